"""Bad inputs, each made from a real corpus file: `triage archive` must print one line on stderr
(no traceback), exit non-zero, and leave the store byte-for-byte as it was (and not create one).

Permissions as root: root reads and writes whatever the mode bits say, so chmod alone proves
nothing. For the unreadable-file, unsearchable-folder and read-only-store cases, the triage
process is started without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (`setpriv --bounding-set`):
it stays uid 0, still owns every file, but now obeys the mode bits like any user, so the real
kernel checks (open, os.access, mkstemp) fail as they would for a user. Not as root, plain chmod
does the same. Where root cannot drop them (no setpriv, no CAP_SETPCAP), those cases are skipped
with that reason. A store path under a regular file fails for everyone and always runs.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import corpus_file
from triage.capture.ncu_file import BLOCK_HEADER, KNOWN_FILE_VERSION
from triage.capture.protowire import decode

REPORT = "LakshyaSingh354__CudaCode__report.ncu-rep"
SEED_RUN = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def listing(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and folder under a directory: the sha256 and mode of each."""
    if not root.exists():
        return {}
    out = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[path.relative_to(root).as_posix()] = (digest, mode)
    return out


def run_triage(args: list, store: Path, unprivileged: bool = False):
    prefix = DROP_DAC if unprivileged and os.geteuid() == 0 else []
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    return subprocess.run(prefix + [sys.executable, "-m", "triage", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def can_drop_privileges() -> str | None:
    """None when permission cases can run; else why not."""
    if os.geteuid() != 0:
        return None
    if not shutil.which("setpriv"):
        return "running as root without setpriv: mode bits cannot stop root"
    probe = subprocess.run(DROP_DAC + ["true"], capture_output=True)
    return None if probe.returncode == 0 else "running as root without CAP_SETPCAP"


def require_unprivileged_runs() -> None:
    """Skip where root cannot be made to obey mode bits, unless CI demands the real check."""
    from nvtx_capture import ToolUnavailable, require_or_skip

    if reason := can_drop_privileges():
        require_or_skip(ToolUnavailable(reason))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A store with one labelled run, archived once and copied for each test."""
    store = tmp_path_factory.mktemp("template") / "store"
    result = run_triage(["archive", corpus_file(SEED_RUN), "--label", "base"], store)
    assert result.returncode == 0, result.stderr
    return store


@pytest.fixture
def store(template, tmp_path) -> Path:
    path = tmp_path / "store"
    shutil.copytree(template, path, symlinks=True)
    return path


# -- the bad inputs ----------------------------------------------------------------------------


def block_ends(data: bytes) -> set[int]:
    """Offsets where a block of an ncu report ends: truncating there leaves a valid report."""
    (length,) = struct.unpack_from("<I", data, 4)
    pos, ends = 8 + length, set()
    while pos < len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        header = decode(data[pos + 4:pos + 4 + length], BLOCK_HEADER)
        pos += 4 + length + header.get("payload_size", 0)
        ends.add(pos)
    return ends


def truncation_offsets(data: bytes) -> list[int]:
    """Ten cut points: inside the magic, the header length, the header, then across the file,
    never exactly at a block end (that would be a shorter but complete report)."""
    ends = block_ends(data)
    offsets = [2, 6, 9]
    for k in range(1, 8):
        cut = len(data) * k // 8
        while cut in ends:
            cut += 1
        offsets.append(cut)
    return offsets


TRUNCATIONS = truncation_offsets(corpus_file(REPORT).read_bytes())


def truncated(tmp: Path, offset: int) -> Path:
    path = tmp / f"cut-{offset}.ncu-rep"
    path.write_bytes(corpus_file(REPORT).read_bytes()[:offset])
    return path


def empty(tmp: Path) -> Path:
    path = tmp / "empty.ncu-rep"
    path.write_bytes(b"")
    return path


def random_bytes(tmp: Path) -> Path:
    path = tmp / "random.nsight-cuprof-report"
    path.write_bytes(random.Random(5).randbytes(corpus_file(REPORT).stat().st_size))
    return path


def zip_renamed(tmp: Path) -> Path:
    path = tmp / "zipped.ncu-rep"
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(corpus_file(REPORT), REPORT)
    return path


def newer_header(tmp: Path) -> Path:
    """The FileHeader is `NVR\\0`, uint32 length, then field 1 (version) as a varint: 08 07."""
    data = bytearray(corpus_file(REPORT).read_bytes())
    assert data[8] == 0x08 and data[9] == KNOWN_FILE_VERSION
    data[9] = KNOWN_FILE_VERSION + 1
    path = tmp / "newer.ncu-rep"
    path.write_bytes(bytes(data))
    return path


def foreign_sqlite(tmp: Path) -> Path:
    path = tmp / "notes.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        con.execute("INSERT INTO notes (text) VALUES ('not a profile')")
    return path


def directory(tmp: Path) -> Path:
    path = tmp / "reports.ncu-rep"
    path.mkdir()
    shutil.copy(corpus_file(REPORT), path / REPORT)
    return path


def fifo(tmp: Path) -> Path:
    """A named pipe with a report's name: reading it would block forever."""
    path = tmp / "pipe.ncu-rep"
    os.mkfifo(path)
    return path


def missing(tmp: Path) -> Path:
    return tmp / "never-written.ncu-rep"


def unreadable(tmp: Path) -> Path:
    path = tmp / "private.ncu-rep"
    shutil.copy(corpus_file(REPORT), path)
    os.chmod(path, 0)
    return path


def unsearchable(tmp: Path) -> Path:
    """A readable file in a folder without search (x) permission: it cannot even be stat'ed."""
    folder = tmp / "locked"
    folder.mkdir()
    path = folder / REPORT
    shutil.copy(corpus_file(REPORT), path)
    os.chmod(folder, 0o600)
    return path


def zeros_after_magic(tmp: Path) -> Path:
    """`NVR\\0` and 8 MB of zeros: read as 4-byte empty blocks, it used to archive as a
    0-kernel run at 3 MB/s (a 3 GB file: over 2 minutes)."""
    path = tmp / "zeros.ncu-rep"
    path.write_bytes(b"NVR\0" + bytes(8 << 20))
    return path


def zeros_after_header(tmp: Path) -> Path:
    """A real report's magic and file header, then zeros where its blocks were."""
    data = corpus_file(REPORT).read_bytes()
    (length,) = struct.unpack("<I", data[4:8])
    path = tmp / "header-then-zeros.ncu-rep"
    path.write_bytes(data[:8 + length] + bytes(8 << 20))
    return path


def session_only(tmp: Path) -> Path:
    """A real report's header and blocks with every result taken out (counts and payloads
    rewritten by code): well framed, but nothing in it to archive."""
    data = corpus_file(REPORT).read_bytes()
    (length,) = struct.unpack("<I", data[4:8])
    out, offset = bytearray(data[:8 + length]), 8 + length
    while offset < len(data):
        (size,) = struct.unpack("<I", data[offset:offset + 4])
        header = decode(data[offset + 4:offset + 4 + size], BLOCK_HEADER)
        offset += 4 + size + header.get("payload_size", 0)
        if not header.get("num_results") and not header.get("num_sources"):
            out += data[offset - header.get("payload_size", 0) - size - 4:offset]
    path = tmp / "no-results.ncu-rep"
    path.write_bytes(bytes(out))
    return path


def cut_message(offset: int) -> str:
    return "not an Nsight Compute or Nsight Systems report" if offset < 4 else "truncated"


INPUTS = {
    **{f"truncated-at-{o}": (lambda tmp, o=o: truncated(tmp, o), cut_message(o))
       for o in TRUNCATIONS},
    "empty": (empty, "empty file"),
    "random-bytes": (random_bytes, "not an Nsight Compute or Nsight Systems report"),
    "zip-renamed": (zip_renamed, "not an Nsight Compute or Nsight Systems report"),
    "newer-header": (newer_header, f"version {KNOWN_FILE_VERSION + 1} is newer"),
    "foreign-sqlite": (foreign_sqlite, "not an Nsight Systems"),
    "zeros-after-magic": (zeros_after_magic, "holds no format version"),
    "zeros-after-header": (zeros_after_header, "an empty block header"),
    "no-results": (session_only, "holds no profile result"),
    "directory": (directory, "is a directory"),
    "fifo": (fifo, "not a regular file"),
    "missing": (missing, "no such file"),
    "unreadable": (unreadable, "permission denied"),
    "unsearchable-folder": (unsearchable, "permission denied"),
}
NEEDS_DROP = {"unreadable", "unsearchable-folder"}
CLICK_USAGE: set[str] = set()


def check_refused(result, message: str, click_usage: bool = False) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert message.lower() in result.stderr.lower(), result.stderr
    assert result.stdout == ""
    if click_usage:
        assert result.returncode == 2 and "Error: Invalid value" in result.stderr, result.stderr
        return
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("triage: error: "), \
        result.stderr


def check_kept_going(result, message: str) -> None:
    """An archive of a good report and a bad one: the good one archived, the bad one refused on
    one line, a summary, exit status 1."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert REPORT in result.stdout and "(new)" in result.stdout, result.stdout
    refused = [line for line in result.stderr.splitlines() if line.startswith("triage: refused")]
    assert len(refused) == 1 and message.lower() in refused[0].lower(), result.stderr
    assert result.stderr.splitlines()[-1] == \
        "triage: archived 1 of 2 reports; 1 refused (named above)", result.stderr


@pytest.mark.parametrize("case", list(INPUTS))
def test_bad_input_leaves_the_store_untouched(case, store, tmp_path):
    if case in NEEDS_DROP:
        require_unprivileged_runs()
    make, message = INPUTS[case]
    bad = make(tmp_path)
    before = listing(store)
    try:
        result = run_triage(["archive", bad], store, unprivileged=case in NEEDS_DROP)
        check_refused(result, message, case in CLICK_USAGE)
        assert listing(store) == before
        # With --fail-fast a bad input does not create a store, even alongside a good report.
        fresh = tmp_path / "new-store"
        result = run_triage(["archive", "--fail-fast", corpus_file(REPORT), bad], fresh,
                            unprivileged=case in NEEDS_DROP)
        check_refused(result, message, case in CLICK_USAGE)
        assert not fresh.exists()
        # Without it the good report is archived and the bad one named on a line of its own.
        result = run_triage(["archive", corpus_file(REPORT), bad], fresh,
                            unprivileged=case in NEEDS_DROP)
        check_kept_going(result, message)
    finally:
        for path in (bad, bad.parent):
            if path.exists() and path != tmp_path:
                os.chmod(path, 0o755 if path.is_dir() else 0o644)


def test_read_only_store(store, tmp_path):
    require_unprivileged_runs()
    paths = [store, *store.rglob("*")]
    for path in paths:
        if path.is_dir():
            os.chmod(path, 0o555)
    before = listing(store)
    try:
        result = run_triage(["archive", corpus_file(REPORT)], store, unprivileged=True)
        check_refused(result, "cannot write store")
        assert listing(store) == before
        result = run_triage(["label", "other", "base"], store, unprivileged=True)
        check_refused(result, "cannot write store")
        assert listing(store) == before
    finally:
        for path in paths:
            if path.is_dir():
                os.chmod(path, 0o755)


def test_store_path_under_a_regular_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a folder")
    result = run_triage(["archive", corpus_file(REPORT)], blocker / "store")
    check_refused(result, "cannot create store")
    assert blocker.read_bytes() == b"not a folder"
    result = run_triage(["archive", corpus_file(REPORT)], blocker)  # --store must be a folder
    check_refused(result, "is a file, not a directory")


def test_truncation_offsets_are_spread_and_never_on_a_block_end():
    data = corpus_file(REPORT).read_bytes()
    assert len(set(TRUNCATIONS)) == 10 and not set(TRUNCATIONS) & block_ends(data)
    assert max(TRUNCATIONS) > len(data) * 0.8


def test_an_unimported_nsys_stream_names_the_importer(tmp_path):
    """The first bytes of a real .qdstrm (nsys 2022.4 without its QdstrmImporter), followed by
    junk: triage must say what the file is and how to turn it into a report."""
    stream = tmp_path / "step.qdstrm"
    stream.write_bytes(b"U3w[END]NVIDIA Nsight Systems Stream 2022.4.2.1" + bytes(200))
    result = run_triage(["archive", stream], tmp_path / "store")
    check_refused(result, "QdstrmImporter")


def with_flipped_text(tmp: Path, text: bytes, at: int) -> Path:
    """REPORT with the high bit set on byte `at` of the first `text` in it: a string the report
    stores that is no longer UTF-8, as one bit flipped on disk leaves it."""
    data = bytearray(corpus_file(REPORT).read_bytes())
    data[data.index(text) + at] |= 0x80
    path = tmp / "flipped.ncu-rep"
    path.write_bytes(data)
    return path


def test_a_metric_name_that_is_not_text_is_a_corrupt_report(store, tmp_path):
    """ncu_report lists the damaged name but cannot look it up again (a SWIG TypeError)."""
    bad = with_flipped_text(tmp_path, b"\n0lts__t_sectors.max.pct_of_peak_sustained_elapsed", 2)
    before = listing(store)
    result = run_triage(["archive", bad], store)
    check_refused(result, f"{bad}: corrupt Nsight Compute report (result 0: in method")
    assert listing(store) == before


def test_other_text_that_is_not_utf8_is_kept_with_replacement_characters(store, tmp_path):
    bad = with_flipped_text(tmp_path, b",l1tex__tex_writeback_active.min.", 1)
    assert run_triage(["archive", bad], store).returncode == 0
    found = run_triage(["query", "--csv", "select name from metrics where text like "
                        "'%,' || chr(65533) || '1tex__tex_writeback_active.min.%'"], store)
    assert found.stdout.splitlines()[1:] == [
        "breakdown:gpu__compute_memory_throughput.min.pct_of_peak_sustained_elapsed"]


def test_a_table_removed_mid_archive_is_a_one_line_error(triage, store_dir, monkeypatch):
    """The archive's temp tables removed while it runs (by hand, or by a gc that knows no
    leases; triage's own spares them: tests/test_gc_leases.py)."""
    from triage.archive.tables import TableWriter

    real_close = TableWriter.close

    def close_then_remove(writer):
        count = real_close(writer)
        for temp in (store_dir / "objects").glob(".tmp-*.parquet"):
            temp.unlink()
        return count

    monkeypatch.setattr(TableWriter, "close", close_then_remove)
    result = triage("archive", corpus_file(SEED_RUN), expect=1)
    assert result.output.startswith("triage: error: ") and result.output.count("\n") == 1
    assert "table this archive was writing was removed while it ran" in result.output
