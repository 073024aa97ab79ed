"""Is a change real, when the two sides were measured in pairs? The Wilcoxon signed-rank test.

`bench --interleave` runs the baseline and the candidate alternately (compare/interleave.py),
so run i of one side and run i of the other saw the same machine: the load that drifts between
two series made minutes apart (on a shared machine, more than the change being looked for)
moves both runs of a pair alike. Testing the two sides as independent samples
(compare/noise.py's Mann-Whitney U) would count that drift as noise on each side; a paired test
looks only at each pair's own change, (b - a) / a, and the drift cancels.

The test is the signed-rank one, two-sided, at the confidence asked (99% by default); the
change is the Hodges-Lehmann estimate of the per-pair changes (the median of their Walsh
averages) with its distribution-free (Tukey) interval, in % of each pair's A. The same Noise
as noise.py's comes back (`samples` PAIRS, `method` PAIRED_METHOD), so the gate, the views and
`min_detectable_pct` read it as they read any other: `significant` when the interval excludes
0, `unknown` with fewer pairs than an interval needs (8 at 99%).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from triage.compare.noise import (CONFIDENCE, SIGNIFICANT, UNKNOWN, WITHIN_NOISE,
                                  Noise, spread_of_sorted, thin_positions)

PAIRS = "pairs"
PAIRED_METHOD = "wilcoxon_signed_rank.hodges_lehmann"


@lru_cache(maxsize=64)
def _rank_sum_counts(n: int) -> tuple[int, ...]:
    """How many of the 2^n sign patterns of n ranks give each positive-rank sum T (0..n(n+1)/2):
    the coefficients of prod (1 + q^i) for i = 1..n."""
    poly = [1] + [0] * (n * (n + 1) // 2)
    for i in range(1, n + 1):
        for t in range(i * (i + 1) // 2, i - 1, -1):  # times (1 + q^i), in place from the top
            poly[t] += poly[t - i]
    return tuple(poly)


def critical_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The k for the interval [W(k), W(M + 1 - k)] of the M sorted Walsh averages: the largest
    k with P(T <= k - 1) <= (1 - confidence) / 2; 0 when no interval exists."""
    tail = (1 - confidence) / 2
    counts, total = _rank_sum_counts(n), 2 ** n
    k, below = 0, 0
    while k < len(counts) and (below + counts[k]) / total <= tail:
        below += counts[k]
        k += 1
    return k


@lru_cache(maxsize=8)
def fewest_pairs(confidence: float = CONFIDENCE) -> int:
    """The fewest pairs for which an interval exists."""
    return next(n for n in range(1, 1000) if critical_rank(n, confidence) > 0)


def pair_changes(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Each pair's change, (b - a) / |a| in %, in pair order (a pair whose A is 0 has none)."""
    return [(y - x) / abs(x) * 100.0 for x, y in zip(a, b, strict=True) if x]


def compare_paired(a: Sequence[float], b: Sequence[float],
                   confidence: float = CONFIDENCE) -> Noise:
    """B against A, pair by pair (a[i] and b[i] measured together): the Hodges-Lehmann change
    of the per-pair changes, its interval and verdict at `confidence`. At most MAX_SAMPLES
    pairs, evenly spaced in their order, enter the test (n and the medians are of all)."""
    spread_a = spread_of_sorted(sorted(a)) if a else None
    spread_b = spread_of_sorted(sorted(b)) if b else None
    medians = (spread_b.median - spread_a.median) / abs(spread_a.median) * 100.0 \
        if spread_a and spread_b and spread_a.median else None
    changes = pair_changes(a, b)
    changes = [changes[i] for i in thin_positions(len(changes))]
    k = critical_rank(len(changes), confidence) if changes else 0
    if k == 0:
        return Noise(PAIRS, spread_a, spread_b, medians, medians, None, UNKNOWN,
                     fewest_pairs(confidence), confidence, PAIRED_METHOD)
    walsh = sorted((changes[i] + changes[j]) / 2
                   for i in range(len(changes)) for j in range(i, len(changes)))
    total = len(walsh)
    shift = (walsh[(total - 1) // 2] + walsh[total // 2]) / 2
    low, high = walsh[k - 1], walsh[total - k]
    verdict = SIGNIFICANT if low > 0 or high < 0 else WITHIN_NOISE
    return Noise(PAIRS, spread_a, spread_b, shift, medians, (low, high), verdict,
                 confidence=confidence, method=PAIRED_METHOD)

