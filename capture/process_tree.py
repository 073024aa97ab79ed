"""Ending a profiler that hangs or is interrupted, with everything it started.

A profiler is a tree of processes (nsys, its launcher, the application) plus, for nsys, an agent
it detaches (`nsys --start-agent --session-name=profile-APP-PID`, re-parented to init, so no walk
of the tree finds it once nsys is gone). Ending only the top one leaves the rest holding the
output pipe, and the agent spinning.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

TERM_GRACE = 5.0  # seconds a process tree gets after SIGTERM before SIGKILL


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
