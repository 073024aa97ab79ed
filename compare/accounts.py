"""What the profile accounts for: a benchmark's change set beside its nsys profiles' change.

The benchmark accepts a change; the profile should explain it. A bench run names its profile
with `--from NSYS_RUN` (the capture it follows up). For two bench sides whose first runs both do,
each bench metric that changed is set beside the profiles' change, in points of the benchmark:
a part of the profile that grew by D ns, in a profile whose traced span was S ns on side A,
accounts for D / S * 100 points (the profile is of the same workload, so its span stands for
what the benchmark measures; the points are comparable with the benchmark's % change).

A side that names an investigation (`inv:NAME`) is profiled by the investigation's newest nsys
run (`capture --investigation NAME`), else by what its first bench run names with --from.

The explained total is what the profile measures as busy: the GPU's kernel time where the
profile has kernels, else the time inside any NVTX range (their union: nested ranges are counted
once). Its parts are each top kernel, else each NVTX range by text (ranges nest: a part is its
own share, the parts need not add up). What the total leaves is unexplained: host time outside
every range, or gaps between kernels. `disagrees` says when the two point opposite ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from triage.archive.runs import investigation_runs, investigation_side, side_parts
from triage.base.errors import RunNotFound
from triage.compare.bench import BenchDiff, BenchMetricDiff
from triage.compare.noise import SIGNIFICANT
from triage.compare.rundata import RunData

TOP_PARTS = 5  # the parts listed: the largest changes


@dataclass(frozen=True)
class Profile:
    """One side's profile as the accounting reads it: its traced span, the busy total, and each
    part's total (ns)."""

    run_id: str
    span_ns: float
    busy_ns: float
    parts: dict[str, float]
    basis: str  # "gpu_busy" (kernel time) or "nvtx" (time inside any NVTX range)

    @property
    def outside_ns(self) -> float:
        """The traced time the busy total leaves out: gaps between kernels and host time, or
        host time outside every range."""
        return self.span_ns - self.busy_ns


@dataclass(frozen=True)
class Part:
    """One kernel or NVTX range: its own change (%) and the points of the benchmark it makes."""

    name: str
    change_pct: float | None
    points: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "change_pct": self.change_pct, "points": self.points}


@dataclass(frozen=True)
class Accounting:
    """One bench metric's change and how much of it the profiles account for (in points)."""

    metric: str
    bench_pct: float | None
    bench_ci_pct: tuple[float, float] | None
    significance: str
    basis: str  # "gpu_busy" (kernel time) or "nvtx" (time inside any NVTX range)
    explained_points: float
    parts: tuple[Part, ...]
    outside_delta_ns: float = 0.0  # B's traced time outside the busy total minus A's

    @property
    def unexplained_points(self) -> float | None:
        return None if self.bench_pct is None else self.bench_pct - self.explained_points

    @property
    def within_noise(self) -> bool:
        """The explained points lie inside the benchmark's interval: the profile accounts for
        the change as far as the benchmark can tell."""
        ci = self.bench_ci_pct
        return ci is not None and ci[0] <= self.explained_points <= ci[1]

    @property
    def disagrees(self) -> str | None:
        """'slower_explained_faster' / 'faster_explained_slower': the benchmark changed beyond
        noise one way while the profile moved the other; 'flat_explained_changed': the
        benchmark is flat while the profile moved by more than the benchmark could detect."""
        ci = self.bench_ci_pct
        if ci is None:
            return None
        if self.significance == SIGNIFICANT and ci[0] > 0 and self.explained_points < 0:
            return "slower_explained_faster"
        if self.significance == SIGNIFICANT and ci[1] < 0 and self.explained_points > 0:
            return "faster_explained_slower"
        if self.significance != SIGNIFICANT and not ci[0] <= self.explained_points <= ci[1]:
            return "flat_explained_changed"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "bench_pct": self.bench_pct,
                "bench_ci_pct": list(self.bench_ci_pct) if self.bench_ci_pct else None,
                "significance": self.significance, "basis": self.basis,
                "explained_points": self.explained_points,
                "unexplained_points": self.unexplained_points,
                "within_noise": self.within_noise, "disagrees": self.disagrees,
                "outside_delta_ns": self.outside_delta_ns,
                "parts": [p.to_json() for p in self.parts]}


@dataclass(frozen=True)
class Accounts:
    """The profiles of the two sides and each bench metric's accounting."""

    profile_a: Profile
    profile_b: Profile
    metrics: tuple[Accounting, ...]

    def to_json(self) -> dict[str, Any]:
        return {"profiles": {side: {"id": p.run_id, "span_ns": p.span_ns, "busy_ns": p.busy_ns,
                                    "basis": p.basis}
                             for side, p in (("a", self.profile_a), ("b", self.profile_b))},
                "metrics": [m.to_json() for m in self.metrics]}


