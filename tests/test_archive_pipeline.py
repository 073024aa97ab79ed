"""Archiving several reports stores run N on a thread while run N+1 is built (ingest.py,
`_archive_all`): on S3 the store's part of a run waits ~50 ms on the server. Two things must hold
for that: no reader starts (an ncu reader forks then) while that thread runs, and a failure on
the thread leaves nothing of the runs after it, on real corpus reports.
"""

from __future__ import annotations

import threading
import time

import pytest

from helpers import CORPUS
from triage.archive import atomic
from triage.archive.run_manifests import Runs, manifest_file
from triage.capture.ncu import PreparedNcu
from triage.base.errors import StoreError

REPORTS = sorted(str(p) for p in (CORPUS / "ncu").iterdir())[:4]


def test_no_reader_starts_while_a_run_is_stored_on_a_thread(triage, monkeypatch):
    """The reader of each report is started with no thread of the archive running: the one
    storing the run before it starts only after it, and has ended before the next begins."""
    before = set(threading.enumerate())
    beside: list[list[str]] = []
    real = PreparedNcu.batches

    def watched(self, report_index):
        beside.append([t.name for t in threading.enumerate() if t not in before])
        return real(self, report_index)

    monkeypatch.setattr(PreparedNcu, "batches", watched)
    triage("archive", *REPORTS)
    assert beside == [[]] * len(REPORTS)
    assert len(triage.json("ls")) == len(REPORTS)


def test_a_run_failing_on_the_thread_leaves_nothing_of_the_runs_after_it(triage, store_dir,
                                                                       monkeypatch):
    """The second run's manifest cannot be written while the third run is built: one line,
    exit 1, after the line of the first run, which stays whole and listed (it was named as it
    was filed); nothing is left of the third's tables and report copy, temp files included."""
    real = Runs.write_manifest
    written: list[str] = []
    refused: list[str] = []

    def refuse_the_second(self, manifest, replace=False):
        if written:
            refused.append(manifest_file(manifest)[0])
            raise StoreError(f"cannot write store {self.store.where}: server gone; run it again")
        written.append(real(self, manifest, replace))
        return written[-1]

    with monkeypatch.context() as patched:
        patched.setattr(Runs, "write_manifest", refuse_the_second)
        result = triage("archive", *REPORTS[:3], expect=1)
    filed, *notices, error = result.output.strip().splitlines()
    assert filed.startswith(written[0][:12]) and filed.endswith("(new)")
    assert all(line.startswith("    note: ") for line in notices)
    assert error == f"triage: error: cannot write store {store_dir}: server gone; run it again"
    assert [run["id"] for run in triage.json("ls")] == written
    assert triage("verify").exit_code == 0
    files = [p.relative_to(store_dir) for p in store_dir.rglob("*") if p.is_file()]
    assert not [f for f in files if f.name.startswith(atomic.TMP_PREFIX)]
    # The refused run's tables and copy were published before its manifest: unreferenced,
    # they are gc's to remove. Of the third, built meanwhile, nothing is left.
    tables = {f.parts[2] for f in files if f.parts[0] == "tables"}
    assert tables == {f"run_id={written[0]}", f"run_id={refused[0]}"}
    assert len([f for f in files if f.parts[0] == "objects"]) == 2



def test_an_interrupt_while_a_run_is_stored_on_the_thread_keeps_it_and_drops_the_next(
        triage, store_dir, monkeypatch):
    """Ctrl-C while the third run is built and the second is still being stored (its manifest
    write held back): once the thread has ended, the first two runs are whole and listed, nothing
    of the third is left, and no lease stays (every run written has its catalog row)."""
    from triage.archive import ingest, summaries

    real_summaries, real_manifest = summaries.compute_summaries, Runs.write_manifest
    built: list[int] = []

    def interrupted_third(tables, names):
        built.append(1)
        if len(built) == 3:
            raise KeyboardInterrupt
        return real_summaries(tables, names)

    def held_back(self, manifest, replace=False):
        time.sleep(0.3)  # the outcome is the same whether the interrupt comes first or not
        return real_manifest(self, manifest, replace)

    monkeypatch.setattr(summaries, "compute_summaries", interrupted_third)
    monkeypatch.setattr(Runs, "write_manifest", held_back)
    with pytest.raises(KeyboardInterrupt):
        ingest.archive_files(store_dir, REPORTS[:3])
    monkeypatch.setattr(Runs, "write_manifest", real_manifest)
    listed = triage.json("ls")
    assert len(listed) == 2 and triage("verify").exit_code == 0
    files = [p.relative_to(store_dir) for p in store_dir.rglob("*") if p.is_file()]
    assert not [f for f in files if f.name.startswith(atomic.TMP_PREFIX) or f.parts[0] == "leases"]
    assert {f.parts[2] for f in files if f.parts[0] == "tables"} == {
        f"run_id={run['id']}" for run in listed}


def test_a_run_is_filed_once_even_when_saying_so_is_interrupted(store_dir):
    """Ctrl-C while the first run is being named (its line printed) as the second is built:
    the run is named once, not again on the way out, and the second is discarded."""
    from triage.archive import ingest
    from triage.base.errors import Interrupted

    told: list[str] = []

    def interrupted_filing(result):
        told.append(result.record.id)
        raise KeyboardInterrupt

    with pytest.raises(Interrupted) as interrupted:
        ingest.archive_batch(store_dir, REPORTS[:3], filed=interrupted_filing)
    assert len(told) == 1 and interrupted.value.filed == tuple(told)
