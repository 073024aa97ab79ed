"""`triage capture -- ncu|nsys ...`: run the profiler as given and record how it ran.

Everything knowable at capture time is recorded with the run: the exact argv and working
directory, the profiler's version and (for ncu) its `--list-sections` / `--list-sets`, the settings
in effect with their defaults marked, the machine (GPUs, clocks, driver, counters permission, DCGM,
scheduler, container, frameworks) and the workload's git state. None of these facts may fail the
capture. A profiler run that leaves no report is still recorded as a run, and said loudly.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from triage.archive.ingest import ArchiveResult, ReportInput, RunRequest, archive_run, \
    record_attempt
from triage.archive.store import Store, check_label
from triage.capture import profilers, redact
from triage.capture.outputs import find_reports, output_pattern, snapshot
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.errors import CaptureFailed, ToolMissing, UsageError
from triage.timeutil import utc_now

TAIL_LINES = 200
NO_KERNELS = "No kernels were profiled"


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
    nsys: str | None = None
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


def plan(request: CaptureRequest) -> tuple[ParsedCommand, str]:
    """Parse the command and find the profiler; fail before anything runs or is written."""
    if not request.argv:
        raise UsageError("nothing to capture: `triage capture -- ncu -o prof ./app`")
    if request.label:
        check_label(request.label)
    words = request.argv if not request.shell else shlex.split(" ".join(request.argv))
    parsed = parse_command(words)
    if parsed.tool is None:
        raise UsageError(f"triage capture runs ncu or nsys, not {request.argv[0]!r}: "
                         "`triage capture -- nsys profile -o step ./app`")
    if not parsed.application and not request.shell:
        raise UsageError(f"no program to profile after the {parsed.tool} options: "
                         f"`triage capture -- {parsed.tool} ... ./app ARGS`")
    return parsed, profilers.find_tool(parsed.tool, parsed.executable)


def _rank_guard(request: CaptureRequest, facts: dict) -> None:
    """Under srun/mpirun every rank would archive its own run: ask for one archiver or a group."""
    scheduler = facts.get("scheduler") or {}
    world, rank = scheduler.get("world_size"), scheduler.get("rank")
    if request.group or not world or world <= 1:
        return
    raise UsageError(
        f"this is rank {rank} of {world}: run triage once around the launcher "
        "(triage capture -- srun ncu -o prof.%q{SLURM_PROCID} ./app) so the ranks' reports "
        "become one run, or pass --group KEY on every rank to tag their runs as one group")


def questionable(parsed: ParsedCommand, facts: dict) -> list[str]:
    """Conditions that make the capture's numbers questionable, said before it starts."""
    warnings = []
    counters = facts.get("profiling_counters") or {}
    if (counters.get("admin_only") or {}).get("value") and not counters.get("is_root"):
        warnings.append("GPU performance counters are restricted to admin users "
                        "(RmProfilingAdminOnly=1) and this is not root: ncu will fail with "
                        "ERR_NVGPUCTRPERM. " + (counters.get("advice") or ""))
    if ((facts.get("dcgm") or {}).get("running") or {}).get("value"):
        warnings.append((facts["dcgm"].get("advice") or "DCGM is running") +
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


def run_profiler(argv: list[str], shell: bool, cwd: Path, env: Mapping[str, str],
                 on_output: Callable[[str], None]) -> Outcome:
    """Run the command, streaming its merged output line by line; keep the tail."""
    started, clock = utc_now(), time.monotonic()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    command = " ".join(argv) if shell else argv
    with subprocess.Popen(command, shell=shell, cwd=cwd, env=dict(env),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", bufsize=1) as process:
        for line in process.stdout:
            on_output(line.rstrip("\n"))
            tail.append(line.rstrip("\n"))
        code = process.wait()
    return Outcome(code, started, utc_now(), round(time.monotonic() - clock, 3), list(tail))


def _ncu_lists(parsed: ParsedCommand, executable: str, store: Store) -> tuple[dict, dict]:
    """`--list-sections` / `--list-sets` of the ncu that runs: blobs, parsed tables, summary."""
    if parsed.tool != "ncu":
        return {}, {}
    record, tables = {}, {}
    for key, flag, table, to_rows in (
            ("sections", "--list-sections", "ncu_section_list", profilers.section_rows),
            ("sets", "--list-sets", "ncu_set_list", profilers.set_rows)):
        listing = profilers.ncu_listing(executable, flag)
        sha = store.put_bytes(listing.text.encode())[0] if listing.text else None
        record[key] = {"blob": sha, "count": len(listing.rows), "error": listing.error}
        tables[table] = to_rows(listing)
    return record, tables


def _settings(parsed: ParsedCommand, version: str | None) -> tuple[dict, dict]:
    """Settings in effect from the argv, the tool's defaults filled in and marked."""
    if parsed.tool == "ncu":
        from triage.capture.ncu import derive_settings
        from triage.capture.ncu_file import NcuFileInfo

        return derive_settings(NcuFileInfo(file_version=0), parsed, version)
    from triage.capture.nsys import derive_settings as nsys_settings

    return nsys_settings({}, parsed)


def _gpus_from_facts(facts: dict) -> list[dict]:
    gpus = ((facts.get("gpu") or {}).get("gpus") or {}).get("value") or []
    return [{"name": g.get("name"), "uuid": g.get("uuid"), "bus": g.get("bus_id"),
             "max_sm_clock_khz": g["max_sm_clock_mhz"] * 1000 if g.get("max_sm_clock_mhz")
             else None, "memory_bytes": g["memory_mib"] << 20 if g.get("memory_mib") else None}
            for g in gpus]


def _fact(facts: dict, *path):
    node = facts
    for key in path:
        node = (node or {}).get(key)
    return node.get("value") if isinstance(node, dict) else node


def attempt_provenance(parsed: ParsedCommand, version: str | None, facts: dict,
                       outcome: Outcome, command: str) -> dict:
    """The manifest parts of a capture that left no report, from what the machine says."""
    settings, sources = _settings(parsed, version)
    return {
        "tool": parsed.tool, "tool_version": version, "created": outcome.started,
        "command": command,
        "environment": {
            "driver_version": _fact(facts, "gpu", "driver_version"),
            "cuda_version": _fact(facts, "gpu", "cuda_driver_version"),
            "gpus": _gpus_from_facts(facts),
            "host": {"name": _fact(facts, "host", "hostname"),
                     "os": _fact(facts, "host", "os_release"),
                     "cpu": _fact(facts, "host", "cpu_model"), "arch": None,
                     "platform": None},
            "working_directory": None, "variables": None},
        "application": {"argv": parsed.application} if parsed.application else None,
        "settings": settings, "settings_source": sources, "evidence": {},
        "notices": [_no_report_notice(parsed, outcome)],
    }


def _no_report_notice(parsed: ParsedCommand, outcome: Outcome) -> str:
    if any(".qdstrm" in line for line in outcome.tail) and parsed.tool == "nsys":
        return ("no report was produced: nsys left a .qdstrm stream it could not import "
                "(its QdstrmImporter is missing; Debian's nsys needs the link /usr/lib/"
                "x86_64-linux-gnu/nsight-systems/host-linux-x64/QdstrmImporter)")
    if any("File exists" in line for line in outcome.tail):
        return (f"no report was produced where asked: {parsed.tool} said the output file exists; "
                "add --force-overwrite true (nsys) or -f (ncu)")
    if any(NO_KERNELS in line for line in outcome.tail):
        return (f"no report was produced: {parsed.tool} exited {outcome.exit_code} and said "
                f"'{NO_KERNELS}' (no GPU, or the filters matched no kernel)")
    if parsed.tool == "ncu" and not output_pattern(parsed):
        return "no report was produced: ncu was run without -o/--export"
    return f"no report was produced: {parsed.tool} exited {outcome.exit_code}"


def capture_record(request: CaptureRequest, parsed: ParsedCommand, executable: str,
                   version_text: str, outcome: Outcome, extra: dict) -> dict:
    """The `capture` block of the manifest: how the profiler ran, on what, from which source."""
    patterns = redact.extra_patterns(request.redaction())
    return {
        "argv": redact.redact_argv(list(request.argv), patterns),
        "shell": request.shell, "cwd": str(request.cwd),
        "started": outcome.started, "ended": outcome.ended, "seconds": outcome.seconds,
        "exit_code": outcome.exit_code,
        "output_tail": [redact.redact_value(line) for line in outcome.tail[-60:]],
        "tool_path": executable, "tool_version_text": version_text,
        "environment": redact.redact_mapping(dict(request.environ), patterns),
        "group": request.group, "from_run": request.from_run, **extra,
    }


@dataclass
class Prepared:
    """What is known before the profiler runs."""

    parsed: ParsedCommand
    executable: str
    store: Store
    facts: dict
    version: str | None
    version_text: str
    lists: dict
    list_tables: dict
    warnings: list[str]
    from_run: str | None


def prepare(request: CaptureRequest, on_warning: Callable[[str], None]) -> Prepared:
    """Everything checked and recorded before the run; problems are said before it starts."""
    from triage.capture.machine import collect_machine_facts

    parsed, executable = plan(request)
    store = Store.open(request.store, create=True)
    store.check_writable()
    from_run = _resolve_from(store, request.from_run)
    facts = collect_machine_facts(parsed.application, request.environ)
    _rank_guard(request, facts)
    version, version_text = profilers.tool_version(parsed.tool, executable)
    lists, list_tables = _ncu_lists(parsed, executable, store)
    warnings = questionable(parsed, facts)
    for warning in warnings:
        on_warning(warning)
    return Prepared(parsed, executable, store, facts, version, version_text, lists, list_tables,
                    warnings, from_run)


def _run_request(request: CaptureRequest, ready: Prepared, outcome: Outcome,
                 found: list) -> RunRequest:
    from triage.capture.git_state import git_state

    extra = {"tool": ready.parsed.tool, "tool_version": ready.version, "machine": ready.facts,
             "git": git_state(request.cwd), "ncu_lists": ready.lists,
             "warnings": ready.warnings, "rank": (ready.facts.get("scheduler") or {}).get("rank"),
             "reports_found": [str(f.path) for f in found], "from_run": ready.from_run}
    record = capture_record(request, ready.parsed, ready.executable, ready.version_text,
                            outcome, extra)
    return RunRequest([ReportInput(f.path, f.rank, f.process) for f in found], source="capture",
                      label=request.label, note=request.note, nsys=request.nsys,
                      redact_patterns=request.redaction(), capture=record,
                      overrides={"command": " ".join(record["argv"])},
                      extra_tables=ready.list_tables)


def capture(request: CaptureRequest, on_output: Callable[[str], None],
            on_warning: Callable[[str], None]) -> ArchiveResult:
    """Run and record one capture; raise CaptureFailed (after recording) if no report came."""
    ready = prepare(request, on_warning)
    before, since = snapshot(request.cwd, ready.parsed.tool), time.time()
    outcome = run_profiler(request.argv, request.shell, request.cwd, request.environ, on_output)
    found = find_reports(ready.parsed, request.cwd, since, before)
    run = _run_request(request, ready, outcome, found)
    if not found:
        run.source = "capture-failed"
        provenance = attempt_provenance(ready.parsed, ready.version, ready.facts, outcome,
                                        run.overrides["command"])
        result = record_attempt(ready.store, run, provenance)
        raise CaptureFailed(f"{provenance['notices'][0]}; the attempt is recorded as run "
                            f"{result.id[:12]} (`triage show {result.id[:12]}`)")
    result = archive_run(ready.store, run)
    for warning in after_run_warnings(ready.parsed, result.manifest):
        on_warning(warning)
        ready.store.annotate(result.id, utc_now(precise=True), f"warning: {warning}")
    if outcome.exit_code != 0:
        raise CaptureFailed(f"{ready.parsed.tool} exited {outcome.exit_code}; its report was "
                            f"archived as run {result.id[:12]} (`triage show {result.id[:12]}`)")
    return result


def after_run_warnings(parsed: ParsedCommand, manifest: dict) -> list[str]:
    """What the report shows went wrong: an NVTX capture range that never opened."""
    capture_range = parsed.last("--capture-range")
    tables = manifest.get("tables") or {}
    if capture_range == "nvtx" and not (tables.get("nvtx_ranges") or {}).get("rows"):
        return ["--capture-range=nvtx but the report has no NVTX range: the range named by "
                "-p/--nvtx-capture never opened, so the capture may hold nothing useful"]
    return []


def _resolve_from(store: Store, ref: str | None) -> str | None:
    if not ref:
        return None
    from triage.archive.runs import resolve

    return resolve(store, ref)


def _tool_status(tool: str, given: str | None) -> dict:
    try:
        path = profilers.find_tool(tool, given)
    except ToolMissing as exc:  # reported, not raised, by `triage env`
        return {"path": None, "version": None, "missing": str(exc)}
    version, text = profilers.tool_version(tool, path)
    if version is None:
        return {"path": None, "version": None,
                "missing": f"{path} did not report a {tool} version ({(text.splitlines() or ['no output'])[0][:60]}); "
                           f"{profilers.INSTALL_HINTS[tool]}"}
    return {"path": path, "version": version, "missing": None}


def _checklist(facts: dict, tools: dict) -> list[dict]:
    """The seed's pre-capture checklist: permissions, contention, versions."""
    gpus = _gpus_from_facts(facts)
    counters = (facts.get("profiling_counters") or {}).get("admin_only") or {}
    dcgm = ((facts.get("dcgm") or {}).get("running") or {})
    return [
        {"check": "GPU visible", "ok": bool(gpus) if gpus else None,
         "detail": ", ".join(g["name"] or "?" for g in gpus) or
         ((facts.get("gpu") or {}).get("gpus") or {}).get("reason")},
        {"check": "profiling counters usable", "ok": None if counters.get("value") is None
         else (not counters["value"] or bool((facts.get("profiling_counters") or {}).get("is_root"))),
         "detail": counters.get("reason") or (facts.get("profiling_counters") or {}).get("advice")},
        {"check": "no DCGM host engine holding counters", "ok": None if dcgm.get("value") is None
         else not dcgm["value"], "detail": (facts.get("dcgm") or {}).get("advice")},
        {"check": "ncu installed", "ok": tools["ncu"]["path"] is not None,
         "detail": tools["ncu"]["version"] or tools["ncu"]["missing"]},
        {"check": "nsys installed", "ok": tools["nsys"]["path"] is not None,
         "detail": tools["nsys"]["version"] or tools["nsys"]["missing"]},
    ]


def environment_check(nsys: str | None = None, environ: Mapping[str, str] | None = None) -> dict:
    """`triage env`: this machine's facts and tools, without capturing anything."""
    from triage.capture.machine import collect_machine_facts

    facts = collect_machine_facts(None, environ)
    tools = {"ncu": _tool_status("ncu", None), "nsys": _tool_status("nsys", nsys)}
    return {"machine": facts, "tools": tools, "checklist": _checklist(facts, tools)}
