"""`triage rerun RUN`: re-execute a recorded capture and say whether it reproduced.

In order, each step able to refuse before the next starts:
1. the run must come from `triage capture` (an archived report records no command), its argv
   must be whole (redaction hid no word of it), and every redacted variable it recorded must be
   set here (its value is the user's, never the marker);
2. this machine is described as a run would record it (the capture's machine facts and the
   profiler found on PATH) and graded against the run with the drift table `diff` uses: the
   predicted verdict (`strict`: refused when `invalid`);
3. the tree: `here` is the current tree (its commit and edits are compared with the record);
   `at_commit` is a temporary git worktree of the recorded commit with the stored patch applied,
   removed afterwards; the working directory keeps its path relative to the repository;
4. `build` runs in that tree (a failure stops the rerun);
5. each repeat is a normal capture (`archive/captured.py`) with `rerun_of` set and its outputs
   moved into a fresh directory (`capture/replay.py`), so no file of the original is touched;
6. the original side (the run and its `--repeat` siblings: same group, same rerun_of) is diffed
   against the new runs, noise-aware, and read as one outcome (`compare/rerun.py`).

Here in compare/, above the archive and the capture it drives, since it ends in a diff.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triage.archive.annotations import Arrival
from triage.archive.model import RunRecord
from triage.archive.labels import check_label, series_label
from triage.archive.runs import load_record
from triage.archive.store import Store
from triage.capture import replay
from triage.capture.progress import ProgressEvent
from triage.capture.session import CaptureRequest
from triage.compare.result import DiffResult, DriftItem
from triage.compare.rerun import Reproduced
from triage.base.errors import BuildFailed, RerunRefused, UsageError

HERE, AT_COMMIT = "here", "at_commit"


@dataclass(frozen=True)
class RerunRequest:
    """What the user asked `triage rerun` to do."""

    ref: str
    store: str | None = None
    label: str | None = None
    repeat: int = 1
    mode: str = HERE
    build: str | None = None
    strict: bool = False
    threshold_pct: float = 1.0  # a change beyond noise below this still reproduces (diff's)
    environ: Mapping[str, str] | None = None
    yes: bool = False  # run a foreign run's command without asking (--yes)
    confirm: Callable[[ForeignRun], bool] | None = None  # asked where not `yes` (a terminal)


@dataclass(frozen=True)
class ForeignRun:
    """A run that arrived from another store (import, pull, push): its command is that store's
    choice, not this one's (a bundle's manifest is self-consistent, not signed), and it would
    get this machine's values of the variables redacted when it was recorded (`supplied`)."""

    run_id: str
    arrival: Arrival
    argv: tuple[str, ...]
    supplied: tuple[str, ...]


@dataclass(frozen=True)
class Prediction:
    """This machine graded against the run before anything runs: the same items `diff` lists
    (the ones not the same) and the verdict they imply."""

    here: RunRecord
    drift: tuple[DriftItem, ...]
    verdict: str


@dataclass(frozen=True)
class TreeDelta:
    """How the tree the rerun uses differs from the recorded one (None: not recorded)."""

    mode: str
    recorded_commit: str | None
    commit: str | None
    recorded_dirty: bool | None
    dirty: bool | None
    same_edits: bool | None  # the same `git diff HEAD` bytes as recorded


@dataclass(frozen=True)
class Plan:
    """Everything checked before running: the run, the replay and the predicted drift."""

    original: RunRecord
    argv: list[str]
    environment: replay.ReplayEnvironment
    prediction: Prediction


@dataclass(frozen=True)
class RerunResult:
    """What the rerun did: the tree it used, the new runs, their diff with the original side."""

    plan: Plan
    tree: TreeDelta
    new_runs: tuple[str, ...]
    original_side: tuple[str, ...]
    diff: DiffResult
    outcome: Reproduced


def plan(store: Store, request: RerunRequest) -> Plan:
    """Refuse what cannot be replayed, and grade this machine against the run."""
    if request.label:
        check_label(request.label)
    original = load_record(store, request.ref)
    capture = original.capture
    if capture is None or not capture.argv:
        raise UsageError(f"run {original.id[:12]} was filed by `triage archive`: it records no "
                         "command to rerun (only runs made by `triage capture` can be rerun)")
    hidden = replay.redacted_words(list(capture.argv))
    if hidden:
        raise RerunRefused(f"run {original.id[:12]}'s command had {len(hidden)} word(s) "
                           "redacted (a secret in the argv): it cannot be replayed as recorded")
    environment = replay.replay_environment(capture.environ, request.environ or os.environ)
    if environment.missing:
        raise RerunRefused("the run recorded these variables redacted; set them to replay it: "
                           + ", ".join(environment.missing))
    _check_foreign(request, ForeignRun(original.id, arrival, tuple(capture.argv),
                                              tuple(environment.supplied))
                   if (arrival := store.annotations.arrival(original.id)) else None)
    prediction = predict(original, environment.variables)
    if request.strict and prediction.verdict == "invalid":
        fields = ", ".join(i.field for i in prediction.drift if i.severity == "invalidates")
        raise RerunRefused(f"--strict: a rerun here would be invalid ({fields} differs from "
                           f"run {original.id[:12]}); nothing was run")
    return Plan(original, list(capture.argv), environment, prediction)


