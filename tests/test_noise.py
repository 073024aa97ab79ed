"""compare/noise.py: the statistics of "is it real?", checked against brute force, and the
spread every kernel carries in `diff --json` of real corpus reports."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from helpers import corpus_file
from triage.compare.noise import (MAX_SAMPLES, SIGNIFICANT, UNKNOWN, WITHIN_NOISE, _u_counts,
                                  compare, critical_rank, fewest_per_side, sample_of, thinned)


@pytest.mark.parametrize("m,n", [(1, 4), (2, 3), (3, 3), (4, 5), (5, 5)])
def test_u_distribution_is_the_brute_force_one(m, n):
    counts = [0] * (m * n + 1)
    for chosen in itertools.combinations(range(m + n), m):
        others = set(range(m + n)) - set(chosen)
        counts[sum(x > y for x in chosen for y in others)] += 1
    assert list(_u_counts(m, n)) == counts and sum(counts) == math.comb(m + n, m)


def test_fewest_samples_and_critical_ranks():
    """At 99%, 5 per side are the fewest (2 / C(10, 5) = 0.8% <= 1%); 4 per side cannot."""
    assert fewest_per_side() == 5
    assert [critical_rank(n, n) for n in range(1, 8)] == [0, 0, 0, 0, 1, 3, 5]
    # the normal approximation beyond the exact table continues the exact one smoothly
    assert 0 < critical_rank(30, 30) < critical_rank(31, 31) < critical_rank(32, 32)


def test_verdicts_and_spread():
    a = sample_of([100, 101, 102, 103, 104])
    b = sample_of([120, 121, 122, 123, 124])
    slower = compare(a, b, "runs")
    assert slower.significance == SIGNIFICANT and slower.slower
    assert slower.change_pct == pytest.approx(19.6078, rel=1e-4)  # 122 / 102 - 1
    assert slower.ci_pct == pytest.approx((16 / 102 * 100, 24 / 102 * 100))
    assert slower.a is not None and (slower.a.n, slower.a.median, slower.a.iqr) == (5, 102, 2)
    overlapping = compare(a, sample_of([101, 102, 103, 104, 105]), "runs")
    assert overlapping.significance == WITHIN_NOISE and not overlapping.slower
    few = compare(sample_of([100]), sample_of([130]), "launches")
    assert few.significance == UNKNOWN and few.needed == 5 and few.change_pct == 30
    assert compare(None, b, "runs").significance == UNKNOWN


def test_large_samples_are_thinned_not_truncated():
    values = list(range(1_000_001))
    picked = thinned(values)
    assert len(picked) == MAX_SAMPLES and picked[0] == 0 and picked[-1] == 1_000_000
    sample = sample_of(values)
    assert sample is not None and sample.n == 1_000_001 and sample.spread.median == 500_000


def test_false_positive_rate_of_equal_samples_is_at_most_one_percent():
    """Seeded: 2,000 pairs of 20 draws from one distribution; a 99% test flags about 1%."""
    rng = random.Random(16)
    flagged = sum(compare(sample_of([rng.gauss(100, 5) for _ in range(20)]),
                          sample_of([rng.gauss(100, 5) for _ in range(20)]),
                          "launches").significance == SIGNIFICANT for _ in range(2000))
    assert flagged / 2000 <= 0.015


def test_every_kernel_carries_its_noise(triage):
    """An ncu pair from the corpus: each kernel's n, median and spread per side, per launch."""
    names = ("armleth__cuda-mlp-inference__mlp_v1.ncu-rep",
             "armleth__cuda-mlp-inference__mlp_v2.ncu-rep")
    a, b = (triage.json("archive", corpus_file(n))[0]["id"] for n in names)
    diff = triage.json("diff", a, b)
    assert diff["sides"] == {"a": [a], "b": [b]}
    for kernel in diff["kernels"]:
        noise = kernel["noise"]
        assert noise["samples"] == "launches" and noise["method"]
        for side in ("a", "b"):
            if kernel[side]:
                assert noise[side]["n"] == kernel[side]["launches"]
                assert noise[side]["min"] <= noise[side]["median"] <= noise[side]["max"]
        assert noise["significance"] in (SIGNIFICANT, WITHIN_NOISE, UNKNOWN)
    # a run named twice on one side counts once
    twice = triage.json("diff", f"{a},{a}", b)
    assert twice["sides"]["a"] == [a]  # each run once


