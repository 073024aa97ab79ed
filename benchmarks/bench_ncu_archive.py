"""Benchmark: `triage archive` of the largest corpus ncu reports vs bare `ncu_report` extraction.

Two reports by default: the largest file (few results: fixed costs weigh most) and the one with
the most metric values (the extraction rate proper).

Both sides are measured in this one run, alternating, best of N:
- bare: load the report with ncu_report and read every metric's name, unit and value;
- archive: `triage archive` of the same file into an existing, empty store (validation,
  every metric, section and rule, Parquet writes, blob copy, manifest, catalog).
Each measurement runs in a fresh process, after one untimed pass of the same work (imports,
ncu_report's first decode); see `fresh` for why.
Prints the metrics/s of each (min and median) and the ratio (target: archive >= 0.8x the bare
rate). Then the fixed cost per run at the CLI: `python -m triage archive` of the smallest
report against a bare `ncu_report` script reading the same file, each a whole fresh process
(imports included), interleaved (target: <= 0.06 s more). Then a batch (issue 41):
`triage archive` of every corpus `.ncu-rep` in one call against one bare process reading every
metric of the same files, interleaved round by round (target: <= 1.5x, min and median). Then
the peak RSS of one process that reads every corpus report, bare and through
`triage archive`, after 1 and 8 passes (`ncu_report` keeps the memory of every result it
decodes; triage hands results to worker processes once a process has read 256).

    python benchmarks/bench_ncu_archive.py [REPORT] [--repeat 7] [--batch-only] [--baseline PYTHON]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import compile_legs

CORPUS = Path(os.environ.get("TRIAGE_CORPUS")
              or Path(__file__).resolve().parents[2] / "shared" / "corpus") / "ncu"


def largest_report() -> Path:
    return max(CORPUS.iterdir(), key=lambda p: p.stat().st_size)


def most_metrics_report() -> Path:
    """The corpus report with the most metric values (the largest file holds far fewer)."""
    import ncu_report

    def metric_count(path: Path) -> int:
        try:
            context = ncu_report.load_report(str(path))
        except Exception:  # noqa: BLE001 - reports ncu_report cannot read do not compete
            return 0
        return sum(len(r.action_by_idx(a).metric_names())
                   for r in map(context.range_by_idx, range(context.num_ranges()))
                   for a in range(r.num_actions()))

    return max(sorted(CORPUS.iterdir()), key=metric_count)


def bare_extraction(path: Path) -> int:
    import ncu_report

    context = ncu_report.load_report(str(path))
    count = 0
    for range_index in range(context.num_ranges()):
        profile_range = context.range_by_idx(range_index)
        for action_index in range(profile_range.num_actions()):
            action = profile_range.action_by_idx(action_index)
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                metric.value(), metric.unit()
                count += 1
    return count


def triage_archive(path: Path) -> float:
    """Seconds for one `triage archive` into an existing, empty store (a team creates its store
    once; making it and removing it are not timed)."""
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store

    store = Path(tempfile.mkdtemp(prefix="triage-bench-")) / "store"
    try:
        Store.open(store, create=True)
        start = time.perf_counter()
        archive_files(store, [str(path)])
        return time.perf_counter() - start
    finally:
        shutil.rmtree(store.parent)


def timed_bare(path: Path) -> float:
    start = time.perf_counter()
    bare_extraction(path)
    return time.perf_counter() - start


def one_measurement(side: str, path: Path) -> float:
    """In a fresh process: warm up (imports, ncu_report's first decode, DuckDB) with one
    untimed pass, then time one pass."""
    work = timed_bare if side == "bare" else triage_archive
    work(path)
    return work(path)


def fresh(side: str, path: Path) -> float:
    """One measurement in its own process. `ncu_report` keeps what it decodes (see
    capture/ncu_results.py), so repeats in one process would measure an ever larger process."""
    out = subprocess.run([sys.executable, __file__, "--one", side, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def measure(path: Path, repeat: int) -> None:
    metrics = bare_extraction(path)
    bare, archive = [], []
    for _ in range(repeat):  # alternating, so both sides see the same machine
        bare.append(fresh("bare", path))
        archive.append(fresh("archive", path))
    print(f"report        {path.name} ({path.stat().st_size:,} bytes, {metrics:,} metrics)")
    print(f"load average  {os.getloadavg()[0]:.2f}")
    for what, pick in (("min", min), ("median", statistics.median)):
        b, a = pick(bare), pick(archive)
        print(f"{what:6} bare ncu_report extraction  {b:8.3f} s  {metrics / b:12,.0f} metrics/s")
        print(f"{what:6} triage archive              {a:8.3f} s  {metrics / a:12,.0f} metrics/s")
        print(f"{what:6} ratio archive/bare rate     {b / a:8.2f}x  (target >= 0.80x)")


BARE_SCRIPT = """import sys
sys.path.insert(0, {here!r})
import bench_ncu_archive
for path in sys.argv[1:]:
    bench_ncu_archive.bare_extraction(bench_ncu_archive.Path(path))
"""


def process_seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def interleaved(reports: list[str], repeat: int, baseline: str | None = None
                ) -> tuple[list[float], list[float], list[float], list[float]]:
    """Seconds of whole fresh processes, round by round: a script that imports ncu_report and
    reads every metric of the reports, `triage archive` of them in one call (into an existing,
    empty store each time, made untimed) and, with `baseline`, the same with that interpreter's
    triage; the load after each round.

    The stores are removed only once every round is timed: ext4 makes an inode allocation scan
    past the inodes freed in the last seconds (`recently_deleted`), so removing a store's few
    hundred files and folders before the next leg made that leg's file creation 0.2-0.3 s
    slower here, a cost the bare script, which creates no file, never pays."""
    bare_command = [sys.executable, "-c", BARE_SCRIPT.format(here=str(Path(__file__).parent)),
                    *reports]
    bare, archive, before, load = [], [], [], []
    with tempfile.TemporaryDirectory() as folder:
        stores = (Path(folder) / f"store-{number}" for number in itertools.count())
        for _ in range(repeat + 1):  # the first round warms the page cache: not counted
            bare.append(process_seconds(bare_command))
            archive.append(archive_seconds(sys.executable, reports, next(stores)))
            if baseline:
                before.append(archive_seconds(baseline, reports, next(stores)))
            load.append(os.getloadavg()[0])
    return bare[1:], archive[1:], before[1:], load[1:]


def archive_seconds(python: str, reports: list[str], store: Path) -> float:
    """`triage archive` of the reports, by `python`'s triage, into `store`, made empty first."""
    from triage.archive.store import Store

    Store.open(store, create=True)
    return process_seconds([python, "-m", "triage", "--store", str(store), "archive", *reports])


def cli_fixed_cost(repeat: int) -> None:
    """The smallest report alone: what `triage archive` costs over the bare script."""
    path = min(CORPUS.iterdir(), key=lambda p: p.stat().st_size)
    bare, archive, _before, load = interleaved([str(path)], repeat)
    print(f"CLI, smallest report {path.name} (load average {min(load):.1f}-{max(load):.1f})")
    for what, pick in (("min", min), ("median", statistics.median)):
        b, a = pick(bare), pick(archive)
        print(f"{what:6} bare ncu_report script {b:6.3f} s  triage archive {a:6.3f} s  "
              f"fixed cost {a - b:+6.3f} s  (target <= +0.060 s)")


BATCH_TARGET = 1.5


def batch(repeat: int, baseline: str | None) -> None:
    """`triage archive DIR/*.ncu-rep` of the corpus in one call against one bare process
    reading every metric of the same files (and `baseline`'s triage, in the same rounds)."""
    reports = sorted(str(p) for p in CORPUS.glob("*.ncu-rep"))
    bare, archive, before, load = interleaved(reports, repeat, baseline)
    print(f"batch: the {len(reports)} corpus .ncu-rep files in one call, {repeat} rounds, "
          f"load average {min(load):.1f}-{max(load):.1f}")
    for what, pick in (("min", min), ("median", statistics.median)):
        b, a = pick(bare), pick(archive)
        print(f"{what:6} bare ncu_report script {b:6.3f} s  triage archive {a:6.3f} s  "
              f"{a / b:5.2f}x  (target <= {BATCH_TARGET:.1f}x)")
        if before:
            print(f"{what:6} {'':24} baseline archive {pick(before):6.3f} s  "
                  f"{pick(before) / b:5.2f}x  ({baseline})")


MEMORY_PASSES = (1, 8)


def peak_memory(side: str, passes: int) -> int:
    """Peak RSS (MB) of one process that reads every corpus report `passes` times."""
    code = ("import resource, sys; sys.path.insert(0, %r); import bench_ncu_archive as b; "
            "b.read_all(%r, %d); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
            % (str(Path(__file__).parent), side, passes))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[-1])


