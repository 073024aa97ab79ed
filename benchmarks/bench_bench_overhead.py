"""Benchmark (issue 41 target 4): what `triage bench` adds per repeat, hyperfine-style.

Two legs a round, interleaved (the order turned each round), each a fresh process:
`triage bench --repeat N` of the workload into an empty store, and a bare loop (a plain Python
script: `subprocess.run` of the same command N times, a line printed after each, as bench prints
its progress line). This script stamps each run's line as it arrives; the span from the first
run's line to the last is N - 1 whole repeats of each side, with no start-up, probe or archive
cost in it, so the per-repeat overhead is

    (bench span - bare span) / (N - 1)

Target: <= 2 ms a repeat, or <= 1% of the workload's own time, whichever is larger. Also: the
wall times `triage bench` records (its `bench_samples` table) against the times the bare loop
measured around `subprocess.run` of the same workload, pooled over the rounds (min, median,
quartiles): the target is the same distribution within noise.

The workload is `sleep 0.01` (~10 ms, almost no CPU: its time is the clock's, not the load's).

    python benchmarks/bench_bench_overhead.py [--repeat 20] [--rounds 5] [--workload 'sleep 0.01']
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import compile_sources  # noqa: E402 - bytecode, as an install has

BARE = ("import json, subprocess, sys, time\n"
        "argv, times = sys.argv[2:], []\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    started = time.perf_counter()\n"
        "    subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)\n"
        "    times.append(time.perf_counter() - started)\n"
        "    print('run', flush=True)\n"
        "print(json.dumps(times), flush=True)\n")


def stamped(argv: list[str], env: dict, marker: str, stream: str) -> tuple[float, str]:
    """One fresh process: the span from its first line starting with `marker` (on `stream`) to
    its last, and its stdout's last line."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    pipes[stream] = subprocess.PIPE
    stamps, last = [], ""
    with subprocess.Popen(argv, env=env, text=True, **pipes) as process:  # type: ignore[call-overload]
        for line in getattr(process, stream):
            if line.startswith(marker):
                stamps.append(time.perf_counter())
            last = line
        rest = process.stdout.read() if stream == "stderr" else last
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)[:80]} failed (exit {process.returncode})")
    return stamps[-1] - stamps[0], rest


def bench_leg(store: Path, repeat: int, workload: list[str], env: dict) -> tuple[float, list]:
    """`triage bench --repeat N` into a fresh store: its span and the wall times it recorded."""
    triage = [sys.executable, "-m", "triage", "--store", str(store)]
    span, _ = stamped([*triage, "bench", "--repeat", str(repeat), "--", *workload], env,
                      "bench: run ", "stderr")
    query = subprocess.run([*triage, "query", "--json", "select value from bench_samples "
                            "where metric = 'wall_time'"], env=env, capture_output=True,
                           text=True, check=True)
    return span, [row["value"] for row in json.loads(query.stdout)]


def bare_leg(repeat: int, workload: list[str], env: dict) -> tuple[float, list]:
    span, out = stamped([sys.executable, "-c", BARE, str(repeat), *workload], env, "run",
                        "stdout")
    return span, json.loads(out)


def spread(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return (f"min {min(values) * 1e3:.2f}, q1 {q1 * 1e3:.2f}, median {median * 1e3:.2f}, "
            f"q3 {q3 * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", default="sleep 0.01")
    args = parser.parse_args()
    compile_sources()
    workload, env = shlex.split(args.workload), dict(os.environ)
    spans: dict[str, list[float]] = {"bench": [], "bare": []}
    recorded: dict[str, list[float]] = {"bench": [], "bare": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            for leg in ("bench", "bare")[::1 if number % 2 == 0 else -1]:
                span, times = (bench_leg(Path(tmp, str(number)), args.repeat, workload, env)
                               if leg == "bench" else bare_leg(args.repeat, workload, env))
                spans[leg].append(span)
                recorded[leg] += times
            loads.append(os.getloadavg()[0])
    report(spans, recorded, args.repeat, loads, args.workload)


def report(spans: dict[str, list[float]], recorded: dict[str, list[float]], repeat: int,
           loads: list[float], workload: str) -> None:
    """Per-repeat overhead per round (min and median over rounds) beside the target, and the
    two sides' distributions of the workload's wall time."""
    per_repeat = [(bench - bare) / (repeat - 1)
                  for bench, bare in zip(spans["bench"], spans["bare"], strict=True)]
    own = statistics.median(recorded["bare"])
    target = max(0.002, 0.01 * own)
    print(f"workload {workload!r}: {own * 1e3:.2f} ms median (bare loop); {len(per_repeat)} "
          f"rounds of --repeat {repeat}; load average {min(loads):.1f}-{max(loads):.1f}")
    for leg, found in spans.items():
        print(f"  {leg:5s} span of {repeat - 1} repeats: min {min(found):.3f} s, median "
              f"{statistics.median(found):.3f} s")
    print(f"per-repeat overhead: min {min(per_repeat) * 1e3:.2f} ms, median "
          f"{statistics.median(per_repeat) * 1e3:.2f} ms (target <= {target * 1e3:.2f} ms: "
          f"{min(per_repeat) / target:.2f}x of it at min, "
          f"{statistics.median(per_repeat) / target:.2f}x at median)")
    print(f"wall time recorded by bench ({len(recorded['bench'])}): {spread(recorded['bench'])}")
    print(f"wall time of the bare loop  ({len(recorded['bare'])}): {spread(recorded['bare'])}")
    ratio = statistics.median(recorded["bench"]) / own
    print(f"median recorded / median bare: {ratio:.3f} (target: the same within noise)")


if __name__ == "__main__":
    main()
