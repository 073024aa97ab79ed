"""DuckDB connections that never reach for the network.

DuckDB can auto-install and auto-load extensions (httpfs, sqlite_scanner) at run time; GPU
clusters and CI have no internet, and a peer tool spends 25 s per command timing out on exactly
that. triage only needs the Parquet reader, which is built in, so autoloading is switched off.
"""

from __future__ import annotations

import sys
import threading
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


def summary_connection() -> duckdb.DuckDBPyConnection:
    """One single-threaded connection per process for archive-time summaries (connecting costs
    more than a small summary query; one thread keeps float sums, hence bytes, reproducible),
    once the thread opening it ahead (`open_summary_connection`) has."""
    joined_summary_connection()
    return _summary_connection()


@lru_cache(maxsize=1)
def _summary_connection() -> duckdb.DuckDBPyConnection:
    return connect(threads=1)


_OPENING: list[threading.Thread] = []  # the thread opening the summaries' connection, if any


def open_summary_connection() -> None:
    """Import DuckDB and open the summaries' connection on a thread (0.15-0.25 s) while the
    caller reads a run's rows: that reading waits on SQLite or nsys most of the time, and the
    summaries come after it. The caller joins it (`joined_summary_connection`) before anything
    that may fork."""
    if not _OPENING and not _summary_connection.cache_info().currsize:
        _OPENING.append(threading.Thread(target=_summary_connection, daemon=True,
                                         name="open-summary-connection"))
        _OPENING[0].start()


def joined_summary_connection() -> None:
    """Wait for the thread `open_summary_connection` started, if one runs."""
    while _OPENING:
        _OPENING.pop().join()


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
