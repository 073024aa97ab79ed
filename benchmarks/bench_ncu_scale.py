"""Benchmark: `triage diff`, `explain` and `report` of large full-set ncu runs, against DuckDB.

A full-set profile of a real workload's step holds thousands of launches of hundreds of metrics
each; the corpus reports hold a few. The large runs are made here, at run time, from a corpus
report (`tests/ncu_derive.py`: its rows archived `copies` times over through the archive's own
write path, each copy's launches under new indices; a valid larger .ncu-rep cannot be written
without ncu). Sizes are given as the report size they stand for: issue 45 measured a 200 MB
full-set report at 1.95 M metric values, so 9,750 values stand for 1 MB. Side B is side A with
every metric value 10% higher.

Shapes, each at every size (20, 100 and 200 MB unless --sizes says otherwise): many launches of
a few kernels, and many kernels (the launches renamed into 500 distinct kernel names). For
each, in fresh processes, each command once untimed (imports, first reads) and then the best
of --repeat timed:
- `triage diff A B --json`, `triage explain B --json`, `triage report A B -o r.html`;
- the floor: one DuckDB query over the same stored tables computing the same aggregates (per
  kernel name and metric: mean, median, count; both runs joined for diff and report, run B
  alone for explain).
Targets: each command <= 5x its floor at the largest size (the issue's ~200 MB; the ratios at
smaller sizes are printed, not judged) and <= 400 MB peak RSS at every size; memory flat from
20 to 200 MB (the slope printed per shape, in MB of RSS per MB of report).

    python benchmarks/bench_ncu_scale.py [--report PATH] [--sizes 20,100,200] [--repeat 3]
                                         [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import CHECKOUT, compile_sources

sys.path.insert(0, str(CHECKOUT / "tests"))
from ncu_derive import derive_run  # noqa: E402

CORPUS = CHECKOUT.parent / "shared" / "corpus" / "ncu"
REPORT = CORPUS / "spymaster2h__spyinfer__report.ncu-rep"  # the corpus's most metric values
VALUES_PER_MB = 9750  # issue 45: 1.95 M metric values in a 200 MB full-set report
TIME_TARGET, RSS_TARGET = 5.0, 400.0
KERNEL_NAMES = 500  # the many-kernels shape

COMMAND = """
import json, sys, time
from triage.cli import cli
args, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
def once():
    start = time.perf_counter()
    try:
        cli.main(args, prog_name="triage", standalone_mode=False)
    except SystemExit:
        pass
    return time.perf_counter() - start
once()
best = min(once() for _ in range(repeat))
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
sys.stderr.write(json.dumps({"seconds": best, "rss_mb": int(peak.split()[1]) / 1024}))
"""

FLOOR = """
import json, sys, time
from triage.base.duck import connect
sql, repeat = sys.argv[1], int(sys.argv[2])
con = connect()
def once():
    start = time.perf_counter()
    con.sql(sql).fetch_arrow_table()
    return time.perf_counter() - start
