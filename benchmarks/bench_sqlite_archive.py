"""How long `triage archive` of an nsys `.sqlite` export takes, next to ADBC reading the same rows.

Two exports, made once per work directory (`--workdir`, the names `bench_nsys_archive.py` uses,
so one directory serves both):

  ranges   `nsys export --type sqlite` of tests/programs/nvtx_steps.c captured with about
           1,000,000 NVTX ranges (needs nsys and gcc; run it under flock /tmp/triage-tools.lock);
  kernels  a real corpus export (nsys 2023.3, 16 kernels) whose kernel table is grown to about
           1,000,000 kernels by repeating them later in time (tests/helpers.py `grown`).

The floor of each is a bare script that imports pyarrow and ADBC's SQLite driver and reads, with
the driver's Arrow batches, every SELECT that triage's reader runs on that export: the same
statements, parameters and batch size, so the same rows in the same order (the statements are
taken from one untimed archive in this process). Beside it, not judged: the same statements
without their ORDER BY (the rows in the export's order: what sorting costs SQLite, which triage
cannot skip, since the stored order is the time order). `triage archive` runs as a user runs it, a
fresh process into a new store (interpreter start-up included on both sides). The legs are
interleaved round by round; each prints its min and median, and the ratio archive / ADBC of
the mins and of the medians against the target: <= 2.0x (issue 41). `--baseline PYTHON` times
the archive a second time in each round with another interpreter, one whose triage is another
commit (a venv with that checkout installed), for a before/after under the same load.

usage: python benchmarks/bench_sqlite_archive.py [--workdir DIR] [--rounds 5]
                                                 [--ranges N] [--kernels N] [--only ranges|kernels]
                                                 [--baseline PYTHON]
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
from statistics import median

from benchlib import compile_sources

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import grown  # noqa: E402
from nvtx_capture import build_program, capture, require_tool  # noqa: E402

TARGET = 2.0

# The floor: ADBC's SQLite driver reading each statement's Arrow batches, nothing kept.
ADBC_READ = """
import json, sys
import adbc_driver_manager as adbc
import adbc_driver_sqlite
import pyarrow as pa

path, statements, batch_rows = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
database = adbc_driver_sqlite.connect(f"file:{path}?mode=ro&immutable=1")
connection = adbc.AdbcConnection(database)
rows = 0
for sql, params in statements:
    statement = adbc.AdbcStatement(connection)
    statement.set_options(**{"adbc.sqlite.query.batch_rows": batch_rows})
    statement.set_sql_query(sql)
    if params:
        statement.bind(pa.record_batch([pa.array([p]) for p in params],
                                       names=[f"p{i}" for i in range(len(params))]))
    stream, _count = statement.execute_query()
    with pa.RecordBatchReader.from_stream(stream) as reader:
        for batch in reader:
            rows += batch.num_rows
    statement.close()
