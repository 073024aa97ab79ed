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

The same with the two sides interleaved (`bench --interleave`: the baseline run measured again,
run for run with the new one, and tested pair by pair), which is what a loaded machine needs:

    python benchmarks/bench_false_positives.py interleave [TRIALS [COMPARISONS [POOL [SIDE]]]]
                               (default 20 200 40 12; about 17 minutes here, loaded)

TRIALS runs of `bench --repeat auto --against base --interleave` (at most 30 pairs) of the
program 15% slower in one range, and as many of the identical program: how many decided, in how
many pairs, and the detectable change the undecided ones printed. Then an interleaved pool of
POOL pairs of the identical program (and one of the slower) re-sampled COMPARISONS times, SIDE
pairs at a time, judged by the gate pair by pair, and the same draws judged as two independent
sides (the test of two series) for contrast.
"""

from __future__ import annotations

import json
import os
import random
import statistics
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
from triage.compare.paired import compare_paired  # noqa: E402
from triage.compare.result import DiffOptions  # noqa: E402
from triage.compare.rundata import RunData  # noqa: E402

METRIC = "step_ms:ms=re:step time: (?P<v>[0-9.]+) ms"
STEPS = 100  # interleave: steps a run (~0.15 s unloaded), the mean of which the program prints


def bench_pool(store: Path, program: Path, label: str, pool: int, forward_us: int = 500,
               steps: int = 20) -> dict:
    """One `triage bench` of the program, its series by metric."""
    subprocess.run([sys.executable, "-m", "triage", "bench", "--store", str(store), "--label",
                    label, "--repeat", str(pool), "--warmup", "2", "--metric", METRIC, "--",
                    str(program), str(steps), str(forward_us), "1000"], check=True,
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


def auto_trial(store: Path, program: Path, forward_us: int) -> dict:
    """One `bench --repeat auto --against base --interleave` of the program: its --json."""
    done = subprocess.run([sys.executable, "-m", "triage", "bench", "--store", str(store),
                           "--repeat", "auto", "--against", "base", "--interleave",
                           "--max-runs", "30", "--warmup", "1", "--metric", METRIC, "--json",
                           "--", str(program), str(STEPS), str(forward_us), "1000"],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def trials(store: Path, program: Path, count: int) -> None:
    """`count` auto trials of the slower program and of the identical one, interleaved
    round by round (so the load of the moment reaches both kinds of trial)."""
    found: dict[str, list[dict]] = {"15% slower": [], "identical": []}
    for _ in range(count):
        for name, forward in (("15% slower", 725), ("identical", 500)):
            found[name].append(auto_trial(store, program, forward))
    for name, outs in found.items():
        noises = [out["against"]["noise"] for out in outs]
        slower = [o for o, n in zip(outs, noises, strict=True)
                  if o["stopped"] == "decided" and n["ci_pct"][0] > 0]
        faster = sum(o["stopped"] == "decided" and n["ci_pct"][1] < 0
                     for o, n in zip(outs, noises, strict=True))
        pairs = sorted(o["runs"] for o in slower)
        detectable = [n["min_detectable_pct"] for o, n in zip(outs, noises, strict=True)
                      if o["stopped"] != "decided" and n["min_detectable_pct"] is not None]
        print(f"--repeat auto --interleave, {name:10}: {len(slower)}/{count} decided slower"
              + (f" in {pairs[0]}-{pairs[-1]} pairs (median {statistics.median(pairs):g})"
                 if pairs else "")
              + f", {faster} decided faster, {count - len(slower) - faster} undecided"
              + (f" (printed detectable change: median {statistics.median(detectable):.1f}%, "
                 f"{min(detectable):.1f}-{max(detectable):.1f}%)" if detectable else ""))
        changes = [n["change_pct"] for n in noises if n["change_pct"] is not None]
        print(f"    change measured: median {statistics.median(changes):+.1f}% "
              f"({min(changes):+.1f}..{max(changes):+.1f})")


def interleaved_pool(store: Path, program: Path, pool: int, forward_us: int
                     ) -> tuple[dict, dict]:
    """`bench --repeat POOL --interleave --against base`: the baseline's and the candidate's
    samples per metric, pair by pair (repeat i of each)."""
    done = subprocess.run([sys.executable, "-m", "triage", "bench", "--store", str(store),
                           "--repeat", str(pool), "--against", "base", "--interleave",
                           "--warmup", "2", "--metric", METRIC, "--json", "--", str(program),
                           str(STEPS), str(forward_us), "1000"],
                          check=True, capture_output=True, text=True)
    out = json.loads(done.stdout)
    found = Store.open(str(store))
    return (side_series([RunData(found, out["against"]["baseline_run"]["id"])]),
            side_series([RunData(found, out["run"]["id"])]))


def paired_fails(a: dict, b: dict, rng: random.Random, side: int, limit: float,
                 paired: bool) -> bool:
    """One comparison of `side` pairs drawn from an interleaved pool (the same positions on
    both sides), judged by the gate pair by pair, or as two independent sides."""
    count = len(next(iter(a.values())).values)
    picked = rng.sample(range(count), side)
    metrics = []
    for name in a:
        drawn_a = [a[name].values[i] for i in picked]
        drawn_b = [b[name].values[i] for i in picked]
        noise = compare_paired(drawn_a, drawn_b) if paired else \
            compare(sample_of(drawn_a), sample_of(drawn_b), RUNS)
        metrics.append(BenchMetricDiff(name, a[name].unit, a[name].better, noise))
    checks = gate_checks((), None, DiffOptions(max_slowdown_pct=limit), limit,
                         BenchDiff(tuple(metrics)))
    return any(c.failed for c in checks)


def interleave_main(count: int, comparisons: int, pool: int, side: int) -> None:
    compile_sources()
    print(f"load before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="triage-bench-interleave-") as temp:
        program = build_program(Path(temp))
        store = Path(temp) / "store"
        bench_pool(store, program, "base", 5, steps=STEPS)
        trials(store, program, count)
        print(f"load after the trials: {os.getloadavg()[0]:.1f}")
        same = interleaved_pool(store, program, pool, 500)
        slower = interleaved_pool(store, program, pool, 725)
    print(f"load after the pools: {os.getloadavg()[0]:.1f}")
    for limit in (5.0, 0.0):
        for name, (a, b) in (("identical", same), ("15% slower", slower)):
            for paired in (True, False):
                rng = random.Random(35)
                hits = sum(paired_fails(a, b, rng, side, limit, paired)
                           for _ in range(comparisons))
                how = "pair by pair" if paired else "as two sides"
                print(f"--max-slowdown {limit:g}: interleaved {name:10} {side} pairs, {how:12}: "
                      f"{hits}/{comparisons} = {hits / comparisons:.1%} failed")


if __name__ == "__main__":
    if sys.argv[1:2] == ["interleave"]:
        args = [int(a) for a in sys.argv[2:6]]
        interleave_main(*(args + [20, 200, 40, 12][len(args):]))
    else:
        args = [int(a) for a in sys.argv[1:4]]
        main(*(args + [200, 40, 8][len(args):]))
