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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


def time_export(nsys: str, report: Path, work: Path) -> float:
    out = work / "alone.sqlite"
    out.unlink(missing_ok=True)
    return timed([nsys, "export", "--type", "sqlite", "--output", str(out), str(report)])


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


def run(work: Path, ranges: int, repeat: int) -> None:
    nsys = require_tool("nsys")
    report, exported = prepare(work, ranges, nsys)
    best = {"export": [], "rep": [], "sqlite": []}
    rows = 0
    for _ in range(repeat):
        best["export"].append(time_export(nsys, report, work))
        seconds, _ = time_archive(report, work / "store-rep")
        best["rep"].append(seconds)
        seconds, rows = time_archive(exported, work / "store-sqlite")
        best["sqlite"].append(seconds)
    export, rep, sqlite = (min(best[k]) for k in ("export", "rep", "sqlite"))
    print(f"nsys {nsys_version(nsys)}; capture {report.stat().st_size / 1e6:.1f} MB, "
          f"export {exported.stat().st_size / 1e6:.1f} MB; {rows:,} rows written; "
          f"best of {repeat}")
    print(f"  nsys export --type sqlite      {export:7.2f} s")
    print(f"  triage archive .nsys-rep       {rep:7.2f} s   {rep / export:.2f} x export  "
          f"(target <= 1.30 x)")
    print(f"  triage archive .sqlite         {sqlite:7.2f} s   {rows / sqlite / 1e6:.2f} M rows/s  "
          f"(target >= 1.00 M rows/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workdir", type=Path, help="keep the capture here between runs")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, args.ranges, args.repeat)
        return
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as work:
        run(Path(work), args.ranges, args.repeat)


if __name__ == "__main__":
    main()
