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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.base.timeutil import from_epoch
from triage.capture.ncu_file import NcuFileInfo, read_ncu_file
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.capture.redact import parse_environment_text
from triage.capture.settings import joined_option, resolve
from triage.base.errors import UnsupportedReport

if TYPE_CHECKING:
    from triage.capture.formats import TableBatch
    from triage.capture.ncu_results import BatchResults, Chunks, ResultTables

DURATION_METRIC = "gpu__time_duration.sum"
SM_CLOCK_METRIC = "smsp__cycles_elapsed.avg.per_second"
PLATFORMS = {0: "unknown", 1: "windows", 2: "linux", 3: "android", 4: "osx", 5: "qnx",
             6: "hos", 7: "integrity", 8: "linux-ppc"}
MESSAGE_TYPES: dict[Any, str] = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
SPEEDUP_TYPES: dict[Any, str | None] = {0: None, 1: "local", 2: "global"}
# Launch attributes stored as kernel columns, by metric name.
LAUNCH_METRICS = {
    "registers_per_thread": "launch__registers_per_thread",
    "static_shared_bytes": "launch__shared_mem_per_block_static",
    "dynamic_shared_bytes": "launch__shared_mem_per_block_dynamic",
    "device_id": "device__attribute_device_index",
    "context_id": "launch__context_id",
    "stream_id": "launch__stream_id",
}
# The columns of the rows each table's reader below yields, in the order of its tuples (the
# metrics rows are the bulk of a report: tuples, not dicts, named here once).
METRIC_COLUMNS = ("report_index", "kernel_index", "name", "unit", "value", "text")
SECTION_COLUMNS = ("report_index", "kernel_index", "section_id", "section_name",
                   "section_order", "part", "position", "metric_name", "metric_label")
RULE_COLUMNS = ("report_index", "kernel_index", "rule_id", "rule_name", "section_id",
                "message_type", "title", "message", "speedup_type", "speedup_pct",
                "focus_metrics", "error")
COLUMNS = {"metrics": METRIC_COLUMNS, "sections": SECTION_COLUMNS, "rules": RULE_COLUMNS}


