"""Forked worker processes that return bytes, consumed in task order.

For a reader that keeps memory it should not (`ncu_report`) or that one core cannot keep up
with: a forked child inherits what the parent has loaded, computes one task, writes its result
(Arrow IPC) into a pipe and exits, so nothing it allocated stays behind. At most `workers` run
at once; each result is read whole, in task order, so a chunk's rows are held by its worker and
then by the parent, never by both for long.

Forking while another thread runs can deadlock the child (a lock that thread held stays held
there), and the archive runs threads while it reads (the blob copier, Parquet encoders). So a
`Relay` forks once, when it is made, before the caller starts them: that single-threaded child
forks the workers, for as long as they are needed, and relays their results in order.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import signal
import struct
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterable
from contextlib import closing, suppress
from typing import IO, TYPE_CHECKING, Any

from triage.base.errors import TriageError

if TYPE_CHECKING:
    import pyarrow as pa

OK, FAILED, REFUSED = b"T", b"E", b"R"  # result, exception, TriageError
DONE, WORKER_FAILED, INTERRUPTED = b"D", b"W", b"I"  # what else a relay says, last
FRAME = struct.Struct("!cQ")  # a relayed frame's header: what it is, how many bytes follow
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerFailed(Exception):
    """A task raised (`reason` is its exception, one line) or its process died (`crashed`)."""

    def __init__(self, task: Any, reason: str, crashed: bool) -> None:
        super().__init__(reason)
        self.task, self.reason, self.crashed = task, reason, crashed


def can_fork() -> bool:
    """Linux only: Windows has no fork, and macOS's system libraries are not fork-safe."""
    return sys.platform.startswith("linux")


