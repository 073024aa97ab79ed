"""Reading Nsight Compute reports (.ncu-rep, legacy .nsight-cuprof-report).

Profile results, metrics, sections and rules come from NVIDIA's `ncu_report` package; how the
report was captured (versions, command line, settings, host, GPU) comes from the file's own block
headers (`ncu_file`), because `ncu_report` does not expose it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass

from triage.timeutil import from_epoch
from triage.capture.ncu_file import NcuFileInfo, read_ncu_file
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.capture.redact import parse_environment_text
from triage.capture.settings import joined_option, resolve
from triage.errors import UnsupportedReport

DURATION_METRIC = "gpu__time_duration.sum"
SM_CLOCK_METRIC = "smsp__cycles_elapsed.avg.per_second"
PLATFORMS = {0: "unknown", 1: "windows", 2: "linux", 3: "android", 4: "osx", 5: "qnx",
             6: "hos", 7: "integrity", 8: "linux-ppc"}
MESSAGE_TYPES = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
SPEEDUP_TYPES = {0: None, 1: "local", 2: "global"}
# Launch attributes stored as kernel columns, by metric name.
LAUNCH_METRICS = {
    "registers": "launch__registers_per_thread",
    "static_shared": "launch__shared_mem_per_block_static",
    "dynamic_shared": "launch__shared_mem_per_block_dynamic",
    "device": "device__attribute_device_index",
}


@dataclass
class NcuReport:
    """A validated ncu report: its framing info and the loaded `ncu_report` context."""

    path: str
    info: NcuFileInfo
    context: object

    def actions(self, low: int = 0, high: int | None = None):
        """Yield (result index, range index, action) for results low..high-1, in file order.

        Each action is decoded here, once: `ncu_report` keeps what decoding allocates (see
        `ncu_results`), so no result is decoded twice.
        """
        first = 0
        for range_index in range(self.context.num_ranges()):
            profile_range = self.context.range_by_idx(range_index)
            count = profile_range.num_actions()
            for action_index in range(max(low - first, 0), count):
                if high is not None and first + action_index >= high:
                    return
                yield first + action_index, range_index, profile_range.action_by_idx(action_index)
            first += count

    def warm_up(self) -> None:
        """Decode the first result: `ncu_report`'s first decode in a process also builds about
        100 MB of shared state (30 ms); forked workers then inherit it instead of each
        building it again."""
        next(self.actions(0, 1), None)

    def count_actions(self) -> int:
        return sum(self.context.range_by_idx(i).num_actions()
                   for i in range(self.context.num_ranges()))


def open_ncu_report(path: str | os.PathLike) -> NcuReport:
    """Validate the file's framing, then load it with `ncu_report`."""
    path = os.fspath(path)
    info = read_ncu_file(path)
    import ncu_report

    try:
        context = ncu_report.load_report(path)
    except Exception as exc:  # noqa: BLE001 - ncu_report raises bare Exceptions on bad input
        raise UnsupportedReport(f"{path}: ncu_report cannot read this report ({exc}); "
                                "upgrade ncu-report (pip install -U ncu-report)") from None
    report = NcuReport(path, info, context)
    if info.clock.results and report.count_actions() == 0:
        raise UnsupportedReport(f"{path}: ncu_report found no results in a report that has "
                                f"{info.clock.results}; upgrade ncu-report")
    return report


# -- provenance --------------------------------------------------------------------------------


def _version(raw: str | None) -> str | None:
    """'2024.1.1.0 (build 33998838) (public-release)' -> '2024.1.1.0'."""
    return raw.split(" ")[0] if raw else None


def _version_tuple(version: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in (version or "").split(".")[:2])
    except ValueError:
        return ()


def _attributes(device: dict) -> dict:
    """A device's attributes as {short name: value}."""
    out = {}
    for attr in device.get("attributes", []):
        values = list((attr.get("value") or {}).values())
        if attr.get("name") and values:
            out[attr["name"].removeprefix("device__attribute_")] = values[0]
    return out


def _gpu(device: dict) -> dict:
    attrs = _attributes(device)
    major, minor = attrs.get("compute_capability_major"), attrs.get("compute_capability_minor")
    return {
        "name": attrs.get("display_name") or device.get("name") or None,
        "index": attrs.get("device_index", device.get("id")),
        "compute_capability": f"{major}.{minor}" if major is not None else None,
        "sm_count": attrs.get("multiprocessor_count"),
        "max_sm_clock_khz": attrs.get("max_gpu_frequency_khz") or attrs.get("clock_rate"),
        "max_mem_clock_khz": attrs.get("max_mem_frequency_khz") or attrs.get("memory_clock_rate"),
        "memory_bytes": attrs.get("total_memory"),
        "l2_cache_bytes": attrs.get("l2_cache_size"),
        "chip": attrs.get("chip"),
    }


