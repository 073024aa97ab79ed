"""The typed result of `triage diff`: one shape for ncu, nsys and mixed (ncu vs nsys) pairs.

Compare builds these frozen values once; the views (terminal, Markdown, HTML) read them and do
all clipping and most wording, and `DiffResult.to_json()` writes the versioned `diff --json`
document that `schemas/diff.schema.json` describes. Names are kept whole here: a JSON consumer
gets the kernel a drift item is about, not 60 characters of it. Facts carry reason codes
(`"gpu.name"`, `"kernels.renamed"`, ...) so that a reader can act on them without parsing text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage.archive.acceptances import Acceptance
from triage.archive.model import RunRecord
from triage.compare.matching import PairEvidence
from triage.compare.noise import Noise
from triage.compare.renames import MetricRename
from triage.base.errors import UsageError

if TYPE_CHECKING:
    from triage.compare.accounts import Accounts
    from triage.compare.bench import BenchDiff

# 2: one kernel shape on every path; drift items carry codes and whole names; no nsys.kernels.
DIFF_FORMAT = 2
JsonDict = dict[str, Any]
Value = Any  # a recorded value: text, number, flag, or None when unknown
# Reason codes of the facts a diff finds beyond the drift table (whose items are coded by their
# field); a kernel's notes use the kernel ones.
KERNEL_SET, KERNEL_LAUNCHES, KERNEL_RENAMED = "kernels.set", "kernels.launches", "kernels.renamed"
KERNEL_NO_DATA = "kernels.no_data"  # a side's launches carry no metric values (ncu got nothing)
KERNEL_PAIRED = "kernels.paired"  # two names paired by the user (--pair A=B): confirmed
KERNEL_RENAME_RULE = "kernels.rename_rule"  # two names a library's renamed family pairs
KERNEL_UNPAIRED = "kernels.unpaired"  # a launch-order guess refused: launch config or duration
SAME_RUN, MIXED_TOOLS = "run.same", "tools.mixed"
NVTX_RANGES = "nvtx.ranges"  # two nsys runs whose NVTX range names differ
SECTION_ONLY_A, SECTION_ONLY_B = "section.only_a", "section.only_b"  # collected by one run
PROVENANCE_KEYS = ("id", "tool", "tool_version", "created", "archived", "labels", "source",
                   "command", "application", "environment", "settings", "settings_source",
                   "evidence", "reports", "kernels", "notices", "notes")


def relative_change(a: object, b: object) -> float | None:
    """(b - a) / |a| in percent; None when undefined (missing side, a == 0 != b)."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    if a == 0:
        return 0.0 if b == 0 else None
    return (b - a) / abs(a) * 100.0


@dataclass(frozen=True)
class DiffOptions:
    """What to show: filters, and the relative change below which a metric is 'unchanged'."""

    sections: tuple[str, ...] = ()
    kernel: str | None = None
    metric: str | None = None
    show_all: bool = False
    threshold_pct: float = 1.0
    max_slowdown_pct: float | None = None
    gate_ncu: bool = False  # --gate-ncu: let --max-slowdown judge ncu durations all the same
    pairs: tuple[tuple[str, str], ...] = ()  # --pair A=B: kernel A of run A is kernel B of B
    rename_pairing: bool = True  # --no-rename-pairing: False, no launch-order guesses

    def __post_init__(self) -> None:
        for option, pattern in (("--kernel", self.kernel), ("--metric", self.metric)):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise UsageError(f"{option} {pattern!r} is not a regular expression: "
                                     f"{exc}") from None
        if not math.isfinite(self.threshold_pct) or self.threshold_pct < 0:
            raise UsageError(f"--threshold {self.threshold_pct} must be a percentage >= 0")
        slowdown = self.max_slowdown_pct
        if slowdown is not None and (not math.isfinite(slowdown) or slowdown < 0):
            raise UsageError(f"--max-slowdown {slowdown} must be a percentage >= 0")
        for a, b in self.pairs:
            if not a.strip() or not b.strip():
                raise UsageError(f"--pair {a}={b}: give a kernel name on each side of '=' "
                                 "(--pair 'naive_gemm=sgemm_coalesced')")

    def kernel_shown(self, *names: str | None) -> bool:
        """--kernel: whether a kernel (by either side's name) is shown; all are without it."""
        return self.kernel is None or any(n and re.search(self.kernel, n) for n in names)

    def to_json(self) -> JsonDict:
        return {"threshold_pct": self.threshold_pct, "sections": list(self.sections),
                "kernel": self.kernel, "metric": self.metric, "all": self.show_all,
                "max_slowdown_pct": self.max_slowdown_pct,
                "pairs": [{"a": a, "b": b} for a, b in self.pairs],
                "rename_pairing": self.rename_pairing}


