"""Forked worker processes that return bytes, consumed in task order.

For a reader that keeps memory it should not (`ncu_report`) or that one core cannot keep up
with: a forked child inherits what the parent has loaded, computes one task, writes its result
(Arrow IPC) into a pipe and exits, so nothing it allocated stays behind. At most `workers` run
at once; each result is read whole, in task order, so a chunk's rows are held by its worker and
then by the parent, never by both for long.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import signal
import sys
from collections import deque
from contextlib import suppress

from triage.errors import TriageError

OK, FAILED, REFUSED = b"T", b"E", b"R"  # result, exception, TriageError
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerFailed(Exception):
    """A task raised (`reason` is its exception, one line) or its process died (`crashed`)."""

    def __init__(self, task, reason: str, crashed: bool):
        super().__init__(reason)
        self.task, self.reason, self.crashed = task, reason, crashed


def can_fork() -> bool:
    """Linux only: Windows has no fork, and macOS's system libraries are not fork-safe."""
    return sys.platform.startswith("linux")


def cores(limit: int) -> int:
    """Cores this process may use, at most `limit`."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(limit, count or 1))


def in_order(tasks, work, workers: int):
    """Yield work(task) (bytes) for each task, in order, computed in forked processes.

    A task that raises a TriageError raises it here too; any other failure raises WorkerFailed
    (a Ctrl-C that reached a worker first is raised as KeyboardInterrupt). Workers still
    running are killed and reaped when the consumer stops early (an error, Ctrl-C, or closing
    the generator).
    """
    pending, running = iter(tasks), deque()
    try:
        for task in pending:
            running.append((task, _start(work, task)))
            if len(running) == workers:
                break
        while running:
            task, (pid, read_fd) = running.popleft()
            data = _collect(task, pid, read_fd)  # closes the pipe and reaps, whatever happens
            following = next(pending, None)
            if following is not None:
                running.append((following, _start(work, following)))
            yield data
    finally:
        for _task, (pid, read_fd) in running:
            _stop(pid, read_fd)


def _start(work, task) -> tuple[int, int]:
    """Fork a worker for one task; (pid, the pipe its result comes through)."""
    parent, libc = os.getpid(), _libc()  # loaded here once, not in every worker
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise TriageError(f"cannot start a worker process ({exc.strerror or exc}); free "
                          "memory or raise the process limit (ulimit -u)") from None
    if pid == 0:  # the worker: never returns, and runs no cleanup of the parent's objects
        gc.disable()  # no finalizer of an object inherited from the parent runs here
        os.close(read_fd)
        code = 1
        try:
            _die_with(parent, libc)
            _send(write_fd, _run(work, task))
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


@functools.cache
def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int, libc) -> None:
    """Have the kernel kill this worker when its parent dies, even by SIGKILL (the OOM
    killer): otherwise it would read its whole chunk for nobody. Linux's PR_SET_PDEATHSIG,
    which fires when the forking thread ends: `in_order` starts and awaits its workers in the
    thread that consumes it."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # a worker that outlives its parent still ends at its first write to the pipe
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _run(work, task) -> bytes:
    try:
        return OK + work(task)
    except TriageError as exc:  # a verdict on the input: the parent raises it as it is
        return REFUSED + pickle.dumps(exc)
    except BaseException as exc:  # noqa: BLE001 - the parent turns it into a one-line error
        text = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever it said
        return FAILED + text.encode("utf-8", "replace")


def _send(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def _collect(task, pid: int, read_fd: int) -> bytes:
    """A worker's result, or WorkerFailed for what it reported or how it died. The pipe is
    closed and the worker reaped (killed first if this is interrupted) either way."""
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        _pid, status = os.waitpid(pid, 0)
    except BaseException:
        _end(pid)
        raise
    if data[:1] == REFUSED:
        raise pickle.loads(data[1:])  # noqa: S301 - written by this process's own fork
    if data[:1] == FAILED:
        reason = data[1:].decode("utf-8", "replace")
        if reason.startswith("KeyboardInterrupt"):
            raise KeyboardInterrupt
        raise WorkerFailed(task, reason, crashed=False)
    code = os.waitstatus_to_exitcode(status)
    if data[:1] != OK or code != 0:
        how = (f"killed by {signal.Signals(-code).name}" if code < 0 and -code in
               signal.valid_signals() else f"exit status {code}")
        raise WorkerFailed(task, how, crashed=True)
    return data[1:]


def _stop(pid: int, read_fd: int) -> None:
    """End a worker whose result is no longer wanted."""
    os.close(read_fd)
    _end(pid)


def _end(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)


def arrow_payload(tables) -> bytes:
    """Arrow tables as consecutive IPC streams (one per table), for `arrow_tables`."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    for table in tables:
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_tables(data: bytes) -> list:
    import pyarrow as pa

    source, tables = pa.BufferReader(data), []
    while source.tell() < source.size():
        tables.append(pa.ipc.open_stream(source).read_all())
    return tables
