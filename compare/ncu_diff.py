"""Section-by-section diff of two ncu runs, per matched kernel.

Duration leads (a falling SOL percentage can go with a faster kernel, so percentages are never
the headline); then each section the reports show, in the report's order, with its metrics' values
on both sides. A section or metric on one side only is "not comparable" there and named in the
drift. A kernel side whose launches carry no metric values (ncu collected nothing) is `no_data`,
and so are its sections and metrics, and any metric without a value on both sides: nothing was
renamed there. Numbers of repeated launches are the mean over the launches paired in order.
A side of several runs is read as one: each kernel's numbers and each metric value the median
over its runs of each run's mean (`compare/aggregate.py`); the layout of sections, the rules
that fired and the conclusions are those of each side's first run.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from weakref import WeakKeyDictionary

from triage.compare.aggregate import median_side, median_value
from triage.compare.drift import NOT_COMPARABLE, drift_item, kernel_set_drift, no_data_drift
from triage.compare.explain import NOT_READ, duration_ns, explain_planned, plan
from triage.compare.explain_result import KernelExplained
from triage.compare.explain_tables import METRICS
from triage.compare.launch_stats import Group, RawValues
from triage.compare.matching import (TWO_NAMES, KernelGroup, Launch, Match,
                                     group_kernels, match_kernels, match_key)
from triage.compare.result import (SECTION_ONLY_A, SECTION_ONLY_B, Conclusion, DiffOptions,
                                   DriftItem, FiredRule, KernelDiff, KernelSide, MetricDiff,
                                   RuleChanges, SectionDiff, Value, relative_change)
from triage.compare.renames import MetricRename, metric_map
from triage.compare.rundata import RunData

FIRED = ("optimization", "warning", "error")
Labels = dict[str, str | None]  # a section's metric names, in order, with the label it shows


def kernel_rows(run: RunData) -> list[dict]:
    """The run's kernel rows, a missing duration read from the launch's metrics the way
    `triage explain` reads it (ncu 2019 reports record gpu__time_duration, without `.sum`, and
    their kernels table holds no duration)."""
    rows = run.kernels.to_pylist()  # with each launch's grid and block: pairing evidence
    if all(r["duration_ns"] is not None for r in rows):
        return rows
    raw, _with_data = run.ncu.facts(METRICS["duration"].names) or ({}, set())
    for row in rows:
        if row["duration_ns"] is None:
            row["duration_ns"] = duration_ns(raw.get((row["report_index"], row["kernel_index"]),
                                                     {}))
    return rows


_GROUPS: WeakKeyDictionary[RunData, list[KernelGroup]] = WeakKeyDictionary()


def kernel_groups(run: RunData) -> list[KernelGroup]:
    """`group_kernels(kernel_rows(run))`, once per run: a diff asks for them from four places
    (the summary, matching, the noise of each side), 0.1 s each at thousands of launches."""
    if run not in _GROUPS:
        _GROUPS[run] = group_kernels(kernel_rows(run))
    return _GROUPS[run]


def _by_launch(rows: list[dict]) -> dict[Launch, list[dict]]:
    out: dict[Launch, list[dict]] = {}
    for row in rows:
        out.setdefault((row["report_index"], row["kernel_index"]), []).append(row)
    return out


class Side:
    """One run's tables for the kernels being compared, each kernel given as its compared
    launches: per kernel each metric's statistics (one query where the metrics are stored),
    the sections and rules of its first launch, and (when asked) explain's conclusion."""

    def __init__(self, run: RunData, kernels: Sequence[Group], conclude: bool = True) -> None:
        """`conclude`: explain's conclusions will be asked for (their launches are classified
        now, so that one query reads the statistics of the kernels and of their groups)."""
        self.tables = run.ncu
        self.version = run.record.tool_version  # names a renamed metric's sides
        self.kernels = list(dict.fromkeys(kernels))
        self.plan = plan(self.tables, [("", None, group) for group in self.kernels]) \
            if conclude else None
        self._conclusions: dict[Group, str | None] = {}
        groups = self.kernels + (self.plan.groups if self.plan else [])
        self.index = {group: index for index, group in enumerate(dict.fromkeys(groups))}
        self.stats = self.tables.stats(list(self.index))
        firsts = [group[0] for group in self.kernels]
        self.sections = _by_launch(self.tables.rows("sections", firsts))
        self.rules = _by_launch(self.tables.rows("rules", firsts))

    def section_layout(self, launch: Launch) -> list[tuple[str, str, Labels]]:
        """(section id, display name, {metric name: its label in the section}) in the report's
        order for one launch; a run archived before labels were stored has None for each."""
        rows = sorted(self.sections.get(launch, []),
                      key=lambda r: (r["section_order"], r["section_id"], r["position"] or 0))
        layout: dict[str, tuple[str, str, Labels]] = {}
        for row in rows:
            entry = layout.setdefault(row["section_id"],
                                      (row["section_id"], row["section_name"], {}))
            if row["metric_name"]:
                entry[2].setdefault(row["metric_name"], row["metric_label"])
        return list(layout.values())

    def means(self, launches: Sequence[Launch]) -> RawValues:
        """Each metric's mean over these launches (one kernel's, as given), and its unit."""
        return self.stats.raw(self.index[tuple(launches)])

    def conclusion(self, launches: Sequence[Launch]) -> str | None:
        """`triage explain`'s conclusion for a kernel's launches: explain's label where they
        behave alike, else each group's label in launch order, joined by " / ". Kernels are
        explained as they are asked for, in order: the statistics of the last group explained
        are then still at hand for the kernel's sections."""
        wanted = tuple(launches)
        while wanted not in self._conclusions:
            self._conclude_next()
        return self._conclusions[wanted]

    @cached_property
    def _explained(self) -> Iterator[KernelExplained]:
        assert self.plan is not None, "a Side made with conclude=False"
        return explain_planned(self.tables, self.plan, self.stats, self.index)

    def _conclude_next(self) -> None:
        group = self.kernels[len(self._conclusions)]
        first = next(self._explained)
        labels = [first.conclusion] + [next(self._explained).conclusion
                                       for _ in range(first.group.of - 1 if first.group else 0)]
        self._conclusions[group] = labels[0] if len(set(labels)) == 1 else \
            " / ".join(dict.fromkeys(label or "none" for label in labels))


