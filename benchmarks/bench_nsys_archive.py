"""How long `triage archive` takes on a large nsys capture, next to `nsys export` alone.

Captures tests/programs/nvtx_steps.c once with about 1,000,000 NVTX ranges (3 per step, no spin),
then times, side by side in one run, each from scratch (fresh output, fresh stores):

  1. `nsys export --type arrow` of the .nsys-rep alone (what archive runs; `--type sqlite`
     is shown beside it),
  2. `triage archive` of the .nsys-rep (which runs nsys's Arrow export itself, SQLite if that
     fails),
  3. `triage archive` of the .sqlite export,
  4. `triage archive` of a .sqlite with about 1,000,000 kernels: a real corpus export (nsys
     2023.3, 16 kernels) whose kernel table is grown by repeating its kernels later in time
     (tests/helpers.py `grown`),

and prints the ratios against the targets: (2) <= 1.3 x (1) at 1M ranges and <= 1.25 x at 10M
(issue 41); (3) and (4) as rows per second, where rows are the rows written to all tables of
the run (not targets: a .sqlite's is its ratio to ADBC, benchmarks/bench_sqlite_archive.py),
and the bytes of those tables. `triage archive` runs as a subprocess, as a
user runs it (interpreter start-up included); the legs are interleaved, round by round (the
order of (1), (2) and the baseline turned each round), and each is printed as its min and median,
with the median CPU seconds of the process and its children (the export's for (2)), which the
machine's load stretches less than the wall time. `--baseline PYTHON` times (2) a second time
in each round with another interpreter, one whose triage is another commit (a venv with that
checkout installed), for a before/after on the same capture under the same load.

usage: python benchmarks/bench_nsys_archive.py [--ranges N] [--kernels N] [--repeat R]
                                               [--workdir DIR] [--rep-only]  # 1 and 2 alone
                                               [--baseline PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from benchlib import compile_legs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import grown  # noqa: E402
from nvtx_capture import build_program, capture, nsys_version, require_tool  # noqa: E402


def timed(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall seconds of a command, and the CPU seconds it and its children used (user + system:
    what the machine's load does not change much, where it stretches the wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_export(nsys: str, report: Path, work: Path, fmt: str) -> tuple[float, float]:
    """Wall and CPU seconds for `nsys export --type FMT` alone, into a fresh file."""
    out = work / f"alone.{fmt}"
    out.unlink(missing_ok=True)
    return timed([nsys, "export", "--type", fmt, "--output", str(out), str(report)])


def time_archive(path: Path, store: Path, python: str = sys.executable
                 ) -> tuple[tuple[float, float], int, int]:
    """Wall and CPU seconds for `triage archive PATH` into a new store, and the rows and table
    bytes it wrote."""
    shutil.rmtree(store, ignore_errors=True)  # an existing run would be found, not extracted
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    seconds = timed([python, "-m", "triage", "archive", str(path)], env=env)
    shown = subprocess.run([python, "-m", "triage", "show", "--json", "latest"],
                           check=True, capture_output=True, text=True, env=env).stdout
    shutil.rmtree(store)
    tables = json.loads(shown)["tables"].values()
    return seconds, sum(t["rows"] for t in tables), sum(t["bytes"] for t in tables)


def prepare(work: Path, ranges: int, nsys: str, rep_only: bool) -> tuple[Path, Path | None]:
    """The capture and (unless `rep_only`) its export, made once per work directory."""
    report, exported = work / "bench.nsys-rep", work / "bench.sqlite"
    if not report.exists():
        program = build_program(work)
        steps = -(-ranges // 3)
        capture(program, [steps, 0, 0], work / "bench", nsys=nsys)
    if rep_only:
        return report, None
    if not exported.exists():
        subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(exported),
                        str(report)], check=True, capture_output=True)
    return report, exported


def prepare_kernels(work: Path, kernels: int) -> Path:
    """The grown-kernels export, made once per work directory and size."""
    path = work / f"kernels-{kernels}.sqlite"
    if not path.exists():
        grown(work / "kernels.partial", kernels).rename(path)
    return path


def versus_export(label: str, seconds: list[float], export: list[float], table_bytes: int,
                  target: float, cpu: list[float], export_cpu: list[float]) -> str:
    """A .nsys-rep leg: its min and median, as ratios to the export's, its tables' bytes, and
    its median CPU against the export's."""
    return (f"  {label:46s} {times(seconds)}   {min(seconds) / min(export):.2f} / "
            f"{median(seconds) / median(export):.2f} x arrow export  (target <= {target:.2f} x)"
            f"; tables {table_bytes / 1e6:.1f} MB; CPU {median(cpu):.2f} s, "
            f"{median(cpu) / median(export_cpu):.2f} x the export's")