@dataclass(frozen=True)
class DriftItem:
    """One difference in how the runs were captured, graded; `code` says which rule found it.

    `kernels_a`/`kernels_b` are the whole names of the kernels an item is about (only in A /
    only in B, or each side's name of a renamed or re-counted kernel); `why` is the sentence
    they complete, and `describe` writes both with each name passed through `shorten`."""

    field: str
    code: str
    a: Value
    b: Value
    state: str
    severity: str
    why: str
    kernels_a: tuple[str, ...] = ()
    kernels_b: tuple[str, ...] = ()
    # A side's value where only the profiler's documented default stands for it (graded as
    # unknown: an assumption is no record), and the profiler whose default it is.
    assumed: tuple[Value, Value] = (None, None)
    assumed_of: str | None = None

    def describe(self, shorten: Callable[[str], str] = str) -> str:
        """The why with the kernels it names: views clip names, `--json` keeps them whole."""
        if self.code == KERNEL_SET:
            lists = [_listed("only in A", self.kernels_a, shorten),
                     _listed("only in B", self.kernels_b, shorten)]
            return f"{self.why}: " + "; ".join(filter(None, lists))
        if self.kernels_a:
            return _listed(self.why, self.kernels_a, shorten)
        return self.why

    def to_json(self) -> JsonDict:
        out = {"field": self.field, "code": self.code, "a": self.a, "b": self.b,
               "state": self.state, "severity": self.severity, "why": self.describe()}
        if self.kernels_a or self.kernels_b:
            out["kernels"] = {"a": list(self.kernels_a), "b": list(self.kernels_b)}
        if self.assumed != (None, None):
            out["assumed"] = {"a": self.assumed[0], "b": self.assumed[1],
                              "default_of": self.assumed_of}
        return out


def _listed(label: str, names: tuple[str, ...], shorten: Callable[[str], str]) -> str:
    """'label: n1, n2, n3 and 4 more' (three names say which; the count says how many)."""
    if not names:
        return ""
    shown = ", ".join(shorten(n) for n in names[:3])
    return f"{label}: {shown}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")


@dataclass(frozen=True)
class KernelSide:
    """One side's numbers for a kernel: mean duration over the launches compared, total and
    count over all its launches; nsys adds the median and the share of kernel time. For a side
    of several runs each number is the median of the per-run numbers over the `runs` runs that
    launched the kernel (a count: the lower median, a count one of the runs had)."""

    duration_ns: float | None = None
    total_ns: float | None = None
    launches: int | None = None
    median_ns: float | None = None
    share: float | None = None
    runs: int = 1

    def to_json(self) -> JsonDict:
        return {"duration_ns": self.duration_ns, "total_ns": self.total_ns,
                "launches": self.launches, "median_ns": self.median_ns, "share": self.share,
                "runs": self.runs}


NO_SIDE = KernelSide()  # what views show for a run that lacks the kernel: every number unknown


def total_change(a: KernelSide | None, b: KernelSide | None) -> float | None:
    """B's total time minus A's. An absent side counts 0 (the kernel is new or gone); a side
    whose total is unknown makes the change unknown, never 0."""
    totals = [side.total_ns if side else 0 for side in (a, b)]
    return None if totals[0] is None or totals[1] is None else totals[1] - totals[0]