def _check_foreign(request: RerunRequest, foreign: ForeignRun | None) -> None:
    """Refuse to run a command another store chose unless the user said yes (--yes, or the
    question `confirm` asks on a terminal); one made here runs as before."""
    if foreign is None or request.yes or (request.confirm and request.confirm(foreign)):
        return
    given = f"; it would get this machine's {', '.join(foreign.supplied)}" \
        if foreign.supplied else ""
    raise RerunRefused(f"run {foreign.run_id[:12]} arrived by {foreign.arrival.how} from "
                       f"{foreign.arrival.source}: its command is that store's choice, not "
                       f"yours: {shlex.join(foreign.argv)}{given}; read it, then rerun with "
                       "--yes to run it")


def predict(original: RunRecord, environ: Mapping[str, str]) -> Prediction:
    """This machine as a capture would record it (its facts and the profiler on PATH), where
    the run's command would run; graded with `diff`'s table."""
    from triage.capture import profilers
    from triage.capture.machine import collect_machine_facts
    from triage.capture.profiler_args import parse_command
    from triage.compare.drift import grade, verdict

    capture = original.capture
    parsed = parse_command(list(capture.argv) if capture else [])
    tool = parsed.tool or original.tool
    version: str | None
    if tool == "bench":  # no profiler: the workload itself is the command, triage measures it
        from triage.base.version import __version__ as version

        application = list(capture.argv) if capture else []
    else:
        version, _ = profilers.tool_version(tool, profilers.find_tool(tool, parsed.executable))
        application = parsed.application
    facts = collect_machine_facts(application, environ)
    manifest = dict(original.manifest)
    manifest.update(
        tool_version=version,
        environment=_environment_here(manifest.get("environment") or {},
                                      dict(capture.machine) if capture else {}, facts),
        capture={**(manifest.get("capture") or {}), "machine": facts})
    here = RunRecord.from_manifest("this machine", manifest)
    items = tuple(i for i in grade(original, here) if i.state != "same")
    return Prediction(here, items, verdict(items))


def _environment_here(recorded: Mapping, then: Mapping, now: Mapping) -> dict:
    """The run's `environment` as a capture here would record it. The record's values came
    from the report, which words them its own way (nsys: host.os with the kernel appended);
    so a value is taken from this machine's facts only where those differ from the facts
    recorded with the run, and kept as recorded where the machine is the same."""
    from triage.capture.session import environment_of

    before, after = environment_of(dict(then)), environment_of(dict(now))
    environment = dict(recorded)
    for key in ("driver_version", "cuda_version", "gpus"):
        if after[key] != before[key]:
            environment[key] = after[key]
    environment["host"] = {**(recorded.get("host") or {}),
                           **{key: value for key, value in after["host"].items()
                              if value != before["host"].get(key)}}
    return environment


def tree_delta(original: RunRecord, mode: str, cwd: Path) -> TreeDelta:
    """The tree at `cwd` against the recorded git state."""
    from triage.capture.git_state import git_snapshot

    git = original.capture.git if original.capture else None
    recorded = (original.manifest.get("capture") or {}).get("git") or {}
    state = git_snapshot(cwd).state
    same = state.get("diff_sha256") == recorded.get("diff_sha256") \
        if state.get("diff_sha256") and recorded.get("diff_sha256") else None
    return TreeDelta(mode, git.commit if git else None, state.get("commit"),
                     git.dirty if git else None, state.get("dirty"), same)


def _relative_cwd(original: RunRecord) -> Path:
    """The recorded working directory relative to its repository (for a worktree of it)."""
    capture = original.capture
    git = capture.git if capture else None
    if capture is None or capture.cwd is None or git is None or not git.repository \
            or not git.commit:
        raise UsageError(f"run {original.id[:12]} records no git commit: --at-commit needs one "
                         "(use --here)")
    return Path(capture.cwd).relative_to(git.repository)


@contextlib.contextmanager
def at_commit(store: Store, original: RunRecord,
              on_warning: Callable[[str], None]) -> Iterator[Path]:
    """A temporary worktree of the recorded commit with the stored patch applied; yields the
    recorded working directory inside it (the worktree is removed afterwards)."""
    from triage.archive.captured import stored_patch
    from triage.capture.git_worktree import temporary_worktree

    relative = _relative_cwd(original)
    state = original.capture.git if original.capture else None
    assert state is not None and state.repository and state.commit  # _relative_cwd checked
    patch = stored_patch(store, original) if state.dirty else b""
    if state.patch is not None and state.patch.redactions:
        on_warning(f"the stored patch had {state.patch.redactions} value(s) redacted: the "
                   "tree rebuilt differs from the one recorded there")
    if state.patch is not None and state.patch.binary_left_out:
        on_warning("the stored patch left binary changes out: "
                   + ", ".join(state.patch.binary_left_out) + " are as committed")
    with temporary_worktree(state.repository, state.commit, patch) as tree:
        yield tree / relative