once()
best = min(once() for _ in range(repeat))
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
sys.stderr.write(json.dumps({"seconds": best, "rss_mb": int(peak.split()[1]) / 1024}))
"""


def measured(script: str, args: list[str], repeat: int) -> dict:
    """Seconds (best of `repeat`, after one untimed pass) and peak RSS of a fresh process (its
    VmHWM: getrusage's maximum carries over from the parent across fork and exec)."""
    done = subprocess.run([sys.executable, "-c", script, *args, str(repeat)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def aggregates(store: Path, run: str) -> str:
    """The floor's aggregates of one run: per kernel name and metric, mean, median, count."""
    from triage.archive.store import Store
    from triage.base.duck import sql_string
    from triage.compare.rundata import RunData

    data = RunData(Store.open(store), run)
    path = {name: sql_string(data.store.tables.local(data.id, name,
                                                     data.record.tables[name].sha256))
            for name in ("metrics", "kernels")}
    return (f"SELECT k.name AS kernel, m.name AS metric, avg(m.value) AS mean, "
            f"median(m.value) AS median, count(m.value) AS n FROM read_parquet({path['metrics']})"
            f" AS m JOIN read_parquet({path['kernels']}) AS k USING (report_index, kernel_index)"
            " GROUP BY ALL")


def floors(store: Path, a: str, b: str) -> dict[str, str]:
    both = (f"WITH a AS ({aggregates(store, a)}), b AS ({aggregates(store, b)}) "
            "SELECT * FROM a FULL JOIN b USING (kernel, metric)")
    return {"diff": both, "explain": aggregates(store, b), "report": both}


def commands(store: Path, a: str, b: str, work: Path) -> dict[str, list[str]]:
    where = ["--store", str(store)]
    return {"diff": [*where, "diff", a, b, "--json"],
            "explain": [*where, "explain", b, "--json"],
            "report": [*where, "report", a, b, "-o", str(work / "r.html")]}


def pair(store: Path, report: Path, megabytes: int, rename: int) -> tuple[str, str]:
    """Runs A and B standing for reports of `megabytes` (B's values 10% higher)."""
    from triage.archive.store import Store
    from triage.compare.rundata import RunData

    one = derive_run(store, report, 1, "probe")
    per_copy = RunData(Store.open(store), one).record.tables["metrics"].rows
    copies = max(1, round(megabytes * VALUES_PER_MB / per_copy))
    return (derive_run(store, report, copies, "a", rename),
            derive_run(store, report, copies, "b", rename, scale=1.1))


def shape(store: Path, report: Path, megabytes: int, rename: int, work: Path,
          repeat: int, judged: bool) -> dict[str, dict]:
    """Each command and its floor on one derived pair; printed as it goes. `judged`: the time
    target is the issue's at ~200 MB (the largest size); below it the ratio is shown only."""
    from triage.archive.store import Store
    from triage.compare.rundata import RunData

    a, b = pair(store, report, megabytes, rename)
    run = RunData(Store.open(store), b)
    kernels = len(set(run.kernels["name"].to_pylist()))
    print(f"\n{megabytes} MB, {'many kernels' if rename else 'many launches'}: "
          f"{run.record.tables['metrics'].rows:,} metric values, {run.kernels.num_rows:,} "
          f"launches, {kernels:,} kernel names", flush=True)
    results = {}
    floor_sql = floors(store, a, b)
    for name, args in commands(store, a, b, work).items():
        mine = measured(COMMAND, [json.dumps(args)], repeat)
        floor = measured(FLOOR, [floor_sql[name]], repeat)
        ratio = mine["seconds"] / floor["seconds"]
        verdict = f"target <= {TIME_TARGET:.0f}x: " \
            f"{'met' if ratio <= TIME_TARGET else 'MISSED'}" if judged else "not judged"
        print(f"  {name:<8} {mine['seconds']:6.2f} s, floor {floor['seconds']:5.2f} s: "
              f"{ratio:4.1f}x ({verdict}); peak RSS {mine['rss_mb']:4.0f} MB, floor "
              f"{floor['rss_mb']:4.0f} MB (target <= {RSS_TARGET:.0f} MB: "
              f"{'met' if mine['rss_mb'] <= RSS_TARGET else 'MISSED'})", flush=True)
        results[name] = {"ratio": ratio, "judged": judged, **mine}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--sizes", default="20,100,200", help="MB the runs stand for")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    options = parser.parse_args()
    compile_sources()
    sizes = [int(size) for size in options.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-ncu-scale-") as temp:
        work = options.workdir or Path(temp)
        store = work / "store"
        print(f"runs made from {options.report.name} at {VALUES_PER_MB:,} values per MB")
        by_shape = {rename: {size: shape(store, options.report, size, rename, work,
                                         options.repeat, size == max(sizes)) for size in sizes}
                    for rename in (0, KERNEL_NAMES)}
    low, high = min(sizes), max(sizes)
    if high > low:
        for rename, by_size in by_shape.items():
            print(f"\nmemory from {low} to {high} MB, "
                  f"{'many kernels' if rename else 'many launches'} (target: flat):")
            for name in by_size[low]:
                rss = by_size[low][name]["rss_mb"], by_size[high][name]["rss_mb"]
                print(f"  {name:<8} {rss[0]:4.0f} -> {rss[1]:4.0f} MB: "
                      f"{(rss[1] - rss[0]) / (high - low):+.2f} MB of RSS per MB of report")
    missed = [f"{name} ({size} MB, {'many kernels' if rename else 'many launches'})"
              for rename, by_size in by_shape.items() for size, results in by_size.items()
              for name, result in results.items()
              if (result["judged"] and result["ratio"] > TIME_TARGET)
              or result["rss_mb"] > RSS_TARGET]
    print(f"\ntargets: {'all met' if not missed else 'NOT met: ' + ', '.join(missed)}")


if __name__ == "__main__":
    main()