@dataclass(frozen=True)
class Reading:
    """A kernel's compared launches in each run of one side, with that run's tables (the first
    run's first): a metric is the median over the runs of each run's mean over its launches."""

    parts: tuple[tuple[Side, tuple[Launch, ...]], ...]

    @property
    def side(self) -> Side:
        return self.parts[0][0]

    @property
    def launches(self) -> list[Launch]:
        return list(self.parts[0][1])

    @cached_property
    def _means(self) -> list[RawValues]:
        """Each run's metrics over its launches (looked up once per kernel, not per metric)."""
        return [side.means(launches) for side, launches in self.parts]

    def metric(self, name: str) -> tuple[Value, str | None]:
        found = [means.get(name, NOT_READ) for means in self._means]
        known = [(value, unit) for value, unit in found if value is not None]
        if not known:
            return NOT_READ
        if len(known) == 1:  # one run: its mean, what the median of one value is
            return known[0]
        return median_value([value for value, _unit in known]), known[0][1]


class SideRuns:
    """The runs of one side past the first, for the kernels shown: each run's launch groups by
    match key, its tables for the launches of those kernels."""

    def __init__(self, runs: Sequence[RunData], counts: dict[str, int]) -> None:
        """`counts`: each kernel shown by name, with the number of its launches compared (0:
        a kernel of one side, whose metrics are not compared)."""
        counts = {match_key(name): count for name, count in counts.items()}
        self.groups = [{match_key(g.name): g for g in kernel_groups(run)
                        if match_key(g.name) in counts} for run in runs]
        self.sides = [Side(run, [tuple(group.launches[:counts[key]])
                                 for key, group in groups.items() if counts[key]],
                           conclude=False)
                      for run, groups in zip(runs, self.groups, strict=True)]

    def of(self, name: str) -> list[tuple[Side, KernelGroup]]:
        """The kernel's launch group in each run that launched it, with the run's tables."""
        key = match_key(name)
        return [(side, groups[key]) for side, groups in zip(self.sides, self.groups, strict=True)
                if key in groups]


