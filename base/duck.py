"""DuckDB connections that never reach for the network.

DuckDB can auto-install and auto-load extensions (httpfs, sqlite_scanner) at run time; GPU
clusters and CI have no internet, and a peer tool spends 25 s per command timing out on exactly
that. triage only needs the Parquet reader, which is built in, so autoloading is switched off.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

OFFLINE = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def connect(threads: int | None = None,
            temp_directory: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with extension autoloading disabled; large sorts spill
    to `temp_directory` (DuckDB's default is `.tmp` in the working directory)."""
    import duckdb

    config: dict[str, Any] = dict(OFFLINE, **({"threads": threads} if threads else {}),
                                  **({"temp_directory": temp_directory} if temp_directory
                                     else {}))
    return duckdb.connect(":memory:", config=config)


def import_duckdb() -> None:
    """Import DuckDB ahead (0.05-0.07 s), while the caller waits on work that leaves the GIL
    free (SQLite sorting a large table for its first rows), without connecting: a connection
    holds about 29 MB more, which would add to the peak of the read that follows."""
    import duckdb  # noqa: F401


@lru_cache(maxsize=1)
def summary_connection() -> duckdb.DuckDBPyConnection:
    """One single-threaded connection per process for archive-time summaries (connecting costs
    more than a small summary query; one thread keeps float sums, hence bytes, reproducible)."""
    return connect(threads=1)


@lru_cache(maxsize=1)
def query_database() -> duckdb.DuckDBPyConnection:
    """One in-memory database per process for queries over stored tables: each reader takes a
    `.cursor()` of it (its own connection, for its own thread) for 3 ms, not a new database
    for 70 ms."""
    return connect()


def interrupted(exc: BaseException) -> bool:
    """Whether DuckDB raised `exc` because a Ctrl-C reached it mid-query. DuckDB takes SIGINT
    itself while a query runs and answers with an error of its own, an Exception
    (RuntimeError "Query interrupted" in DuckDB 2, InterruptException before), so a reader
    that falls back on errors would take the user's Ctrl-C for an unreadable input."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is None:  # never imported: nothing of it ran
        return False
    return isinstance(exc, getattr(duckdb, "InterruptException", ())) \
        or (type(exc) is RuntimeError and str(exc) == "Query interrupted")


def sql_string(value: object) -> str:
    """A SQL string literal (paths of stored objects are hex, but quote properly anyway)."""
    return "'" + str(value).replace("'", "''") + "'"


def fetch_arrow(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """Run a query and return a pyarrow Table (DuckDB 2 renamed .arrow() to .to_arrow_table())."""
    relation = con.sql(sql)
    fetch = getattr(relation, "to_arrow_table", None) or relation.arrow
    return fetch()


def arrow_batches(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any],
                  batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Yield a query's result as Arrow record batches, never the whole result at once.

    A generator on purpose: the relation must outlive its reader (DuckDB 1.1-1.3 free it with
    the Python object, and the reader then stops early or crashes).
    """
    relation = con.sql(sql, params=params)
    read = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
    yield from read(batch_rows)
