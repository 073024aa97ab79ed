"""Forked worker processes that return bytes, consumed in task order.

For a reader that keeps memory it should not (`ncu_report`) or that one core cannot keep up
with: a forked child inherits what the parent has loaded, computes tasks from a shared queue,
writes each result (Arrow IPC) into a pipe, and exits once it has done its share (a weight
budget), so nothing it allocated stays behind; one worker serves many small tasks, so a batch
of small reports pays a few forks, not one per report. At most `workers` run at once, and
results are handed over in task order, at most a few per worker ahead of the consumer.

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
import select
import signal
import struct
import sys
from collections.abc import Callable, Generator, Iterable
from contextlib import closing, suppress
from typing import IO, TYPE_CHECKING, Any

from triage.base.errors import TriageError
from triage.capture.process_tree import read_some

if TYPE_CHECKING:
    import pyarrow as pa

OK, FAILED, REFUSED = b"T", b"E", b"R"  # result, exception, TriageError
DONE, WORKER_FAILED, INTERRUPTED = b"D", b"W", b"I"  # what else a relay says, last
TAKEN, RESULT = b"N", b"O"  # what a worker says: the task it took, then its outcome
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
Weight = Callable[[Task], int]
NUMBER = struct.Struct("!Q")  # a task's number, as the queue and a TAKEN frame carry it


def _one(_task: Task) -> int:
    return 1


def in_order(tasks: Iterable[Task], work: Work, workers: int, weight: Weight = _one,
             budget: int = 1) -> Generator[bytes, None, None]:
    """Yield work(task) (bytes) for each task, in order, computed in forked processes.

    At most `workers` run at once. Each takes tasks one after another from a shared queue until
    it has done `budget` of their `weight` (one task at least), then exits, and what those
    tasks allocated goes with it; another is forked while tasks remain. A task that raises a
    TriageError raises it here too; any other failure raises WorkerFailed (a Ctrl-C that
    reached a worker first is raised as KeyboardInterrupt), each once the results before it
    have been yielded. Workers still running are killed and reaped when the consumer stops
    early (an error, Ctrl-C, or closing the generator). Forks while it runs: a caller with
    threads uses a `Relay`.
    """
    pool = _Pool(list(tasks), work, workers, weight, budget)
    try:
        yield from pool.results()
    finally:
        pool.stop()


class _Worker:
    """A worker as its pool sees it: its pid, the pipe it reports through, the task it holds."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        self.holding: int | None = None  # the number of the task it took and has not finished