def _reading(first: Side, launches: list[Launch], name: str, rest: SideRuns | None,
             count: int) -> Reading:
    """The kernel's first `count` launches in each run of the side."""
    parts = [(first, tuple(launches))]
    if rest is not None:
        parts += [(side, tuple(group.launches[:count])) for side, group in rest.of(name)]
    return Reading(tuple(parts))


def _metric_entry(name: str, label: str | None, a: tuple[Value, str | None],
                  b: tuple[Value, str | None], opts: DiffOptions,
                  no_data: tuple[str, ...] = (), renamed: MetricRename | None = None
                  ) -> MetricDiff:
    (value_a, unit_a), (value_b, unit_b) = a, b
    if no_data or (value_a is None and value_b is None):
        status = "no_data"  # nothing collected there: neither renamed nor a change
    elif value_a is None or value_b is None:
        status = "only_a" if value_b is None else "only_b"
    elif isinstance(value_a, str) or isinstance(value_b, str):
        status = "changed" if value_a != value_b else "unchanged"
    else:
        pct = relative_change(value_a, value_b)
        status = "unchanged" if pct is not None and abs(pct) < opts.threshold_pct else "changed"
    numeric = all(isinstance(v, (int, float)) for v in (value_a, value_b))
    return MetricDiff(name, unit_a or unit_b, value_a, value_b,
                      value_b - value_a if numeric else None,
                      relative_change(value_a, value_b), status,
                      unit_b if unit_a and unit_b and unit_a != unit_b else None, label, renamed)


def _section_wanted(section_id: str, display: str | None, opts: DiffOptions) -> bool:
    if not opts.sections:
        return True
    wanted = {s.lower() for s in opts.sections}
    return section_id.lower() in wanted or (display or "").lower() in wanted


def _merged_layout(side_a: Side, side_b: Side, launch_a: Launch, launch_b: Launch
                   ) -> Iterator[tuple[str, str | None, Labels | None, Labels | None]]:
    """Per section: id, display name, metric labels in A and in B (None: not collected there);
    A's order, then B's extras."""
    layout_a = {sid: (name, labels) for sid, name, labels in side_a.section_layout(launch_a)}
    layout_b = {sid: (name, labels) for sid, name, labels in side_b.section_layout(launch_b)}
    for sid in list(layout_a) + [s for s in layout_b if s not in layout_a]:
        name_a, labels_a = layout_a.get(sid, (None, None))
        name_b, labels_b = layout_b.get(sid, (None, None))
        yield sid, name_a or name_b, labels_a, labels_b


def _merged_labels(labels_a: Labels | None, labels_b: Labels | None,
                   renamed: dict[str, MetricRename]) -> Labels:
    """The section's metrics on either side, A's order then B's extras, each with A's label,
    else B's (a run archived before labels were stored has none); B's name of a renamed
    metric is A's row."""
    a, b = labels_a or {}, labels_b or {}
    taken = {r.name_b for r in renamed.values()}
    return {name: a.get(name) or b.get(name) for name in [*a, *b] if name not in taken}


def _renames(sid: str, labels_a: Labels | None, labels_b: Labels | None,
             versions: tuple[str | None, str | None]) -> dict[str, MetricRename]:
    """The metric map's pairs among the section's metrics shown on one side only."""
    a, b = labels_a or {}, labels_b or {}
    return metric_map().section_renames(sid, [n for n in a if n not in b],
                                        [n for n in b if n not in a], versions)


def _section_entries(reading_a: Reading, reading_b: Reading, opts: DiffOptions,
                     no_data: tuple[str, ...] = ()) -> tuple[SectionDiff, ...]:
    metric_filter = re.compile(opts.metric) if opts.metric else None
    entries = []
    for sid, display, labels_a, labels_b in _merged_layout(
            reading_a.side, reading_b.side, reading_a.launches[0], reading_b.launches[0]):
        if not _section_wanted(sid, display, opts):
            continue
        renamed = _renames(sid, labels_a, labels_b,
                           (reading_a.side.version, reading_b.side.version))
        labels = _merged_labels(labels_a, labels_b, renamed)
        names = [n for n, label in labels.items() if not metric_filter
                 or metric_filter.search(n) or (label and metric_filter.search(label))
                 or (n in renamed and metric_filter.search(renamed[n].name_b))]
        metrics = [_metric_entry(n, labels[n], reading_a.metric(n),
                                 reading_b.metric(renamed[n].name_b if n in renamed else n),
                                 opts, no_data, renamed.get(n)) for n in names]
        entries.append(_section_entry(sid, display, labels_a is not None, labels_b is not None,
                                      metrics, opts, no_data))
    return tuple(entries)


