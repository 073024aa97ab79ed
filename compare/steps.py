"""Step changes in a series: where one stable level of a measurement ends and another begins.

The method: Pettitt's non-parametric change-point test (Pettitt 1979) applied by binary
segmentation, as asv finds steps in a benchmark's history, each step then sized and tested the
way `diff` tests a change.

1. Each run is one value, in series order (its median launch: compare/history.py).
2. A stretch of T runs is ranked; for each cut t, U_t = sum over the first t runs of
   (2 * rank - T - 1), which is the Mann-Whitney statistic of runs 1..t against t+1..T, centred.
   The candidate step is the cut of the largest |U_t|; it holds when (a) a permutation test of
   that largest |U_t| (PERMUTATIONS shuffles of the stretch, seeded: the same series always
   gives the same answer) finds it at p <= 5%, so choosing the best of many cuts is paid for,
   and (b) the Hodges-Lehmann shift of the runs after it against the runs before it has a 95%
   interval that excludes 0 (compare/noise.py, one value per run; at the 99% of `diff` an
   interval needs 5 runs a side, at 95% 4 a side, or 3 and 5, or 2 and 8).
   and (c) that shift is at least MIN_STEP_PCT of the level before it (asv, too, names only
   changes above a relative threshold): on a loaded machine a whole run's level can wander by
   a percent or two, and a step nobody would act on is not worth naming.
3. Each part is cut again the same way while cuts hold; then every step is tested again (b, c)
   between its neighbouring levels, and the smallest that no longer holds merges away.

Ranks make one preempted run no larger than any other outlier. A level shorter than (b) allows
is never split off, so a step is named once enough runs after it confirm it. Without (c), on
4,000 seeded series each of 8, 12 and 20 values drawn from one distribution (normal,
exponential), 2.9%, 4.4-4.7% and 4.9-5.1% show a step (benchmarks/steps_false_positives.py);
(c) removes those whose shift is small beside the level.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from triage.compare.noise import RUNS, SIGNIFICANT, Noise, compare, sample_of

STEP_CONFIDENCE = 0.95
PERMUTATIONS = 999
MIN_STEP_PCT = 5.0
METHOD = "pettitt.binary_segmentation+hodges_lehmann"


@dataclass(frozen=True)
class Step:
    """A change of level at `at`, the first index of the new level; `start` and `end` bound the
    level before it and the level after it (end exclusive); `noise` is after against before."""

    at: int
    start: int
    end: int
    noise: Noise


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..T, ties given their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pettitt(ranks: Sequence[float]) -> tuple[float, int]:
    """max |U_t| over the cuts and the first cut reaching it (the index the new level starts)."""
    centre, total, best, cut = len(ranks) + 1, 0.0, -1.0, 1
    for t, rank in enumerate(ranks[:-1], start=1):
        total += 2 * rank - centre
        if abs(total) > best:
            best, cut = abs(total), t
    return best, cut


def _p_value(ranks: list[float], observed: float) -> float:
    """How often a shuffled stretch has a cut as extreme: (count + 1) / (PERMUTATIONS + 1)."""
    shuffle = random.Random(len(ranks)).shuffle
    shuffled, extreme = list(ranks), 0
    for _ in range(PERMUTATIONS):
        shuffle(shuffled)
        extreme += _pettitt(shuffled)[0] >= observed - 1e-9
    return (extreme + 1) / (PERMUTATIONS + 1)


def _tested(values: Sequence[float], lo: int, cut: int, hi: int) -> Noise:
    return compare(sample_of(values[lo:cut]), sample_of(values[cut:hi]), RUNS, STEP_CONFIDENCE)


def _holds(noise: Noise, min_pct: float) -> bool:
    """(b) and (c): the level after differs from the level before, by at least `min_pct`."""
    return noise.significance == SIGNIFICANT and abs(noise.change_pct or 0.0) >= min_pct


def _cuts(values: Sequence[float], lo: int, hi: int, min_pct: float) -> list[int]:
    if hi - lo < 2:
        return []
    ranks = _ranks(values[lo:hi])
    observed, cut = _pettitt(ranks)
    cut += lo
    if _p_value(ranks, observed) > 1 - STEP_CONFIDENCE or \
            not _holds(_tested(values, lo, cut, hi), min_pct):
        return []
    return [*_cuts(values, lo, cut, min_pct), cut, *_cuts(values, cut, hi, min_pct)]


def detect_steps(values: Sequence[float], min_pct: float = MIN_STEP_PCT) -> list[Step]:
    """The steps of a series of values (one per run, in order), earliest first; a step
    smaller than `min_pct` % of the level before it is not named."""
    values = list(values)
    cuts = _cuts(values, 0, len(values), min_pct)
    while True:
        bounds = [0, *cuts, len(values)]
        steps = [Step(cut, lo, hi, _tested(values, lo, cut, hi))
                 for lo, cut, hi in zip(bounds, bounds[1:], bounds[2:], strict=False)]
        weak = [s for s in steps if not _holds(s.noise, min_pct)]
        if not weak:
            return steps
        cuts.remove(min(weak, key=lambda s: abs(s.noise.change_pct or 0.0)).at)
