"""Drift: what differs in how two runs were captured, and how much that matters.

The grading is one table, DRIFT_RULES, read top to bottom: a field, how to read it from a run's
record, how to compare, and the severity when the two known values differ:

- invalidates: the numbers are not comparable (different GPU, clock or cache control, replay);
- caution: comparable with care (tool, driver major or CUDA version, section set, host machine);
- info: recorded for the reader (driver patch level, host name, working directory, command).

A value unknown on either side gives the state "unknown": never a difference, never "same".
The verdict is `invalid` if anything invalidates, else `caution` if anything cautions, else
`comparable`. Per-section comparability (a section or metric on one side only) is added by the
ncu diff with severity "not_comparable" and does not change the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from triage.archive.model import RunRecord

INVALIDATES, CAUTION, INFO = "invalidates", "caution", "info"
NOT_COMPARABLE, UNKNOWN = "not_comparable", "unknown"
VERDICT_OF = {INVALIDATES: "invalid", CAUTION: "caution"}
VERDICT_ORDER = ["comparable", "caution", "invalid"]
UNKNOWN_WHY = "not recorded on one side: neither a difference nor the same"


def _gpu(record: RunRecord, key: str):
    return getattr(record.gpu, key) if record.gpu is not None else None


def _env(record: RunRecord, key: str):
    return getattr(record.environment, key)


def _host(record: RunRecord, key: str):
    return getattr(record.environment.host, key)


def _major(version) -> str | None:
    return str(version).split(".")[0] if version else None


def clock_locked(record: RunRecord) -> bool | None:
    """Whether the kernels ran with locked clocks, from the report's own evidence first."""
    clock = record.clock
    if clock.results_with_status:
        return clock.executed_locked == clock.results_with_status
    setting = record.setting("clock_control")
    if record.tool != "ncu" or setting is None:
        return None
    return setting != "none"


def _sections(record: RunRecord):
    sections = record.setting("sections")
    return ", ".join(sorted(sections)) if sections is not None and record.tool == "ncu" \
        else None


@dataclass(frozen=True)
class DriftRule:
    """One row of the grading table."""

    field: str
    read: Callable[[RunRecord], object]
    severity: str
    why: str
    # Only compare when this holds for both records (e.g. driver patch: same major version).
    when: Callable[[RunRecord, RunRecord], bool] = lambda a, b: True


DRIFT_RULES: list[DriftRule] = [
    DriftRule("gpu.name", lambda r: _gpu(r, "name"), INVALIDATES,
              "different GPU model: the numbers come from different hardware"),
    DriftRule("gpu.sm_count", lambda r: _gpu(r, "sm_count"), INVALIDATES,
              "different SM count: throughput and occupancy scale with it"),
    DriftRule("gpu.compute_capability", lambda r: _gpu(r, "compute_capability"), INVALIDATES,
              "different compute capability: different architecture and metrics"),
    DriftRule("clock.locked", clock_locked, INVALIDATES,
              "one run locked the GPU clocks and the other did not: durations are not comparable"),
    DriftRule("settings.clock_control", lambda r: r.setting("clock_control"), INVALIDATES,
              "different --clock-control: kernel durations depend on the clock"),
    DriftRule("settings.cache_control", lambda r: r.setting("cache_control"), INVALIDATES,
              "different --cache-control: flushed vs warm caches change memory metrics"),
    DriftRule("settings.replay_mode", lambda r: r.setting("replay_mode"), INVALIDATES,
              "different --replay-mode: kernel vs application/range replay measure differently"),
    DriftRule("tool_version", lambda r: r.tool_version, CAUTION,
              "different profiler version: metric definitions and rules change across releases",
              when=lambda a, b: a.tool == b.tool),
    DriftRule("driver.major", lambda r: _major(_env(r, "driver_version")), CAUTION,
              "different driver major version: scheduling and clocks may differ"),
    DriftRule("cuda_version", lambda r: _env(r, "cuda_version"), CAUTION,
              "different CUDA version: compiler, runtime and library kernels may differ"),
    DriftRule("settings.sections", _sections, CAUTION,
              "different section set: only the sections both runs collected are compared"),
    DriftRule("settings.trace", lambda r: r.setting("trace"), CAUTION,
              "different nsys trace domains: tracing overhead differs"),
    DriftRule("host.cpu", lambda r: _host(r, "cpu"), CAUTION,
              "different host CPU: launch overhead and host-side gaps differ"),
    DriftRule("host.os", lambda r: _host(r, "os"), CAUTION,
              "different host OS or kernel"),
    DriftRule("driver.version", lambda r: _env(r, "driver_version"), INFO,
              "different driver patch level (same major version)",
              when=lambda a, b: _major(_env(a, "driver_version")) == _major(
                  _env(b, "driver_version"))),
    DriftRule("host.name", lambda r: _host(r, "name"), INFO, "captured on different hosts"),
    DriftRule("environment.working_directory", lambda r: _env(r, "working_directory"), INFO,
              "different working directory"),
    DriftRule("command", lambda r: r.command, INFO,
              "different profiler command line"),
]


