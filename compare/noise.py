"""Is a change real? Spread per side and a measured significance, in pure Python.

A side's samples are per-launch durations (one run per side) or one value per run (several
runs per side: each run's median launch, or its total where a run has one number). Two sides
are compared with the Mann-Whitney U test, two-sided at 99% confidence, and the Hodges-Lehmann
shift with its distribution-free (Moses) confidence interval, both as a percentage of A's
median. `significant` when the interval excludes 0, `within_noise` when it holds 0, `unknown`
when the samples are too few for any interval at that confidence (5 per side are the fewest).

No floor is assumed: the noise is what the samples show. Samples of more than MAX_SAMPLES values
enter the test as MAX_SAMPLES of them evenly spaced in launch (or run) order, which keeps it
fast on a million launches and only widens the interval (a test of fewer samples); n, the
median and the spread are of every value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any

CONFIDENCE = 0.99
MAX_SAMPLES = 100
METHOD = "mann_whitney_u.hodges_lehmann"
LAUNCHES, RUNS = "launches", "runs"
SIGNIFICANT, WITHIN_NOISE, UNKNOWN = "significant", "within_noise", "unknown"
EXACT_LIMIT = 30  # exact U distribution up to this many samples on the smaller side


@dataclass(frozen=True)
class Spread:
    """n, median, min/max and quartiles (IQR = q3 - q1) of one side's samples."""

    n: int
    median: float
    min: float
    max: float
    q1: float
    q3: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "median": self.median, "min": self.min, "max": self.max,
                "q1": self.q1, "q3": self.q3, "iqr": self.iqr}


@dataclass(frozen=True)
class Sample:
    """One side's samples: the spread of every value, and the values the test uses."""

    spread: Spread
    values: tuple[float, ...]  # at most MAX_SAMPLES of them, evenly spaced in their order

    @property
    def n(self) -> int:
        return self.spread.n


def _quantile(ordered: Sequence[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default, DuckDB quantile_cont)."""
    position = p * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def thin_positions(count: int, limit: int = MAX_SAMPLES) -> list[int]:
    """The positions of at most `limit` values evenly spaced among `count` (all when fewer)."""
    if count <= limit:
        return list(range(count))
    return [round(i * (count - 1) / (limit - 1)) for i in range(limit)]


def thinned(values: Sequence[float], limit: int = MAX_SAMPLES) -> tuple[float, ...]:
    """At most `limit` of the values, evenly spaced in their order."""
    return tuple(values[i] for i in thin_positions(len(values), limit))


def sample_of(values: Sequence[float | None]) -> Sample | None:
    """A side's sample from its values in launch or run order (unknown ones left out); None
    when none is known."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    return Sample(spread_of_sorted(sorted(known)), thinned(known))


def spread_of_sorted(ordered: Sequence[float]) -> Spread:
    return Spread(len(ordered), _quantile(ordered, 0.5), ordered[0], ordered[-1],
                  _quantile(ordered, 0.25), _quantile(ordered, 0.75))


@dataclass(frozen=True)
class Noise:
    """A change measured against the noise of both sides, in % of A's median: `change_pct` the
    Hodges-Lehmann shift where the samples allow an interval (`ci_pct`, its confidence interval),
    else the change of the median; `median_change_pct` always the change of the median;
    `needed` the samples per side a verdict would take when `significance` is unknown."""

    samples: str
    a: Spread | None
    b: Spread | None
    change_pct: float | None
    median_change_pct: float | None
    ci_pct: tuple[float, float] | None
    significance: str
    needed: int | None = None
    confidence: float = CONFIDENCE
    method: str = METHOD  # compare/paired.py's Noise: PAIRED_METHOD

    @property
    def min_detectable_pct(self) -> float | None:
        """The smallest change these samples could tell from noise, in % of A's median: half
        the interval's width (a shift of that size, with this spread, would put the interval
        clear of 0). None when there is no interval (too few samples: see `needed`)."""
        return (self.ci_pct[1] - self.ci_pct[0]) / 2 if self.ci_pct is not None else None

    @property
    def slower(self) -> bool:
        """B measurably slower than A (the interval lies above 0)."""
        return self.significance == SIGNIFICANT and self.ci_pct is not None and self.ci_pct[0] > 0

    def to_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "method": self.method, "confidence": self.confidence,
                "a": self.a.to_json() if self.a else None,
                "b": self.b.to_json() if self.b else None,
                "change_pct": self.change_pct, "median_change_pct": self.median_change_pct,
                "ci_pct": list(self.ci_pct) if self.ci_pct else None,
                "significance": self.significance, "needed": self.needed,
                "min_detectable_pct": self.min_detectable_pct}


@lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many orderings of m + n distinct values give each U (0..m*n): the coefficients of
    the Gaussian binomial [m+n choose m], prod (1 - q^(n+i)) / (1 - q^i) for i = 1..m."""
    poly = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        for k in range(m * n, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[k] -= poly[k - n - i]
        for k in range(i, m * n + 1):  # divided by (1 - q^i)
            poly[k] += poly[k - i]
    return tuple(poly)


def critical_rank(m: int, n: int, confidence: float = CONFIDENCE) -> int:
    """The k for the interval [D(k), D(mn + 1 - k)] of the sorted pairwise differences: the
    largest k with P(U <= k - 1) <= (1 - confidence) / 2; 0 when no interval exists."""
    tail = (1 - confidence) / 2
    if min(m, n) <= EXACT_LIMIT:
        counts, total = _u_counts(min(m, n), max(m, n)), math.comb(m + n, m)
        k, below = 0, 0
        while k < len(counts) and (below + counts[k]) / total <= tail:
            below += counts[k]
            k += 1
        return k
    z = NormalDist().inv_cdf(1 - tail)
    return max(int(math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))), 0)


@lru_cache(maxsize=4)
def fewest_per_side(confidence: float = CONFIDENCE) -> int:
    """The fewest samples per side (equal counts) for which an interval exists."""
    return next(n for n in range(1, 1000) if critical_rank(n, n, confidence) > 0)


def compare(a: Sample | None, b: Sample | None, samples: str,
            confidence: float = CONFIDENCE) -> Noise:
    """B against A: Hodges-Lehmann shift and its interval, change of the median, verdict (at
    `confidence`: a history's steps are tested at 95%, see compare/steps.py)."""
    spread_a, spread_b = (s.spread if s else None for s in (a, b))
    change = _pct(spread_b.median - spread_a.median, spread_a.median) \
        if spread_a and spread_b and spread_a.median else None
    k = critical_rank(len(a.values), len(b.values), confidence) if a and b else 0
    if not (a and b) or k == 0 or spread_a is None or spread_a.median == 0:
        return Noise(samples, spread_a, spread_b, change, change, None, UNKNOWN,
                     fewest_per_side(confidence), confidence)
    differences = sorted(y - x for x in a.values for y in b.values)  # at most 100 x 100
    total = len(differences)
    shift = (differences[(total - 1) // 2] + differences[total // 2]) / 2
    low, high = differences[k - 1], differences[total - k]
    base = spread_a.median
    ci = (_pct(low, base), _pct(high, base))
    verdict = SIGNIFICANT if low > 0 or high < 0 else WITHIN_NOISE
    return Noise(samples, spread_a, spread_b, _pct(shift, base), change, ci, verdict,
                 confidence=confidence)


def _pct(delta: float, base: float) -> float:
    return delta / abs(base) * 100.0
