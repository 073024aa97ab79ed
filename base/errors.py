"""The errors the library raises; only the CLI turns them into messages and exit codes.

Each error carries a one-line message that names the thing and the fix. Anything else that escapes
the library is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_OK = 0  # every other exit code is the exit_code of the error that ended the command
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports a command it ended: 128 + 2


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended a command that files runs, with the runs it had made visible by then
    (`filed`: an interrupt after a run's manifest was written). A KeyboardInterrupt still, so
    that no `except Exception` on the way takes it for a failure to fall back from."""

    def __init__(self, filed: tuple[str, ...] = ()):
        super().__init__("interrupted")
        self.filed = filed


class TriageError(Exception):
    """A user-facing failure: bad input, missing tool, unknown run. Exit code 1."""

    exit_code = 1


class UsageError(TriageError):
    """Arguments that cannot work together. Exit code 2, like click's own usage errors."""

    exit_code = 2


class RunNotFound(TriageError):
    """A RUN reference (id, prefix, label, `latest`) that matches nothing."""


class LabelNotFound(TriageError):
    """A label NAME that `triage label -d` was asked to delete but that no label has."""


class LabelMoveLost(TriageError):
    """`triage label` whose move another writer's later move overtook: never reported a success."""


class UnknownRemote(TriageError):
    """A remote NAME that `triage remote add` never added to this store."""


class AmbiguousRun(TriageError):
    """A RUN prefix that matches several runs."""


class UnsupportedReport(TriageError):
    """A file that is not a report triage can read (foreign, empty, truncated, corrupt)."""


class NewerFormat(TriageError):
    """A report or stored object written by a newer tool than this one understands."""


class ToolMissing(TriageError):
    """A profiler (nsys, ncu) that is needed but not installed or not runnable."""


class ToolTooOld(TriageError):
    """A profiler that is present but too old for the report it was asked to read."""


class StoreError(TriageError):
    """The store cannot be read or written (permissions, corruption, foreign directory)."""


class DiskFull(StoreError):
    """The store's disk cannot hold what is being written (ENOSPC)."""


class CorruptObject(StoreError):
    """A stored object whose bytes no longer match its hash."""


class Unreachable(StoreError):
    """A remote store that did not answer, or answered with a failure, after its retries:
    nothing was judged damaged; running the command again is the fix. Exit code 6.
    `silent`: no server answered at all (running it again at once would only wait again)."""

    exit_code = 6
    silent = False


class CaptureFailed(TriageError):
    """A profiler run that produced no report; the attempt itself is still recorded."""


class PatchNotStored(TriageError):
    """`show --patch` of a run with no stored patch (clean tree, over the limit, no git)."""


class RerunRefused(TriageError):
    """`triage rerun` cannot replay what was recorded, or would be invalid (--strict)."""


class BuildFailed(TriageError):
    """`triage rerun --build CMD` exited non-zero: nothing was profiled."""


class ComparisonGate(TriageError):
    """`diff --strict`: the comparison verdict is at or above the requested gate. Exit code 3."""

    exit_code = 3


class GateNotJudged(TriageError):
    """`diff --max-slowdown` with nothing it may accept on (ncu durations alone): a CI gate that
    judged nothing must not read as passed. Exit code 5."""

    exit_code = 5


class RegressionGate(TriageError):
    """`diff --max-slowdown`: a time is slower than the gate allows, beyond noise. Exit code 4."""

    exit_code = 4
