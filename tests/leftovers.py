"""What a test module left behind: processes the suite started and triage's temporary files.

The suite runs with a private $TMPDIR (inside pytest's base temp) and a marker variable in its
environment, so that on a shared machine only its own leftovers are seen: a process is the
suite's when it is below pytest or carries the marker (an nsys agent, re-parented to init
once nsys exits, inherits it: capture/process_tree.py), and a temporary file is triage's when
its name is one triage (or nsys for it) gives one in $TMPDIR.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from triage.capture import process_tree

MARKER = "TRIAGE_TESTS_SESSION"
# mkstemp/mkdtemp prefixes of triage (archive/query.py, capture/nsys.py, capture/nsys_export.py,
# capture/git_worktree.py, compare/reproduce.py, triage/cli/demo.py) and nsys's own temporary
# report (capture/diagnosis.py)
TEMP_PREFIXES = ("triage-", "nsys-report-")
EXIT_WAIT = 10.0  # seconds a process that is exiting gets before it counts as left behind
# processes a session fixture owns for the whole run (the SeaweedFS server of `s3_server`, by
# its data folder: a test may restart it, so its pid changes): not a module's leftover, and
# ended by that fixture at the end of the session
SESSION_FOLDERS: set[str] = set()


@dataclass(frozen=True)
class Snapshot:
    processes: dict[tuple[int, str], str]  # (pid, start time) -> command line
    temp: frozenset[str]


def _started(pid: int) -> str | None:
    """A live process's start time (pids are reused); None when gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if fields[0] != "Z" else None


def _marked(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return "?"


def suite_processes() -> dict[tuple[int, str], str]:
    """The live processes of this suite, less the session fixtures' (SESSION_FOLDERS)."""
    me = os.getpid()
    marker = f"{MARKER}={me}".encode()
    pids = set(process_tree.descendants(me))
    pids |= {int(e.name) for e in Path("/proc").glob("[0-9]*")
             if int(e.name) != me and _marked(int(e.name), marker)}
    found = {}
    for pid in pids:
        started, command = _started(pid), _command(pid)
        if started is not None and not any(f in command for f in SESSION_FOLDERS):
            found[(pid, started)] = command
    return found


def snapshot(temp: Path) -> Snapshot:
    names = frozenset(p.name for p in temp.iterdir() if p.name.startswith(TEMP_PREFIXES))
    return Snapshot(suite_processes(), names)


def left_behind(before: Snapshot, temp: Path) -> list[str]:
    """What is there now and was not before, after waiting up to EXIT_WAIT seconds for
    processes that are exiting (a loaded machine reaps slowly): one line each. Processes left
    are killed (by pid) once named, so the next module starts clean."""
    deadline = time.monotonic() + EXIT_WAIT
    while True:
        now = snapshot(temp)
        new = {key: cmd for key, cmd in now.processes.items() if key not in before.processes}
        if not new or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for pid, _ in new:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    lines = [f"process {pid}: {cmd}" for (pid, _), cmd in sorted(new.items())]
    return lines + [f"temporary file {temp / name}" for name in sorted(now.temp - before.temp)]
