"""The Parquet encoding of one stored table, per column as archive writes it today
(`archive/tables.py` `table_options`) against a dictionary on every column (before issue 41):
CPU seconds to encode it in row groups as TableWriter does, and the bytes.

    python benchmarks/bench_encoding.py STORE/tables/nvtx_ranges/run_id=ID/SHA.parquet [--rounds 5]

Any table of any run will do (e.g. the `nvtx_ranges` of a `bench_nsys_archive.py` capture
archived once); the two encodings alternate round by round, min and median printed. CPU time
(process_time), not wall time: on a loaded machine it is the figure that holds still.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from statistics import median

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive.tables import BATCH_ROWS, PARQUET_OPTIONS, table_options


def encode(table: pa.Table, options: dict, out: Path) -> tuple[float, int]:
    """CPU seconds to write `table` in BATCH_ROWS row groups with these options, and bytes."""
    start = time.process_time()
    with pq.ParquetWriter(out, table.schema, **options) as writer:
        for offset in range(0, table.num_rows, BATCH_ROWS):
            writer.write_table(table.slice(offset, BATCH_ROWS), row_group_size=BATCH_ROWS)
    return time.process_time() - start, out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path, help="a stored table's Parquet file")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    table = pq.ParquetFile(args.table).read()
    legs = {"a dictionary on every column": dict(PARQUET_OPTIONS),
            "per column (today)": table_options(table.schema)}
    seconds: dict[str, list[float]] = {name: [] for name in legs}
    size: dict[str, int] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.rounds):
            for name, options in legs.items():
                spent, size[name] = encode(table, options, Path(work) / "table.parquet")
                seconds[name].append(spent)
            load.append(os.getloadavg()[0])
    print(f"{args.table.parent.parent.name}: {table.num_rows:,} rows, {args.rounds} rounds, "
          f"load average {min(load):.1f}-{max(load):.1f}; CPU seconds min / median, bytes")
    for name in legs:
        print(f"  {name:30s} {min(seconds[name]):6.3f} / {median(seconds[name]):6.3f} s  "
              f"{size[name] / 1e6:7.2f} MB")
    before, after = legs
    print(f"  per column: {min(seconds[after]) / min(seconds[before]):.2f} / "
          f"{median(seconds[after]) / median(seconds[before]):.2f} x the CPU, "
          f"{size[after] / size[before]:.2f} x the bytes")


if __name__ == "__main__":
    main()
