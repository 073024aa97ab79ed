"""Section-by-section diff of two ncu runs, per matched kernel.

Duration leads (a falling SOL percentage can go with a faster kernel, so percentages are never
the headline); then each section the reports show, in the report's order, with its metrics' values
on both sides. A section or metric on one side only is "not comparable" there and named in the
drift. Numbers of repeated launches are the mean over the launches paired in order.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

from triage.compare.drift import NOT_COMPARABLE, drift_item, kernel_set_drift
from triage.compare.explain import duration_ns
from triage.compare.explain_tables import METRICS
from triage.compare.matching import (Launch, Match, group_kernels, match_kernels,
                                     pairing_note)
from triage.compare.rundata import RunData
from triage.errors import UsageError

FIRED = ("optimization", "warning", "error")


@dataclass(frozen=True)
class DiffOptions:
    """What to show: filters, and the relative change below which a metric is 'unchanged'."""

    sections: tuple[str, ...] = ()
    kernel: str | None = None
    metric: str | None = None
    show_all: bool = False
    threshold_pct: float = 1.0

    def __post_init__(self):
        for option, pattern in (("--kernel", self.kernel), ("--metric", self.metric)):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise UsageError(f"{option} {pattern!r} is not a regular expression: "
                                     f"{exc}") from None
        if not math.isfinite(self.threshold_pct) or self.threshold_pct < 0:
            raise UsageError(f"--threshold {self.threshold_pct} must be a percentage >= 0")

    def kernel_shown(self, *names: str | None) -> bool:
        """--kernel: whether a kernel (by either side's name) is shown; all are without it."""
        return self.kernel is None or any(n and re.search(self.kernel, n) for n in names)


def relative_change(a, b) -> float | None:
    """(b - a) / |a| in percent; None when undefined (missing side, a == 0 != b)."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    if a == 0:
        return 0.0 if b == 0 else None
    return (b - a) / abs(a) * 100.0


def total_change(a: dict | None, b: dict | None) -> float | None:
    """B's total time minus A's. An absent side counts 0 (the kernel is new or gone); a side
    whose total is unknown makes the change unknown, never 0."""
    totals = [side["total_ns"] if side else 0 for side in (a, b)]
    return None if None in totals else totals[1] - totals[0]


def kernel_rows(run: RunData) -> list[dict]:
    """The run's kernel rows, a missing duration read from the launch's metrics the way
    `triage explain` reads it (ncu 2019 reports record gpu__time_duration, without `.sum`, and
    their kernels table holds no duration)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = run.kernels.to_pylist()
    unknown = [r["kernel_index"] for r in rows if r["duration_ns"] is None]
    if not unknown:
        return rows
    columns = ["report_index", "kernel_index", "name", "unit", "value"]
    table = run.rows_for("metrics", unknown, columns)
    table = table.filter(pc.is_in(table["name"], value_set=pa.array(METRICS["duration"].names)))
    raw: dict[Launch, dict] = {}
    for report, kernel, name, unit, value in zip(*(table.column(c).to_pylist() for c in columns)):
        raw.setdefault((report, kernel), {})[name] = (value, unit)
    for row in rows:
        if row["duration_ns"] is None:
            row["duration_ns"] = duration_ns(raw.get((row["report_index"], row["kernel_index"]),
                                                     {}))
    return rows


def _mean(values: list) -> float | str | None:
    numbers = [v for v in values if isinstance(v, (int, float))]
    if numbers:
        return statistics.fmean(numbers)
    texts = [v for v in values if isinstance(v, str)]
    return texts[0] if texts else None


class Side:
    """One run's tables for the launches being compared, indexed by launch."""

    def __init__(self, run: RunData, launches: set[Launch]):
        indices = [k for _r, k in launches]
        self.sections: dict[Launch, list[dict]] = {}
        for row in run.rows_for("sections", indices).to_pylist():
            key = (row["report_index"], row["kernel_index"])
            if key in launches:
                self.sections.setdefault(key, []).append(row)
        self.values: dict[Launch, dict[str, tuple]] = {}
        columns = ["report_index", "kernel_index", "name", "unit", "value", "text"]
        table = run.rows_for("metrics", indices, columns)
        for report, kernel, name, unit, value, text in zip(
                *(table.column(c).to_pylist() for c in columns)):
            if (report, kernel) in launches:
                self.values.setdefault((report, kernel), {})[name] = (
                    value if value is not None else text, unit)
        self.rules: dict[Launch, list[dict]] = {}
        for row in run.rows_for("rules", indices).to_pylist():
            self.rules.setdefault((row["report_index"], row["kernel_index"]), []).append(row)

    def section_layout(self, launch: Launch) -> list[tuple[str, str, list[str]]]:
        """(section id, display name, metric names) in the report's order for one launch."""
        rows = sorted(self.sections.get(launch, []),
                      key=lambda r: (r["section_order"], r["section_id"], r["position"] or 0))
        layout: dict[str, tuple[str, str, list[str]]] = {}
        for row in rows:
            entry = layout.setdefault(row["section_id"], (row["section_id"], row["section_name"], []))
            if row["metric_name"] and row["metric_name"] not in entry[2]:
                entry[2].append(row["metric_name"])
        return list(layout.values())

    def metric(self, launches: list[Launch], name: str) -> tuple:
        found = [self.values[l][name] for l in launches if name in self.values.get(l, {})]
        if not found:
            return None, None
        return _mean([v for v, _u in found]), found[0][1]

    def conclusion(self, launches: list[Launch]) -> str | None:
        """`triage explain`'s conclusion for these launches (their mean values)."""
        from triage.compare.explain import Values, explain_values, mean_values

        raw = mean_values([self.values.get(l, {}) for l in launches])
        sections = {row["section_id"] for l in launches for row in self.sections.get(l, [])}
        return explain_values(Values(raw, sections))[-1]["label"]


def _metric_entry(name: str, a: tuple, b: tuple, opts: DiffOptions) -> dict:
    (value_a, unit_a), (value_b, unit_b) = a, b
    if value_a is None or value_b is None:
        status = "only_a" if value_b is None else "only_b"
    elif isinstance(value_a, str) or isinstance(value_b, str):
        status = "changed" if value_a != value_b else "unchanged"
    else:
        pct = relative_change(value_a, value_b)
        status = "unchanged" if pct is not None and abs(pct) < opts.threshold_pct else "changed"
    numeric = all(isinstance(v, (int, float)) for v in (value_a, value_b))
    return {"name": name, "unit": unit_a or unit_b, "a": value_a, "b": value_b,
            "delta": value_b - value_a if numeric else None,
            "delta_pct": relative_change(value_a, value_b), "status": status,
            **({"unit_b": unit_b} if unit_a and unit_b and unit_a != unit_b else {})}


def _section_wanted(section_id: str, display: str, opts: DiffOptions) -> bool:
    if not opts.sections:
        return True
    wanted = {s.lower() for s in opts.sections}
    return section_id.lower() in wanted or (display or "").lower() in wanted


def _merged_layout(side_a: Side, side_b: Side, launch_a: Launch, launch_b: Launch):
    """Per section: id, display name, metric names in A and in B; A's order, then B's extras."""
    layout_a = {sid: (name, names) for sid, name, names in side_a.section_layout(launch_a)}
    layout_b = {sid: (name, names) for sid, name, names in side_b.section_layout(launch_b)}
    for sid in list(layout_a) + [s for s in layout_b if s not in layout_a]:
        name_a, names_a = layout_a.get(sid, (None, None))
        name_b, names_b = layout_b.get(sid, (None, None))
        yield sid, name_a or name_b, names_a, names_b


def _section_entries(match: Match, side_a: Side, side_b: Side, opts: DiffOptions) -> list[dict]:
    pairs = match.pairs()
    launches_a, launches_b = [p[0] for p in pairs], [p[1] for p in pairs]
    metric_filter = re.compile(opts.metric) if opts.metric else None
    entries = []
    for sid, display, names_a, names_b in _merged_layout(side_a, side_b, launches_a[0],
                                                         launches_b[0]):
        if not _section_wanted(sid, display, opts):
            continue
        in_a, in_b = names_a is not None, names_b is not None
        names = (names_a or []) + [n for n in names_b or [] if n not in (names_a or [])]
        if metric_filter:
            names = [n for n in names if metric_filter.search(n)]
        metrics = [_metric_entry(n, side_a.metric(launches_a, n), side_b.metric(launches_b, n),
                                 opts) for n in names]
        entries.append(_section_entry(sid, display, in_a, in_b, metrics, opts))
    return entries


def _section_entry(sid, display, in_a, in_b, metrics, opts) -> dict:
    missing = [m["name"] for m in metrics if m["status"] in ("only_a", "only_b")]
    if not (in_a and in_b):
        why = f"collected only in {'A' if in_a else 'B'}"
    elif missing:
        why = f"{len(missing)} metric(s) on one side only (renamed or not collected): " + \
            ", ".join(missing[:4])
    else:
        why = None
    shown = metrics if opts.show_all else [m for m in metrics if m["status"] != "unchanged"]
    return {"section": sid, "name": display, "comparable": why is None, "why": why,
            "metrics": shown, "unchanged": sum(m["status"] == "unchanged" for m in metrics)}


def _fired(rules: list[dict]) -> dict[tuple, dict]:
    return {(r["rule_id"], r["title"] or ""): r for r in rules if r["message_type"] in FIRED}


def _rule_entries(match: Match, side_a: Side, side_b: Side) -> dict:
    pairs = match.pairs()
    fired_a = _fired(side_a.rules.get(pairs[0][0], [])) if pairs else {}
    fired_b = _fired(side_b.rules.get(pairs[0][1], [])) if pairs else {}
    keep = ("rule_id", "rule_name", "section_id", "message_type", "title", "message",
            "speedup_pct")
    pick = lambda r: {k: r[k] for k in keep}  # noqa: E731
    return {"only_a": [pick(r) for k, r in fired_a.items() if k not in fired_b],
            "only_b": [pick(r) for k, r in fired_b.items() if k not in fired_a],
            "both": [pick(r) for k, r in fired_a.items() if k in fired_b]}


def _side_summary(durations: list, paired: int | None) -> dict:
    """Mean duration over the launches compared (paired ones), total and count over all."""
    compared = durations[:paired] if paired else durations
    numbers = [d for d in compared if isinstance(d, (int, float))]
    every = [d for d in durations if isinstance(d, (int, float))]
    return {"duration_ns": statistics.fmean(numbers) if numbers else None,
            "total_ns": sum(every) if every else None, "launches": len(durations)}


def _kernel_entry(match: Match, side_a: Side, side_b: Side, opts: DiffOptions) -> dict:
    n_pairs = len(match.pairs())
    a = _side_summary(match.a.durations, n_pairs) if match.a else None
    b = _side_summary(match.b.durations, n_pairs) if match.b else None
    entry = {"name": match.name, "match": match.kind, "matched_by": match.matched_by,
             "a": a, "b": b,
             "delta_pct": relative_change(a["duration_ns"], b["duration_ns"]) if a and b else None,
             "delta_total_ns": total_change(a, b),
             "launches": {"a": len(match.a.launches) if match.a else 0,
                          "b": len(match.b.launches) if match.b else 0, "paired": n_pairs},
             "sections": [], "rules": {"only_a": [], "only_b": [], "both": []}, "notes": []}
    if match.a and match.b:
        if match.matched_by == "launch_order":  # not names that differ only in spacing
            entry["name_b"] = match.b.name
            entry["notes"].append(pairing_note(match.a.name, match.b.name, match.a.short_name,
                                               match.b.short_name))
        if len(match.a.launches) != len(match.b.launches):
            entry["notes"].append(f"launch counts differ ({len(match.a.launches)} vs "
                                  f"{len(match.b.launches)}); compared the first {n_pairs} of each")
        entry["sections"] = _section_entries(match, side_a, side_b, opts)
        entry["rules"] = _rule_entries(match, side_a, side_b)
        pairs = match.pairs()
        entry["conclusion"] = {"a": side_a.conclusion([p[0] for p in pairs]),
                               "b": side_b.conclusion([p[1] for p in pairs])}
    return entry


def _section_drift(kernels: list[dict]) -> list[dict]:
    """One drift item per section that is not comparable in some kernel."""
    seen: dict[str, str] = {}
    for kernel in kernels:
        for section in kernel["sections"]:
            if not section["comparable"]:
                seen.setdefault(section["section"], section["why"])
    return [drift_item(f"section:{sid}", None, None, NOT_COMPARABLE, f"not comparable: {why}")
            for sid, why in seen.items()]


def _set_entry(match: Match) -> dict:
    """What the kernel-set drift reads of a match, without reading its sections."""
    return {"name": match.name, "match": match.kind, "matched_by": match.matched_by,
            "launches": {"a": len(match.a.launches) if match.a else 0,
                         "b": len(match.b.launches) if match.b else 0}}


def diff_ncu(run_a: RunData, run_b: RunData, opts: DiffOptions) -> tuple[list[dict], list[dict]]:
    """Kernel entries (matched, only_a, only_b) and the drift they show. The kernel-set drift
    is of every kernel, so that --kernel narrows what is shown, never the verdict."""
    matches = match_kernels(group_kernels(kernel_rows(run_a)), group_kernels(kernel_rows(run_b)))
    set_drift = kernel_set_drift([_set_entry(m) for m in matches])
    matches = [m for m in matches if opts.kernel_shown(*(g.name for g in (m.a, m.b) if g))]
    side_a = Side(run_a, {p[0] for m in matches for p in m.pairs()})
    side_b = Side(run_b, {p[1] for m in matches for p in m.pairs()})
    kernels = [_kernel_entry(m, side_a, side_b, opts) for m in matches]
    return kernels, _section_drift(kernels) + set_drift
