"""The archive path loses nothing and leaves nothing (issue 15): a full disk, a killed nsys export,
and re-archiving a run whose objects were lost.

Full disk: real corpus reports archived one after another into a store on a 5 MB tmpfs (mounted
by the test; CI runs as root), then more of them each with the disk filled to just above the
report's size, so that they fail while writing rather than at the check before. Every failure
must be one line, exit 1, with no temp file, orphan or other leftover, and the runs before it
intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Triage
from helpers import CORPUS, corpus_file, table_file
from triage.archive import space
from triage.archive.space import free_bytes

DISK_BYTES = 5 << 20
QDREP = "DongHun1995__cumat__report1.qdrep"  # exported by Debian's nsys 2022.4


@pytest.fixture
def small_disk(tmp_path):
    """A 5 MB tmpfs, unmounted afterwards; a skip (with the reason) where mounting is refused."""
    point = tmp_path / "disk"
    point.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(point)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command: the full-disk checks need a small tmpfs")
    if done.returncode:
        pytest.skip(f"cannot mount a 5 MB tmpfs here ({done.stderr.strip() or 'refused'}): the "
                    "full-disk checks need one (CI runs them as root)")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


def reports() -> list[Path]:
    """Corpus reports that need no nsys, largest first (they fill the disk soonest)."""
    found = [*(CORPUS / "ncu").iterdir(), *(CORPUS / "nsys").glob("*.sqlite")]
    return sorted(found, key=lambda p: (-p.stat().st_size, p.name))


def fill(disk: Path, leave: int) -> Path:
    """A file of real (not sparse) bytes leaving about `leave` bytes free on the disk."""
    filler = disk / "filler"
    size = max(free_bytes(disk) - leave, 0)
    with open(filler, "wb") as stream:
        while size > 0:
            stream.write(bytes(min(size, 1 << 20)))
            size -= 1 << 20
    return filler


def open_files() -> list[str]:
    """What this process has open (Linux)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the listing's own descriptor, closed meanwhile
    return names


def temp_files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob(".tmp-*"))


def check_clean_failure(triage: Triage, store: Path, result, runs_before: list[str]) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("triage: error: store disk full: ")
    assert " bytes needed at " in result.stderr
    assert temp_files(store) == []
    if not runs_before:  # the store this archive created is gone again
        assert not store.exists()
        return
    verified = json.loads(triage("--store", store, "verify", "--json").stdout)
    assert verified["errors"] == [] and verified["leftovers"] == [], verified
    assert [r["id"] for r in triage.json("--store", store, "ls")] == runs_before


def test_full_disk_failures_are_one_line_and_leave_nothing(small_disk, monkeypatch):
    triage = Triage()
    store = small_disk / "store"
    runs: list[str] = []
    failures = clean = 0
    planned = reports()
    # First as they come, until the disk is full (most are refused by the check before
    # reading); then each again with the disk filled to just above what that check asks for,
    # and the check switched off, so that the disk fills in the middle of real writes (the
    # report's copy, the tables) as it would while another program fills it.
    for leave in (None, 0, 16 * 1024, 64 * 1024):
        if leave is not None:
            monkeypatch.setattr(space, "check_room", lambda root, needed: None)
        for report in planned:
            filler = None if leave is None else fill(
                small_disk, report.stat().st_size + space.COMMIT_BYTES + leave)
            result = triage("--store", store, "archive", report, expect=None)
            if filler is not None:
                filler.unlink()
            if result.exit_code == 0:
                runs = [r["id"] for r in triage.json("--store", store, "ls")]
                continue
            failures += 1
            check_clean_failure(triage, store, result, runs)
            clean += 1
    assert failures >= len(planned) and clean == failures
    print(f"full-disk failures clean {clean}/{failures}")
    # A failed write's file is closed, not only removed: else its room stays taken.
    assert [name for name in open_files() if name.startswith(str(small_disk))] == []


def test_a_killed_nsys_archive_leaves_only_what_gc_removes(tmp_path, nsys_exe):
    """kill -9 (and SIGTERM) while `nsys export` has written its export: nothing in the system
    temp directory, only a temp file in the store, which `gc` removes. An nsys wrapper signals
    when the export is written, then waits to be killed, so no timing is guessed."""
    exported = tmp_path / "exported"
    wrapper = tmp_path / "nsys"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = export ]; then "{nsys_exe}" "$@"; '
                       f'touch "{exported}"; exec sleep 600; fi\nexec "{nsys_exe}" "$@"\n')
    wrapper.chmod(0o755)
    system_temp = tmp_path / "tmp"
    system_temp.mkdir()
    store = tmp_path / "store"
    env = {**os.environ, "TMPDIR": str(system_temp)}
    for sig in (signal.SIGKILL, signal.SIGTERM):
        archive = subprocess.Popen(
            [sys.executable, "-m", "triage", "--store", str(store), "archive", "--nsys",
             str(wrapper), str(corpus_file(QDREP))], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not exported.exists():
            assert archive.poll() is None, archive.stderr.read() if archive.stderr else ""
            time.sleep(0.05)
        os.killpg(archive.pid, sig)
        archive.wait()
        archive.stderr.close()
        exported.unlink()
        assert list(system_temp.iterdir()) == []
        assert [p for p in temp_files(store) if p.endswith("-export.arrow")]
    triage = Triage()
    triage("--store", store, "gc", "--grace", "0")
    assert temp_files(store) == []
    verified = json.loads(triage("--store", store, "verify", "--json").stdout)
    assert verified["errors"] == [] and verified["leftovers"] == []


def test_an_nsys_report_archived_again_rewrites_its_lost_tables(tmp_path, nsys_exe):
    """The .nsys-rep path finds a run by the file's hash without exporting; a run whose
    objects are gone is exported again and rebuilt, to the same run id."""
    triage = Triage()
    store = tmp_path / "store"
    first = triage.json("--store", store, "archive", corpus_file(QDREP))[0]
    table_file(store, first["id"], "kernels").unlink()
    again = triage.json("--store", store, "archive", corpus_file(QDREP))[0]
    assert (again["id"], again["new"], again["repaired"]) == (first["id"], False, True)
    verified = json.loads(triage("--store", store, "verify", "--json").stdout)
    assert verified["ok"] is True and verified["leftovers"] == []
