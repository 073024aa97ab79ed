"""`triage query SQL`: DuckDB over the catalog and the runs' Parquet tables.

Views (documented in docs/usage.md, "Queries"):
- `runs`: one row per run (from the catalog), keyed by `run_id` like every other view, with
  `labels`; `id` is the same column under its old name (deprecated, for one release);
- `kernel_summary`: every run's kernel ranking (from the catalog, no per-run file opened);
- one view per table in schemas/tables.json (`kernels`, `metrics`, `sections`, `rules`,
  `api_calls`, `memops`, `nvtx_ranges`, `osrt_calls`, `api_summary`, `memop_summary`,
  `nvtx_summary`, `gpu_gaps`), each with a leading `run_id` column.

Only the views a statement names are built, and `--run` limits the per-run views to some runs, so
a query over one table of a few runs does not touch the other 10,000.

Read-only by construction, not by reading the SQL: file access is switched off and the
configuration locked before any view exists, and every view is an Arrow object this process hands
over (the catalog as a table, a per-run table as a dataset over the runs' Parquet files), so
DuckDB has no path to the store: COPY, ATTACH, read_text() and the like fail whatever statement
wraps them (probes: tests/test_query_security.py). The statement check only words the refusal.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import pyarrow as pa

from triage.archive import catalog
from triage.base.duck import connect, fetch_arrow
from triage.archive.runs import labels_by_run, resolve
from triage.archive.store import Store
from triage.schemas.tables import arrow_schema, table_specs
from triage.base.errors import TriageError, UsageError

if TYPE_CHECKING:
    import duckdb

CATALOG_VIEWS = ("runs", "kernel_summary")


def per_run_views() -> list[str]:
    return [name for name in table_specs()["tables"] if name not in CATALOG_VIEWS]


def view_names() -> list[str]:
    return list(CATALOG_VIEWS) + per_run_views()


def _mentioned(sql: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", sql, re.IGNORECASE) is not None


@contextmanager
def sealed_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection that can open no file but its own spill files, and cannot be told otherwise.

    DuckDB leaves its temp directory open to queries when file access is off, so that directory
    is a fresh one of this process (mkdtemp: mode 0700, a name nobody could have planted a link
    at), removed after the query; the default, `.tmp` in the working directory, is wherever a
    link there points. File access off also stops DuckDB reading Python variables as tables.
    """
    with tempfile.TemporaryDirectory(prefix="triage-query-") as spill:
        con = connect(temp_directory=spill)
        try:
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            yield con
        finally:
            con.close()


# Up to these sizes a query reads the merged segment's rows into memory, beside DuckDB's
# import (read_runs); past either, DuckDB streams them from a dataset over the segment, which
# costs `import pyarrow.dataset` (0.06-0.08 s) but holds a batch at a time: runs of hundreds of
# kernels each make the rankings column GBs at 100,000 runs.
WHOLE_ROWS = 250_000  # catalog rows (runs): about 650 bytes each in memory
WHOLE_RANKINGS = 250_000  # kernel_summary rows in all, when a statement names it: ~200 bytes


@dataclass(frozen=True)
class QueryRuns:
    """What a query's views are built over: the catalog's rows of the runs asked for (every
    run, or those `--run` names; only the columns `sql` needs, in no particular order), as a
    table (`rows`) and, for a large catalog, the merged segment's as a dataset (`merged`);
    each run's labels; the per-run tables `sql` names."""

    rows: pa.Table
    merged: object | None  # pyarrow.dataset.Dataset (imported only when one is made)
    labels: dict[str, list[str]]
    tables: list[str]


