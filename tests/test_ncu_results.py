"""Reading ncu results in forked worker processes (capture/ncu_results.py), on corpus reports.

`ncu_report` keeps the memory of every result it decodes, so past IN_PROCESS_RESULTS a process
hands results to short-lived workers. These tests force one path or the other; which one a
test would otherwise take depends on how many results the test process read before.
"""

from __future__ import annotations

import os
import threading

import pytest

from helpers import corpus_file
from triage.archive.ingest import archive_files
from triage.capture import ncu_results

SPYMASTER = "spymaster2h__spyinfer__report.ncu-rep"  # 105 results
STRRULES = "strrules105__PhysiCell__profile.nsight-cuprof-report"  # 30 results, legacy format


@pytest.fixture
def forks(monkeypatch) -> list:
    """The forks made by this process: how many threads it ran at each."""
    made, real = [], os.fork

    def counting_fork():
        made.append(threading.active_count())
        return real()

    monkeypatch.setattr(os, "fork", counting_fork)
    return made


def in_process(monkeypatch) -> None:
    monkeypatch.setattr(ncu_results.DECODED, "count", 0)
    monkeypatch.setattr(ncu_results, "IN_PROCESS_RESULTS", 10**9)


def in_workers(monkeypatch) -> None:
    """Every result read by two workers at a time, 16 results each: several chunks, more
    chunks than workers, on a machine of any size."""
    monkeypatch.setattr(ncu_results, "IN_PROCESS_RESULTS", 0)
    monkeypatch.setattr(ncu_results, "CHUNK_RESULTS", 16)
    monkeypatch.setattr(ncu_results, "cores", lambda limit: 2)


def tables_of(results) -> list[dict]:
    return [{name: ref["sha256"] for name, ref in r.manifest["tables"].items()} for r in results]


def test_workers_write_the_same_run_as_reading_in_process(tmp_path, monkeypatch, forks):
    reports = [str(corpus_file(SPYMASTER)), str(corpus_file(STRRULES))]
    in_process(monkeypatch)
    alone = archive_files(tmp_path / "in-process", reports)
    assert forks == []
    in_workers(monkeypatch)
    shared = archive_files(tmp_path / "workers", reports)
    # One relay per report, forked before the archive's threads (blob copier, encoders)
    # start; the relays fork the workers.
    assert forks == [1, 1]
    assert [r.id for r in shared] == [r.id for r in alone]
    assert tables_of(shared) == tables_of(alone)
    assert shared[0].manifest["kernels"] == 105


def test_reading_moves_to_workers_once_the_process_has_read_its_share(tmp_path, monkeypatch,
                                                                      forks):
    monkeypatch.setattr(ncu_results.DECODED, "count", 0)
    monkeypatch.setattr(ncu_results, "IN_PROCESS_RESULTS", 40)
    archive_files(tmp_path / "store", [str(corpus_file(STRRULES))])
    assert forks == [] and ncu_results.DECODED.count == 30
    archive_files(tmp_path / "store", [str(corpus_file(SPYMASTER))])  # 30 + 105 > 40
    assert forks


@pytest.mark.parametrize("failure, message", [
    ("raise", "reading results 16-31 failed (RuntimeError: decoding went wrong)"),
    ("die", "reading results 16-31: ncu_report crashed (exit status 7)"),
])
def test_a_worker_that_fails_is_a_one_line_error_and_leaves_the_store_as_it_was(
        triage, store_dir, monkeypatch, failure, message):
    in_workers(monkeypatch)
    real = ncu_results.extract_chunk

    def second_chunk_fails(report, report_index, low, high):
        if low == 16 and failure == "raise":
            raise RuntimeError("decoding went wrong")
        if low == 16:
            os._exit(7)  # as a crash inside ncu_report ends the worker
        return real(report, report_index, low, high)

    monkeypatch.setattr(ncu_results, "extract_chunk", second_chunk_fails)
    path = corpus_file(SPYMASTER)
    result = triage("archive", path, expect=1)
    assert result.output == (f"triage: error: {path}: {message}; upgrade ncu-report "
                             "(pip install -U ncu-report)\n")
    assert not store_dir.exists()  # there was none; the one made for this run is removed


def test_the_parent_decodes_one_result_per_process_not_per_report(tmp_path, monkeypatch):
    """The parent decodes a result before forking (workers inherit ncu_report's first-decode
    state); doing it per report would make the parent keep one result per report."""
    from triage.capture.ncu import NcuReport

    warmed, warm_up = [], NcuReport.warm_up
    monkeypatch.setattr(NcuReport, "warm_up", lambda report: warmed.append(1) or warm_up(report))
    in_workers(monkeypatch)
    monkeypatch.setattr(ncu_results.DECODED, "count", 0)
    archive_files(tmp_path / "store", [str(corpus_file(SPYMASTER)), str(corpus_file(STRRULES))])
    assert warmed == [1]