class _Pool:
    """`in_order`'s workers. Task numbers go into a queue (a pipe: 8-byte writes and reads are
    atomic) at most LOOKAHEAD per worker ahead of the result the consumer waits for, so no more
    results than that are ever held here; a worker says which task it took (TAKEN), then its
    outcome (RESULT), so a worker that dies is a failure of the task it held."""

    LOOKAHEAD = 2

    def __init__(self, tasks: list[Task], work: Work, workers: int, weight: Weight,
                 budget: int) -> None:
        self.tasks, self.work, self.size = tasks, work, max(1, workers)
        self.weight, self.budget = weight, budget
        self.queue_read, self.queue_write = os.pipe()
        self.fed = self.taken = 0
        self.running: dict[int, _Worker] = {}  # by the fd of its pipe
        self.outcomes: dict[int, bytes | BaseException] = {}  # by task number, not yet yielded

    def results(self) -> Generator[bytes, None, None]:
        for number in range(len(self.tasks)):
            self._feed(number + self.LOOKAHEAD * self.size)
            while number not in self.outcomes:
                self._fork_wanted()
                self._hear()
            outcome = self.outcomes.pop(number)
            if isinstance(outcome, BaseException):
                raise outcome
            yield outcome

    def _feed(self, limit: int) -> None:
        while self.fed < min(limit, len(self.tasks)):
            os.write(self.queue_write, NUMBER.pack(self.fed))
            self.fed += 1
        if self.fed == len(self.tasks) and self.queue_write >= 0:
            os.close(self.queue_write)  # a worker that finds the queue empty now exits
            self.queue_write = -1

    def _fork_wanted(self) -> None:
        """As many workers as may run, or as there are tasks no worker has taken."""
        while len(self.running) < min(self.size, len(self.tasks) - self.taken):
            others = [fd for fd in (self.queue_write, *self.running) if fd >= 0]
            serve = functools.partial(_serve, self.queue_read, self.tasks, self.work,
                                      self.weight, self.budget)
            pid, fd = _fork_child(serve, close=others)
            self.running[fd] = _Worker(pid, fd)

    def _hear(self) -> None:
        """Wait for any worker to say something, and take it in."""
        poller = select.poll()
        for fd in self.running:
            poller.register(fd, select.POLLIN)
        for fd, _event in poller.poll():
            self._take_in(self.running[fd])

    def _take_in(self, worker: _Worker) -> None:
        frame = _read_frame_from(worker.fd)
        if frame is None:  # it ended: all told, or died
            self._ended(worker)
            return
        kind, data = frame
        if kind == TAKEN:
            worker.holding = NUMBER.unpack(data)[0]
            self.taken += 1
        else:
            number, worker.holding = worker.holding, None
            assert number is not None  # a worker reports a task it took
            self.outcomes[number] = _outcome(self.tasks[number], data)

    def _ended(self, worker: _Worker) -> None:
        del self.running[worker.fd]
        os.close(worker.fd)
        _pid, status = os.waitpid(worker.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if worker.holding is not None:  # died in the task it held: a failure of that task
            self.outcomes[worker.holding] = WorkerFailed(self.tasks[worker.holding], _how(code),
                                                         crashed=True)
        elif code != 0:
            # Died holding no task it had named: between taking one and saying which (that
            # task is lost, and nothing would ever finish it), or killed while idle. The pool
            # fails now, naming no task: which one was lost is not known.
            raise WorkerFailed(None, _how(code), crashed=True)

    def stop(self) -> None:
        """Kill and reap every worker still running, and close every pipe."""
        for fd in (self.queue_write, self.queue_read):
            if fd >= 0:
                os.close(fd)
        self.queue_write = self.queue_read = -1
        for worker in list(self.running.values()):
            _stop(worker.pid, worker.fd)
        self.running.clear()


def _serve(queue: int, tasks: list[Task], work: Work, weight: Weight, budget: int,
           write_fd: int) -> None:
    """In a worker: tasks from the queue until `budget` of their weight is done, the queue is
    closed and empty, or one fails (what follows is not wanted)."""
    spent = 0
    with os.fdopen(write_fd, "wb") as pipe:
        while spent < budget:
            taken = os.read(queue, NUMBER.size)
            if not taken:
                return
            _frame(pipe, TAKEN, taken)
            task = tasks[NUMBER.unpack(taken)[0]]
            outcome = _run(work, task)
            _frame(pipe, RESULT, outcome)
            if outcome[:1] != OK:
                return
            spent += weight(task)


class Relay:
    """The results of `in_order`, run by one child forked when this is made (make it before
    starting threads) that stays single-threaded, so the workers it forks later never inherit
    another thread's locks.

    Iterating raises as `in_order` does; a failure of the relay itself is a WorkerFailed of
    task None. `close` (also before the first result) kills the relay; its workers die with it.
    `first` runs in the relay before it forks any worker: what every worker would otherwise do
    for itself, done once, off the caller's process.
    """

    def __init__(self, tasks: Iterable[Task], work: Work, workers: int, weight: Weight = _one,
                 budget: int = 1, first: Callable[[], object] = lambda: None) -> None:
        self.pid, read_fd = _fork_child(functools.partial(_relay, tasks, work, workers, weight,
                                                          budget, first))
        self._fd: int | None = read_fd

    def __iter__(self) -> Relay:
        return self

    def __next__(self) -> bytes:
        if self._fd is None:
            raise StopIteration
        try:
            frame = _read_frame_from(self._fd)
        except BaseException:
            self.close()
            raise
        if frame is None:  # the relay died without a last word: say how
            os.close(self._fd)
            self._fd = None
            _pid, status = os.waitpid(self.pid, 0)
            raise WorkerFailed(None, _how(os.waitstatus_to_exitcode(status)), crashed=True)
        kind, data = frame
        if kind == OK:
            return data
        self.close()
        if kind == DONE:
            raise StopIteration
        raise _relayed_failure(kind, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            _end(self.pid)  # ended already, or stopped early: its workers die with it


def _relay(tasks: Iterable[Task], work: Work, workers: int, weight: Weight, budget: int,
           first: Callable[[], object], write_fd: int) -> None:
    """In the relay: every result as a frame, then one frame saying how it ended."""
    with os.fdopen(write_fd, "wb") as pipe:
        try:
            first()
            with closing(in_order(tasks, work, workers, weight, budget)) as results:
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
        except BaseException as exc:  # noqa: BLE001 - the relay's own failure (`first`'s)
            _frame(pipe, WORKER_FAILED, pickle.dumps((None, _one_line(exc), False)))


def _relayed_failure(kind: bytes, data: bytes) -> BaseException:
    """What a relay's last frame says went wrong, to raise."""
    if kind == WORKER_FAILED:
        task, reason, crashed = pickle.loads(data)  # noqa: S301 - written by our own fork
        return WorkerFailed(task, reason, crashed)
    if kind == REFUSED:
        return pickle.loads(data)  # noqa: S301 - written by this process's own fork
    return KeyboardInterrupt()


def _frame(pipe: IO[bytes], kind: bytes, data: bytes) -> None:
    pipe.write(FRAME.pack(kind, len(data)))
    pipe.write(data)
    pipe.flush()


def _fork_child(body: Callable[[int], None], close: Iterable[int] = ()) -> tuple[int, int]:
    """Fork a child that closes the fds `close` (the parent's ends it must not hold: a queue's
    write end held by a worker would keep every worker waiting for more), runs body(the write
    end of a pipe) and exits; (pid, the read end)."""
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
        code = 1
        try:
            for fd in (read_fd, *close):
                os.close(fd)
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
        return FAILED + _one_line(exc).encode("utf-8", "replace")


def _one_line(exc: BaseException) -> str:
    """An exception as one line, whatever it said."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _read_frame_from(fd: int) -> tuple[bytes, bytes] | None:
    """The next frame (kind, data) of a worker or a relay, read straight from its pipe (nothing
    is buffered that `poll` would not see); None once it has ended, or died halfway through a
    frame."""
    header = _read_exactly(fd, FRAME.size)
    if header is None:
        return None
    kind, size = FRAME.unpack(header)
    data = _read_exactly(fd, size)
    return None if data is None else (kind, data)


def _read_exactly(fd: int, size: int) -> bytes | None:
    parts, left = [], size
    while left:
        part = read_some(fd, min(left, 1 << 20))  # a Ctrl-C given to another thread is met
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _outcome(task: Task, data: bytes) -> bytes | BaseException:
    """A task's result, or what to raise for it, from what `_run` made of it."""
    if data[:1] == REFUSED:
        return pickle.loads(data[1:])  # noqa: S301 - written by this process's own fork
    if data[:1] == FAILED:
        reason = data[1:].decode("utf-8", "replace")
        if reason.startswith("KeyboardInterrupt"):
            return KeyboardInterrupt()
        return WorkerFailed(task, reason, crashed=False)
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


def arrow_payload(tables: Iterable[pa.Table], head: bytes = b"") -> bytes:
    """`head`, then Arrow tables as consecutive IPC streams (one per table), for
    `arrow_tables` (its `offset` the size of `head`)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    sink.write(head)
    for table in tables:
        with pa.ipc.new_stream(sink, table.schema) as stream:
            stream.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_tables(data: bytes, offset: int = 0) -> list[pa.Table]:
    import pyarrow as pa

    source = pa.BufferReader(data)
    source.seek(offset)
    tables: list[pa.Table] = []
    while source.tell() < source.size():
        tables.append(pa.ipc.open_stream(source).read_all())
    return tables