def read_all(side: str, passes: int) -> None:
    """Bare extraction of every corpus report, or `triage archive` of each (into a new store
    per pass, so that every pass reads every report again)."""
    from triage.archive.ingest import archive_files
    from triage.base.errors import TriageError

    reports = sorted(p for p in CORPUS.iterdir()
                     if p.suffix in (".ncu-rep", ".nsight-cuprof-report"))
    for _ in range(passes):
        with tempfile.TemporaryDirectory() as store:
            for report in reports:
                try:  # the reports ncu_report cannot read fail on both sides
                    if side == "bare":
                        bare_extraction(report)
                    else:
                        archive_files(Path(store) / "store", [str(report)])
                except (TriageError, Exception):  # noqa: BLE001
                    pass


def memory() -> None:
    """Peak RSS after 1 and after 8 passes: bare `ncu_report` grows with every result it has
    decoded; triage should not."""
    for passes in MEMORY_PASSES:
        bare, archive = peak_memory("bare", passes), peak_memory("archive", passes)
        print(f"peak RSS, every corpus ncu report read {passes}x in one process: "
              f"bare ncu_report {bare} MB, triage archive {archive} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--one", nargs=2, metavar=("SIDE", "REPORT"), help=argparse.SUPPRESS)
    parser.add_argument("--batch-only", action="store_true",
                        help="time the batch and the single-file fixed cost alone")
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="also time the batch with this interpreter's triage (a venv of "
                        "another commit), in the same rounds")
    args = parser.parse_args()
    if args.one:
        print(one_measurement(args.one[0], Path(args.one[1])))
        return
    compile_legs(args.baseline)
    if args.batch_only:
        batch(args.repeat, args.baseline)
        cli_fixed_cost(args.repeat)
        return
    reports = [args.report] if args.report else [largest_report(), most_metrics_report()]
    for path in reports:
        measure(path, args.repeat)
    cli_fixed_cost(args.repeat)
    batch(args.repeat, args.baseline)
    memory()


if __name__ == "__main__":
    main()
