"""compare/steps.py on synthetic series: no step in one level, one step where the level moves."""

from __future__ import annotations

import random

from triage.compare.steps import MIN_STEP_PCT, detect_steps


def noisy(rng: random.Random, n: int, level: float, spread: float = 0.02) -> list[float]:
    return [level * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_a_constant_series_has_no_step():
    assert detect_steps([100.0] * 12) == []
    assert detect_steps([]) == [] and detect_steps([5.0]) == []


def test_series_from_one_distribution_have_no_step():
    """200 seeded series of 8, 12 and 20 runs with 2% noise: no step is named (a shift under
    MIN_STEP_PCT is never one; without that floor about 1 in 25 would show one)."""
    rng = random.Random(18)
    found = [detect_steps(noisy(rng, n, 200.0)) for n in (8, 12, 20) for _ in range(200)]
    assert sum(map(bool, found)) == 0


def test_one_step_is_found_at_its_index_with_its_sign():
    rng = random.Random(5)
    values = noisy(rng, 6, 100.0) + noisy(rng, 6, 130.0)
    [step] = detect_steps(values)
    assert (step.at, step.start, step.end) == (6, 0, 12)
    assert step.noise.ci_pct[0] > 15 and 20 < step.noise.change_pct < 40
    [down] = detect_steps(list(reversed(values)))
    assert down.at == 6 and down.noise.change_pct < 0


def test_two_steps_and_a_small_one():
    rng = random.Random(7)
    values = noisy(rng, 8, 100.0, 0.01) + noisy(rng, 8, 150.0, 0.01) + noisy(rng, 8, 100.0, 0.01)
    assert [s.at for s in detect_steps(values)] == [8, 16]
    small = noisy(rng, 8, 100.0, 0.002) + noisy(rng, 8, 103.0, 0.002)  # 3%: real, below 5%
    assert detect_steps(small) == [] and [s.at for s in detect_steps(small, min_pct=1.0)] == [8]
    assert MIN_STEP_PCT == 5.0


def test_the_shortest_level_a_step_needs():
    """At 95% one value per run needs 4 runs a side (or 3 and 5): 3 and 3 is never a step."""
    assert detect_steps([100.0, 101.0, 99.0, 200.0, 201.0, 199.0]) == []
    assert [s.at for s in detect_steps([100.0, 101.0, 99.0, 100.5, 200.0, 201.0, 199.0,
                                        200.5])] == [4]
