"""Reading ncu results in forked worker processes (capture/ncu_results.py), on corpus reports.

`ncu_report` keeps the memory of every result it decodes, so past IN_PROCESS_RESULTS a process
hands results to short-lived workers. These tests force one path or the other; which one a
test would otherwise take depends on how many results the test process read before.
"""

from __future__ import annotations

import os
import threading

import pytest

from helpers import CORPUS, corpus_file
from triage.archive.ingest import archive_files
from triage.capture import ncu_results

SPYMASTER = "spymaster2h__spyinfer__report.ncu-rep"  # 105 results
STRRULES = "strrules105__PhysiCell__profile.nsight-cuprof-report"  # 30 results, legacy format
SEED = "Lashi0812__CudaProgramming__readSegmentUnroll.ncu-rep"  # 36 results


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
    """Every result read in this process: one core, and room for every result."""
    monkeypatch.setattr(ncu_results.DECODED, "count", 0)
    monkeypatch.setattr(ncu_results, "IN_PROCESS_RESULTS", 10**9)
    monkeypatch.setattr(ncu_results, "cores", lambda limit: 1)


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
    # One relay for the batch, forked before the archive's threads (blob copier, encoders)
    # start; the relay forks the workers.
    assert forks == [1]
    assert [r.id for r in shared] == [r.id for r in alone]
    assert tables_of(shared) == tables_of(alone)
    assert shared[0].manifest["kernels"] == 105


def test_a_batch_is_read_by_one_relay_whose_workers_take_several_reports(tmp_path, monkeypatch):
    """A batch of small reports pays one relay and a worker per core, not a relay and workers
    per report (8 ms a fork here): the forks made in the relay are counted in a file."""
    made = tmp_path / "forks"
    real = os.fork

    def logged_fork():
        with open(made, "a") as log:
            log.write(f"{os.getpid()}\n")
        return real()

    in_workers(monkeypatch)
    monkeypatch.setattr(ncu_results, "CHUNK_RESULTS", 10**6)
    monkeypatch.setattr(os, "fork", logged_fork)
    reports = [str(p) for p in sorted(CORPUS.joinpath("ncu").glob("*.ncu-rep"))[:6]]
    results = archive_files(tmp_path / "store", reports)
    assert len(results) == 6
    forkers = made.read_text().split()
    assert forkers.count(str(os.getpid())) == 1  # the relay
    assert len(forkers) == 1 + 2  # and its two workers, for the 6 reports


def test_a_report_that_fails_in_a_batch_is_named_and_the_runs_before_it_stay(triage, monkeypatch):
    """The batch's workers read ahead, but a failure is told when its report is reached: the
    report before it is filed (and said to be, though the failure came while it was stored),
    the error names the report and its results, and nothing of the one after is stored."""
    in_workers(monkeypatch)
    real = ncu_results.extract_chunk
    failing = corpus_file(SPYMASTER)

    def fails_on_spymaster(report, report_index, low, high):
        if report.path == str(failing) and low == 16:
            raise RuntimeError("decoding went wrong")
        return real(report, report_index, low, high)

    monkeypatch.setattr(ncu_results, "extract_chunk", fails_on_spymaster)
    first = corpus_file(STRRULES)
    result = triage("archive", first, failing, corpus_file(SEED), expect=1)
    filed, error = result.output.strip().splitlines()
    assert filed.endswith(f"{first.name}  (new)")
    assert error == (f"triage: error: {failing}: reading results 16-31 failed (RuntimeError: "
                     "decoding went wrong); upgrade ncu-report (pip install -U ncu-report)")
    assert [run["report_names"] for run in triage.json("ls")] == [first.name]


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


def test_the_relay_decodes_one_result_before_forking_and_the_parent_none(tmp_path, monkeypatch):
    """Workers inherit what `ncu_report`'s first decode builds (100 MB, 30-90 ms) from their
    relay, which decodes once for the whole batch; the archive's process decodes nothing, so
    it neither waits for that decode nor keeps its memory. Decodes are logged to a file: the
    relay is another process."""
    from triage.capture.ncu import NcuReport

    log, warm_up = tmp_path / "warmed", NcuReport.warm_up

    def logged(report):
        with open(log, "a") as out:
            out.write(f"{os.getpid()}\n")
        warm_up(report)

    monkeypatch.setattr(NcuReport, "warm_up", logged)
    in_workers(monkeypatch)
    monkeypatch.setattr(ncu_results.DECODED, "count", 0)
    archive_files(tmp_path / "store", [str(corpus_file(SPYMASTER)), str(corpus_file(STRRULES))])
    warmed = log.read_text().split()
    assert len(warmed) == 1 and warmed[0] != str(os.getpid())
    assert ncu_results.DECODED.count == 0