def _host(session: dict) -> dict | None:
    system = session.get("target") or session.get("host")
    if not system:
        return None
    return {
        "name": system.get("computer_name") or None,
        "os": " ".join(p for p in (system.get("os_name"), system.get("build")) if p) or None,
        "cpu": system.get("processor") or None,
        "arch": system.get("architecture") or None,
        "platform": PLATFORMS.get(system.get("platform")),
    }


def default_section_set(tool_version: str | None) -> str | None:
    """Name of ncu's default section set: 'default' until 2022.x, 'basic' from 2023.1."""
    version = _version_tuple(tool_version)
    if not version:
        return None
    return "basic" if version >= (2023, 1) else "default"


def _from_clock_status(info: NcuFileInfo) -> str | None:
    clock = info.clock
    if not clock.recorded:
        return None
    return "base" if clock.requested_lock == clock.recorded else "none"


def _section_set_from_command(command: ParsedCommand) -> str | None:
    if command.has("--set"):
        return command.last("--set")
    if command.has("--section") or command.has("--metrics"):
        return "custom"
    return None


def _settings_table(info: NcuFileInfo, command: ParsedCommand, tool_version: str | None
                    ) -> list[tuple]:
    """Each setting: (name, from the report, from the command, the tool's default), None where
    that source says nothing. Data, not code paths: `resolve` takes the first value per row."""
    recorded = info.session.get("settings", {})
    filters = recorded.get("filter") or {}
    return [
        ("clock_control",
         (recorded.get("clock_control_mode") or "").lower() or _from_clock_status(info),
         command.last("--clock-control"), "base"),
        ("cache_control", None, command.last("--cache-control"), "all"),
        ("replay_mode", (recorded.get("replay_mode") or "").lower() or None,
         command.last("--replay-mode"), "kernel"),
        ("section_set", None, _section_set_from_command(command),
         default_section_set(tool_version)),
        ("metrics", (recorded.get("other") or {}).get("metrics") or None,
         joined_option(command, "--metrics"), None),
        ("kernel_filter", filters.get("kernel_name") or None,
         command.last("--kernel-name") or command.last("--kernel-id"), None),
        ("launch_count", filters.get("capture_count") or None, command.last("--launch-count"),
         None),
        ("launch_skip", filters.get("skip_count") or None, command.last("--launch-skip"), "0"),
        ("nvtx_filter", None, joined_option(command, "--nvtx-include", sep=";"), None),
        ("target_processes", None, command.last("--target-processes"), "application-only"),
    ]


def derive_settings(info: NcuFileInfo, command: ParsedCommand, tool_version: str | None
                    ) -> tuple[dict, dict]:
    """Settings in effect and where each came from: "report", "command" or "default"."""
    return resolve(_settings_table(info, command, tool_version))


def provenance(report: NcuReport, sections: list[str], sm_clocks: list[float]) -> dict:
    """The manifest parts an ncu report supplies about how it was captured."""
    info, session = report.info, report.info.session
    tool_version = _version(info.versions.get("Nsight Compute Target")
                            or info.versions.get("Nsight Compute Host"))
    command_line = (session.get("command_line") or "").strip() or None
    parsed = parse_command(command_line or "")
    settings, sources = derive_settings(info, parsed, tool_version)
    settings["sections"], sources["sections"] = sections, "report"
    gpus = [_gpu(d) for d in session.get("devices", [])]
    executable = session.get("executable") or {}
    return {
        "tool": "ncu",
        "tool_version": tool_version,
        "created": from_epoch(session.get("creation_time")),
        "command": command_line,
        "environment": {
            "driver_version": info.versions.get("Display Driver Version") or None,
            "cuda_version": info.versions.get("CUDA Version") or None,
            "gpus": gpus,
            "host": _host(session),
            "working_directory": executable.get("working_directory") or None,
            "variables": parse_environment_text(executable.get("environment")),
        },
        "application": _application(parsed, executable, info),
        "settings": settings,
        "settings_source": sources,
        "evidence": {"clock": _clock_evidence(info, gpus, sm_clocks)},
        "versions": dict(sorted(info.versions.items())),
    }