print(rows)
"""


def ranges_export(work: Path, ranges: int) -> Path:
    """The NVTX capture's `.sqlite` export, made once per work directory."""
    report, exported = work / "bench.nsys-rep", work / "bench.sqlite"
    nsys = require_tool("nsys")
    if not report.exists():
        capture(build_program(work), [-(-ranges // 3), 0, 0], work / "bench", nsys=nsys)
    if not exported.exists():
        subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(exported),
                        str(report)], check=True, capture_output=True)
    return exported


def kernels_export(work: Path, kernels: int) -> Path:
    path = work / f"kernels-{kernels}.sqlite"
    if not path.exists():
        grown(work / "kernels.partial", kernels).rename(path)
    return path


def statements_of(path: Path) -> list[tuple[str, list]]:
    """Every SELECT triage's reader gives ADBC when archiving `path` (one untimed archive in this
    process, into a store removed after), with its parameters."""
    from triage.archive.ingest import archive_files
    from triage.capture import nsys_sqlite

    seen: list[tuple[str, list]] = []
    reading = nsys_sqlite.SqliteExport._adbc_batches

    def recorded(export, query):
        seen.append((export.resolved(query.sql()), list(query.params)))
        return reading(export, query)

    nsys_sqlite.SqliteExport._adbc_batches = recorded
    try:
        with tempfile.TemporaryDirectory(prefix="triage-bench-") as store:
            archive_files(Path(store) / "store", [str(path)])
    finally:
        nsys_sqlite.SqliteExport._adbc_batches = reading
    return seen


def timed(command: list[str], env: dict | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done.stdout


def unordered(statements: list[tuple[str, list]]) -> list[tuple[str, list]]:
    """The statements without their ORDER BY (each has it last; the lookups within have none)."""
    return [(sql.rsplit(" ORDER BY ", 1)[0], params) for sql, params in statements]


def adbc_read(path: Path, statements: list) -> tuple[float, int]:
    from triage.capture.nsys_export import BATCH

    seconds, out = timed([sys.executable, "-c", ADBC_READ, str(path), json.dumps(statements),
                          str(BATCH)])
    return seconds, int(out.split()[-1])


def archive(path: Path, store: Path, python: str = sys.executable) -> float:
    """`triage archive PATH` into a new store (removed after: a run there would be found)."""
    shutil.rmtree(store, ignore_errors=True)
    seconds, _out = timed([python, "-m", "triage", "--store", str(store), "archive",
                           str(path)])
    shutil.rmtree(store)
    return seconds


def times(seconds: list[float]) -> str:
    return f"{min(seconds):6.2f} s min {median(seconds):6.2f} s median"


def run(work: Path, inputs: dict[str, Path], rounds: int, baseline: str | None) -> None:
    statements = {name: statements_of(path) for name, path in inputs.items()}
    legs: dict[tuple[str, str], list[float]] = {}
    rows: dict[str, int] = {}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for name, path in inputs.items():
            seconds, rows[name] = adbc_read(path, statements[name])
            legs.setdefault((name, "adbc"), []).append(seconds)
            legs.setdefault((name, "unordered"), []).append(
                adbc_read(path, unordered(statements[name]))[0])
            legs.setdefault((name, "archive"), []).append(archive(path, work / "store"))
            if baseline:
                legs.setdefault((name, "baseline"), []).append(
                    archive(path, work / "store", baseline))
        load.append(os.getloadavg()[0])
    print(f"{rounds} rounds, interleaved, load average {min(load):.1f}-{max(load):.1f}")
    for name, path in inputs.items():
        floor = legs[(name, "adbc")]
        print(f"{name}: {path.name}, {path.stat().st_size / 1e6:.1f} MB, {rows[name]:,} rows "
              f"read by {len(statements[name])} statements")
        print(f"  {'ADBC read of the same rows':32s} {times(floor)}")
        print(f"  {'  the same, no ORDER BY':32s} {times(legs[(name, 'unordered')])}  "
              "(not judged)")
        for leg, label in (("archive", "triage archive"),
                           ("baseline", f"the same with {baseline}")):
            if (name, leg) in legs:
                print(versus(label, legs[(name, leg)], floor))


def versus(label: str, archived: list[float], floor: list[float]) -> str:
    """An archive leg: its min and median, as ratios to the ADBC read's."""
    return (f"  {label:32s} {times(archived)}   {min(archived) / min(floor):.2f}x min / "
            f"{median(archived) / median(floor):.2f}x median  (target <= {TARGET:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep the exports here between runs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ranges", type=int, default=1_000_000)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--only", choices=("ranges", "kernels"))
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="also time the archive with this interpreter's triage")
    args = parser.parse_args()
    compile_sources()
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as temp:
        work = args.workdir or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        inputs = {}
        if args.only in (None, "ranges"):
            inputs["ranges"] = ranges_export(work, args.ranges)
        if args.only in (None, "kernels"):
            inputs["kernels"] = kernels_export(work, args.kernels)
        run(work, inputs, args.rounds, args.baseline)


if __name__ == "__main__":
    main()
