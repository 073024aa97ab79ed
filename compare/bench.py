"""Comparing `triage bench` runs: each metric's runs against the other side's, with its noise.

A side's samples are the measured runs of its bench runs (warm-ups left out): one value per run
of the workload, so a side of one bench run of 10 repeats has 10 samples, and a side of several
bench runs pools theirs. The test is compare/noise.py's (Mann-Whitney U, Hodges-Lehmann shift,
99% interval); a metric keeps its direction (`better`: lower for times, higher for throughput),
which the gate and the views read. Two bench runs measured in alternation (`bench --interleave`:
the candidate records its baseline as `interleaved_with`) are compared pair by pair instead
(compare/paired.py: run i of one side with run i of the other, so the machine's drift cancels).
`AgainstCheck` is `bench --repeat auto`'s stopping rule: the series stops once its primary
metric differs from the `--against` side beyond noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from triage.archive.bench import BenchRun
from triage.archive.store import Store
from triage.base.errors import UsageError
from triage.capture.bench import LOWER, WALL_TIME, BenchMeasured
from triage.base.records import mapping_of
from triage.compare.noise import CONFIDENCE, RUNS, SIGNIFICANT, Noise, compare, sample_of
from triage.compare.paired import compare_paired
from triage.compare.rundata import RunData


@dataclass(frozen=True)
class Series:
    """One metric's measured values over a side's bench runs, in run order."""

    unit: str
    better: str
    values: tuple[float, ...]


def side_series(runs: Sequence[RunData]) -> dict[str, Series]:
    """Every metric the side's bench runs measured (the first run's order: wall_time first)."""
    found: dict[str, Series] = {}
    for run in runs:
        for row in _measured_rows(run):
            seen = found.get(row["metric"])
            values = (seen.values if seen else ()) + (row["value"],)
            found[row["metric"]] = Series(row["unit"] or "", row["better"] or LOWER, values)
    return found


def _measured_rows(run: RunData) -> list[dict[str, Any]]:
    """The run's bench_samples rows of measured runs (warm-ups left out)."""
    table = run.table("bench_samples")
    if table is None:
        raise UsageError(f"run {run.id[:12]} is no bench run (it has no bench_samples); "
                         "`triage bench -- CMD` makes one")
    return [row for row in table.to_pylist() if not row["warmup"]]


def interleaved_with(run: RunData) -> str | None:
    """The run this bench run was measured in alternation with (`bench --interleave`)."""
    found = mapping_of(mapping_of(run.record.manifest.get("capture")).get("bench"))
    return str(found["interleaved_with"]) if found.get("interleaved_with") else None


def _paired(runs_a: Sequence[RunData], runs_b: Sequence[RunData]) -> bool:
    """One run a side, measured in alternation with each other (either side may be first)."""
    if len(runs_a) != 1 or len(runs_b) != 1:
        return False
    a, b = runs_a[0], runs_b[0]
    return interleaved_with(b) == a.id or interleaved_with(a) == b.id


def pair_values(run_a: RunData, run_b: RunData, metric: str
                ) -> tuple[list[float], list[float]]:
    """One metric's values of two interleaved runs, pair by pair: the runs of one number."""
    found = [{row["repeat"]: row["value"] for row in _measured_rows(run)
              if row["metric"] == metric} for run in (run_a, run_b)]
    numbers = sorted(set(found[0]) & set(found[1]))
    return [found[0][n] for n in numbers], [found[1][n] for n in numbers]


@dataclass(frozen=True)
class BenchMetricDiff:
    """One metric of two sides of bench runs compared; `noise.change_pct` is B against A."""

    name: str
    unit: str
    better: str
    noise: Noise

    @property
    def worse_pct(self) -> float | None:
        """The change in the metric's worse direction (+5: 5% slower, or 5% less throughput)."""
        change = self.noise.change_pct
        return None if change is None else (change if self.better == LOWER else -change)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "better": self.better,
                "worse_pct": self.worse_pct, "noise": self.noise.to_json()}


@dataclass(frozen=True)
class BenchDiff:
    """The metrics both sides measured (wall time first), and those only one side has."""

    metrics: tuple[BenchMetricDiff, ...]
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"metrics": [m.to_json() for m in self.metrics], "only_a": list(self.only_a),
                "only_b": list(self.only_b)}