def _application(parsed: ParsedCommand, executable: dict, info: NcuFileInfo) -> dict | None:
    """The profiled program: from the command line, the UI launch settings, or the process."""
    if parsed.application:
        return {"argv": parsed.application}
    if executable.get("executable"):
        args = executable.get("arguments") or ""
        return {"argv": [executable["executable"]] + (args.split() if args else [])}
    names = [p.get("name") for p in info.processes if p.get("name")]
    return {"argv": names[:1]} if names else None


def _clock_evidence(info: NcuFileInfo, gpus: list[dict], sm_clocks: list[float]) -> dict:
    """Was the GPU clock locked? The report's ClockStatus and the SM clock it measured."""
    measured = statistics.median(sm_clocks) if sm_clocks else None
    max_khz = gpus[0].get("max_sm_clock_khz") if gpus else None
    return {
        "results": info.clock.results,
        "results_with_status": info.clock.recorded,
        "requested_lock": info.clock.requested_lock,
        "executed_locked": info.clock.executed_locked,
        "measured_sm_clock_hz": measured,
        "max_sm_clock_hz": max_khz * 1000 if max_khz else None,
        "measured_to_max": round(measured / (max_khz * 1000), 4) if measured and max_khz else None,
    }


# -- tables ------------------------------------------------------------------------------------


def _metric_value(action, name):
    metric = action.metric_by_name(name)
    return metric.value() if metric is not None and metric.has_value() else None


def _as_int(value):
    return int(value) if isinstance(value, (int, float)) else None


def _nvtx_json(action) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return None
    domains = {}
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        push_pop, start_end = list(domain.push_pop_ranges()), list(domain.start_end_ranges())
        if push_pop or start_end:
            domains[domain.name()] = {"push_pop": push_pop, "start_end": start_end}
    return json.dumps(domains, sort_keys=True) if domains else None


def _kernel_row(report_index, kernel_index, range_index, action, locked):
    import ncu_report

    value = lambda name: _metric_value(action, name)  # noqa: E731 - local shorthand
    duration = value(DURATION_METRIC)
    return (
        report_index, kernel_index,
        action.name(ncu_report.IAction.NameBase_DEMANGLED),
        action.name(ncu_report.IAction.NameBase_FUNCTION),
        action.name(ncu_report.IAction.NameBase_MANGLED),
        _finite(duration) if isinstance(duration, (int, float)) else None,
        None, None,
        *(_as_int(value(f"launch__{part}_dim_{axis}")) for part in ("grid", "block")
          for axis in "xyz"),
        _as_int(value(LAUNCH_METRICS["registers"])),
        _as_int(value(LAUNCH_METRICS["static_shared"])),
        _as_int(value(LAUNCH_METRICS["dynamic_shared"])),
        _as_int(value(LAUNCH_METRICS["device"])),
        _as_int(value("launch__context_id")), _as_int(value("launch__stream_id")),
        None, None, range_index, _nvtx_json(action), locked,
        _finite(value(SM_CLOCK_METRIC)),
    )


def _value_readers() -> dict:
    """Value kind -> reader. `IMetric.value()` builds this table on every call; once is enough."""
    from ncu_report import IMetric

    return {IMetric.ValueKind_DOUBLE: IMetric.as_double, IMetric.ValueKind_FLOAT: IMetric.as_double,
            IMetric.ValueKind_UINT32: IMetric.as_uint64, IMetric.ValueKind_UINT64: IMetric.as_uint64,
            IMetric.ValueKind_STRING: IMetric.as_string}


def computed_by_ncu_report(name: str) -> bool:
    """Metrics ncu_report computes itself (breakdowns, section-file derived metrics).

    Their unit depends on which reports the process evaluated before (measured on the corpus:
    'byte' or '%', 'sector' or 'byte', 'inst' or 'thread'), so the same report would give
    different table bytes, hence another run id. Their values do not vary; their unit is not
    stored. Hardware and launch metrics are named `unit__counter`, these are not.
    """
    return name.startswith(("breakdown:", "derived__")) or "__" not in name