def _section_entry(sid: str, display: str | None, in_a: bool, in_b: bool, metrics: list[MetricDiff],
                   opts: DiffOptions, no_data: tuple[str, ...] = ()) -> SectionDiff:
    missing = [m.name for m in metrics if m.status in ("only_a", "only_b")]
    reason: str | None
    why: str | None
    if no_data:
        reason, why = "section.no_data", "no data in " + " and ".join(s.upper() for s in no_data)
    elif not (in_a and in_b):
        reason, why = SECTION_ONLY_A if in_a else SECTION_ONLY_B, \
            f"collected only in {'A' if in_a else 'B'}"
    elif missing:
        reason, why = "section.metrics", f"{len(missing)} metric(s) on one side only " \
            "(renamed or not collected): " + ", ".join(missing[:4])
    else:
        reason = why = None
    # a kernel side without data: the section says so; its metrics rows only with --all
    hidden = ("unchanged", "no_data") if no_data else ("unchanged",)
    shown = metrics if opts.show_all else [m for m in metrics if m.status not in hidden]
    return SectionDiff(sid, display, reason, why, tuple(shown),
                       sum(m.status == "unchanged" for m in metrics), len(metrics))


def _fired(rules: list[dict]) -> dict[tuple[str, str], FiredRule]:
    """The rules that fired, one per rule and title (the last message of each). A rule that
    could not run keeps its first error: ncu records the reason ("... Metric X not found")
    before ncu_report's own failure and the rule file's line."""
    out: dict[tuple[str, str], FiredRule] = {}
    for r in rules:
        key = (r["rule_id"], r["title"] or "")
        if r["message_type"] not in FIRED or (r["error"] and key in out):
            continue
        out[key] = FiredRule(r["rule_id"], r["rule_name"], r["section_id"], r["message_type"],
                             r["title"], r["message"], r["speedup_pct"], r["error"])
    return out


def _rule_entries(match: Match, side_a: Side, side_b: Side) -> RuleChanges:
    pairs = match.pairs()
    fired_a = _fired(side_a.rules.get(pairs[0][0], [])) if pairs else {}
    fired_b = _fired(side_b.rules.get(pairs[0][1], [])) if pairs else {}
    return RuleChanges(tuple(r for k, r in fired_a.items() if k not in fired_b),
                       tuple(r for k, r in fired_b.items() if k not in fired_a),
                       tuple(r for k, r in fired_a.items() if k in fired_b))


def _side_summary(durations: list[float | None], paired: int) -> KernelSide:
    """Mean duration over the launches compared (paired ones), total and count over all."""
    compared = durations[:paired] if paired else durations
    numbers = [d for d in compared if isinstance(d, (int, float))]
    every = [d for d in durations if isinstance(d, (int, float))]
    return KernelSide(statistics.fmean(numbers) if numbers else None,
                      sum(every) if every else None, len(durations))


def _no_data(match: Match, data_a: set[Launch] | None, data_b: set[Launch] | None
             ) -> tuple[str, ...]:
    """The sides of a matched kernel none of whose compared launches carries values."""
    pairs = match.pairs()
    if not (match.a and match.b and pairs):
        return ()
    return tuple(side for side, data, launches in (("a", data_a, [p[0] for p in pairs]),
                                                   ("b", data_b, [p[1] for p in pairs]))
                 if data is not None and not data.intersection(launches))


def _kernel_head(match: Match, no_data: tuple[str, ...] = ()) -> KernelDiff:
    """A match's names and per-side numbers, without its sections (what the kernel-set drift
    of every kernel reads, before --kernel narrows the kernels shown)."""
    n_pairs = len(match.pairs())
    two_names = match.matched_by in TWO_NAMES  # not names that differ in spacing
    return KernelDiff(
        match.name, match.kind, match.matched_by,
        _side_summary(match.a.durations, n_pairs) if match.a else None,
        _side_summary(match.b.durations, n_pairs) if match.b else None,
        name_b=match.b.name if two_names and match.b else None,
        short_name=match.group.short_name,
        short_name_b=match.b.short_name if two_names and match.b else None,
        paired=n_pairs if match.a and match.b else None, no_data=no_data,
        pairing=match.evidence)


