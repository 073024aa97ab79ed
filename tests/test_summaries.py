"""kernel_summary without DuckDB: an ncu archive computes it in Python, bit for bit as DuckDB's
SQL (KERNEL_SUMMARY) does, so run ids stay what they were; and it then never imports DuckDB.
The nsys summaries aggregated per name first give the rows of the per-call SQL."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import corpus_file, corpus_manifest
from triage.archive.store import Store
from triage.archive.summaries import KERNEL_SUMMARY, kernel_summary
from triage.base.duck import connect, fetch_arrow, sql_string
from triage.schemas.tables import arrow_schema

NCU_FILES = [r["file"] for r in corpus_manifest() if r["kind"] == "ncu"]


def duckdb_summary(kernels: pa.Table, tmp_path) -> pa.Table:
    """KERNEL_SUMMARY run by DuckDB (one thread, as at archive time) over a Parquet file."""
    path = tmp_path / "kernels.parquet"
    pq.write_table(kernels, path)
    table = fetch_arrow(connect(threads=1),
                        KERNEL_SUMMARY.format(kernels=f"read_parquet({sql_string(path)})"))
    return table.cast(arrow_schema("kernel_summary"))


def bits(table: pa.Table) -> list[list]:
    """Every value, floats as their 8 bytes: NaN, -0.0 and the last bit all count."""
    return [[struct.pack("<d", v) if isinstance(v, float) else v for v in column.to_pylist()]
            for column in table.columns]


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory):
    """Every corpus ncu report archived (in one command): [(store, run document)]."""
    from click.testing import CliRunner

    from triage.cli import cli

    store = tmp_path_factory.mktemp("ncu") / "store"
    paths = [str(corpus_file(name)) for name in NCU_FILES]
    result = CliRunner().invoke(cli, ["--store", str(store), "archive", "--json", *paths])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    shown = [json.loads(CliRunner().invoke(cli, ["--store", str(store), "show", "--json",
                                                 run["id"]]).stdout) for run in runs]
    return Store.open(store), shown


def stored(store: Store, run: dict, table: str) -> pa.Table:
    return pq.ParquetFile(store.root / store.tables.key(run["id"], table,
                                                       run["tables"][table]["sha256"])).read()


def test_every_corpus_reports_kernel_summary_is_duckdbs(corpus_runs, tmp_path):
    store, runs = corpus_runs
    assert len(runs) == len(NCU_FILES)
    for run in runs:
        kernels = stored(store, run, "kernels").select(["name", "short_name", "duration_ns"])
        assert bits(stored(store, run, "kernel_summary")) == \
            bits(duckdb_summary(kernels, tmp_path)), run["reports"][0]["name"]


def derived_kernels() -> pa.Table:
    """A real report's kernels (readSegmentUnroll: 36 launches of 3 kernels) made awkward:
    durations a third of ncu's (sums that round), NULL and NaN durations, a kernel of NULL
    durations only (total NULL: ranked last), one with a single launch (stddev NULL), a copy
    of a kernel under another name (a tie in total, broken by name), a NULL name and
    short name, and an infinite duration."""
    from triage.capture.formats import prepare_report

    prepared = prepare_report(corpus_file("Lashi0812__CudaProgramming__readSegmentUnroll.ncu-rep"))
    try:
        tables = [batch for name, batch in prepared.batches(0) if name == "kernels"]
    finally:
        prepared.close()
    real = pa.concat_tables(tables).select(["name", "short_name", "duration_ns"]).to_pylist()
    assert len(real) == 36 and len({r["name"] for r in real}) == 3
    rows = [dict(r, duration_ns=r["duration_ns"] / 3) for r in real]
    rows[1]["duration_ns"] = None
    rows[4]["duration_ns"] = float("nan")
    first = rows[0]["name"]
    rows += [dict(r, name="a copy of " + first) for r in rows if r["name"] == first]
    rows += [{"name": "no durations", "short_name": "z", "duration_ns": None}] * 2
    rows += [{"name": "once", "short_name": None, "duration_ns": 7.0 / 3}]
    rows += [{"name": None, "short_name": None, "duration_ns": 1e-3},
             {"name": None, "short_name": "b", "duration_ns": 2e-3}]
    rows += [{"name": "endless", "short_name": "e", "duration_ns": float("inf")},
             {"name": "endless", "short_name": "d", "duration_ns": 1.0}]
    return pa.Table.from_pylist(rows, schema=pa.schema([("name", pa.string()),
                                                        ("short_name", pa.string()),
                                                        ("duration_ns", pa.float64())]))


def test_nulls_nan_ties_and_rounding_match_duckdb(tmp_path):
    kernels = derived_kernels()
    ours = kernel_summary(kernels)
    assert bits(ours) == bits(duckdb_summary(kernels, tmp_path))
    names = ours["name"].to_pylist()
    assert names[-1] == "no durations" and "once" in names and None in names


def test_without_nan_or_inf_the_ties_and_nulls_still_match(tmp_path):
    """NaN and inf make every share NaN; the finite case ranks and divides for real."""
    kernels = derived_kernels()
    finite = [r for r in kernels.to_pylist()
              if r["duration_ns"] is None or abs(r["duration_ns"]) != float("inf")
              and r["duration_ns"] == r["duration_ns"]]
    table = pa.Table.from_pylist(finite, schema=kernels.schema)
    assert bits(kernel_summary(table)) == bits(duckdb_summary(table, tmp_path))


def test_an_ncu_archive_imports_no_duckdb(tmp_path):
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from triage.cli import cli\n"
            "result = CliRunner().invoke(cli, sys.argv[1:])\n"
            "assert result.exit_code == 0, result.output\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'duckdb'))\n")
    report = corpus_file("Lashi0812__CudaProgramming__simpleAOS.ncu-rep")
    done = subprocess.run([sys.executable, "-c", code, "--store", str(tmp_path / "store"),
                           "archive", str(report)], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[-2] == "[]", done.stdout


# api_summary and memop_summary as first written: every call read for the groups and again for
# the total, which DuckDB materializes (all the calls' strings in memory: 725 MB archiving 10M
# API calls). Today's SQL aggregates per name first; its rows must be these, bit for bit.
PER_CALL = {
    "api_summary": ("api_calls", """