def build(command: str, tree: Path, on_output: Callable[[ProgressEvent], None]) -> None:
    """The user's build step, in the tree the rerun profiles; its output streams as it runs."""
    from triage.capture.session import run_profiler

    done = run_profiler([command], True, tree, os.environ, on_output)
    if done.exit_code != 0:
        raise BuildFailed(f"--build {command!r} exited {done.exit_code} in {tree}; nothing was "
                          "profiled")


def original_side(store: Store, original: RunRecord) -> tuple[str, ...]:
    """The run and its `capture --repeat` siblings: same group, same rerun_of, same command,
    a report archived (not a failed attempt)."""
    capture = original.capture
    if capture is None or not capture.group:
        return (original.id,)
    siblings = []
    for run_id in store.runs.ids():
        record = RunRecord.from_manifest(run_id, store.runs.read_manifest(run_id))
        other = record.capture
        if other is not None and not record.failed_capture and other.group == capture.group \
                and other.rerun_of == capture.rerun_of and other.argv == capture.argv:
            siblings.append(run_id)
    return tuple(sorted(siblings, key=lambda r: r != original.id))


def run_repeats(store: Store, request: RerunRequest, ready: Plan, cwd: Path,
                on_output: Callable[[ProgressEvent], None],
                on_warning: Callable[[str], None]) -> tuple[str, ...]:
    """Each repeat a normal capture, outputs in a fresh directory, linked by `rerun_of`."""
    from triage.archive.bench import rerun_bench
    from triage.archive.captured import capture

    original = ready.original
    group = (request.label or f"rerun-{original.id[:12]}") if request.repeat > 1 else None
    base = replay_request(ready, cwd, store=request.store, label=request.label, group=group)
    made = []
    for i in range(1, request.repeat + 1):
        fresh = Path(tempfile.mkdtemp(prefix="triage-rerun-out-"))
        try:
            label = series_label(request.label, i, request.repeat)
            if original.tool == "bench":  # the recorded series again (its metrics, its size)
                made.append(rerun_bench(original, replace(base, label=label), on_warning).id)
                continue
            one = replace(base, argv=replay.rewrite_outputs(ready.argv, fresh), label=label)
            made.append(capture(one, on_output, on_warning).id)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return tuple(made)


def replay_request(ready: Plan, cwd: Path, **given: Any) -> CaptureRequest:
    """The planned run's recorded command as a new capture in `cwd`: its shell, redactions and
    replayed environment ($PWD moved to `cwd`), rerun_of the original; `given` adds the rest
    (store, label, group)."""
    original = ready.original
    return CaptureRequest(list(ready.argv), shell=bool(original.capture and original.capture.shell),
                          rerun_of=original.id, redact_patterns=tuple(original.redact_patterns),
                          cwd=cwd, environ=_moved_to(ready.environment.variables, cwd), **given)


def _moved_to(variables: dict[str, str], cwd: Path) -> dict[str, str]:
    """The recorded environment with $PWD where the rerun runs (a worktree's path)."""
    return {**variables, "PWD": str(cwd)} if "PWD" in variables else variables


def finish(store: Store, ready: Plan, tree: TreeDelta, new_runs: tuple[str, ...],
           threshold_pct: float) -> RerunResult:
    """The diff of the original side against the new runs, and its outcome."""
    from triage.compare.diff import diff_runs
    from triage.compare.rerun import reproduced
    from triage.compare.result import DiffOptions

    side = original_side(store, ready.original)
    result = diff_runs(store, ",".join(side), ",".join(new_runs),
                       DiffOptions(threshold_pct=threshold_pct))
    return RerunResult(ready, tree, new_runs, side, result, reproduced(result))


def rerun(request: RerunRequest, on_plan: Callable[[Plan, TreeDelta], None],
          on_output: Callable[[ProgressEvent], None],
          on_warning: Callable[[str], None]) -> RerunResult:
    """Plan, say the plan (`on_plan`: the predicted drift and the tree), build, run, diff."""
    store = Store.open(request.store)
    ready = plan(store, request)
    with replay_tree(store, ready.original, request.mode, on_warning) as cwd:
        delta = tree_delta(ready.original, request.mode, cwd)
        on_plan(ready, delta)
        if request.build:
            build(request.build, cwd, on_output)
        new_runs = run_repeats(store, request, ready, cwd, on_output, on_warning)
    return finish(store, ready, delta, new_runs, request.threshold_pct)


@contextlib.contextmanager
def replay_tree(store: Store, original: RunRecord, mode: str,
                on_warning: Callable[[str], None]) -> Iterator[Path]:
    """Where the run's command runs again: a worktree of its commit (AT_COMMIT), or its
    recorded working directory (HERE), refused when that is not here."""
    if mode == AT_COMMIT:
        with at_commit(store, original, on_warning) as cwd:
            yield cwd
        return
    recorded = original.capture.cwd if original.capture else None
    if recorded is None or not Path(recorded).is_dir():
        raise UsageError(f"run {original.id[:12]}'s working directory {recorded} is not here: "
                         "use --at-commit to rerun it in a checkout of its commit")
    yield Path(recorded)