@dataclass(frozen=True)
class MetricDiff:
    """One ncu metric of a section on both sides; `status` is changed, unchanged, only_a,
    only_b or no_data (no value on a side whose kernel carries no data, or on neither side);
    `renamed` where the two sides name it differently (a profiler release renamed it);
    `unit_b` is set only where B's unit differs from A's. `name` is the raw metric name
    (gpu__time_duration.sum), `label` what the section calls it (Duration; A's, else B's),
    None where neither report gives one: views show it first and fall back to the name."""

    name: str
    unit: str | None
    a: Value
    b: Value
    delta: float | None
    delta_pct: float | None
    status: str
    unit_b: str | None = None
    label: str | None = None
    renamed: MetricRename | None = None  # A's `name` is B's `renamed.name_b` (the metric map)

    def to_json(self) -> JsonDict:
        out = {"name": self.name, "label": self.label, "unit": self.unit, "a": self.a,
               "b": self.b, "delta": self.delta, "delta_pct": self.delta_pct,
               "status": self.status}
        if self.renamed:
            out["renamed"] = self.renamed.to_json()
        return {**out, "unit_b": self.unit_b} if self.unit_b else out


@dataclass(frozen=True)
class SectionDiff:
    """One ncu section of a matched kernel. `reason` (section.only_a, section.only_b,
    section.metrics, section.no_data) says why it is not comparable; `metrics` are those
    shown, `metric_count` how many it compared (shown or not: a section collected on one side
    only is one line with this count in the views, not a row per metric)."""

    section: str
    name: str | None
    reason: str | None
    why: str | None
    metrics: tuple[MetricDiff, ...]
    unchanged: int
    metric_count: int = 0

    @property
    def comparable(self) -> bool:
        return self.reason is None

    @property
    def only_in(self) -> str | None:
        """"a" or "b" for a section collected by that run only, else None."""
        return {SECTION_ONLY_A: "a", SECTION_ONLY_B: "b"}.get(self.reason or "")

    def to_json(self) -> JsonDict:
        return {"section": self.section, "name": self.name, "comparable": self.comparable,
                "reason": self.reason, "why": self.why,
                "metrics": [m.to_json() for m in self.metrics], "unchanged": self.unchanged}


@dataclass(frozen=True)
class FiredRule:
    """An ncu rule that fired (optimization, warning or error) on a kernel."""

    rule_id: str
    rule_name: str | None
    section_id: str | None
    message_type: str
    title: str | None
    message: str | None
    speedup_pct: float | None
    error: str | None = None  # why the rule could not run (then message is None)

    def to_json(self) -> JsonDict:
        return {"rule_id": self.rule_id, "rule_name": self.rule_name,
                "section_id": self.section_id, "message_type": self.message_type,
                "title": self.title, "message": self.message, "speedup_pct": self.speedup_pct,
                "error": self.error}


@dataclass(frozen=True)
class RuleChanges:
    """Fired rules by where they fired: only in A, only in B, in both."""

    only_a: tuple[FiredRule, ...] = ()
    only_b: tuple[FiredRule, ...] = ()
    both: tuple[FiredRule, ...] = ()

    def to_json(self) -> JsonDict:
        return {side: [r.to_json() for r in getattr(self, side)]
                for side in ("only_a", "only_b", "both")}


@dataclass(frozen=True)
class Conclusion:
    """`triage explain`'s conclusion for a kernel in each run."""

    a: str | None
    b: str | None


