"""`triage capture -- ncu|nsys ...`: run the profiler as given and record how it ran.

This module runs it and says what happened (`Captured`); archiving that is the archive's job
(`archive/captured.py`), so nothing here touches the store.

Everything knowable at capture time is recorded with the run: the exact argv and working
directory, the profiler's version and (for ncu) its `--list-sections` / `--list-sets`, the settings
in effect with their defaults marked, the machine (GPUs, clocks, driver, counters permission, DCGM,
scheduler, container, frameworks) and the workload's git state. None of these facts may fail the
capture. A profiler run that leaves no report is still recorded as a run, and said loudly.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from triage.capture import diagnosis, process_tree, profilers, redact
from triage.capture.progress import Elapsed, LineCollapser, OutputLine, ProgressEvent
from triage.capture.outputs import (FoundReport, find_reports, fingerprints, is_output,
                                    output_pattern, snapshot, split_fresh)
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.base.errors import UsageError
from triage.base.timeutil import utc_now

if TYPE_CHECKING:
    import pyarrow as pa

    from triage.capture.git_state import GitSnapshot

TAIL_LINES = 200
STOP_SECONDS = 15  # how long an interrupted profiler gets to stop its application and exit
_PROFILER_RUNS = itertools.count(1)  # this process's profiler runs, for their process_tree.MARK


@dataclass
class CaptureRequest:
    """What the user asked `triage capture` to do."""

    argv: list[str]
    store: str | None = None
    label: str | None = None
    note: str | None = None
    shell: bool = False
    group: str | None = None
    from_run: str | None = None
    rerun_of: str | None = None  # the run `triage rerun` re-executes (its full id)
    nsys: str | None = None
    timeout: float | None = None  # seconds the profiler may run before it is ended; None: no limit
    series: str | None = None  # the --repeat group this capture is one try of
    investigation: str | None = None  # --investigation NAME, or the --from run's
    redact_patterns: tuple[str, ...] = ()
    cwd: Path = field(default_factory=Path.cwd)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def redaction(self) -> tuple[str, ...]:
        """--redact patterns plus $TRIAGE_REDACT of the environment the capture runs in."""
        return redact.user_patterns(self.redact_patterns, self.environ)


@dataclass
class Outcome:
    """What happened when the profiler ran."""

    exit_code: int
    started: str
    ended: str
    seconds: float
    tail: list[str]
    interrupted: str | None = None  # the signal that stopped the capture (SIGINT, SIGTERM)
    timed_out: float | None = None  # the --timeout (seconds) that ended the profiler
    wall: float = 0.0  # seconds from just before the process started to just after it was reaped

    @property
    def ended_early(self) -> bool:
        return bool(self.interrupted or self.timed_out)

    @property
    def status(self) -> str:
        """How the profiler ended: `exited N`, the signal that interrupted it, or the timeout."""
        if self.interrupted:
            return self.interrupted
        if self.timed_out:
            return f"timed out after {self.timed_out:g} s"
        return f"exited {self.exit_code}"


@dataclass(frozen=True)
class Planned:
    """A command `plan` accepted: its parse, the profiler it runs and where that is."""

    parsed: ParsedCommand
    tool: str  # "ncu" or "nsys": parsed.tool, known to be set
    executable: str


def plan(request: CaptureRequest) -> Planned:
    """Parse the command and find the profiler; fail before anything runs or is written."""
    if not request.argv:
        raise UsageError("nothing to capture: `triage capture -- ncu -o prof ./app`")
    words = request.argv if not request.shell else shlex.split(" ".join(request.argv))
    parsed = parse_command(words)
    if parsed.tool is None:
        raise UsageError(f"triage capture runs ncu or nsys, not {request.argv[0]!r}: "
                         "`triage capture -- nsys profile -o step ./app`")
    if not parsed.application and not request.shell:
        raise UsageError(f"no program to profile after the {parsed.tool} options: "
                         f"`triage capture -- {parsed.tool} ... ./app ARGS`")
    return Planned(parsed, parsed.tool, profilers.find_tool(parsed.tool, parsed.executable))


def _rank_guard(request: CaptureRequest, facts: dict) -> None:
    """Under srun/mpirun every rank would archive its own run: ask for one archiver or a group."""
    world, rank = _at(facts, "scheduler", "world_size"), _at(facts, "scheduler", "rank")
    if request.group or not world or world <= 1:
        return
    raise UsageError(
        f"this is rank {rank} of {world}: run triage once around the launcher "
        "(triage capture -- srun ncu -o prof.%q{SLURM_PROCID} ./app) so the ranks' reports "
        "become one run, or pass --group KEY on every rank to tag their runs as one group")


def questionable(parsed: ParsedCommand, facts: dict) -> list[str]:
    """Conditions that make the capture's numbers questionable, said before it starts."""
    warnings = []
    if _fact(facts, "profiling_counters", "admin_only") \
            and not _at(facts, "profiling_counters", "is_root"):
        warnings.append("GPU performance counters are restricted to admin users "
                        "(RmProfilingAdminOnly=1) and this is not root: ncu will fail with "
                        "ERR_NVGPUCTRPERM. " + (_at(facts, "profiling_counters", "advice") or ""))
    if _fact(facts, "dcgm", "running"):
        warnings.append((_at(facts, "dcgm", "advice") or "DCGM is running") +
                        " (it holds the counters ncu needs)")
    if parsed.tool == "ncu":
        warnings += _ncu_warnings(parsed)
    return warnings