def _metric_rows(report_index, kernel_index, action, readers, units: dict):
    """Rows of the metrics table.

    `units` caches each metric's stored unit by name, for the whole report: a hardware metric's
    unit comes from its counter definition (measured on the corpus: no metric name of the 36
    reports has two units), and asking `ncu_report` for it on every result would cost a third
    of the extraction. The value kind is asked every time: computed metrics change kind
    between results.
    """
    metric_by_name = action.metric_by_name
    for name in action.metric_names():
        metric = metric_by_name(name)
        read = readers.get(metric.kind())
        value = read(metric) if read else None
        if name in units:
            unit = units[name]
        else:
            unit = units[name] = None if computed_by_ncu_report(name) else (metric.unit() or None)
        if isinstance(value, str):
            yield (report_index, kernel_index, name, unit, None, value)
        else:
            yield (report_index, kernel_index, name, unit, _finite(value), None)


def _finite(value) -> float | None:
    """A float, or None for no value and NaN (ncu's 'not available')."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _section_rows(report_index, kernel_index, action):
    for section in action.sections():
        identity = (section.identifier(), section.name(), section.order())
        metrics = [("header", m) for m in section.header_metrics()]
        metrics += [("body", m) for m in section.body_metrics()]
        if not metrics:
            yield (report_index, kernel_index, *identity, None, None, None)
        for position, (part, metric) in enumerate(metrics):
            yield (report_index, kernel_index, *identity, part, position, metric.name())


def _rule_rows(report_index, kernel_index, action):
    for rule in action.rule_results_as_dicts():
        message = rule.get("rule_message") or {}
        speedup = rule.get("speedup_estimation") or {}
        focus = rule.get("focus_metrics")
        yield (report_index, kernel_index, rule.get("rule_identifier"), rule.get("name"),
               rule.get("section_identifier") or None,
               MESSAGE_TYPES.get(message.get("type"), str(message.get("type"))),
               message.get("title") or None, message.get("message") or None,
               SPEEDUP_TYPES.get(speedup.get("type")), speedup.get("speedup"),
               json.dumps(focus, sort_keys=True) if focus else None)


def result_rows(report: NcuReport, report_index: int, low: int, high: int) -> dict[str, list]:
    """The rows of the kernels/metrics/sections/rules tables for results low..high-1."""
    rows: dict[str, list] = {"kernels": [], "metrics": [], "sections": [], "rules": []}
    locked = report.info.result_clock_locked
    readers, units = _value_readers(), {}
    for kernel_index, range_index, action in report.actions(low, high):
        rows["kernels"].append(_kernel_row(
            report_index, kernel_index, range_index, action,
            locked[kernel_index] if kernel_index < len(locked) else None))
        rows["metrics"].extend(_metric_rows(report_index, kernel_index, action, readers, units))
        rows["sections"].extend(_section_rows(report_index, kernel_index, action))
        rows["rules"].extend(_rule_rows(report_index, kernel_index, action))
    return rows


def write_tables(report: NcuReport, tables, report_index: int = 0) -> tuple[list[str], list[float]]:
    """Stream every result into the kernels/metrics/sections/rules tables (read by worker
    processes, chunk by chunk: `ncu_results`).

    Returns the section identifiers seen (in the report's order) and the measured SM clocks.
    """
    from contextlib import closing

    from triage.capture.ncu_results import result_tables

    seen_sections: dict[str, int] = {}
    sm_clocks: list[float] = []
    with closing(result_tables(report, report_index)) as chunks:
        for chunk in chunks:
            for name, table in chunk.items():
                tables.writer(name).write_arrow(table)
            sm_clocks.extend(v for v in chunk["kernels"]["sm_clock_hz"].to_pylist()
                             if v is not None)
            sections = chunk["sections"]
            for section, order in zip(sections["section_id"].to_pylist(),
                                      sections["section_order"].to_pylist()):
                seen_sections.setdefault(section, order)
    ordered = sorted(seen_sections, key=lambda s: (seen_sections[s], s))
    return ordered, sm_clocks


class PreparedNcu:
    """An ncu report validated and loaded, ready to be written into a run."""

    tool = "ncu"

    def __init__(self, path, fmt: str, report: NcuReport):
        self.path, self.format, self.report = path, fmt, report
        self.sha256 = report.info.sha256

    @classmethod
    def open(cls, path, fmt: str) -> "PreparedNcu":
        return cls(path, fmt, open_ncu_report(path))

    def write_tables(self, tables, report_index: int) -> dict:
        sections, sm_clocks = write_tables(self.report, tables, report_index)
        return provenance(self.report, sections, sm_clocks)

    def close(self) -> None:
        self.report = None