def _state(a, b) -> str:
    if a is None or b is None:
        return UNKNOWN
    return "same" if a == b else "different"


def grade(record_a: RunRecord, record_b: RunRecord, rules: list[DriftRule] = DRIFT_RULES) -> list[dict]:
    """Every rule's comparison: field, both values, state, and severity when different."""
    items = []
    for rule in rules:
        if not rule.when(record_a, record_b):
            continue
        a, b = rule.read(record_a), rule.read(record_b)
        state = _state(a, b)
        # An unknown value is not the difference the rule explains: every format says so.
        items.append({"field": rule.field, "a": a, "b": b, "state": state,
                      "severity": rule.severity if state == "different" else state,
                      "why": UNKNOWN_WHY if state == UNKNOWN else rule.why})
    return items


def verdict(items: list[dict]) -> str:
    """The worst verdict any item implies."""
    worst = "comparable"
    for item in items:
        implied = VERDICT_OF.get(item["severity"], "comparable")
        if VERDICT_ORDER.index(implied) > VERDICT_ORDER.index(worst):
            worst = implied
    return worst


def drift_item(field: str, a, b, severity: str, why: str) -> dict:
    """A drift item found by a diff rather than by the table (kernel set, sections, tools)."""
    return {"field": field, "a": a, "b": b, "state": "different", "severity": severity,
            "why": why}


def kernel_set_drift(kernels: list[dict]) -> list[dict]:
    """Kernels on one side only, and matched kernels launched a different number of times.

    `kernels` are diff entries (name, match, matched_by, and `launches` {a, b} for matched
    ones). Kernels paired by launch order (renamed) are matched, and named as info."""
    only_a = [k["name"] for k in kernels if k["match"] == "only_a"]
    only_b = [k["name"] for k in kernels if k["match"] == "only_b"]
    counts = [k["name"] for k in kernels if k["match"] == "matched" and "launches" in k
              and k["launches"].get("a") != k["launches"].get("b")]
    items = []
    if only_a or only_b:
        items.append(drift_item("kernels.set", f"{len(only_a)} only in A",
                                f"{len(only_b)} only in B", CAUTION, "different kernel set: "
                                + "; ".join(filter(None, [_names("only in A", only_a),
                                                          _names("only in B", only_b)]))))
    if counts:
        items.append(drift_item("kernels.launches", None, None, CAUTION,
                                _names("different launch counts for", counts)))
    renamed = [k["name"] for k in kernels if k.get("matched_by") == "launch_order"]
    if renamed:  # compared as one kernel on a guess: the reader should know which
        items.append(drift_item("kernels.renamed", None, None, INFO,
                                _names("paired by launch order, names differ", renamed)))
    return items


def _names(label: str, names: list[str]) -> str:
    if not names:
        return ""
    shown = ", ".join(clip_middle(n, 60) for n in names[:3])
    return f"{label}: {shown}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def clip_middle(text: str, width: int) -> str:
    """Shortened in the middle: kernel names that differ only in their tail (a changed
    parameter list) stay distinguishable, unlike names cut at the end."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]