@dataclass(frozen=True)
class KernelDiff:
    """A kernel as compared, on any path: `match` is matched, only_a or only_b; `matched_by`
    name, launch_order (a guess), pair (the user's --pair) or rename_rule (a library renamed the
    kernel's family; for these three, `name_b` is B's name and `pairing` the evidence);
    `paired` counts the launches an ncu diff compared one to one (None where whole runs'
    summaries are compared); `no_data` the sides ("a", "b") whose compared
    launches carry no metric values (ncu collected nothing). An only_a kernel's `pairing` is a
    launch-order guess that was refused (its `refused` says why)."""

    name: str
    match: str
    matched_by: str | None
    a: KernelSide | None
    b: KernelSide | None
    name_b: str | None = None
    short_name: str | None = None
    short_name_b: str | None = None
    paired: int | None = None
    sections: tuple[SectionDiff, ...] = ()
    rules: RuleChanges = RuleChanges()
    conclusion: Conclusion | None = None
    noise: Noise | None = None
    no_data: tuple[str, ...] = ()
    pairing: PairEvidence | None = None

    @property
    def guessed(self) -> bool:
        """Compared as one kernel on a guess (launch order): the gate does not judge it."""
        return self.matched_by == "launch_order"

    @property
    def delta_pct(self) -> float | None:
        """Change of the mean duration per launch."""
        return relative_change(self.a.duration_ns, self.b.duration_ns) \
            if self.a and self.b else None

    @property
    def delta_total_ns(self) -> float | None:
        return total_change(self.a, self.b)

    @property
    def delta_total_pct(self) -> float | None:
        return relative_change(self.a.total_ns, self.b.total_ns) if self.a and self.b else None

    @property
    def time_changed(self) -> float:
        """How far the total GPU time moved, the rank every rendering sorts by; an unknown
        change ranks last rather than as a change of its whole total."""
        return abs(self.delta_total_ns or 0)

    @property
    def notes(self) -> tuple[str, ...]:
        """Codes of what a reader of this kernel's numbers should know (the views word them)."""
        notes: tuple[str, ...] = (KERNEL_RENAMED,) if self.guessed else \
            (KERNEL_PAIRED,) if self.matched_by == "pair" else \
            (KERNEL_RENAME_RULE,) if self.matched_by == "rename_rule" else ()
        if self.pairing and self.pairing.refused:
            notes += (KERNEL_UNPAIRED,)
        if self.paired is not None and self.a and self.b and self.a.launches != self.b.launches:
            notes += (KERNEL_LAUNCHES,)
        return notes + ((KERNEL_NO_DATA,) if self.no_data else ())

    def to_json(self) -> JsonDict:
        return {"name": self.name, "name_b": self.name_b, "match": self.match,
                "matched_by": self.matched_by, "a": self.a.to_json() if self.a else None,
                "b": self.b.to_json() if self.b else None,
                "delta_pct": self.delta_pct, "delta_total_ns": self.delta_total_ns,
                "delta_total_pct": self.delta_total_pct,
                "launches": {"a": self.a.launches if self.a else None,
                             "b": self.b.launches if self.b else None, "paired": self.paired},
                "sections": [s.to_json() for s in self.sections], "rules": self.rules.to_json(),
                "conclusion": {"a": self.conclusion.a, "b": self.conclusion.b}
                if self.conclusion else None, "notes": list(self.notes),
                "no_data": list(self.no_data), "noise": _noise_json(self.noise),
                "pairing": self.pairing.to_json() if self.pairing else None}


@dataclass(frozen=True)
class SummaryChange:
    """One row of an nsys summary (NVTX range, memory operation, API call) on both sides.

    `key` holds the summary's key columns (NVTX: domain, text, kind; memops: op, kind; API:
    api, name), A's where A has the row; `a`/`b` its value columns; `change` new, vanished or
    changed."""

    key: Mapping[str, Value]
    a: Mapping[str, Value] | None
    b: Mapping[str, Value] | None
    change: str
    delta_ns: float
    delta_pct: float | None
    noise: Noise | None = None

    def to_json(self) -> JsonDict:
        return {**self.key, "a": dict(self.a) if self.a else None,
                "b": dict(self.b) if self.b else None, "change": self.change,
                "delta_ns": self.delta_ns, "delta_pct": self.delta_pct,
                "noise": _noise_json(self.noise)}


@dataclass(frozen=True)
class GpuTime:
    """Kernel time, idle gaps between kernels, and the largest gap of one nsys run; for a side
    of several runs each the median over its `runs` (gaps: the lower median)."""

    kernel_ns: float
    idle_ns: float
    gaps: int
    max_gap_ns: float
    runs: int = 1

    def to_json(self) -> JsonDict:
        return {"kernel_ns": self.kernel_ns, "idle_ns": self.idle_ns, "gaps": self.gaps,
                "max_gap_ns": self.max_gap_ns, "runs": self.runs}


@dataclass(frozen=True)
class GpuChange:
    a: GpuTime
    b: GpuTime
    noise: Noise | None = None  # of the kernel time: per-run totals when sides have several runs

    @property
    def idle_delta_pct(self) -> float | None:
        return relative_change(self.a.idle_ns, self.b.idle_ns)

    @property
    def kernel_delta_pct(self) -> float | None:
        return relative_change(self.a.kernel_ns, self.b.kernel_ns)

    def to_json(self) -> JsonDict:
        return {"a": self.a.to_json(), "b": self.b.to_json(),
                "idle_delta_pct": self.idle_delta_pct, "kernel_delta_pct": self.kernel_delta_pct,
                "noise": _noise_json(self.noise)}


