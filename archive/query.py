"""`triage query SQL`: DuckDB over the catalog and the runs' Parquet tables.

Views (documented in the README):
- `runs`: one row per run (from the catalog), with `labels`;
- `kernel_summary`: every run's kernel ranking (from the catalog, no per-run file opened);
- one view per table in schemas/tables.json (`kernels`, `metrics`, `sections`, `rules`,
  `api_calls`, `memops`, `nvtx_ranges`, `osrt_calls`, `api_summary`, `memop_summary`,
  `nvtx_summary`, `gpu_gaps`), each with a leading `run_id` column.

Only the views a statement names are built, and `--run` limits the per-run views to some runs, so
a query over one table of a few runs does not touch the other 10,000.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from triage.archive import catalog
from triage.archive.duck import connect, fetch_arrow, sql_string
from triage.archive.runs import labels_by_run, resolve
from triage.archive.store import Store
from triage.archive.tables import arrow_schema, table_specs
from triage.errors import TriageError, UsageError

CATALOG_VIEWS = ("runs", "kernel_summary")


def per_run_views() -> list[str]:
    return [name for name in table_specs()["tables"] if name not in CATALOG_VIEWS]


def view_names() -> list[str]:
    return list(CATALOG_VIEWS) + per_run_views()


def _mentioned(sql: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", sql, re.IGNORECASE) is not None


def _register_catalog(con, cat: pa.Table, labels: dict[str, list[str]]) -> None:
    runs = cat.drop_columns(["kernel_summary", "tables", "indexed"])
    runs = runs.append_column(
        "labels", pa.array([labels.get(i, []) for i in runs.column("id").to_pylist()],
                           type=pa.list_(pa.string())))
    con.register("_runs", runs)
    con.execute("CREATE VIEW runs AS SELECT * FROM _runs")
    summary = cat.select(["id", "kernel_summary"])
    con.register("_catalog_summary", summary)
    con.execute("CREATE VIEW kernel_summary AS SELECT id AS run_id, "
                "unnest(kernel_summary, recursive := true) FROM _catalog_summary")


def _register_table(con, store: Store, name: str, cat: pa.Table) -> None:
    """One view over the named table of every run in the catalog, with run_id."""
    pairs = []
    for run_id, tables in zip(cat.column("id").to_pylist(), cat.column("tables").to_pylist()):
        sha = json.loads(tables or "{}").get(name)
        if sha:
            pairs.append((str(store.object_path(sha)), run_id))
    if not pairs:
        empty = arrow_schema(name).empty_table()
        con.register(f"_{name}_empty", empty)
        con.execute(f"CREATE VIEW {name} AS SELECT NULL::VARCHAR AS run_id, * "
                    f"FROM _{name}_empty")
        return
    mapping = pa.table({"path": [p for p, _ in pairs], "run_id": [r for _, r in pairs]})
    con.register(f"_{name}_map", mapping)
    files = "[" + ", ".join(sql_string(p) for p in sorted({p for p, _ in pairs})) + "]"
    con.execute(f"CREATE VIEW {name} AS SELECT m.run_id, t.* EXCLUDE (_triage_file) "
                f"FROM read_parquet({files}, filename = '_triage_file', union_by_name = true) t "
                f"JOIN _{name}_map m ON t._triage_file = m.path")


def _check_read_only(con, sql: str) -> None:
    """Only queries: no COPY/ATTACH/INSTALL/SET, which could write files or fetch extensions."""
    import duckdb

    if not sql.strip():
        raise UsageError("empty query: `triage query \"select * from runs\"`")
    statements = con.extract_statements(sql)
    allowed = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
    refused = [_statement_name(s) for s in statements if s.type not in allowed]
    if refused or len(statements) != 1:
        raise UsageError("triage query runs one read-only SELECT statement"
                         + (f" (not {', '.join(refused)})" if refused else ""))


def _statement_name(statement) -> str:
    """What the user wrote, where DuckDB's statement type says otherwise: INSTALL parses as
    LOAD, and PIVOT (even inside a SELECT) as MULTI, for the statements it expands into."""
    if statement.type.name == "MULTI":
        return "PIVOT; use GROUP BY"
    if statement.type.name == "LOAD":
        return _LEADING_COMMENTS.sub("", statement.query).split(None, 1)[0].upper()
    return statement.type.name


_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def _lock_down(con, store: Store) -> None:
    """After the views exist: files only under the store's objects, nothing else, no changes."""
    directories = ", ".join(sql_string(str(d) + "/") for d in (store.objects, store.index))
    con.execute(f"SET allowed_directories = [{directories}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def run_query(store: Store, sql: str, runs: list[str] | None = None) -> pa.Table:
    """Run one SQL statement over the views it names; return the result as Arrow."""
    import duckdb

    cat = catalog.read_catalog(store)
    if runs:
        wanted = {resolve(store, r) for r in runs}
        cat = cat.filter(pa.array([i in wanted for i in cat.column("id").to_pylist()]))
    con = connect()
    try:
        _check_read_only(con, sql)
        _register_catalog(con, cat, labels_by_run(store))
        for name in per_run_views():
            if _mentioned(sql, name):
                _register_table(con, store, name, cat)
        _lock_down(con, store)
        return fetch_arrow(con, sql)
    except duckdb.Error as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise TriageError(f"query failed: {first_line}; views: {', '.join(view_names())}") from None
    finally:
        con.close()