def diff_bench(runs_a: Sequence[RunData], runs_b: Sequence[RunData]) -> BenchDiff:
    """Each metric measured on both sides, B against A at compare/noise.py's confidence; pair
    by pair (compare/paired.py) when the two are one interleaved pair of runs."""
    a, b = side_series(runs_a), side_series(runs_b)
    paired = _paired(runs_a, runs_b)

    def noise(name: str) -> Noise:
        if paired:
            return compare_paired(*pair_values(runs_a[0], runs_b[0], name))
        return compare(sample_of(a[name].values), sample_of(b[name].values), RUNS)

    metrics = tuple(BenchMetricDiff(name, a[name].unit, a[name].better, noise(name))
                    for name in a if name in b)
    return BenchDiff(metrics, tuple(n for n in a if n not in b), tuple(n for n in b if n not in a))


def per_look_confidence(looks: int) -> float:
    """The confidence each of `looks` looks at a growing series is made at, so that all of them
    together keep CONFIDENCE (Bonferroni: a series looked at after every run would otherwise
    find a change in noise sooner or later)."""
    return 1 - (1 - CONFIDENCE) / max(looks, 1)


@dataclass(frozen=True)
class AgainstCheck:
    """`bench --repeat auto --against RUN`: the side the new series is compared with, the
    metric that decides (the first --metric, else wall time), and how many times the series
    may look (one test after each run, up to --max-runs).

    Looking after every run and stopping at the first significant test would find a change
    that is not there far more often than 1% of the time; each look is tested at 1 - 1%/looks
    (Bonferroni), so that the series as a whole keeps noise.py's 99%.

    With --interleave the other side is measured now, run for run with the new one (`against`
    is then empty): the two series are tested pair by pair, each look likewise corrected."""

    ref: str
    metric: str
    against: tuple[float, ...]
    looks: int = 1
    interleaved: bool = False

    @property
    def confidence(self) -> float:
        return per_look_confidence(self.looks)

    def noise(self, measured: BenchMeasured, baseline: BenchMeasured | None = None) -> Noise:
        """The series so far against the other side (the interleaved `baseline` series, pair
        by pair, where there is one), at the per-look confidence."""
        values = measured.values(self.metric)
        if baseline is not None:
            return compare_paired(baseline.values(self.metric), values, self.confidence)
        return compare(sample_of(self.against), sample_of(values), RUNS, self.confidence)

    def decided(self, measured: BenchMeasured) -> bool:
        """The change is told from noise (the interval excludes 0)."""
        return self.noise(measured).significance == SIGNIFICANT

    def decided_pairs(self, sides: tuple[BenchMeasured, ...]) -> bool:
        """`decided` of an interleaved series: (baseline, candidate), pair by pair."""
        return self.noise(sides[1], sides[0]).significance == SIGNIFICANT


@dataclass(frozen=True)
class BenchOutcome:
    """`triage bench` as it ends: the run archived and, with --against, its change (with
    --interleave, against the `baseline` run measured alongside it)."""

    run: BenchRun
    against: AgainstCheck | None = None
    baseline: BenchRun | None = None

    def noise(self) -> Noise | None:
        """The change against --against as the series ended."""
        if self.against is None:
            return None
        return self.against.noise(self.run.measured,
                                  self.baseline.measured if self.baseline else None)

    def to_json(self) -> dict[str, Any]:
        """The `bench --json` document (schemas/bench.schema.json)."""
        check, noise = self.against, self.noise()
        return {**self.run.to_json(), "against": None if check is None or noise is None else {
            "ref": check.ref, "metric": check.metric, "confidence": check.confidence,
            "interleaved": check.interleaved,
            "baseline_run": self.baseline.result.to_json() if self.baseline else None,
            "noise": noise.to_json()}}


def against_check(store: Store, ref: str, metric: str | None, looks: int = 1) -> AgainstCheck:
    """The --against side's samples of the deciding metric (a label glob names several runs)."""
    from triage.compare.repeats import side_runs

    runs, _names = side_runs(store, ref)
    series = side_series(runs)
    name = metric or WALL_TIME
    if name not in series:
        raise UsageError(f"--against {ref}: its bench runs did not measure {name} "
                         f"(they measured {', '.join(series)}); bench with the same --metric")
    return AgainstCheck(ref, name, series[name].values, looks)