WITH a AS (SELECT api, name, duration_ns AS d FROM {table}),
     t AS (SELECT sum(d) AS total FROM a)
SELECT api, name, count(*) AS calls, sum(d) AS total_ns, avg(d) AS avg_ns,
       median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns,
       sum(d) / nullif(any_value(t.total), 0) AS share
FROM a, t GROUP BY api, name ORDER BY total_ns DESC, api, name"""),
    "memop_summary": ("memops", """
WITH m AS (SELECT op, kind, duration_ns AS d, bytes AS b FROM {table}),
     t AS (SELECT sum(d) AS total FROM m)
SELECT op, kind, count(*) AS count, sum(d) AS total_ns, avg(d) AS avg_ns,
       median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns, sum(b) AS total_bytes,
       avg(b) AS avg_bytes, min(b) AS min_bytes, max(b) AS max_bytes,
       sum(d) / nullif(any_value(t.total), 0) AS share
FROM m, t GROUP BY op, kind ORDER BY total_ns DESC, op, kind"""),
}


@pytest.mark.parametrize("report", ["unschlagbar__neural-networks__prof.sqlite",
                                    "igouProto__CSC746CUDALab__report5.sqlite"])
def test_api_and_memop_summaries_are_the_per_call_sql(triage, store_dir, report):
    """Two real exports with thousands of API calls or memory operations (medians between two
    calls, shares of a total of many) archived: each summary's rows as the per-call SQL."""
    run = triage.json("show", triage.json("archive", corpus_file(report))[0]["id"])
    store = Store.open(store_dir)
    for summary, (source, sql) in PER_CALL.items():
        path = store.root / store.tables.key(run["id"], source, run["tables"][source]["sha256"])
        expected = fetch_arrow(connect(threads=1), sql.format(
            table=f"read_parquet({sql_string(path)})")).cast(arrow_schema(summary))
        assert expected.num_rows
        assert bits(stored(store, run, summary)) == bits(expected), summary