def times(seconds: list[float]) -> str:
    return f"{min(seconds):7.2f} s min {median(seconds):6.2f} s median"


def rate(label: str, seconds: list[float], rows: int) -> str:
    """A .sqlite leg: its min and median, as rows per second (its target is
    bench_sqlite_archive.py's ratio to ADBC)."""
    return (f"  {label:46s} {times(seconds)}   {rows / min(seconds) / 1e6:.2f} / "
            f"{rows / median(seconds) / 1e6:.2f} M rows/s")


def rep_target(ranges: int) -> float:
    """The .nsys-rep archive's target against the Arrow export: start-up weighs at 1M ranges."""
    return 1.25 if ranges >= 10_000_000 else 1.30


def run(work: Path, ranges: int, kernels: int, repeat: int, rep_only: bool,
        baseline: str | None) -> None:
    nsys = require_tool("nsys")
    report, exported = prepare(work, ranges, nsys, rep_only)
    kernel_export = None if rep_only else prepare_kernels(work, kernels)
    legs: dict[str, list[float]] = {"arrow": [], "rep": [], "baseline": [], "sqlite export": [],
                                    "sqlite": [], "kernels": []}
    cpu: dict[str, list[float]] = {leg: [] for leg in legs}
    rows = kernel_rows = 0
    table_bytes: dict[str, int] = {}
    load = [os.getloadavg()[0]]

    def record(leg: str, timing: tuple[float, float]) -> None:
        legs[leg].append(timing[0])
        cpu[leg].append(timing[1])

    for number in range(repeat):
        rep_legs = ["arrow", "rep", *(["baseline"] if baseline else [])]
        for leg in rep_legs[number % len(rep_legs):] + rep_legs[:number % len(rep_legs)]:
            if leg == "arrow":
                record(leg, time_export(nsys, report, work, "arrow"))
            else:
                python = baseline if leg == "baseline" and baseline else sys.executable
                timing, _, table_bytes[leg] = time_archive(report, work / f"store-{leg}", python)
                record(leg, timing)
        if kernel_export is not None and exported is not None:
            record("sqlite export", time_export(nsys, report, work, "sqlite"))
            timing, rows, _ = time_archive(exported, work / "store-sqlite")
            record("sqlite", timing)
            timing, kernel_rows, _ = time_archive(kernel_export, work / "store-kernels")
            record("kernels", timing)
        load.append(os.getloadavg()[0])
    sqlite = f", export {exported.stat().st_size / 1e6:.1f} MB" if exported else ""
    print(f"nsys {nsys_version(nsys)}; capture {report.stat().st_size / 1e6:.1f} MB{sqlite}; "
          f"{repeat} rounds, interleaved, load average {min(load):.1f}-{max(load):.1f}")
    print(f"  {'nsys export --type arrow':46s} {times(legs['arrow'])}; "
          f"CPU {median(cpu['arrow']):.2f} s")
    for leg, label in (("rep", "triage archive .nsys-rep"),
                       ("baseline", f"the same with {baseline}")):
        if legs[leg]:
            print(versus_export(label, legs[leg], legs["arrow"], table_bytes[leg],
                                rep_target(ranges), cpu[leg], cpu["arrow"]))
    if kernel_export is None:
        return
    print(f"  {'nsys export --type sqlite':46s} {times(legs['sqlite export'])}")
    print(rate(f"triage archive .sqlite ({rows:,} rows)", legs["sqlite"], rows))
    print(f"kernels export {kernel_export.stat().st_size / 1e6:.1f} MB")
    print(rate(f"triage archive kernels .sqlite ({kernel_rows:,} rows)", legs["kernels"],
               kernel_rows))



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path, help="keep the capture here between runs")
    parser.add_argument("--rep-only", action="store_true",
                        help="time the Arrow export and the .nsys-rep archive alone")
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="also time the .nsys-rep archive with this interpreter's triage")
    args = parser.parse_args()
    compile_legs(args.baseline)
    options = (args.ranges, args.kernels, args.repeat, args.rep_only, args.baseline)
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, *options)
        return
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as work:
        run(Path(work), *options)


if __name__ == "__main__":
    main()
