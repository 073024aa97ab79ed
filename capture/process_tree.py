"""Ending a profiler that hangs or is interrupted, with everything it started.

A profiler is a tree of processes (nsys, its launcher, the application) plus, for nsys, an agent
it detaches (`nsys --start-agent --session-name=profile-APP-PID`, re-parented to init, so no walk
of the tree finds it once nsys is gone). Ending only the top one leaves the rest holding the
output pipe, and the agent spinning.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TERM_GRACE = 5.0  # seconds a process tree gets after SIGTERM before SIGKILL
# The longest the main thread waits on a child without running Python: a signal the kernel
# hands to another of triage's threads (DuckDB's, pyarrow's) trips Python's handler there but
# does not interrupt the main thread's blocked poll or read, and the handler's exception is
# raised in the main thread only when it next runs Python code.
SIGNAL_LATENCY = 0.5


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (the children of each of its threads)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


# Set in a profiler's environment (capture/session.py `run_profiler`): its nsys agents inherit
# it, so they are found even when the nsys that started their session came and went between two
# looks at the profiler's processes (a profile shorter than the look's interval).
MARK = "TRIAGE_PROFILER_RUN"


def agents_of(pids: list[int], mark: str | None = None) -> list[int]:
    """nsys agents whose session was started by one of `pids` (the session name ends in the
    starting nsys's pid), or, given `mark`, that carry MARK=mark in their environment."""
    wanted = {str(pid) for pid in pids}
    marked = f"{MARK}={mark}".encode() if mark else None
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--start-agent" not in args:
            continue
        if marked is not None and marked in _environment(entry):
            found.append(int(entry.name))
            continue
        for arg in args:
            match = re.fullmatch(rb"--session-name=\S*-(\d+)", arg)
            if match and match.group(1).decode() in wanted:
                found.append(int(entry.name))
    return found


def _environment(entry: Path) -> list[bytes]:
    try:
        return (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def end_tree(pid: int, is_done, grace: float = TERM_GRACE, mark: str | None = None) -> None:
    """SIGTERM the process `pid`, everything below it and its nsys agents (those of `mark`
    too); SIGKILL what is left after `grace` seconds (`is_done()` says the top one has
    exited)."""
    tree = [pid, *descendants(pid)]
    everything = tree + agents_of(tree, mark)
    _signal_all(everything, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not is_done():
        time.sleep(0.1)
    # whatever is still there (the tree may have grown while it stopped)
    late = [p for p in [pid, *descendants(pid)] if p not in everything]
    _signal_all([p for p in everything + late + agents_of(late, mark) if _alive(p)],
                signal.SIGKILL)


def end_agents(pids: list[int], mark: str | None = None) -> None:
    """Kill the nsys agents of sessions that `pids` started, or that carry `mark` (MARK)."""
    _signal_all(agents_of(pids, mark), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class HeldSignals:
    """Signals that arrived while a child process was being started (`signals_held`)."""

    def __init__(self, then: Callable[[int], None] | None) -> None:
        self.arrived: list[int] = []
        self.then = then
        self.previous: dict[int, Any] = {}  # the handlers from before, while replaced

    def deliver(self) -> None:
        """Hand the signals on, now that the caller knows the child and can end it: to `then`
        from here on, or back to the handlers from before; each held one raised again, so
        the exception its handler raises comes out of this call."""
        if self.then is None:
            self.restore()
        else:
            then = self.then
            for sig in self.previous:
                signal.signal(sig, lambda signum, _frame: then(signum))
        arrived, self.arrived = self.arrived, []
        for signum in arrived:
            signal.raise_signal(signum)

    def restore(self) -> None:
        """The handlers from before back (a second Ctrl-C while the child is stopped is theirs)."""
        previous, self.previous = self.previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held(*signums: int, then: Callable[[int], None] | None = None
                 ) -> Iterator[HeldSignals]:
    """Hold `signums` while a child is started, until the caller, holding the Popen object,
    calls `deliver()`: a Ctrl-C that lands inside `subprocess.Popen` after the fork raises
    there, before any caller holds the process, and leaves the child running (nsys export, a
    whole profiler). `then(signum)` handles them from `deliver()` on, with no moment between
    under the handlers from before; without it, only signals with a Python handler are held
    (one ignored stays ignored: the child inherits that, a job started in the background of a
    script), and they go back to those handlers. The handlers from before come back when the
    block ends; when it fails (the child did not start), what arrived is delivered to them.
    Only the main thread may set handlers, and only it receives their exceptions: elsewhere
    nothing is held."""
    held = HeldSignals(then)
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    held.previous = {sig: signal.signal(sig, lambda signum, _frame: held.arrived.append(signum))
                     for sig in signums if then is not None or callable(signal.getsignal(sig))}
    try:
        yield held
    except BaseException:
        held.then = None
        held.deliver()
        raise
    finally:
        held.restore()


def run_ended(argv: list[str], timeout: float, **options) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, timeout=timeout, **options)`, except that a
    Ctrl-C never leaves the child running: one that lands while the child starts is held until
    the process is known (`signals_held`), one that lands while it runs is seen within
    SIGNAL_LATENCY whichever thread the kernel gave it to, and on any way out but its end
    (Ctrl-C, the timeout) the child is killed and reaped without waiting for pipes a process
    of its own may hold; one a thread still waits on when triage exits is killed then."""
    process = None
    try:
        with signals_held(signal.SIGINT) as held:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       **options)
            _WAITED_ON.add(process)
            held.deliver()
        out, err = _communicate(process, timeout)
    except BaseException:
        if process is not None:
            _reap(process)
        raise
    finally:
        _WAITED_ON.discard(process)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


# The tools `run_ended` is waiting on, in any thread. A Ctrl-C reaches only the main thread,
# whose own tool is reaped on the way out; a probe's thread (a daemon: git, nvidia-smi,
# `--version` beside the profiler) may still wait on its tool when triage exits, and the tool
# would outlive triage.
_WAITED_ON: set[subprocess.Popen] = set()


@atexit.register
def _end_waited_on() -> None:
    """At exit, kill the tools still waited on (by then, only other threads' can be)."""
    for process in list(_WAITED_ON):
        with contextlib.suppress(OSError):
            process.kill()


def _communicate(process: subprocess.Popen, timeout: float) -> tuple:
    """`process.communicate(timeout=timeout)` in slices of SIGNAL_LATENCY (a slice that times
    out loses no output)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return process.communicate(timeout=max(0.0, min(SIGNAL_LATENCY, left)))
        except subprocess.TimeoutExpired:
            if left <= SIGNAL_LATENCY:
                raise subprocess.TimeoutExpired(process.args, timeout) from None


def read_some(fd: int, size: int = 65536) -> bytes:
    """The next bytes (at most `size`) of a pipe from a child, b"" at its end, waited for in
    slices of SIGNAL_LATENCY."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    while not waiting.poll(SIGNAL_LATENCY * 1000):
        pass
    return os.read(fd, size)


def _reap(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