@dataclass
class NcuReport:
    """A validated ncu report: its framing info and the loaded `ncu_report` context."""

    path: str
    info: NcuFileInfo
    context: Any  # an ncu_report IContext

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
        100 MB of shared state (30-90 ms). A relay does it before forking its workers, which
        then inherit that state instead of each building it again; a process whose results
        are read by workers never holds it."""
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
        context = _load(ncu_report, path)
    except Exception as exc:  # noqa: BLE001 - ncu_report raises bare Exceptions on bad input
        raise UnsupportedReport(f"{path}: ncu_report cannot read this report ({exc}); "
                                "upgrade ncu-report (pip install -U ncu-report)") from None
    report = NcuReport(path, info, context)
    if info.clock.results and report.count_actions() == 0:
        raise UnsupportedReport(f"{path}: ncu_report found no results in a report that has "
                                f"{info.clock.results}; upgrade ncu-report")
    return report


def _load(ncu_report: Any, path: str) -> Any:
    """`ncu_report.load_report`, which takes only UTF-8 paths (SWIG's `char const *`): a file
    name of other bytes is opened here and handed over as /proc/self/fd/N (Linux)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        fd = os.open(path, os.O_RDONLY)
        try:
            return ncu_report.load_report(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
    return ncu_report.load_report(path)


# -- provenance --------------------------------------------------------------------------------


def _version(raw: str | None) -> str | None:
    """'2024.1.1.0 (build 33998838) (public-release)' -> '2024.1.1.0'."""
    return raw.split(" ")[0] if raw else None


def report_version(info: NcuFileInfo) -> str | None:
    """The ncu version that wrote the report; None where it recorded none (ncu 2019)."""
    return _version(info.versions.get("Nsight Compute Target")
                    or info.versions.get("Nsight Compute Host"))


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
    other = recorded.get("other") or {}
    return [
        ("clock_control",
         (recorded.get("clock_control_mode") or "").lower() or _from_clock_status(info),
         command.last("--clock-control"), "base"),
        ("cache_control", None, command.last("--cache-control"), "all"),
        ("replay_mode", (recorded.get("replay_mode") or "").lower() or None,
         command.last("--replay-mode"), "kernel"),
        ("section_set", None, _section_set_from_command(command),
         default_section_set(tool_version)),
        ("metrics", other.get("metrics") or None,
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
    tool_version = report_version(info)
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


def _metric_value(action: Any, name: str) -> Any:
    metric = action.metric_by_name(name)
    return metric.value() if metric is not None and metric.has_value() else None


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def _nvtx_json(action: Any) -> str | None:
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


def _kernel_row(action: Any, range_index: int, locked: bool | None) -> dict[str, Any]:
    """One result's kernels row by column name (a column not named here is null: ncu records
    no timestamps, correlation or process ids)."""
    import ncu_report

    value = lambda name: _metric_value(action, name)  # noqa: E731 - local shorthand
    duration = value(DURATION_METRIC)
    row: dict[str, Any] = {
        "name": action.name(ncu_report.IAction.NameBase_DEMANGLED),
        "short_name": action.name(ncu_report.IAction.NameBase_FUNCTION),
        "mangled_name": action.name(ncu_report.IAction.NameBase_MANGLED),
        "duration_ns": _finite(duration) if isinstance(duration, (int, float)) else None,
    }
    for part in ("grid", "block"):
        for axis in "xyz":
            row[f"{part}_{axis}"] = _as_int(value(f"launch__{part}_dim_{axis}"))
    for column, metric in LAUNCH_METRICS.items():
        row[column] = _as_int(value(metric))
    row.update(range_index=range_index, nvtx=_nvtx_json(action), clock_locked=locked,
               sm_clock_hz=_finite(value(SM_CLOCK_METRIC)))
    return row


def _value_readers() -> dict[int, Callable[[Any], Any]]:
    """Value kind -> reader. `IMetric.value()` builds this table on every call; once is enough."""
    from ncu_report import IMetric

    return {IMetric.ValueKind_DOUBLE: IMetric.as_double, IMetric.ValueKind_FLOAT: IMetric.as_double,
            IMetric.ValueKind_UINT32: IMetric.as_uint64,
            IMetric.ValueKind_UINT64: IMetric.as_uint64,
            IMetric.ValueKind_STRING: IMetric.as_string}


def computed_by_ncu_report(name: str) -> bool:
    """Metrics ncu_report computes itself (breakdowns, section-file derived metrics).

    Their unit depends on which reports the process evaluated before (measured on the corpus:
    'byte' or '%', 'sector' or 'byte', 'inst' or 'thread'), so the same report would give
    different table bytes, hence another run id. Their values do not vary; their unit is not
    stored. Hardware and launch metrics are named `unit__counter`, these are not.
    """
    return name.startswith(("breakdown:", "derived__")) or "__" not in name


# Metrics that say nothing about whether the profiler measured a result: the device's and the
# system's attributes, the profiler's own bookkeeping, the sections' metric groups (lists of
# names), the launch configuration (known before the kernel ran), the occupancy limits it
# implies (`sm__maximum_warps_*`: a per-device constant the corpus's failed results carry, value
# 1 where every counter is NaN) and a counter's peak (`*.peak_sustained*`: the hardware's rate).
NOT_MEASURED_PREFIXES = ("device__", "numa__", "nvlink__", "c2clink__", "profiler__", "group:",
                         "launch__")
NOT_MEASURED_PARTS = ("__maximum_warps",)


def measured_metric(name: str) -> bool:
    """Whether a metric's value is something the profiler measured for this result (durations,
    throughputs, stalls, instructions: counters), not what the device, the launch, the
    profiler or ncu_report supply anyway. A result none of whose measured metrics has a value
    (number or text) carries no data: on the corpus, results whose every counter ncu recorded
    as NaN, and results of a run that collected no section (launch statistics only)."""
    submetric = name.rsplit(".", 1)[-1] if "." in name else ""
    return not (name.startswith(NOT_MEASURED_PREFIXES)
                or any(part in name for part in NOT_MEASURED_PARTS)
                or submetric.startswith("peak_sustained") or computed_by_ncu_report(name))


def _metric_rows(report_index: int, kernel_index: int, action: Any,
                 readers: dict[int, Callable[[Any], Any]], units: dict[str, str | None]
                 ) -> Iterator[tuple[Any, ...]]:
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


def _finite(value: Any) -> float | None:
    """A float, or None for no value and NaN (ncu's 'not available')."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _section_rows(report_index: int, kernel_index: int, action: Any
                  ) -> Iterator[tuple[Any, ...]]:
    for section in action.sections():
        identity = (section.identifier(), section.name(), section.order())
        metrics = [("header", m) for m in section.header_metrics()]
        metrics += [("body", m) for m in section.body_metrics()]
        if not metrics:
            yield (report_index, kernel_index, *identity, None, None, None, None)
        for position, (part, metric) in enumerate(metrics):
            name = metric.name()
            yield (report_index, kernel_index, *identity, part, position, name,
                   display_label(metric.label(), name))


def display_label(label: str | None, name: str) -> str | None:
    """The label ncu's section shows for a metric ("Duration" for gpu__time_duration.sum), the
    name a reader of the UI knows it by; None where it adds nothing a view could show: none
    given, the name again, or a template ncu fills per breakdown ("{UNIT}: {COMPOUND_NAME}")."""
    if not label or label == name or "{" in label:
        return None
    return label


def _rule_rows(report_index: int, kernel_index: int, action: Any
               ) -> Iterator[tuple[Any, ...]]:
    """One row per rule message. An error-type message is ncu saying the rule could not run
    ("Rule Occupancy returned an error: Metric ... not found", then ncu_report's own "<built-in
    function IAction_metric_by_name> returned a result with an error set" and the rule file's
    line): no rule ncu ships (2022.3) sends one itself, and every one in the corpus is such a
    failure. It goes to `error`, so `message` only ever holds what a rule said."""
    for rule in action.rule_results_as_dicts():
        message = rule.get("rule_message") or {}
        kind = MESSAGE_TYPES.get(message.get("type"), str(message.get("type")))
        text = message.get("message") or None
        speedup = rule.get("speedup_estimation") or {}
        focus = rule.get("focus_metrics")
        failed = kind == "error"
        yield (report_index, kernel_index, rule.get("rule_identifier"), rule.get("name"),
               rule.get("section_identifier") or None, kind,
               message.get("title") or None, None if failed else text,
               SPEEDUP_TYPES.get(speedup.get("type")), speedup.get("speedup"),
               json.dumps(focus, sort_keys=True) if focus else None, text if failed else None)


def result_rows(report: NcuReport, report_index: int, low: int, high: int
                ) -> tuple[dict[str, list[Any]], ResultFacts]:
    """The rows of the kernels/metrics/sections/rules tables for results low..high-1: kernels
    as {column: value}, the others as tuples of METRIC_COLUMNS, SECTION_COLUMNS, RULE_COLUMNS;
    and what the provenance needs from them (`ResultFacts`), gathered as they are made."""
    rows: dict[str, list[Any]] = {"kernels": [], "metrics": [], "sections": [], "rules": []}
    facts = ResultFacts()
    locked = report.info.result_clock_locked
    readers = _value_readers()
    units: dict[str, str | None] = {}
    for kernel_index, range_index, action in report.actions(low, high):
        row = {"report_index": report_index, "kernel_index": kernel_index}
        row.update(_kernel_row(action, range_index,
                               locked[kernel_index] if kernel_index < len(locked) else None))
        metrics = list(_metric_rows(report_index, kernel_index, action, readers, units))
        sections = list(_section_rows(report_index, kernel_index, action))
        facts.see(row, metrics, sections)
        rows["kernels"].append(row)
        rows["metrics"].extend(metrics)
        rows["sections"].extend(sections)
        rows["rules"].extend(_rule_rows(report_index, kernel_index, action))
    return rows, facts


@dataclass
class ResultFacts:
    """What the provenance needs from a report's results: the sections seen, in the report's
    order, the SM clock each result measured, and which results carry values. Gathered per
    chunk where its rows are made (a worker's, when workers read: the archive's process then
    reads no row back), and added up, in result order, for the report."""

    results: int = 0
    sections: dict[str, int] = field(default_factory=dict)  # id -> order, first seen
    sm_clocks: list[float] = field(default_factory=list)
    with_values: set[tuple[int, int]] = field(default_factory=set)

    def see(self, kernel: dict[str, Any], metrics: list[tuple[Any, ...]],
            sections: list[tuple[Any, ...]]) -> None:
        """One result's rows. It carries values when it has a duration (a measured value:
        DURATION_METRIC), else when any measured metric has a number or a text."""
        self.results += 1
        if kernel["sm_clock_hz"] is not None:
            self.sm_clocks.append(kernel["sm_clock_hz"])
        if kernel["duration_ns"] is not None or any(
                (value is not None or text is not None) and measured_metric(name)
                for _r, _k, name, _unit, value, text in metrics):
            self.with_values.add((kernel["report_index"], kernel["kernel_index"]))
        for section in sections:
            self.sections.setdefault(section[2], section[4])  # section_id, section_order

    def add(self, chunk: ResultFacts) -> None:
        """A later chunk's facts."""
        self.results += chunk.results
        self.sm_clocks.extend(chunk.sm_clocks)
        self.with_values |= chunk.with_values
        for section, order in chunk.sections.items():
            self.sections.setdefault(section, order)

    def sections_in_order(self) -> list[str]:
        """The section ids as the report orders them (ties by id), as the provenance lists them."""
        return sorted(self.sections, key=lambda s: (self.sections[s], s))

    def notices(self) -> list[str]:
        """'N of M results carry no metric values ...' where some result has none."""
        empty = self.results - len(self.with_values)
        return [f"{empty} of {self.results} results carry no metric values (the profiler "
                "collected nothing for them)"] if empty > 0 else []


class PreparedNcu:
    """An ncu report validated and loaded, ready to hand over its results."""

    tool = "ncu"

    def __init__(self, path: Path, fmt: str, report: NcuReport) -> None:
        self.path, self.format = path, fmt
        self.report: NcuReport | None = report
        self.sha256 = report.info.sha256 or ""  # taken by every validation read
        self._seen = ResultFacts()
        self._reading: ResultTables | Chunks | None = None
        self._batch: tuple[BatchResults, int] | None = None  # read with others: where

    @staticmethod
    def read_together(reports: list[tuple[PreparedNcu, int]]) -> None:
        """Have these reports (each with its index in its run, in the order the archive reads
        them) read by one pool of workers, where that pays (`BatchResults`)."""
        from triage.capture.ncu_results import BatchResults

        loaded = [(prepared._report(), index) for prepared, index in reports]
        if not BatchResults.worth([report for report, _index in loaded]):
            return
        batch = BatchResults(loaded)  # its relay forked: released by the reports' `close`
        try:
            for position, (prepared, _index) in enumerate(reports):
                prepared._batch = (batch, position)
        except BaseException:  # a Ctrl-C before every report holds it: no report would end it
            batch.relay.close()
            raise

    @classmethod
    def open(cls, path: Path, fmt: str) -> PreparedNcu:
        return cls(path, fmt, open_ncu_report(path))

    def batches(self, report_index: int) -> Iterator[TableBatch]:
        """Every result's rows, chunk by chunk (read by worker processes: `ncu_results`,
        which forks their relay now, before the archive's threads start; or by those of the
        batch it is read with: `read_together`)."""
        from triage.capture.ncu_results import ResultTables

        if self._batch is not None:
            batch, position = self._batch
            self._reading = batch.chunks(position, report_index)
        else:
            self._reading = ResultTables(self._report(), report_index)
        return self._watched(self._reading)

    def _watched(self, chunks: ResultTables | Chunks) -> Iterator[TableBatch]:
        for tables, facts in chunks:
            self._seen.add(facts)
            yield from tables.items()

    def provenance(self) -> dict[str, Any]:
        found = provenance(self._report(), self._seen.sections_in_order(), self._seen.sm_clocks)
        return {**found, "notices": self._seen.notices()}

    def _report(self) -> NcuReport:
        if self.report is None:
            raise RuntimeError(f"{self.path}: read after close")
        return self.report

    def close(self) -> None:
        """Stop reading (the workers, if any) and let the report go."""
        if self._reading is not None:
            self._reading.close()
            self._reading = None
        if self._batch is not None:
            self._batch[0].release(self._batch[1])
            self._batch = None
        self.report = None