def _ncu_warnings(parsed: ParsedCommand) -> list[str]:
    warnings = []
    if parsed.last("--clock-control") == "none":
        warnings.append("--clock-control none: GPU clocks are not locked, so durations follow "
                        "boost and thermal state; compare only with other unlocked captures")
    if parsed.last("--cache-control") == "none":
        warnings.append("--cache-control none: caches are not flushed between replays, so memory "
                        "metrics are warm-cache numbers")
    if not output_pattern(parsed):
        warnings.append("ncu without -o/--export writes no report file: the attempt will be "
                        "recorded but there is nothing to archive; add -o NAME")
    return warnings


class Interrupt(BaseException):
    """SIGINT or SIGTERM while the profiler runs (a BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int) -> None:
    """SIGINT and SIGTERM while the profiler runs: Interrupt, so that the capture can stop it
    and record the attempt."""
    raise Interrupt(signum)


def run_profiler(argv: list[str], shell: bool, cwd: Path, env: Mapping[str, str],
                 on_output: Callable[[ProgressEvent], None], tick_after: float = 1.0,
                 timeout: float | None = None, agents_of: list[int] | None = None) -> Outcome:
    """Run the command, streaming its merged output as OutputLines (a `\r` progress bar
    collapsed to one line: capture/progress.py), and an Elapsed tick each second once it has
    run `tick_after` seconds; keep the tail. Interrupted (SIGINT, SIGTERM), the profiler is
    passed the signal and given STOP_SECONDS to stop its application, then killed; the Outcome
    says which signal. Past `timeout` seconds it is ended with everything it started
    (capture/process_tree.py) and the Outcome says so. The nsys agents its processes left are
    ended as it returns (a scan of /proc for their session's pid or the mark this run put in
    the profiler's environment, process_tree.MARK), or, given `agents_of`, their pids are added
    to it for the caller to end once after many runs (a bench's repeats)."""
    started, clock = utc_now(), time.monotonic()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    command = " ".join(argv) if shell else argv
    interrupted, expired = None, threading.Event()
    done = threading.Event()

    def emit(lines: list[OutputLine]) -> None:
        for line in lines:
            on_output(line)
            if line.final:
                tail.append(line.text)

    seen: set[int] = set()  # the profiler's processes: their nsys agents are ended after

    def tick() -> None:
        wait, waited = min(tick_after, 1.0), 0.0
        while not done.wait(wait):
            seen.update(process_tree.descendants(process.pid))
            waited += wait
            if waited >= tick_after:
                on_output(Elapsed(round(time.monotonic() - clock, 1)))
            wait = 1.0

    mark = f"{os.getpid()}.{next(_PROFILER_RUNS)}"  # its nsys agents inherit it (MARK)
    environ, wall = {**env, process_tree.MARK: mark}, 0
    begun = time.perf_counter_ns()
    with process_tree.signals_held(signal.SIGINT, signal.SIGTERM, then=_interrupt) as signals, \
            subprocess.Popen(command, shell=shell, cwd=cwd, env=environ, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) as process:
        assert process.stdout is not None  # stdout=PIPE: for the type checker
        collapser, decoder = LineCollapser(), codecs.getincrementaldecoder("utf-8")("replace")
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        watchdog = threading.Thread(target=_watch, args=(process, timeout, done, expired, mark),
                                    daemon=True)
        if timeout is not None:
            watchdog.start()
        try:
            signals.deliver()  # from here SIGINT and SIGTERM raise Interrupt, held ones first
            while chunk := process_tree.read_some(process.stdout.fileno()):
                emit(collapser.feed(decoder.decode(chunk)))
            emit(collapser.feed(decoder.decode(b"", final=True)) + collapser.close())
            code = process.wait()
            wall = time.perf_counter_ns() - begun
        except Interrupt as stop:
            signals.restore()
            interrupted = signal.Signals(stop.signum).name
            code = _stop(process, stop.signum, tail, mark)
        finally:
            signals.restore()
            done.set()
            ticker.join()
            if watchdog.is_alive():
                watchdog.join()
            # nsys leaves its agent running after every session (re-parented to init)
            if agents_of is None:
                process_tree.end_agents([process.pid, *seen], mark)
            else:
                agents_of += [process.pid, *seen]
    return Outcome(code, started, utc_now(), round(time.monotonic() - clock, 3), list(tail),
                   interrupted, timeout if expired.is_set() else None, wall / 1e9)


def _watch(process: subprocess.Popen, timeout: float, done: threading.Event,
           expired: threading.Event, mark: str) -> None:
    """Past `timeout`, end the profiler with its whole tree and the agents of its `mark`
    (which closes the output pipe the reading loop waits on)."""
    if done.wait(timeout):
        return
    expired.set()
    process_tree.end_tree(process.pid, lambda: process.poll() is not None, mark=mark)


def _stop(process: subprocess.Popen, signum: int, tail: deque[str], mark: str) -> int:
    """Pass the signal on (a Ctrl-C reached the profiler already; a kill of triage did not),
    keep what it still says, and kill it if it does not exit in time, with the agents of its
    `mark`: an agent whose session's nsys was never seen would otherwise keep the output pipe
    open, and the read of what it still says would wait for ever."""
    tree = [process.pid, *process_tree.descendants(process.pid)]
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)
    try:
        rest, _ = process.communicate(timeout=STOP_SECONDS)  # bytes
    except subprocess.TimeoutExpired:
        process_tree.end_tree(process.pid, lambda: process.poll() is not None, grace=0,
                              mark=mark)
        try:
            rest, _ = process.communicate(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:  # a process not of its tree holds the pipe still
            rest = None
            process.wait()
    process_tree.end_agents(tree, mark)
    tail.extend(line.text for line in LineCollapser().feed(rest.decode("utf-8", "replace") if rest
                                                            else "") if line.final)
    return process.returncode


@dataclass(frozen=True)
class CapturedNcuListing:
    """One `--list-sections` / `--list-sets` of the ncu that runs, as captured: its text (kept
    as a blob), the table parsed from it, and why it could not be read. Once archived, the run
    records where it went (archive.model.StoredNcuListing)."""

    key: str  # "sections" | "sets"
    table_name: str
    text: str
    table: pa.Table
    error: str | None


def _ncu_lists(parsed: ParsedCommand, executable: str) -> list[CapturedNcuListing]:
    """`--list-sections` / `--list-sets` of the ncu that runs (none for nsys)."""
    if parsed.tool != "ncu":
        return []
    out = []
    for key, flag, table, to_table in (
            ("sections", "--list-sections", "ncu_section_list", profilers.section_table),
            ("sets", "--list-sets", "ncu_set_list", profilers.set_table)):
        listing = profilers.ncu_listing(executable, flag)
        out.append(CapturedNcuListing(key, table, listing.text, to_table(listing), listing.error))
    return out


def _settings(parsed: ParsedCommand, version: str | None) -> tuple[dict, dict]:
    """Settings in effect from the argv, the tool's defaults filled in and marked."""
    if parsed.tool == "ncu":
        from triage.capture.ncu import derive_settings
        from triage.capture.ncu_file import NcuFileInfo

        return derive_settings(NcuFileInfo(file_version=0), parsed, version)
    from triage.capture.nsys import derive_settings as nsys_settings

    return nsys_settings({}, parsed)


def _gpus_from_facts(facts: dict) -> list[dict]:
    gpus = _fact(facts, "gpu", "gpus") or []
    return [{"name": g.get("name"), "uuid": g.get("uuid"), "bus": g.get("bus_id"),
             "max_sm_clock_khz": g["max_sm_clock_mhz"] * 1000 if g.get("max_sm_clock_mhz")
             else None, "memory_bytes": g["memory_mib"] << 20 if g.get("memory_mib") else None}
            for g in gpus]


def _at(node: Any, *path: str) -> Any:
    """The machine fact at `path` (facts are nested dicts); None where a step is missing."""
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _fact(facts: dict, *path: str) -> Any:
    """A fact's value: facts that can be unknown are {"value": ..., "reason": ...}."""
    node = _at(facts, *path)
    return node.get("value") if isinstance(node, dict) else node


def attempt_provenance(parsed: ParsedCommand, version: str | None, facts: dict,
                       captured: Captured, command: str) -> dict:
    """The manifest parts of a capture that left no report, from what the machine says."""
    settings, sources = _settings(parsed, version)
    return {
        "tool": parsed.tool, "tool_version": version, "created": captured.outcome.started,
        "command": command, "environment": environment_of(facts),
        "application": {"argv": parsed.application} if parsed.application else None,
        "settings": settings, "settings_source": sources, "evidence": {},
        "notices": [no_report_notice(parsed, captured)],
    }


def environment_of(facts: dict) -> dict:
    """The manifest's `environment` as the machine facts say it (no report to read it from):
    for a failed attempt, and for the machine `triage rerun` is about to run on."""
    return {
        "driver_version": _fact(facts, "gpu", "driver_version"),
        "cuda_version": _fact(facts, "gpu", "cuda_driver_version"),
        "gpus": _gpus_from_facts(facts),
        "host": {"name": _fact(facts, "host", "hostname"),
                 "os": _fact(facts, "host", "os_release"),
                 "cpu": _fact(facts, "host", "cpu_model"), "arch": None,
                 "platform": None},
        "working_directory": None, "variables": None}


def no_report_notice(parsed: ParsedCommand, captured: Captured) -> str:
    """Why there is no report: the end (signal, timeout, exit status) and the profiler's own
    last message decide (capture/diagnosis.py); each cause with its fix."""
    outcome, tool = captured.outcome, parsed.tool or "the profiler"
    if outcome.interrupted:
        return (f"interrupted ({outcome.interrupted}) after {outcome.seconds:.1f} s: "
                f"{tool} was stopped and no report was kept")
    if outcome.timed_out:
        return (f"timed out after {outcome.timed_out:g} s: {tool} and the processes it started "
                "were ended and no report was kept (capture --timeout sets the limit)")
    said, why = diagnosis.cause(tool, outcome.tail)
    text = f"no report was produced: {tool} {outcome.status}"
    if said:
        text += f" and said {said!r}"
    if captured.stale:
        text += f"; {diagnosis.stale_text(captured.stale)}"
    if why is None and parsed.tool == "ncu" and not output_pattern(parsed):
        why = "ncu was run without -o/--export: add -o NAME"
    if why:
        text += f"; {why}"
    if captured.removed:
        text += f" (removed its stray report {', '.join(captured.removed)})"
    return text


def capture_record(request: CaptureRequest, executable: str, version_text: str,
                   outcome: Outcome, extra: dict) -> dict:
    """The `capture` block of the manifest: how the profiler ran, on what, from which source."""
    patterns = redact.extra_patterns(request.redaction())
    return {
        "argv": redact.redact_argv(list(request.argv), patterns),
        "shell": request.shell, "cwd": str(request.cwd),
        "started": outcome.started, "ended": outcome.ended, "seconds": outcome.seconds,
        "exit_code": None if outcome.ended_early else outcome.exit_code,
        "status": outcome.status,
        "output_tail": [redact.redact_value(line) for line in outcome.tail[-60:]],
        "tool_path": executable, "tool_version_text": version_text,
        "environment": redact.redact_mapping(dict(request.environ), patterns),
        "group": request.group, "from_run": request.from_run, "rerun_of": request.rerun_of,
        **extra,
    }


class Probes(threading.Thread):
    """The git state, the machine facts and the tool's version, found in a thread started
    before the profiler and waited for after it (git, nvidia-smi, the frameworks' versions and
    `TOOL --version` take 0.2-1 s, which would otherwise be added to every capture's time);
    what the rank guard and the warnings need is found before it starts
    (`machine.early_facts`). The git state comes first, and the profiler starts only once it
    is read (`source_read`): it is the source the workload runs from, and a workload writing
    to its tree (logs, checkpoints) would otherwise be hashed half-written or not at all, by
    timing. The reports the profiler is about to write are left out."""

    def __init__(self, planned: Planned, request: CaptureRequest, early: dict) -> None:
        super().__init__(daemon=True)
        self.planned, self.environ, self.early = planned, request.environ, early
        self.cwd = request.cwd
        self.failed: Exception | None = None
        self.source_read = threading.Event()
        self.start()

    def run(self) -> None:
        from triage.capture.git_state import git_snapshot
        from triage.capture.machine import collect_machine_facts

        planned = self.planned
        try:
            try:
                self.git = git_snapshot(self.cwd, is_output(planned.parsed, self.cwd))
            finally:
                self.source_read.set()
            self.facts = collect_machine_facts(planned.parsed.application, self.environ,
                                               self.early)
            self.version, self.version_text = profilers.tool_version(planned.tool,
                                                                     planned.executable)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread by found()
            self.failed = exc

    def found(self) -> Probes:
        """The probes once done (re-raising what stopped them)."""
        self.join()
        if self.failed is not None:
            raise self.failed
        return self


@dataclass(frozen=True)
class Prepared:
    """What is known before the profiler runs, and the probes running beside it."""

    parsed: ParsedCommand
    tool: str
    executable: str
    probes: Probes
    listings: list[CapturedNcuListing]
    warnings: list[str]

    @property
    def facts(self) -> dict:
        return self.probes.found().facts

    @property
    def version(self) -> str | None:
        return self.probes.found().version

    @property
    def version_text(self) -> str:
        return self.probes.found().version_text


def prepare(request: CaptureRequest, planned: Planned,
            on_warning: Callable[[str], None]) -> Prepared:
    """Everything checked before the run (given what `plan` found); problems are said before
    it starts. The slower probes are started here and run beside the profiler (`Probes`),
    except under ncu, which locks the clocks nvidia-smi reports: its facts are the machine's
    before it starts."""
    from triage.capture.machine import early_facts

    parsed, executable = planned.parsed, planned.executable
    early = early_facts(request.environ)
    _rank_guard(request, early)
    probes = Probes(planned, request, early)
    if planned.tool == "ncu":
        probes.found()
    listings = _ncu_lists(parsed, executable)
    warnings = questionable(parsed, early)
    for warning in warnings:
        on_warning(warning)
    return Prepared(parsed, planned.tool, executable, probes, listings, warnings)


@dataclass(frozen=True)
class Captured:
    """What one profiler run did: how it ran, the reports it left, and the git state (with its
    patch) as it started."""

    ready: Prepared
    outcome: Outcome
    found: list[FoundReport]
    git: GitSnapshot
    stale: list[FoundReport] = field(default_factory=list)  # reports left from before the run
    removed: list[str] = field(default_factory=list)  # stray temporary reports removed

    @property
    def failed(self) -> bool:
        """No fresh report, or the profiler did not end by itself with status 0."""
        return not self.found or self.outcome.ended_early or self.outcome.exit_code != 0

    def record(self, request: CaptureRequest, ncu_lists: dict, git: dict,
               from_run: str | None) -> dict:
        """The manifest's `capture` block; `ncu_lists` names the listing blobs stored, `git` is
        the state with the patch blob stored (the archive keeps blobs, not this module)."""
        ready = self.ready
        extra = {"tool": ready.tool, "tool_version": ready.version,
                 "machine": ready.facts, "git": git, "ncu_lists": ncu_lists,
                 "warnings": ready.warnings, "rank": _fact(ready.facts, "scheduler", "rank"),
                 "reports_found": [str(f.path) for f in self.found], "from_run": from_run,
                 # only when named: the capture blocks (and ids) of other captures stay as they were
                 **({"investigation": request.investigation} if request.investigation else {})}
        return capture_record(request, ready.executable, ready.version_text,
                              self.outcome, extra)


def run(request: CaptureRequest, ready: Prepared, on_output: Callable[[ProgressEvent], None],
        tick_after: float = 1.0) -> Captured:
    """Run the profiler and find the reports it wrote (`tick_after`: see run_profiler)."""
    before, since = snapshot(request.cwd, ready.tool), time.time()
    existing = fingerprints(ready.parsed, request.cwd)
    ready.probes.source_read.wait()  # the tree as the workload starts from it (Probes)
    outcome = run_profiler(request.argv, request.shell, request.cwd, request.environ, on_output,
                           tick_after, request.timeout)
    probes = ready.probes.found()  # joined here, after the profiler, whatever comes next
    # an interrupted profiler's report, if any, may be cut short: the attempt is what is kept
    found = [] if outcome.ended_early else find_reports(ready.parsed, request.cwd, since, before)
    fresh, stale = split_fresh(found, existing)
    removed = diagnosis.remove_temporary_reports(outcome.tail, request.environ)
    if outcome.ended_early:  # ended before it could name its temporary report
        removed += diagnosis.remove_abandoned_reports(request.environ, since)
    return Captured(ready, outcome, fresh, probes.git, stale, removed)
