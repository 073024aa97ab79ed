"""Reading an ncu report's results in short-lived worker processes.

Why processes: `ncu_report` (2026.3.1, measured on the corpus) never frees what decoding a result
allocates. About 0.3-1 MB per result stays in the process after its IAction, range and context
are gone, and `malloc_trim` returns none of it. A process that reads a report of 100,000
results, or `triage archive *.ncu-rep` of a thousand reports, would grow without bound. Here a
forked worker reads at most CHUNK_RESULTS results and exits, taking that memory with it.

The workers also run on all cores. Each one sends its rows back as one Arrow IPC stream per
table, and the chunks are written in result order, so the tables get the same bytes as reading
in-process. A process still reads its first IN_PROCESS_RESULTS results itself (forking costs
more than reading a small report), and all of them where `fork` is missing or unsafe. The
workers are forked by a relay (`workers.Relay`), itself forked before the archive starts its
threads: no worker is forked beside a running thread.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from triage.capture.workers import (Relay, WorkerFailed, arrow_payload, arrow_tables, can_fork,
                                    cores)
from triage.base.errors import UnsupportedReport
from triage.schemas.tables import records_table, rows_table

if TYPE_CHECKING:
    import pyarrow as pa

    from triage.capture.ncu import NcuReport

CHUNK_RESULTS = 256  # results per worker process: bounds what one keeps (~0.3-1 MB each)
IN_PROCESS_RESULTS = 256  # results read in this process before reading moves to workers
IN_PROCESS_CHUNK = 64  # results whose rows are held at once when reading in-process
MAX_WORKERS = 8
TABLES = ("kernels", "metrics", "sections", "rules")
Chunks = Generator[dict[str, "pa.Table"], None, None]


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
    """{table: Arrow table} per chunk of results, in result order.

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
        if DECODED.count == 0:  # once per process, or the parent would keep one per report
            report.warm_up()  # decoded once here, not once per worker: see NcuReport.warm_up
            DECODED.count += 1

        def work(chunk: tuple[int, int]) -> bytes:
            tables = extract_chunk(report, report_index, *chunk)
            return arrow_payload(tables[name] for name in TABLES)

        self.relay = Relay(chunks, work, workers)
        self.chunks = _from_workers(report, self.relay)

    def __iter__(self) -> Chunks:
        return self.chunks

    def close(self) -> None:
        self.chunks.close()
        if self.relay is not None:
            self.relay.close()


def _in_process(report: NcuReport, report_index: int, count: int) -> Chunks:
    for low in range(0, count, IN_PROCESS_CHUNK):  # rows become Arrow chunk by chunk
        yield extract_chunk(report, report_index, low, min(count, low + IN_PROCESS_CHUNK))


def _from_workers(report: NcuReport, results: Relay) -> Chunks:
    try:
        for data in results:
            yield dict(zip(TABLES, arrow_tables(data), strict=True))
    except WorkerFailed as failed:
        span = result_span(*failed.task) if failed.task else "its results"
        what = (f": ncu_report crashed ({failed.reason})" if failed.crashed
                else f" failed ({failed.reason})")
        raise UnsupportedReport(f"{report.path}: reading {span}{what}; upgrade ncu-report "
                                "(pip install -U ncu-report)") from None
    finally:
        results.close()


def result_span(low: int, high: int) -> str:
    """How messages name results low..high-1."""
    return f"result {low}" if high - low == 1 else f"results {low}-{high - 1}"


def extract_chunk(report: NcuReport, report_index: int, low: int, high: int
                  ) -> dict[str, pa.Table]:
    """The rows of results low..high-1 of every results table, as Arrow tables."""
    from triage.capture.ncu import COLUMNS, result_rows

    try:
        rows = result_rows(report, report_index, low, high)
    except TypeError as exc:
        if not str(exc).startswith("in method '"):
            raise
        # SWIG refused a value ncu_report itself returned (a metric name whose bytes are not
        # text): the report is damaged there.
        where = result_span(low, high)
        raise UnsupportedReport(f"{report.path}: corrupt Nsight Compute report ({where}: "
                                f"{exc}); archive an intact copy") from None
    tables = {name: rows_table(name, columns, rows[name]) for name, columns in COLUMNS.items()}
    return {"kernels": records_table("kernels", rows["kernels"]), **tables}
