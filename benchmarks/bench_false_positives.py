"""How often the bench gate fails two sides of one identical program: the false-positive rate of
`diff --max-slowdown PCT` on `triage bench` runs (target: at most 5% over at least 100
comparisons; the test's own level is 1%, noise.py's 99%).

Two bench runs of tests/programs/nvtx_steps (the same binary and arguments, one after the
other: what the gate sees when nothing changed but the machine's load) of POOL runs each; then
COMPARISONS re-sampled comparisons of SIDE runs a side, drawn without replacement from A's pool
and from B's, judged by the gate itself (compare/gate.py on compare/bench.py's diff) at
--max-slowdown 5 and at 0 (every significant slowdown fails). A third pool, of the program 15%
slower in one range, shows the gate's power on a real change (it should fail nearly always).

    python benchmarks/bench_false_positives.py [COMPARISONS [POOL [SIDE]]]
                                               (default 200 40 8; about a minute here)
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import CHECKOUT, compile_sources

sys.path.insert(0, str(CHECKOUT / "tests"))
from nvtx_capture import build_program  # noqa: E402

from triage.archive.store import Store  # noqa: E402
from triage.compare.bench import BenchDiff, BenchMetricDiff, side_series  # noqa: E402
from triage.compare.gate import gate_checks  # noqa: E402
from triage.compare.noise import RUNS, compare, sample_of  # noqa: E402
from triage.compare.result import DiffOptions  # noqa: E402
from triage.compare.rundata import RunData  # noqa: E402

METRIC = "step_ms:ms=re:step time: (?P<v>[0-9.]+) ms"


def bench_pool(store: Path, program: Path, label: str, pool: int, forward_us: int = 500) -> dict:
    """One `triage bench` of the program, its series by metric."""
    subprocess.run([sys.executable, "-m", "triage", "bench", "--store", str(store), "--label",
                    label, "--repeat", str(pool), "--warmup", "2", "--metric", METRIC, "--",
                    str(program), "20", str(forward_us), "1000"], check=True,
                   capture_output=True)
    return side_series([RunData(Store.open(str(store)), label)])


def gate_fails(a: dict, b: dict, rng: random.Random, side: int, limit: float) -> bool:
    """One comparison of `side` runs drawn from each pool, judged by the gate."""
    metrics = []
    for name in a:
        drawn_a, drawn_b = (rng.sample(s[name].values, side) for s in (a, b))
        metrics.append(BenchMetricDiff(name, a[name].unit, a[name].better,
                                       compare(sample_of(drawn_a), sample_of(drawn_b), RUNS)))
    checks = gate_checks((), None, DiffOptions(max_slowdown_pct=limit), limit,
                         BenchDiff(tuple(metrics)))
    return any(c.failed for c in checks)


def main(comparisons: int, pool: int, side: int) -> None:
    compile_sources()
    with tempfile.TemporaryDirectory(prefix="triage-bench-fp-") as temp:
        program = build_program(Path(temp))
        store = Path(temp) / "store"
        a = bench_pool(store, program, "a", pool)
        b = bench_pool(store, program, "b", pool)
        slower = bench_pool(store, program, "slower", pool, forward_us=725)  # +15% a step
    for limit in (5.0, 0.0):
        rng = random.Random(35)
        for name, (left, right) in (("one series split", (a, a)), ("two series", (a, b))):
            if left is right:  # disjoint halves of one pool: nothing but sampling differs
                hits = sum(_split_fails(left, rng, side, limit) for _ in range(comparisons))
            else:
                hits = sum(gate_fails(left, right, rng, side, limit) for _ in range(comparisons))
            print(f"--max-slowdown {limit:g}: {name:16} {side} vs {side} runs: "
                  f"{hits}/{comparisons} = {hits / comparisons:.1%} failed "
                  f"(target <= 5%)")
        hits = sum(gate_fails(a, slower, rng, side, limit) for _ in range(comparisons))
        print(f"--max-slowdown {limit:g}: {'15% slower':16} {side} vs {side} runs: "
              f"{hits}/{comparisons} = {hits / comparisons:.1%} failed (the gate's power)")


def _split_fails(series: dict, rng: random.Random, side: int, limit: float) -> bool:
    """Two disjoint draws from one pool (the positions drawn once for every metric)."""
    count = len(next(iter(series.values())).values)
    picked = rng.sample(range(count), 2 * side)
    halves = ({n: _subset(s, picked[:side]) for n, s in series.items()},
              {n: _subset(s, picked[side:]) for n, s in series.items()})
    return gate_fails(halves[0], halves[1], rng, side, limit)


def _subset(series, positions):
    from dataclasses import replace

    return replace(series, values=tuple(series.values[i] for i in positions))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    main(*(args + [200, 40, 8][len(args):]))
