"""How often compare/steps.py names a step in a series with none: seeded series of one
distribution (normal, exponential), without the MIN_STEP_PCT floor, so the rate is that of the
statistical tests alone (the design target: about 5%, the permutation test's level).

    python benchmarks/steps_false_positives.py [SERIES]   (default 4000 per kind and length;
                                                          about 2 minutes)
"""

from __future__ import annotations

import random
import sys

from triage.compare.steps import detect_steps


def _draw(rng: random.Random, kind: str) -> float:
    return rng.gauss(100, 3) if kind == "normal" else 100 + rng.expovariate(1 / 3)


def main(count: int) -> None:
    for kind in ("normal", "exponential"):
        for length in (8, 12, 20):
            rng = random.Random(length * 7 + len(kind))
            hits = sum(bool(detect_steps([_draw(rng, kind) for _ in range(length)],
                                         min_pct=0.0)) for _ in range(count))
            print(f"{kind:12} {length:3} runs: {hits}/{count} = {hits / count:.1%} show a step")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)