def test_launch_tables_read_a_batch_at_a_time_give_the_same_noise(triage, tmp_path, monkeypatch):
    """A diff reads each run's launch-level tables a batch at a time (its memory is then the
    durations, not the tables: issue 41, target 7). Batches of 7 rows split every API name's
    launches across batches, yet each row's samples, spread and verdict are those of the
    tables read whole. Runs of a real export's API calls grown to hundreds per name (so the
    spread is computed in Arrow, past 4 x MAX_SAMPLES) against the export itself."""
    from helpers import GROWN_SEED, grown
    from triage.compare import rundata

    a = triage.json("archive", grown(tmp_path / "grown.sqlite", 20_000,
                                     "CUPTI_ACTIVITY_KIND_RUNTIME"))[0]["id"]
    b = triage.json("archive", corpus_file(GROWN_SEED))[0]["id"]
    whole = triage.json("diff", a, b)
    monkeypatch.setattr(rundata, "BATCH_ROWS", 7)
    assert triage.json("diff", a, b) == whole
    api = [row["noise"] for row in whole["nsys"]["api"]]
    assert max(noise["a"]["n"] for noise in api) > 4 * MAX_SAMPLES
    assert all(noise["b"]["n"] for noise in api)


def test_paired_signed_rank_counts_critical_ranks_and_interval():
    """compare/paired.py: the rank-sum counts are those of every sign pattern enumerated; the
    critical ranks are the published two-sided table's (T <= 0 at n 8, 3 at n 10 for 1%; 8 at
    n 10 for 5%); the change is the median of the Walsh averages and the interval their k-th
    from each end; the pairing cancels a drift that swamps the samples taken as two sides."""
    from triage.compare.paired import (_rank_sum_counts, compare_paired, critical_rank,
                                       fewest_pairs)

    for n in range(1, 9):
        counts = [0] * (n * (n + 1) // 2 + 1)
        for signs in itertools.product((0, 1), repeat=n):
            counts[sum(rank for rank, up in zip(range(1, n + 1), signs, strict=True) if up)] += 1
        assert list(_rank_sum_counts(n)) == counts
    assert fewest_pairs() == 8 and critical_rank(7) == 0
    assert (critical_rank(8), critical_rank(10), critical_rank(10, 0.95)) == (1, 4, 9)
    drift = [100, 140, 95, 180, 110, 90, 150, 120, 100, 170]  # the machine's load, pair by pair
    a = [d * (1 + 0.001 * (i % 3)) for i, d in enumerate(drift)]
    b = [d * 1.05 * (1 + 0.001 * ((i + 1) % 3)) for i, d in enumerate(drift)]
    paired = compare_paired(a, b)
    changes = sorted((y - x) / x * 100 for x, y in zip(a, b, strict=True))
    walsh = sorted((changes[i] + changes[j]) / 2 for i in range(10) for j in range(i, 10))
    assert paired.change_pct == pytest.approx(walsh[27])  # the middle of 55
    assert paired.ci_pct == pytest.approx((walsh[3], walsh[-4]))
    assert paired.significance == SIGNIFICANT and paired.samples == "pairs"
    assert compare(sample_of(a), sample_of(b), "runs").significance == WITHIN_NOISE
    few = compare_paired(a[:5], b[:5])
    assert (few.significance, few.needed, few.ci_pct) == (UNKNOWN, 8, None)