@dataclass(frozen=True)
class NsysDiff:
    """What only nsys pairs have: summaries ranked by |time changed|, and GPU idle time."""

    nvtx: tuple[SummaryChange, ...]
    memops: tuple[SummaryChange, ...]
    api: tuple[SummaryChange, ...]
    gpu: GpuChange

    def to_json(self) -> JsonDict:
        return {"nvtx": [e.to_json() for e in self.nvtx],
                "memops": [e.to_json() for e in self.memops],
                "api": [e.to_json() for e in self.api], "gpu": self.gpu.to_json()}


GATE_KERNEL, GATE_NVTX, GATE_GPU = "kernel", "nvtx", "gpu_total"
GATE_BENCH = "bench"  # a metric of `triage bench` runs: what accepts a change


@dataclass(frozen=True)
class GateCheck:
    """One item `--max-slowdown` judged: a bench metric, a matched kernel, an NVTX range or the
    total GPU time, all of one shape. `failed` when worse (in the direction opposite `better`)
    by more than the gate and not within noise (unknown noise: by the percentage alone)."""

    kind: str
    name: str
    change_pct: float | None
    ci_pct: tuple[float, float] | None
    significance: str
    failed: bool
    better: str = "lower"
    unit: str | None = None
    min_detectable_pct: float | None = None

    def to_json(self) -> JsonDict:
        return {"kind": self.kind, "name": self.name, "change_pct": self.change_pct,
                "ci_pct": list(self.ci_pct) if self.ci_pct else None,
                "significance": self.significance, "failed": self.failed,
                "better": self.better, "unit": self.unit,
                "min_detectable_pct": self.min_detectable_pct}


# Why the regression gate judged nothing (Gate.reason): the verdict is invalid; the diff holds
# only ncu durations, which are attribution (a replayed execution), not acceptance; or no time
# was measured on both sides (nothing to judge is never a pass).
GATE_INVALID, GATE_NCU, GATE_NOTHING = "verdict.invalid", "ncu.attribution", "nothing.measured"


@dataclass(frozen=True)
class Gate:
    """The regression gate: what was checked and what failed; where it may judge nothing
    (`reason`: GATE_INVALID, GATE_NCU, GATE_NOTHING), `judged` is False and there are no checks.
    `guesses` are the kernels compared on a launch-order guess (A's name, B's name), never
    judged until --pair confirms them. `accepted`: the accepted run (`triage accept`) the
    gate judged B against instead of A, an intended step between them."""

    max_slowdown_pct: float
    kernel: str | None
    judged: bool
    checks: tuple[GateCheck, ...]
    reason: str | None = None
    guesses: tuple[tuple[str, str], ...] = ()
    accepted: Acceptance | None = None

    @property
    def failed(self) -> tuple[GateCheck, ...]:
        return tuple(c for c in self.checks if c.failed)

    @property
    def passed(self) -> bool:
        """Judged and nothing failed: a gate that judged nothing never passed."""
        return self.judged and not self.failed

    def to_json(self) -> JsonDict:
        return {"max_slowdown_pct": self.max_slowdown_pct, "kernel": self.kernel,
                "judged": self.judged, "passed": self.passed,
                "reason": self.reason,
                "checked": [c.to_json() for c in self.checks],
                "failed": [c.to_json() for c in self.failed],
                "unjudged": [{"kind": GATE_KERNEL, "name": a, "name_b": b,
                              "reason": "pairing.guess"} for a, b in self.guesses],
                "accepted": self.accepted.to_json() if self.accepted else None}


@dataclass(frozen=True)
class FailedTry:
    """A failed try of `capture --repeat N --label L` that a side's label glob would have named
    (as L/i): no member of the group, listed beside it."""

    id: str
    name: str  # L/i, the label it would have had
    status: str | None  # how the profiler ended (`exited 1`, `timed out after N s`, SIGINT)

    def to_json(self) -> JsonDict:
        return {"id": self.id, "name": self.name, "status": self.status}


