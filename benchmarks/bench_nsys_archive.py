"""How long `triage archive` takes on a large nsys capture, next to `nsys export` alone.

Captures tests/programs/nvtx_steps.c once with about 1,000,000 NVTX ranges (3 per step, no spin),
then times, side by side in one run, each from scratch (fresh output, fresh stores):

  1. `nsys export --type sqlite` of the .nsys-rep alone,
  2. `triage archive` of the .nsys-rep (which runs nsys's Arrow export itself, SQLite if that
     fails),
  3. `triage archive` of the .sqlite export,

and prints the ratios against the targets: (2) <= 1.3 x (1), and (3) >= 1M rows/s, where rows
are the rows written to all tables of the run. `triage archive` runs as a subprocess, as a user
runs it (interpreter start-up included).

usage: python benchmarks/bench_nsys_archive.py [--ranges N] [--repeat R] [--workdir DIR]
                                              [--rep-only]   # legs 1 and 2 alone
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nvtx_capture import build_program, capture, nsys_version, require_tool  # noqa: E402


def timed(command: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def time_export(nsys: str, report: Path, work: Path, fmt: str) -> float:
    """Seconds for `nsys export --type FMT` alone, into a fresh file."""
    out = work / f"alone.{fmt}"
    out.unlink(missing_ok=True)
    return timed([nsys, "export", "--type", fmt, "--output", str(out), str(report)])


def time_archive(path: Path, store: Path) -> tuple[float, int]:
    """Seconds for `triage archive PATH` into a new store, and the rows it wrote."""
    shutil.rmtree(store, ignore_errors=True)  # an existing run would be found, not extracted
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    seconds = timed([sys.executable, "-m", "triage", "archive", str(path)], env=env)
    shown = subprocess.run([sys.executable, "-m", "triage", "show", "--json", "latest"],
                           check=True, capture_output=True, text=True, env=env).stdout
    shutil.rmtree(store)
    return seconds, sum(t["rows"] for t in json.loads(shown)["tables"].values())


def prepare(work: Path, ranges: int, nsys: str) -> tuple[Path, Path]:
    """The capture and its export, made once per work directory."""
    report, exported = work / "bench.nsys-rep", work / "bench.sqlite"
    if not report.exists():
        program = build_program(work)
        steps = -(-ranges // 3)
        capture(program, [steps, 0, 0], work / "bench", nsys=nsys)
    if not exported.exists():
        subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(exported),
                        str(report)], check=True, capture_output=True)
    return report, exported


def run(work: Path, ranges: int, repeat: int, rep_only: bool = False) -> None:
    nsys = require_tool("nsys")
    report, exported = prepare(work, ranges, nsys)
    times: dict[str, list[float]] = {"arrow": [], "rep": [], "sqlite export": [], "sqlite": []}
    rows, load = 0, os.getloadavg()[0]
    for _ in range(repeat):
        times["arrow"].append(time_export(nsys, report, work, "arrow"))
        seconds, rows = time_archive(report, work / "store-rep")
        times["rep"].append(seconds)
        if not rep_only:
            times["sqlite export"].append(time_export(nsys, report, work, "sqlite"))
            seconds, rows = time_archive(exported, work / "store-sqlite")
            times["sqlite"].append(seconds)
    low = {k: min(v) for k, v in times.items() if v}
    mid = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"nsys {nsys_version(nsys)}; capture {report.stat().st_size / 1e6:.1f} MB, "
          f"export {exported.stat().st_size / 1e6:.1f} MB; {rows:,} rows written; "
          f"min / median of {repeat}, interleaved; load {load:.1f}-{os.getloadavg()[0]:.1f}")
    print(f"  nsys export --type arrow       {low['arrow']:5.2f} / {mid['arrow']:5.2f} s")
    print(f"  triage archive .nsys-rep       {low['rep']:5.2f} / {mid['rep']:5.2f} s   "
          f"{low['rep'] / low['arrow']:.2f} / {mid['rep'] / mid['arrow']:.2f} x arrow export  "
          "(target <= 1.30 x)")
    if rep_only:
        return
    print(f"  nsys export --type sqlite      {low['sqlite export']:5.2f} / "
          f"{mid['sqlite export']:5.2f} s")
    print(f"  triage archive .sqlite         {low['sqlite']:5.2f} / {mid['sqlite']:5.2f} s   "
          f"{rows / low['sqlite'] / 1e6:.2f} / {rows / mid['sqlite'] / 1e6:.2f} M rows/s  "
          "(target >= 1.00 M rows/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep the capture here between runs")
    parser.add_argument("--rep-only", action="store_true",
                        help="time the Arrow export and the .nsys-rep archive alone")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, args.ranges, args.repeat, args.rep_only)
        return
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as work:
        run(Path(work), args.ranges, args.repeat, args.rep_only)


if __name__ == "__main__":
    main()