def _side_of_runs(head: KernelSide | None, name: str, rest: SideRuns | None,
                  paired: int | None) -> KernelSide | None:
    """A kernel's numbers over a side's runs: the median of each run's (its first `paired`
    launches compared, as in the first run)."""
    if head is None or rest is None:
        return head
    others = [_side_summary(group.durations, paired or 0) for _side, group in rest.of(name)]
    return median_side([head, *others])


def _kernel_entry(head: KernelDiff, match: Match, side_a: Side, side_b: Side,
                  opts: DiffOptions, rest: tuple[SideRuns | None, SideRuns | None]
                  ) -> KernelDiff:
    """The kernel with its sections, rules and conclusions (matched kernels only have them),
    each side's numbers over its runs."""
    name_b = head.name_b or head.name
    head = replace(head, a=_side_of_runs(head.a, head.name, rest[0], head.paired),
                   b=_side_of_runs(head.b, name_b, rest[1], head.paired))
    if not (match.a and match.b):
        return head
    pairs = match.pairs()
    count = len(pairs)
    # explained first: its statistics are then the ones the sections read
    conclusion = Conclusion(side_a.conclusion([p[0] for p in pairs]),
                            side_b.conclusion([p[1] for p in pairs]))
    reading_a = _reading(side_a, [p[0] for p in pairs], head.name, rest[0], count)
    reading_b = _reading(side_b, [p[1] for p in pairs], name_b, rest[1], count)
    return replace(head, sections=_section_entries(reading_a, reading_b, opts, head.no_data),
                   rules=_rule_entries(match, side_a, side_b), conclusion=conclusion)


def _section_drift(kernels: list[KernelDiff]) -> list[DriftItem]:
    """One drift item per section that is not comparable in some kernel."""
    seen: dict[str, SectionDiff] = {}
    for kernel in kernels:
        for section in kernel.sections:
            # a kernel without data is named once, by no_data_drift, not per section
            if not section.comparable and section.reason != "section.no_data":
                seen.setdefault(section.section, section)
    return [drift_item(f"section:{sid}", s.reason or "", None, None, NOT_COMPARABLE,
                       f"not comparable: {s.why}") for sid, s in seen.items()]


def diff_ncu(runs_a: Sequence[RunData], runs_b: Sequence[RunData],
             opts: DiffOptions) -> tuple[list[KernelDiff], list[DriftItem]]:
    """Kernels (matched, only_a, only_b) and the drift they show; kernels match in each side's
    first run, and a side of several runs has the median of its runs' numbers. The kernel-set
    drift is of every kernel, so that --kernel narrows what is shown, never the verdict."""
    run_a, run_b = runs_a[0], runs_b[0]
    matches = match_kernels(kernel_groups(run_a), kernel_groups(run_b),
                            opts.pairs, opts.rename_pairing)
    shown = [m for m in matches if opts.kernel_shown(*(g.name for g in (m.a, m.b) if g))]
    compared = [m for m in shown if m.pairs()]
    # one side after the other: DuckDB uses every core for each already, and two at once
    # hold two sides' hash tables (30-85 MB more at two million values a side)
    side_a = Side(run_a, [tuple(p[0] for p in m.pairs()) for m in compared])
    side_b = Side(run_b, [tuple(p[1] for p in m.pairs()) for m in compared])
    data_a = run_a.ncu.with_data([p[0] for m in matches for p in m.pairs()])
    data_b = run_b.ncu.with_data([p[1] for m in matches for p in m.pairs()])
    heads = {id(m): _kernel_head(m, _no_data(m, data_a, data_b)) for m in matches}
    set_drift = kernel_set_drift(list(heads.values())) + no_data_drift(list(heads.values()))
    rest = (SideRuns(runs_a[1:], {m.a.name: len(m.pairs()) for m in shown if m.a})
            if len(runs_a) > 1 else None,
            SideRuns(runs_b[1:], {m.b.name: len(m.pairs()) for m in shown if m.b})
            if len(runs_b) > 1 else None)
    kernels = [_kernel_entry(heads[id(m)], m, side_a, side_b, opts, rest) for m in shown]
    return kernels, _section_drift(kernels) + set_drift