@dataclass(frozen=True)
class DiffResult:
    """Two runs compared: the verdict over every kernel, the drift, the kernels shown."""

    run_a: RunRecord
    run_b: RunRecord
    verdict: str
    drift: tuple[DriftItem, ...]
    kernels: tuple[KernelDiff, ...]
    nsys: NsysDiff | None
    options: DiffOptions
    sides: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # every run of A and of B
    gate: Gate | None = None
    refs: tuple[str, str] = ("", "")  # what the user named A and B by: a label is shown first
    files: tuple[str | None, str | None] = (None, None)  # a side given as a report file: its name
    # each run of each side by the name it was given (the label a glob matched, the RUN typed)
    side_names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    # the failed tries of a series each side's label glob matched: listed, never sampled
    failed: tuple[tuple[FailedTry, ...], tuple[FailedTry, ...]] = ((), ())
    bench: BenchDiff | None = None  # two sides of `triage bench` runs
    accounts: Accounts | None = None  # what their profiles (bench --from) account for

    def named_labels(self, side: str) -> tuple[str, ...]:
        """The names of a side's run: the report file name it was given as (`triage diff
        a.ncu-rep b.ncu-rep`), else the label the user typed first (`conv/naive`, not the
        alphabetically first `conv/again` of the same run), then its other labels."""
        index = 0 if side == "a" else 1
        run, ref, file = (self.run_a, self.run_b)[index], self.refs[index], self.files[index]
        if file is not None:
            return (file, *run.labels)
        return (ref, *(n for n in run.labels if n != ref)) if ref in run.labels else run.labels

    @property
    def runs_of(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The ids of each side's runs (one each unless a side named several)."""
        return self.sides[0] or (self.run_a.id,), self.sides[1] or (self.run_b.id,)

    @property
    def runs_count(self) -> tuple[int, int]:
        """How many runs each side has."""
        return len(self.runs_of[0]), len(self.runs_of[1])

    @property
    def aggregated(self) -> bool:
        """A side has several runs: every number shown is the median over a side's runs."""
        return max(self.runs_count) > 1

    @property
    def tools(self) -> tuple[str, str]:
        return self.run_a.tool, self.run_b.tool

    def aggregate_json(self) -> JsonDict:
        """What each side's numbers are: the median over its runs (`statistic`, null when
        every side is one run), with the runs' ids and the names they were given by."""
        sides = {}
        for side, ids, names, failed in zip("ab", self.runs_of, self.side_names, self.failed,
                                            strict=True):
            sides[side] = {"runs": len(ids), "ids": list(ids),
                           "names": list(names) if len(names) == len(ids) else list(ids),
                           "failed": [t.to_json() for t in failed]}
        return {"statistic": "median" if self.aggregated else None, **sides}

    def to_json(self) -> JsonDict:
        """The `diff --json` document (schemas/diff.schema.json, version DIFF_FORMAT)."""
        return {"format": DIFF_FORMAT, "a": self.run_a.id, "b": self.run_b.id,
                "tools": list(self.tools), "verdict": self.verdict,
                "drift": [i.to_json() for i in self.drift],
                "kernels": [k.to_json() for k in self.kernels],
                "nsys": self.nsys.to_json() if self.nsys else None,
                "runs": {"a": provenance(self.run_a), "b": provenance(self.run_b)},
                "options": self.options.to_json(),
                "sides": {"a": list(self.runs_of[0]), "b": list(self.runs_of[1])},
                "aggregate": self.aggregate_json(),
                **({"gate": self.gate.to_json()} if self.gate else {}),
                **({"bench": self.bench.to_json()} if self.bench else {}),
                **({"accounts": self.accounts.to_json()} if self.accounts else {})}


def _noise_json(noise: Noise | None) -> JsonDict | None:
    return noise.to_json() if noise else None


def provenance(record: RunRecord) -> JsonDict:
    """What a reader needs to reproduce or challenge a run's numbers, as stored (environment
    variables left out: they are long and, redacted or not, not needed to read a diff)."""
    stored = record.as_json()
    out = {k: stored.get(k) for k in PROVENANCE_KEYS}
    environment = stored.get("environment")
    out["environment"] = {k: v for k, v in environment.items() if k != "variables"} \
        if isinstance(environment, dict) else {}
    capture = stored.get("capture")
    for key in ("git", "argv", "nsys_source"):
        out[key] = capture.get(key) if isinstance(capture, dict) else None
    return out
