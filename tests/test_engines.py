"""Engines read a store's tables in place, with no triage code (issue 17, item 3): Apache Spark
on a local store, plain pyarrow datasets on an S3 one, each against `triage query`.

The layout they read is docs/store.md's: tables/<table>/run_id=<id>/<sha256>.parquet."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import corpus_file

REPORTS = ["LakshyaSingh354__CudaCode__report.ncu-rep",
           "Lashi0812__CudaProgramming__simpleSOA.ncu-rep",
           "0x822a5b87__test-cuda__report1.sqlite"]
# What each engine must agree on with `triage query`, per run: row counts and column sums
FIGURES = {
    "kernels": "count(*) AS n, sum(duration_ns) AS total, sum(grid_x * block_x) AS threads",
    "kernel_summary": "count(*) AS n, sum(instances) AS total, sum(total_ns) AS threads",
}


def triage_figures(triage, table: str) -> dict[str, tuple]:
    rows = triage.json("query", f"SELECT run_id, {FIGURES[table]} FROM {table} GROUP BY run_id")
    return {r["run_id"]: tuple(pytest.approx(v) if isinstance(v, float) else v
                               for v in (r["n"], r["total"], r["threads"])) for r in rows}


def archived(triage, reports=REPORTS) -> set[str]:
    ids = {triage.json("archive", corpus_file(name))[0]["id"] for name in reports}
    triage("archive", corpus_file(reports[0]))  # again: no second copy of its tables
    return ids


# Run in a process of its own: Spark's JVM outlives `spark.stop()`, and a test must leave no
# child behind (tests/test_workers.py counts them).
SPARK = """
import json, os, sys
from pyspark.sql import SparkSession
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
spark = (SparkSession.builder.master("local[1]").appName("triage-engines")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         # a run id of digits and one 'e' would be read as a number
         .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
         .getOrCreate())
out = {}
for table, figures in json.loads(sys.argv[2]).items():
    spark.read.parquet(os.path.join(sys.argv[1], "tables", table)).createOrReplaceTempView(table)
    rows = spark.sql(f"SELECT run_id, {figures} FROM {table} GROUP BY run_id").collect()
    out[table] = {r["run_id"]: [r["n"], r["total"], r["threads"]] for r in rows}
spark.stop()
print(json.dumps(out))
"""


def spark_or_skip() -> None:
    """PyPI pyspark and Java 17, else a skip (a failure when TRIAGE_REQUIRE_TOOLS=1)."""
    import importlib.util
    import shutil

    from nvtx_capture import ToolUnavailable, require_or_skip

    if importlib.util.find_spec("pyspark") is None:
        require_or_skip(ToolUnavailable("pyspark is not installed (pip install -e '.[test]')"))
    if shutil.which("java") is None:
        require_or_skip(ToolUnavailable("java is not on PATH (Debian: apt-get install "
                                        "openjdk-17-jre-headless)"))


def test_spark_reads_a_local_store_as_triage_query_does(triage, store_dir):
    ids = archived(triage)
    spark_or_skip()
    done = subprocess.run([sys.executable, "-c", SPARK, str(store_dir), json.dumps(FIGURES)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for table in FIGURES:
        found = {run: tuple(figures) for run, figures in seen[table].items()}
        assert found == triage_figures(triage, table)
        assert set(found) == ids


def test_pyarrow_datasets_read_an_s3_store_as_triage_query_does(triage, s3_store, s3_server):
    import pyarrow as pa
    import pyarrow.dataset as ds

    ids = archived(triage, REPORTS[:2])
    base = s3_store.removeprefix("s3://")
    for table in FIGURES:
        dataset = ds.dataset(f"{base}/tables/{table}", filesystem=s3_server.client(),
                             format="parquet", partitioning=ds.partitioning(
                                 pa.schema([("run_id", pa.string())]), flavor="hive"))
        found = pyarrow_figures(dataset.to_table(), table)
        assert found == triage_figures(triage, table)
        assert set(found) == ids


def pyarrow_figures(rows, table: str) -> dict[str, tuple]:
    """FIGURES per run, computed by pyarrow alone."""
    import pyarrow.compute as pc

    if table == "kernels":
        total, threads = "duration_ns", pc.multiply(rows["grid_x"], rows["block_x"])
    else:
        total, threads = "instances", rows["total_ns"]
    rows = rows.append_column("threads", threads)
    grouped = rows.group_by("run_id").aggregate([("run_id", "count"), (total, "sum"),
                                                  ("threads", "sum")])
    return {run: (n, a, b) for run, n, a, b in zip(
        *(grouped[c].to_pylist() for c in ("run_id", "run_id_count", f"{total}_sum",
                                           "threads_sum")), strict=True)}
