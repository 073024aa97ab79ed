"""Reading an ncu report's results in short-lived worker processes.

Why processes: `ncu_report` (2026.3.1, measured on the corpus) never frees what decoding a result
allocates. About 0.3-1 MB per result stays in the process after its IAction, range and context
are gone, and `malloc_trim` returns none of it. A process that reads a report of 100,000
results, or `triage archive *.ncu-rep` of a thousand reports, would grow without bound. Here a
forked worker reads at most CHUNK_RESULTS results and exits, taking that memory with it.

The workers also run on all cores. Each one sends its rows back as one Arrow IPC stream per
table, and the chunks are written in result order, so the tables get the same bytes as reading
in-process. A process still reads its first IN_PROCESS_RESULTS results itself (forking costs
more than reading a small report), and all of them where `fork` is missing or unsafe.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from contextlib import suppress

from triage.errors import UnsupportedReport

CHUNK_RESULTS = 256  # results per worker process: bounds what one keeps (~0.3-1 MB each)
IN_PROCESS_RESULTS = 256  # results read in this process before reading moves to workers
IN_PROCESS_CHUNK = 64  # results whose rows are held at once when reading in-process
MAX_WORKERS = 8
TABLES = ("kernels", "metrics", "sections", "rules")
OK, FAILED = b"T", b"E"
_read_here = 0  # results this process has decoded (and keeps the memory of)


def result_tables(report, report_index: int):
    """Yield {table: Arrow table} per chunk of results, in result order.

    Results are read in this process while it has read fewer than IN_PROCESS_RESULTS in all
    (a small report costs less than forking would), in worker processes after that.
    """
    global _read_here
    count = report.count_actions()
    if not sys.platform.startswith("linux") or _read_here + count <= IN_PROCESS_RESULTS:
        _read_here += count  # fork is missing (Windows) or unsafe (macOS) elsewhere
        for low in range(0, count, IN_PROCESS_CHUNK):  # rows become Arrow chunk by chunk
            yield extract_chunk(report, report_index, low, min(count, low + IN_PROCESS_CHUNK))
        return
    workers = _worker_count()
    size = max(1, min(CHUNK_RESULTS, -(-count // workers)))
    chunks = [(low, min(count, low + size)) for low in range(0, count, size)]
    report.warm_up()  # decoded once here, not once per worker: see NcuReport.warm_up
    _read_here += 1
    yield from _from_workers(report, report_index, chunks, workers)


def _worker_count() -> int:
    """One worker process per core this process may use, at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_WORKERS, cores or 1))


def extract_chunk(report, report_index: int, low: int, high: int) -> dict:
    """The rows of results low..high-1 of every results table, as Arrow tables."""
    import pyarrow as pa

    from triage.archive.tables import arrow_schema
    from triage.capture.ncu import result_rows

    rows = result_rows(report, report_index, low, high)
    return {name: pa.Table.from_struct_array(pa.array(rows[name],
                                                      pa.struct(list(arrow_schema(name)))))
            for name in TABLES}


def _from_workers(report, report_index: int, chunks: list, workers: int):
    """Keep `workers` processes busy; yield their chunks in order; never leave one behind."""
    pending, running = iter(chunks), deque()
    try:
        for chunk in pending:
            running.append((chunk, _start(report, report_index, chunk)))
            if len(running) == workers:
                break
        while running:
            chunk, (pid, read_fd) = running.popleft()
            data = _collect(report.path, chunk, pid, read_fd)
            following = next(pending, None)
            if following is not None:
                running.append((following, _start(report, report_index, following)))
            yield _decode(data)
    finally:
        for _chunk, (pid, read_fd) in running:
            _stop(pid, read_fd)


def _start(report, report_index: int, chunk: tuple[int, int]) -> tuple[int, int]:
    """Fork a worker for one chunk; (pid, the pipe its result comes through)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns, and runs no cleanup of the parent's objects
        os.close(read_fd)
        code = 1
        try:
            _send(write_fd, _work(report, report_index, chunk))
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def _work(report, report_index: int, chunk: tuple[int, int]) -> bytes:
    try:
        return OK + _encode(extract_chunk(report, report_index, *chunk))
    except BaseException as exc:  # noqa: BLE001 - the parent turns it into a one-line error
        return FAILED + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")


def _send(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def _collect(path, chunk: tuple[int, int], pid: int, read_fd: int) -> bytes:
    """A worker's Arrow payload, or a one-line error for what it reported or how it died."""
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _pid, status = os.waitpid(pid, 0)
    where = f"{path}: reading results {chunk[0]}-{chunk[1] - 1}"
    if data[:1] == FAILED:
        raise UnsupportedReport(f"{where} failed ({data[1:].decode('utf-8', 'replace')}); "
                                "upgrade ncu-report (pip install -U ncu-report)")
    if data[:1] != OK or os.waitstatus_to_exitcode(status) != 0:
        raise UnsupportedReport(f"{where}: ncu_report crashed (exit status "
                                f"{os.waitstatus_to_exitcode(status)}); upgrade ncu-report "
                                "(pip install -U ncu-report)")
    return data[1:]


def _stop(pid: int, read_fd: int) -> None:
    """End a worker whose chunk is no longer wanted (an earlier chunk failed, or Ctrl-C)."""
    with suppress(ProcessLookupError):
        os.kill(pid, 9)
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)
    os.close(read_fd)


def _encode(tables: dict) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    for name in TABLES:
        with pa.ipc.new_stream(sink, tables[name].schema) as stream:
            stream.write_table(tables[name])
    return sink.getvalue().to_pybytes()


def _decode(data: bytes) -> dict:
    import pyarrow as pa

    source = pa.BufferReader(data)
    return {name: pa.ipc.open_stream(source).read_all() for name in TABLES}