def read_runs(store: Store, sql: str, runs: list[str] | None = None) -> QueryRuns:
    """The store's side of a query: the catalog's rows in the columns `sql` needs (a run's
    kernel ranking, the widest column, and its table hashes only for a statement naming
    `kernel_summary` or a per-run view), the runs asked for, and the labels.

    This runs on a thread while DuckDB loads (run_query), so the rows are read here whole,
    DuckDB then scanning them in memory without a copy, unless the catalog is past WHOLE_ROWS
    or WHOLE_RANKINGS: then the merged segment is streamed to DuckDB as a dataset."""
    tables = [name for name in per_run_views() if _mentioned(sql, name)]
    ranked = _mentioned(sql, "kernel_summary")
    skipped = {"indexed", *(() if ranked else ("kernel_summary",)),
               *(() if tables else ("tables",))}
    view = catalog.open_view(store, [c for c in arrow_schema("catalog").names
                                     if c not in skipped])
    labels = labels_by_run(store)
    if runs:
        return QueryRuns(view.rows_of(resolve(store, r) for r in runs), None, labels, tables)
    found = view.segments
    if found.base is not None and (found.base.metadata.num_rows > WHOLE_ROWS or (
            ranked and found.base_values_count("kernel_summary") > WHOLE_RANKINGS)):
        return QueryRuns(view.tail, view.merged_dataset(), labels, tables)
    return QueryRuns(view.table(ordered=False), None, labels, tables)


def build_views(con: duckdb.DuckDBPyConnection, store: Store, sql: str,
                runs: list[str] | None = None, found: QueryRuns | None = None) -> None:
    """The views `sql` names, over `runs` (every run when None; `found`: read already)."""
    found = found or read_runs(store, sql, runs)
    _register_catalog(con, found)
    cat = fetch_arrow(con, "SELECT id, tables FROM _catalog") if found.tables else None
    for name in found.tables:
        _register_table(con, store, name, cat)


def _register_catalog(con: duckdb.DuckDBPyConnection, found: QueryRuns) -> None:
    """`_catalog` (the catalog's rows), and over it `runs` and `kernel_summary`. `run_id`, as
    in every other view: under `id`, `run_id in (select run_id from runs)` bound the inner
    run_id to the outer table's and matched every run; `id` stays, deprecated."""
    con.register("_rows", found.rows)
    if found.merged is None:
        con.execute("CREATE VIEW _catalog AS SELECT * FROM _rows")
    else:
        con.register("_merged", found.merged)
        con.execute("CREATE VIEW _catalog AS SELECT * FROM _merged UNION ALL SELECT * FROM _rows")
    labels, rows = found.labels, found.rows  # rows: the columns every part of _catalog has
    con.register("_labels", pa.table({
        "id": pa.array(list(labels), type=pa.string()),
        "labels": pa.array(list(labels.values()), type=pa.list_(pa.string()))}))
    shown = [n for n in arrow_schema("catalog").names if n in rows.column_names
             and n not in ("id", "kernel_summary", "tables", "indexed")]
    con.execute("CREATE VIEW runs AS SELECT c.id AS run_id, "
                + "".join(f'c."{n}", ' for n in shown)
                + "coalesce(l.labels, CAST([] AS VARCHAR[])) AS labels, c.id AS id "
                "FROM _catalog c LEFT JOIN _labels l ON l.id = c.id")
    if "kernel_summary" in rows.column_names:  # read only for a statement naming it
        con.execute("CREATE VIEW kernel_summary AS SELECT id AS run_id, "
                    "unnest(kernel_summary, recursive := true) FROM _catalog")


def _register_table(con: duckdb.DuckDBPyConnection, store: Store, name: str,
                    cat: pa.Table) -> None:
    """One view over the named table of every run in the catalog, with run_id: the runs'
    files as one Arrow dataset, each file tagged with its run's id as a partition."""
    import pyarrow.dataset as ds
    from pyarrow import fs

    parquet, local = ds.ParquetFileFormat(), fs.LocalFileSystem()
    fragments = []
    for run_id, tables in zip(cat.column("id").to_pylist(), cat.column("tables").to_pylist(),
                              strict=True):
        sha = json.loads(tables or "{}").get(name)
        if sha:
            fragments.append(parquet.make_fragment(
                str(_table_file(store, run_id, name, sha)), local,
                partition_expression=ds.field("run_id") == run_id))
    schema = pa.schema([pa.field("run_id", pa.string()), *arrow_schema(name)])
    con.register(name, _streamed_dataset()(fragments, schema, parquet, local))


