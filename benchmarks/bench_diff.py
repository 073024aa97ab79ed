"""Benchmark: `triage diff` of big runs, next to two `nsys stats` calls on the same reports.

Side by side in one run:
  1. two nsys captures of tests/programs/nvtx_steps.c with about 1,000,000 NVTX ranges each
     (different step times), archived once; then `triage diff A B --json` (a subprocess, as a
     user runs it) and the diff alone in-process, vs `nsys stats` on each of the two exports
     (the reports a user would otherwise read: nvtxsum, gpukernsum, and the memory/API sums);
  2. the two ncu corpus reports with the most kernels, archived once, then `triage diff`;
  3. sides of several runs: --repeats captures (default 5) per side of the same 1,000,000-range
     program, labelled before/1.. and after/1.., then `triage diff 'before/*' 'after/*' --json
     --max-slowdown 5` (noise measured over the runs, the regression gate judged).
Targets: each diff of two runs <= 0.5 s, and >= 5x faster than the two `nsys stats` calls; the
diff of two sides of 5 runs <= 1 s end to end.

usage: python benchmarks/bench_diff.py [--ranges 1000000] [--repeats 5] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nvtx_capture import build_program, capture, export_sqlite, require_tool  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ncu"
NSYS_REPORTS = "nvtxsum,gpukernsum,gpumemtimesum,gpumemsizesum,cudaapisum"


def timed(command: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def captures(work: Path, ranges: int, nsys: str) -> list[Path]:
    """Two exports ('before': 2 us spins, 'after': 1 us), made once per work directory."""
    program = build_program(work)
    steps = max(ranges // 3, 1)
    exports = []
    for name, spin in (("before", 2), ("after", 1)):
        sqlite = work / f"{name}.sqlite"
        if not sqlite.exists():
            report = capture(program, [steps, spin, spin], work / name, nsys=nsys)
            export_sqlite(report, sqlite, nsys=nsys)
        exports.append(sqlite)
    return exports


def repeated(work: Path, ranges: int, repeats: int, nsys: str, env: dict) -> None:
    """`repeats` captures per side, archived under before/N and after/N (once per work dir)."""
    program = build_program(work)
    steps = max(ranges // 3, 1)
    for i in range(1, repeats + 1):
        for name, spin in (("before", 2), ("after", 1)):
            sqlite = work / f"{name}_{i}.sqlite"
            if not sqlite.exists():
                report = capture(program, [steps, spin, spin], work / f"{name}_{i}", nsys=nsys)
                export_sqlite(report, sqlite, nsys=nsys)
            subprocess.run([sys.executable, "-m", "triage", "archive", str(sqlite), "--label",
                            f"{name}/{i}"], check=True, capture_output=True, env=env)


def report_sides(repeats: int, env: dict) -> None:
    command = [sys.executable, "-m", "triage", "diff", "before/*", "after/*", "--json",
               "--max-slowdown", "5"]
    best = min(_timed_gate(command, env) for _ in range(3))
    print(f"sides of {repeats} runs each: triage diff 'before/*' 'after/*' {best:.2f} s end to "
          "end, best of 3 (target <= 1 s)")


def _timed_gate(command: list[str], env: dict) -> float:
    """Like `timed`, where exit 4 (the gate failed) is a result, not an error."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env)
    if done.returncode not in (0, 4):
        raise RuntimeError(done.stderr.decode(errors="replace")[-500:])
    return time.perf_counter() - start


def archive(paths: list[Path], env: dict) -> None:
    subprocess.run([sys.executable, "-m", "triage", "archive", *map(str, paths)], check=True,
                   capture_output=True, env=env)


def diff_in_process(store: Path, a: str, b: str) -> float:
    from triage.archive.store import Store
    from triage.compare.diff import diff_runs

    start = time.perf_counter()
    diff_runs(Store.open(store), a, b)
    return time.perf_counter() - start


def ids(env: dict) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "triage", "query", "--csv",
                          "select run_id from runs order by archived"], check=True,
                         capture_output=True, text=True, env=env).stdout
    return out.split()[1:]


def report(label: str, store: Path, env: dict, baseline: float | None) -> None:
    a, b = ids(env)[-2:]
    end_to_end = timed([sys.executable, "-m", "triage", "diff", a, b, "--json"], env=env)
    alone = diff_in_process(store, a, b)
    print(f"{label}: triage diff {end_to_end:.2f} s end to end, {alone:.2f} s in process "
          "(target <= 0.5 s)")
    if baseline:
        print(f"  two nsys stats calls {baseline:.2f} s -> triage diff is "
              f"{baseline / end_to_end:.1f}x faster (target >= 5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    nsys = require_tool("nsys")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="triage-bench-diff-"))
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    env = dict(os.environ, TRIAGE_STORE=str(store))
    exports = captures(work, args.ranges, nsys)
    archive(exports, env)
    stats = sum(timed([nsys, "stats", "--report", NSYS_REPORTS, "--format", "csv",
                       "--output", "-", str(p)]) for p in exports)
    report(f"nsys, {args.ranges:,} NVTX ranges per run", store, env, stats)
    biggest = sorted(CORPUS.iterdir(), key=_result_count)[-2:]
    archive(biggest, env)
    report(f"ncu, {' vs '.join(p.name[:32] for p in biggest)}", store, env, None)
    if args.repeats > 1:
        repeated(work, args.ranges, args.repeats, nsys, env)
        report_sides(args.repeats, env)


def _result_count(path: Path) -> int:
    import ncu_report

    context = ncu_report.load_report(str(path))
    return sum(context.range_by_idx(i).num_actions() for i in range(context.num_ranges()))


if __name__ == "__main__":
    main()
