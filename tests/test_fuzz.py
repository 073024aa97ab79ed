"""Fuzzing the report header readers with hypothesis, starting from real corpus reports.

Each example is a real report (its whole bytes) with a few bytes overwritten, inserted or removed
(where a reader looks: the header and first blocks of an ncu report, the header and end-of-file
index of an nsys report), optionally cut short, or the format's magic followed by random bytes.
The reader must return or raise a TriageError; anything else is a crash, and an example that runs
past EXAMPLE_SECONDS is a hang. The run is bounded (TRIAGE_FUZZ_EXAMPLES examples per reader,
default 300) and derandomized, so CI runs the same examples every time.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import CORPUS, corpus_file
from triage.capture.ncu_file import MAGIC as NCU_MAGIC
from triage.capture.ncu_file import read_ncu_file
from triage.base.errors import TriageError

EXAMPLES = int(os.environ.get("TRIAGE_FUZZ_EXAMPLES", "300"))
EXAMPLE_SECONDS = 5
NCU_SEED = "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"
NSYS_SEED = "armleth__cuda-mlp-inference__nsys_report.nsys-rep"
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                         suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.function_scoped_fixture])


class HangError(Exception):
    pass


def _alarm(_signum, _frame):
    raise HangError(f"example ran past {EXAMPLE_SECONDS} s")


def read_bounded(reader, path: Path):
    """Run one reader call under a wall-clock alarm; only TriageError may escape it."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(EXAMPLE_SECONDS)
    try:
        return reader(path)
    except TriageError:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def edits(size: int, hot: list[tuple[int, int]]):
    """A list of (position, kind, byte) edits, positions mostly in the `hot` ranges."""
    spans = [st.integers(lo, max(lo, min(hi, size) - 1)) for lo, hi in hot]
    position = st.one_of(*spans, st.integers(0, size - 1))
    kind = st.sampled_from(["set", "insert", "delete"])
    return st.lists(st.tuples(position, kind, st.integers(0, 255)), min_size=1, max_size=8)


def apply(data: bytes, changes, cut: int | None) -> bytes:
    out = bytearray(data)
    for position, kind, value in sorted(changes, reverse=True):
        position = min(position, len(out) - 1)
        if kind == "set":
            out[position] = value
        elif kind == "insert":
            out.insert(position, value)
        elif len(out) > 1:
            del out[position]
    return bytes(out[:cut] if cut is not None else out)


def mutated(seed: bytes, hot: list[tuple[int, int]], magic: bytes):
    """Mutations of a real report, or the magic followed by random bytes."""
    real = st.builds(apply, st.just(seed), edits(len(seed), hot),
                     st.none() | st.integers(0, len(seed)))
    noise = st.binary(max_size=4096).map(lambda tail: magic + tail)
    return st.one_of(real, real, noise)


NCU_BYTES = corpus_file(NCU_SEED).read_bytes()


@FUZZ_SETTINGS
@given(data=mutated(NCU_BYTES, [(0, 64), (0, 4096)], NCU_MAGIC))
def test_ncu_header_reader_never_crashes(tmp_path, data):
    path = tmp_path / "fuzzed.ncu-rep"
    path.write_bytes(data)
    read_bounded(read_ncu_file, path)


def test_the_unmutated_seeds_read():
    assert read_ncu_file(corpus_file(NCU_SEED)).file_version > 0


def nsys_reader():
    from triage.capture.nsys_file import read_nsys_file

    return read_nsys_file


NSYS_BYTES = corpus_file(NSYS_SEED).read_bytes()


@FUZZ_SETTINGS
@given(data=mutated(NSYS_BYTES, [(0, 64), (len(NSYS_BYTES) - 4096, len(NSYS_BYTES))],
                    b"NVIDIA Tegra Profiler Report"))
def test_nsys_trailer_reader_never_crashes(tmp_path, data):
    reader = nsys_reader()
    path = tmp_path / "fuzzed.nsys-rep"
    path.write_bytes(data)
    read_bounded(reader, path)


def test_nsys_seed_reads():
    assert nsys_reader()(corpus_file(NSYS_SEED)).sections


# -- flipped bits in real .sqlite exports, archived whole (issue 15, item 8) -------------------

SQLITE_FLIPS = 12  # per corpus export: 8 in b-tree page headers, 4 anywhere (seeded)
SQLITE_PAGE = 4096  # every corpus export's page size


def sqlite_flips(data: bytes, name: str) -> list[tuple[int, int]]:
    """(byte, bit) flips of one export, the same on every run: most where SQLite finds damage
    only once it reads that page (a page header deep in a table), the rest anywhere."""
    rng = random.Random(name)
    pages = len(data) // SQLITE_PAGE
    headers = [(rng.randrange(1, pages) * SQLITE_PAGE + rng.randrange(8), rng.randrange(8))
               for _ in range(SQLITE_FLIPS * 2 // 3)]
    anywhere = [(rng.randrange(len(data)), rng.randrange(8))
                for _ in range(SQLITE_FLIPS - len(headers))]
    return headers + anywhere


def test_flipped_bits_in_every_corpus_sqlite_export_are_one_line_and_leave_no_store(tmp_path):
    """Each flip is archived into a new store path: it archives, or fails with triage's own
    one-line error and no store left behind (a mid-read failure used to leave an empty one)."""
    from triage.archive.ingest import archive_files

    exports = sorted(p for p in CORPUS.rglob("*.sqlite"))
    refused = 0
    for export in exports:
        data = export.read_bytes()
        for index, (byte, bit) in enumerate(sqlite_flips(data, export.name)):
            damaged = bytearray(data)
            damaged[byte] ^= 1 << bit
            path = tmp_path / f"{export.stem}-{index}.sqlite"
            path.write_bytes(damaged)
            store = tmp_path / f"store-{export.stem}-{index}"
            try:
                archive_files(store, [str(path)])
            except TriageError as exc:
                refused += 1
                assert "\n" not in str(exc) and not store.exists(), (export.name, byte, bit)
            path.unlink()
    assert len(exports) >= 7 and refused > 0