def _table_file(store: Store, run_id: str, name: str, sha: str):
    """A table's local file: the store's own, or a remote store's cached copy (cache.py), so
    DuckDB reads local files only, whatever the store (no httpfs, nothing fetched by it)."""
    from triage.base.errors import CorruptObject

    try:
        return store.tables.local(run_id, name, sha)
    except FileNotFoundError:
        raise CorruptObject(f"the {name} table of run {run_id[:12]} is missing from the store; "
                            "`triage verify` lists what is damaged") from None


@lru_cache(maxsize=1)
def _streamed_dataset() -> type:
    """A pyarrow dataset whose scans read no row group ahead of the one DuckDB consumes.

    DuckDB scans a registered dataset through its `scanner(columns=, filter=)`, so it reads
    only the columns and files a query needs; pyarrow's default, 16 row groups ahead, would
    decode a million kernels to answer a LIMIT 10.
    """
    import pyarrow.dataset as ds

    class StreamedDataset(ds.FileSystemDataset):
        def scanner(self, *args: object, **kwargs: object) -> ds.Scanner:
            return super().scanner(*args, batch_readahead=0, **kwargs)

    return StreamedDataset


def _check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Only queries. COPY, ATTACH, INSTALL or SET would fail on the sealed connection anyway;
    this names them, before any view is built."""
    import duckdb

    if not sql.strip():
        raise UsageError("empty query: `triage query \"select * from runs\"`")
    statements = con.extract_statements(sql)
    allowed = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
    refused = [_statement_name(s) for s in statements if s.type not in allowed]
    if refused or len(statements) != 1:
        raise UsageError("triage query runs one read-only SELECT statement"
                         + (f" (not {', '.join(refused)})" if refused else ""))


def _statement_name(statement: duckdb.Statement) -> str:
    """What the user wrote, where DuckDB's statement type says otherwise: INSTALL parses as
    LOAD, and PIVOT (even inside a SELECT) as MULTI, for the statements it expands into."""
    if statement.type.name == "MULTI":
        return "PIVOT; use GROUP BY"
    if statement.type.name == "LOAD":
        return _LEADING_COMMENTS.sub("", statement.query).split(None, 1)[0].upper()
    return statement.type.name


_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def run_query(store: Store, sql: str, runs: list[str] | None = None) -> pa.Table:
    """Run one SQL statement over the views it names; return the result as Arrow.

    The store is read on a thread while DuckDB loads and connects (tens of milliseconds
    each: on S3 the catalog's listings wait on the server). A remote store's copies it reads
    stay in the cache until DuckDB is done with them, whatever its cap (`cache.reading`)."""
    from triage.archive.cache import reading

    with reading(), ThreadPoolExecutor(max_workers=1) as reader:
        found = reader.submit(read_runs, store, sql, runs)
        import duckdb

        try:
            with sealed_connection() as con:
                _check_read_only(con, sql)
                build_views(con, store, sql, runs, found.result())
                table = fetch_arrow(con, sql)
                return table.rename_columns(unique_names(table.column_names))
        except duckdb.Error as exc:
            first_line = str(exc).strip().splitlines()[0]
            raise TriageError(f"query failed: {first_line}; views: "
                              f"{', '.join(view_names())}") from None


def unique_names(names: list[str]) -> list[str]:
    """Column names made distinct the way a reader can follow: a repeated `x` becomes `x_1`,
    `x_2` (skipping any name the result already has), so no format drops or merges a column."""
    used = set(names)
    seen: set[str] = set()
    result = []
    for name in names:
        new, number = name, 0
        while new in seen or (new != name and new in used):
            number += 1
            new = f"{name}_{number}"
        seen.add(new)
        used.add(new)
        result.append(new)
    return result
