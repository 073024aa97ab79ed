"""Benchmark: `triage archive` of the largest corpus ncu reports vs bare `ncu_report` extraction.

Two reports by default: the largest file (few results: fixed costs weigh most) and the one with
the most metric values (the extraction rate proper).

Both sides are measured in this one run, alternating, best of N:
- bare: load the report with ncu_report and read every metric's name, unit and value;
- archive: `triage archive` of the same file into a fresh store (validation, every metric,
  section and rule, Parquet writes, blob copy, manifest, catalog).
Prints the metrics/s of each and the ratio (target: archive >= 0.8x the bare rate).

    python benchmarks/bench_ncu_archive.py [REPORT] [--repeat 7]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ncu"


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
    """Seconds for one `triage archive` into a fresh store (removing it afterwards not timed)."""
    from triage.archive.ingest import archive_files

    store = Path(tempfile.mkdtemp(prefix="triage-bench-"))
    try:
        start = time.perf_counter()
        archive_files(store / "store", [str(path)])
        return time.perf_counter() - start
    finally:
        shutil.rmtree(store)


def timed_bare(path: Path) -> float:
    start = time.perf_counter()
    bare_extraction(path)
    return time.perf_counter() - start


def measure(path: Path, repeat: int) -> None:
    metrics = bare_extraction(path)  # also warms caches and imports
    triage_archive(path)
    bare, archive = [], []
    for _ in range(repeat):
        bare.append(timed_bare(path))
        archive.append(triage_archive(path))
    bare, archive = min(bare), min(archive)
    print(f"report        {path.name} ({path.stat().st_size:,} bytes, {metrics:,} metrics)")
    print(f"bare ncu_report extraction  {bare:8.3f} s  {metrics / bare:12,.0f} metrics/s")
    print(f"triage archive              {archive:8.3f} s  {metrics / archive:12,.0f} metrics/s")
    print(f"ratio archive/bare rate     {bare / archive:8.2f}x  (target >= 0.80x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    reports = [args.report] if args.report else [largest_report(), most_metrics_report()]
    for path in reports:
        measure(path, args.repeat)


if __name__ == "__main__":
    main()
