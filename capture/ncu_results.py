"""Reading an ncu report's results in short-lived worker processes.

Why processes: `ncu_report` (2026.3.1, measured on the corpus) never frees what decoding a result
allocates. About 0.3-1 MB per result stays in the process after its IAction, range and context
are gone, and `malloc_trim` returns none of it. A process that reads a report of 100,000
results, or `triage archive *.ncu-rep` of a thousand reports, would grow without bound. Here a
forked worker reads at most CHUNK_RESULTS results and exits, taking that memory with it.

The workers also run on all cores. Each one sends its rows back as one Arrow IPC stream per
table, with what the provenance needs from them (`ncu.ResultFacts`), and the chunks are written
in result order, so the tables get the same bytes as reading in-process. A process still reads
its first IN_PROCESS_RESULTS results itself (forking costs more than reading a small report),
except those of a batch read on more than one core, and all of them where `fork` is missing or
unsafe. The workers are forked by a relay (`workers.Relay`), itself forked before the archive
starts its threads: no worker is forked beside a running thread.

A batch of reports (`triage archive *.ncu-rep`) is read by one relay for all of them
(`BatchResults`): its workers each take results of several reports, up to CHUNK_RESULTS, and
read the reports after the one being written on every core.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from triage.capture.workers import (Relay, WorkerFailed, arrow_payload, arrow_tables, can_fork,
                                    cores)
from triage.base.errors import UnsupportedReport
from triage.schemas.tables import records_table, rows_table

if TYPE_CHECKING:
    import pyarrow as pa

    from triage.capture.ncu import NcuReport, ResultFacts

CHUNK_RESULTS = 256  # results a worker reads (a batch's: one task more at most), ~0.3-1 MB each
IN_PROCESS_RESULTS = 256  # results read in this process before reading moves to workers
IN_PROCESS_CHUNK = 64  # results whose rows are held at once when reading in-process
MAX_WORKERS = 8
TASKS_PER_WORKER = 4  # a batch's tasks: small enough to share the work out evenly
TABLES = ("kernels", "metrics", "sections", "rules")
FACTS_SIZE = struct.Struct("!Q")  # a chunk's payload: the size of its pickled facts first
Chunk = tuple[dict[str, "pa.Table"], "ResultFacts"]  # {table: Arrow table}, what they show
Chunks = Generator[Chunk, None, None]


class Decoded:
    """The results this process has decoded, and so keeps the memory of: what decides whether
    the next report is read here or in workers. One per process (`DECODED`); a test resets its
    `count` to start as a fresh process would."""

    def __init__(self) -> None:
        self.count = 0

    def fits(self, more: int) -> bool:
        return self.count + more <= IN_PROCESS_RESULTS


DECODED = Decoded()


class ResultTables:
    """The chunks of a report's results ({table: Arrow table}, their facts), in result order.

    Results are read in this process while it has read fewer than IN_PROCESS_RESULTS in all
    (a small report costs less than forking would), in worker processes after that. Which one
    is decided when this is made, and the workers' relay forked then: make it before starting
    threads. `close` stops the workers, whether or not reading began.
    """

    def __init__(self, report: NcuReport, report_index: int) -> None:
        count = report.count_actions()
        self.relay: Relay | None = None
        if not can_fork() or DECODED.fits(count):
            DECODED.count += count
            self.chunks = _in_process(report, report_index, count)
            return
        workers = cores(MAX_WORKERS)
        size = max(1, min(CHUNK_RESULTS, -(-count // workers)))
        chunks = [(low, min(count, low + size)) for low in range(0, count, size)]
        self.relay = Relay(chunks, lambda chunk: _payload(report, report_index, *chunk), workers,
                           first=report.warm_up)
        self.chunks = _from_workers(self.relay, lambda _task: report.path)

    def __iter__(self) -> Chunks:
        return self.chunks

    def close(self) -> None:
        self.chunks.close()
        if self.relay is not None:
            self.relay.close()


def _in_process(report: NcuReport, report_index: int, count: int) -> Chunks:
    for low in range(0, count, IN_PROCESS_CHUNK):  # rows become Arrow chunk by chunk
        yield extract_chunk(report, report_index, low, min(count, low + IN_PROCESS_CHUNK))


class BatchResults:
    """The results of a batch's ncu reports (each with its index in its run), read by one
    relay's workers in report order and handed to each report's reader in turn (`chunks`).

    One relay for the batch, not one per report: its workers take tasks of several reports
    until each has read CHUNK_RESULTS (then one more task at most), so a batch of small reports
    pays a few forks, and they read the reports after the one the archive is writing on every
    core. The relay is forked when this is made, once the batch is prepared and before the
    archive starts threads of its own (its runs' store parts, copies, encoders), so the workers
    read while it sets up. `release` each report: the last one stops the relay.
    """

    def __init__(self, reports: list[tuple[NcuReport, int]]) -> None:
        self.reports = reports
        counts = [report.count_actions() for report, _index in reports]
        self.workers = cores(MAX_WORKERS)
        size = max(1, min(CHUNK_RESULTS, -(-sum(counts) // (self.workers * TASKS_PER_WORKER))))
        self.tasks = [(position, low, min(count, low + size))
                      for position, count in enumerate(counts) for low in range(0, count, size)]
        self.handed = 0  # tasks whose results have been taken from the relay
        self.unreleased = set(range(len(reports)))
        self.relay = self._start()

    @staticmethod
    def worth(reports: list[NcuReport]) -> bool:
        """Whether several reports are better read this way than each by itself: workers on
        more than one core, or (on one) more results than this process should keep."""
        return can_fork() and len(reports) > 1 and (
            cores(MAX_WORKERS) > 1 or not DECODED.fits(sum(r.count_actions() for r in reports)))

    def chunks(self, position: int, report_index: int) -> Chunks:
        """The result tables of the report at `position`, chunk by chunk (the results of
        reports before it that were never asked for are passed over); `report_index` is the
        one it was planned with (its rows carry it)."""
        if report_index != self.reports[position][1]:
            raise ValueError(f"report {position} was planned as index "
                             f"{self.reports[position][1]}, read as {report_index}")
        return _from_workers(self._of(position),
                             lambda task: self.reports[task[0] if task else position][0].path)

    def _of(self, position: int) -> Iterator[bytes]:
        while self.handed < len(self.tasks) and self.tasks[self.handed][0] <= position:
            data = next(self.relay)
            self.handed += 1
            if self.tasks[self.handed - 1][0] == position:
                yield data

    def _start(self) -> Relay:
        def work(task: tuple[int, int, int]) -> bytes:
            return _payload(*self.reports[task[0]], task[1], task[2])

        import pyarrow  # noqa: F401 - imported once here, not in every worker

        first = self.reports[self.tasks[0][0]][0].warm_up if self.tasks else lambda: None
        return Relay(self.tasks, work, self.workers, weight=_results, budget=CHUNK_RESULTS,
                     first=first)

    def release(self, position: int) -> None:
        self.unreleased.discard(position)
        if not self.unreleased:
            self.relay.close()


def _results(task: tuple[int, int, int]) -> int:
    return task[2] - task[1]


def _payload(report: NcuReport, report_index: int, low: int, high: int) -> bytes:
    """In a worker: the chunk of results low..high-1, as `_chunk` reads it back: its facts
    (pickled, after their size), then its tables (Arrow IPC)."""
    tables, facts = extract_chunk(report, report_index, low, high)
    head = pickle.dumps(facts)
    return arrow_payload((tables[name] for name in TABLES), head=FACTS_SIZE.pack(len(head)) + head)


def _chunk(data: bytes) -> Chunk:
    size = FACTS_SIZE.unpack_from(data)[0]
    facts = pickle.loads(data[FACTS_SIZE.size:FACTS_SIZE.size + size])  # noqa: S301 - our fork's
    tables = arrow_tables(data, offset=FACTS_SIZE.size + size)
    return dict(zip(TABLES, tables, strict=True)), facts


def _from_workers(results: Iterator[bytes], path_of: Callable[[Any], str]) -> Chunks:
    """The chunks of `results`; a worker's failure as the one-line error about the report
    (`path_of` its task, None where the relay itself failed) and the results it was reading."""
    try:
        for data in results:
            yield _chunk(data)
    except WorkerFailed as failed:
        path = path_of(failed.task)
        span = result_span(*failed.task[-2:]) if failed.task else "its results"
        what = (f": ncu_report crashed ({failed.reason})" if failed.crashed
                else f" failed ({failed.reason})")
        raise UnsupportedReport(f"{path}: reading {span}{what}; upgrade ncu-report "
                                "(pip install -U ncu-report)") from None


def result_span(low: int, high: int) -> str:
    """How messages name results low..high-1."""
    return f"result {low}" if high - low == 1 else f"results {low}-{high - 1}"


def extract_chunk(report: NcuReport, report_index: int, low: int, high: int) -> Chunk:
    """The rows of results low..high-1 of every results table, as Arrow tables, and their
    facts."""
    from triage.capture.ncu import COLUMNS, result_rows

    try:
        rows, facts = result_rows(report, report_index, low, high)
    except TypeError as exc:
        if not str(exc).startswith("in method '"):
            raise
        # SWIG refused a value ncu_report itself returned (a metric name whose bytes are not
        # text): the report is damaged there.
        where = result_span(low, high)
        raise UnsupportedReport(f"{report.path}: corrupt Nsight Compute report ({where}: "
                                f"{exc}); archive an intact copy") from None
    tables = {name: rows_table(name, columns, rows[name]) for name, columns in COLUMNS.items()}
    return {"kernels": records_table("kernels", rows["kernels"]), **tables}, facts