def cores(limit: int) -> int:
    """Cores this process may use, at most `limit`."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(limit, count or 1))


Task = Any
Work = Callable[[Task], bytes]


def in_order(tasks: Iterable[Task], work: Work, workers: int) -> Generator[bytes, None, None]:
    """Yield work(task) (bytes) for each task, in order, computed in forked processes.

    A task that raises a TriageError raises it here too; any other failure raises WorkerFailed
    (a Ctrl-C that reached a worker first is raised as KeyboardInterrupt). Workers still
    running are killed and reaped when the consumer stops early (an error, Ctrl-C, or closing
    the generator). Forks while it runs: a caller with threads uses a `Relay`.
    """
    pending = iter(tasks)
    running: deque[tuple[Task, tuple[int, int]]] = deque()
    try:
        for task in pending:
            running.append((task, _start(work, task)))
            if len(running) == workers:
                break
        while running:
            task, (pid, read_fd) = running.popleft()
            data = collect(task, pid, read_fd)  # closes the pipe and reaps, whatever happens
            following = next(pending, None)
            if following is not None:
                running.append((following, _start(work, following)))
            yield data
    finally:
        for _task, (pid, read_fd) in running:
            _stop(pid, read_fd)


class Relay:
    """The results of `in_order`, run by one child forked when this is made (make it before
    starting threads) that stays single-threaded, so the workers it forks later never inherit
    another thread's locks.

    Iterating raises as `in_order` does; a failure of the relay itself is a WorkerFailed of
    task None. `close` (also before the first result) kills the relay; its workers die with it.
    """

    def __init__(self, tasks: Iterable[Task], work: Work, workers: int) -> None:
        self.pid, read_fd = _fork_child(lambda fd: _relay(fd, tasks, work, workers))
        self._pipe: IO[bytes] | None = os.fdopen(read_fd, "rb")

    def __iter__(self) -> Relay:
        return self

    def __next__(self) -> bytes:
        if self._pipe is None:
            raise StopIteration
        try:
            frame = _read_frame(self._pipe)
        except EOFError:  # the relay died without a last word: say how
            self._pipe.close()
            self._pipe = None
            _pid, status = os.waitpid(self.pid, 0)
            raise WorkerFailed(None, _how(os.waitstatus_to_exitcode(status)),
                               crashed=True) from None
        except BaseException:
            self.close()
            raise
        if frame is None:
            self.close()
            raise StopIteration
        return frame

    def close(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
            _end(self.pid)  # ended already, or stopped early: its workers die with it


def _relay(write_fd: int, tasks: Iterable[Task], work: Work, workers: int) -> None:
    """In the relay: every result as a frame, then one frame saying how it ended."""
    with os.fdopen(write_fd, "wb") as pipe:
        try:
            with closing(in_order(tasks, work, workers)) as results:
                for data in results:
                    _frame(pipe, OK, data)
            _frame(pipe, DONE, b"")
        except WorkerFailed as failed:
            _frame(pipe, WORKER_FAILED, pickle.dumps((failed.task, failed.reason,
                                                      failed.crashed)))
        except TriageError as exc:
            _frame(pipe, REFUSED, pickle.dumps(exc))
        except KeyboardInterrupt:
            _frame(pipe, INTERRUPTED, b"")


def _frame(pipe: IO[bytes], kind: bytes, data: bytes) -> None:
    pipe.write(FRAME.pack(kind, len(data)))
    pipe.write(data)
    pipe.flush()


def _read_frame(pipe: IO[bytes]) -> bytes | None:
    """The next result, None after the last; raises what the relay reports (EOFError when
    it ended without saying)."""
    header = pipe.read(FRAME.size)
    if len(header) < FRAME.size:
        raise EOFError
    kind, size = FRAME.unpack(header)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    if kind == OK:
        return data
    if kind == WORKER_FAILED:
        task, reason, crashed = pickle.loads(data)  # noqa: S301 - written by our own fork
        raise WorkerFailed(task, reason, crashed)
    if kind == REFUSED:
        raise pickle.loads(data)  # noqa: S301 - written by this process's own fork
    if kind == INTERRUPTED:
        raise KeyboardInterrupt
    return None


def _start(work: Work, task: Task) -> tuple[int, int]:
    """Fork a worker for one task; (pid, the pipe its result comes through)."""
    return _fork_child(lambda write_fd: _send(write_fd, _run(work, task)))


def _fork_child(body: Callable[[int], None]) -> tuple[int, int]:
    """Fork a child that runs body(the write end of a pipe) and exits; (pid, the read end)."""
    parent, libc = os.getpid(), _libc()  # loaded here once, not in every child
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise TriageError(f"cannot start a worker process ({exc.strerror or exc}); free "
                          "memory or raise the process limit (ulimit -u)") from None
    if pid == 0:  # the child: never returns, and runs no cleanup of the parent's objects
        gc.disable()  # no finalizer of an object inherited from the parent runs here
        os.close(read_fd)
        code = 1
        try:
            _die_with(parent, libc)
            body(write_fd)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int, libc: Any) -> None:
    """Have the kernel kill this worker when its parent dies, even by SIGKILL (the OOM
    killer): otherwise it would read its whole chunk for nobody. Linux's PR_SET_PDEATHSIG,
    which fires when the forking thread ends: `in_order` starts and awaits its workers in the
    thread that consumes it."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # a worker that outlives its parent still ends at its first write to the pipe
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _run(work: Work, task: Task) -> bytes:
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


def collect(task: Task, pid: int, read_fd: int) -> bytes:
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
        raise WorkerFailed(task, _how(code), crashed=True)
    return data[1:]


def _how(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _stop(pid: int, read_fd: int) -> None:
    """End a worker whose result is no longer wanted."""
    os.close(read_fd)
    _end(pid)


def _end(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with suppress(ChildProcessError):
        os.waitpid(pid, 0)


def arrow_payload(tables: Iterable[pa.Table]) -> bytes:
    """Arrow tables as consecutive IPC streams (one per table), for `arrow_tables`."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    for table in tables:
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_tables(data: bytes) -> list[pa.Table]:
    import pyarrow as pa

    source = pa.BufferReader(data)
    tables: list[pa.Table] = []
    while source.tell() < source.size():
        tables.append(pa.ipc.open_stream(source).read_all())
    return tables