def side_profile(side: str, runs: Sequence[RunData]) -> RunData | None:
    """A side's profile: the newest nsys run of the investigation it names (`inv:NAME`), else
    the nsys run its first bench run follows up (`bench --from`)."""
    for ref in side_parts(side):
        name = investigation_side(ref)
        found = investigation_runs(runs[0].store, name, "nsys") if name is not None else []
        if found:
            return RunData(runs[0].store, found[-1])
    return _profile_of(runs[0])


def _profile_of(bench_run: RunData) -> RunData | None:
    """The nsys run a bench run follows up (`bench --from`), if it names one."""
    capture = bench_run.record.capture
    ref = capture.from_run if capture is not None else None
    if not ref:
        return None
    try:
        run = RunData(bench_run.store, ref)
    except RunNotFound:  # a --from run removed from this store (pulled without it)
        return None
    return run if run.tool == "nsys" else None


def _union_ns(intervals: Sequence[tuple[int, int]]) -> float:
    """The time covered by any of the intervals (overlaps counted once)."""
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def _bounds(table: pa.Table | None) -> tuple[int, int] | None:
    """The first start and the last end of a table's intervals (Arrow computes them: a
    profile may hold millions of launches)."""
    if table is None or table.num_rows == 0:
        return None
    first, last = pc.min(table["start_ns"]).as_py(), pc.max(table["end_ns"]).as_py()
    return (first, last) if first is not None and last is not None else None


def read_profile(run: RunData) -> Profile:
    """A profile's span (first to last traced NVTX range or kernel), busy total and parts."""
    ranges = run.table("nvtx_ranges", columns=["start_ns", "end_ns"])
    found = [b for b in (_bounds(ranges), _bounds(run.table("kernels",
                                                              columns=["start_ns", "end_ns"])))
             if b is not None]
    span = float(max(e for _, e in found) - min(s for s, _ in found)) if found else 0.0
    kernels = run.table("kernel_summary", columns=["name", "total_ns"])
    if kernels is not None and kernels.num_rows:
        parts = _totals(kernels, "name")
        return Profile(run.id, span, sum(parts.values()), parts, "gpu_busy")
    intervals = [] if ranges is None else [
        (s, e) for s, e in zip(ranges["start_ns"].to_pylist(), ranges["end_ns"].to_pylist(),
                               strict=True) if s is not None and e is not None]
    summary = run.table("nvtx_summary", columns=["text", "total_ns"])
    return Profile(run.id, span, _union_ns(intervals),
                   _totals(summary, "text") if summary is not None else {}, "nvtx")


def _totals(table: pa.Table, key: str) -> dict[str, float]:
    """Total time by name (a range text in several domains, or push/pop and start/end: one)."""
    totals: dict[str, float] = {}
    for name, total in zip(table[key].to_pylist(), table["total_ns"].to_pylist(), strict=True):
        totals[str(name)] = totals.get(str(name), 0.0) + float(total or 0)
    return totals


def _account(metric: BenchMetricDiff, a: Profile, b: Profile) -> Accounting:
    def points(delta: float) -> float:
        return delta / a.span_ns * 100 if a.span_ns else 0.0

    changed = sorted(set(a.parts) | set(b.parts),
                     key=lambda n: -abs(b.parts.get(n, 0) - a.parts.get(n, 0)))
    parts = tuple(Part(n, _pct(a.parts.get(n), b.parts.get(n)),
                       points(b.parts.get(n, 0) - a.parts.get(n, 0)))
                  for n in changed[:TOP_PARTS])
    noise = metric.noise
    return Accounting(metric.name, noise.change_pct, noise.ci_pct, noise.significance, a.basis,
                      points(b.busy_ns - a.busy_ns), parts, b.outside_ns - a.outside_ns)


def _pct(a: float | None, b: float | None) -> float | None:
    return (b - a) / a * 100 if a and b is not None else None


def accounts(bench: BenchDiff, profile_a: RunData | None,
             profile_b: RunData | None) -> Accounts | None:
    """Each lower-is-better bench metric set beside the sides' profiles (`side_profile`; None
    unless both sides have one)."""
    if profile_a is None or profile_b is None:
        return None
    a, b = read_profile(profile_a), read_profile(profile_b)
    return Accounts(a, b, tuple(_account(m, a, b) for m in bench.metrics
                                if m.better == "lower"))
