"""A `.sqlite` export (the user's own, or one nsys wrote for triage) as an `Export`: its
launch-level tables read columnar into Arrow by ADBC's SQLite driver, the rest (and what the
driver cannot read exactly) with the standard `sqlite3` module, row batches converted to Arrow.

What is SQLite's alone lives here (values that do not have their declared types, the fall-back
from ADBC to `sqlite3`, SQLite's URIs), apart from the `Export` both readers are
(`nsys_export`), whose `open_export` imports this reader only for a `.sqlite` export.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import quote

from triage.capture.nsys_export import BATCH, Export, Query, as_text, utf8
from triage.base.errors import UnsupportedReport

if TYPE_CHECKING:
    import pyarrow as pa


class SqliteExport(Export):
    """A `.sqlite` export: read-only, immutable. Launch-level queries are read columnar, by
    ADBC's SQLite driver straight into Arrow (`_columnar`); small queries, views and any
    query whose columns hold values of another type than triage reads them as, through the
    `sqlite3` module, text as bytes, row batches converted to Arrow (`_fetched`)."""

    def __init__(self, path, sqlite_path=None):
        self.uri = f"file:{_file_url(os.path.abspath(sqlite_path or path))}?mode=ro&immutable=1"
        self.con = None
        # Thread -> ADBC's (database, connection), opened by its first query: ADBC connections
        # are not shared by threads, and a read started early (`early_table`) runs beside
        # another (the NVTX domains) on a thread of its own.
        self._adbc: dict[int, tuple] = {}
        self._connecting = threading.Lock()
        self._reading_strings = threading.Lock()
        self._reading: set = set()  # ADBC statements of reads not finished (closed first)
        self._lookups: dict[str, str] = {}  # SQL of a StringIds lookup -> the id column's
        self._string_ids: tuple[pa.Array, pa.Array] | None = None
        self._string_ids_read = False
        try:
            # Batches are fetched on worker threads (`nsys_tables.ReadAhead`), and SQLite
            # serializes the threads that use this connection (its fall-back reads, lookups).
            self.con = sqlite3.connect(self.uri, uri=True, check_same_thread=False)
            self.con.text_factory = bytes
            # Pages are read(), not memory-mapped (SQLite's default, kept on purpose): a mapped
            # page stays resident in this process once read, so a 3M-range export's scan grew
            # peak RSS by 250 MB; mapping saved about 15% of a 1M-range scan.
            kinds = self.con.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as exc:
            if self.con is not None:
                self.con.close()
            raise UnsupportedReport(f"{path}: not a readable SQLite database ({exc}); pass the "
                                    "file written by `nsys export --type sqlite`") from None
        self.views = {as_text(name) for name, kind in kinds if as_text(kind) == "view"}
        super().__init__(path, {as_text(name) for name, _kind in kinds})

    def _table_columns(self, table: str) -> set[str]:
        return {as_text(row[1]) for row in self.rows(f"PRAGMA table_info({table})")[1]}

    def _holds_integers(self, table: str, column: str) -> bool | None:
        return None  # SQLite columns are not typed: old exports keep text in id columns

    def string(self, table: str, column: str, alias: str = "t") -> str:
        """The lookup in SQL, for `sqlite3`; the columnar read resolves it in Arrow instead
        (`_resolved`): SQLite's lookups cost about 0.3 s per 1M ids and column."""
        expr = super().string(table, column, alias)
        if column in self.columns(table):
            self._lookups[expr] = f"{alias}.{column}"
        return expr

    def row_order(self, table: str, alias: str) -> str | None:
        return None if self.real.get(table, table) in self.views else f"{alias}.rowid"

    def early_table(self, tables: list[str]) -> str | None:
        """The table of most rows (its largest rowid: a lookup, no scan), of those with more
        than a batch; its read started early sorts beside the rest of the setup, on a
        connection of its own."""
        sizes = {table: self.rows(f"SELECT max(rowid) FROM {table}")[1][0][0] or 0
                 for table in tables
                 if table in self.tables and self.real.get(table, table) not in self.views}
        largest = max(sizes, key=lambda table: sizes[table], default=None)
        return largest if largest is not None and sizes[largest] > BATCH else None

    def rows(self, sql: str, params=()) -> tuple[list[str], list[tuple]]:
        try:
            cursor = self.con.execute(self.resolved(sql), params)
            return [d[0] for d in cursor.description], cursor.fetchall()
        except sqlite3.ProgrammingError:
            raise  # triage's own mistake: keep the traceback
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def batches(self, query: Query, fields) -> Iterator[pa.Table]:
        """Columnar when it can be; from the first row the columnar read could not give (a
        value of another type, damage) on, `sqlite3`'s rows, which convert any value as
        triage always has, or name the damage. A view's rows have no rowid to order ties by,
        and two SQLite versions (ADBC bundles its own) may break them differently: rows."""
        done = 0
        if self.real.get(query.table, query.table) not in self.views:
            try:
                for batch in self._columnar(query, fields):
                    yield batch
                    done += batch.num_rows
                return
            except ColumnarUnfit:
                pass
        yield from self._fetched(query, fields, skip=done)

    def _columnar(self, query: Query, fields) -> Iterator[pa.Table]:
        """The query read by ADBC, each batch checked against the types triage reads its
        columns as (`_typed`), its StringIds lookups read as their ids and resolved in Arrow
        (`_resolved`). An export whose id columns hold text (old ones hold the names
        themselves) or whose StringIds ids are not all integers is read by `sqlite3`."""
        lookups = [i for i, expr in enumerate(query.select) if expr in self._lookups]
        ids = replace(query, select=tuple(self._lookups.get(e, e) for e in query.select))
        for batch in self._adbc_batches(ids):
            # StringIds are read once the query has run (SQLite's sort for its ORDER BY), not
            # before: a read started early sorts from the start.
            if lookups and self._strings() is None:
                raise ColumnarUnfit("StringIds ids that are not all integers")
            yield _typed(self._resolved(batch, lookups), fields)

    def _adbc_batches(self, query: Query) -> Iterator[pa.RecordBatch]:
        """The query's BATCH-row Arrow batches as ADBC reads them. The driver guesses each
        column's type from the first batch and holds later batches to it: a later value of
        another type fails the read (ColumnarUnfit), and `batches` carries on from there with
        `sqlite3`."""
        import adbc_driver_manager as adbc

        try:
            statement = adbc.AdbcStatement(self._adbc_connection())
        except adbc.Error as exc:
            raise ColumnarUnfit(str(exc)) from None
        self._reading.add(statement)
        try:
            stream = _executed(statement, self.resolved(query.sql()), query.params)
            # pyarrow after SQLite's sort, not before: a read started early sorts while the
            # archive's own thread imports it (0.1 s)
            import pyarrow as pa

            try:
                with pa.RecordBatchReader.from_stream(stream) as reader:
                    yield from reader
            except (adbc.Error, pa.ArrowException, OSError) as exc:
                raise ColumnarUnfit(str(exc)) from None
        finally:
            if statement in self._reading:  # else `close` closed it, the read left unfinished
                self._reading.discard(statement)
                statement.close()

    def _strings(self) -> tuple[pa.Array, pa.Array] | None:
        """StringIds as (ids, texts), read once, texts converted as `sqlite3`'s rows are; None
        when a lookup in Arrow could differ from SQLite's: ids that are not all integers
        (SQLite compares a float id by value), or a view (no rowid order for repeated ids)."""
        with self._reading_strings:  # the first thread to need them reads them, others wait
            if not self._string_ids_read:
                self._string_ids_read = True
                self._string_ids = self._read_strings()
        return self._string_ids

    def _read_strings(self) -> tuple[pa.Array, pa.Array] | None:
        """StringIds read, when a lookup in Arrow finds what SQLite's would (`_strings`)."""
        import pyarrow as pa

        if "StringIds" not in self.views and {"id", "value"} <= self.columns("StringIds") \
                and not self.rows("SELECT count(*) FROM StringIds "
                                  "WHERE typeof(id) != 'integer'")[1][0][0]:
            read = Query("StringIds", "s", ("s.id", "s.value"), ("s.rowid",))
            table = pa.concat_tables(self.batches(read, [("id", "int"), ("value", "str")]))
            return table["id"].combine_chunks(), table["value"].combine_chunks()
        return None

    def _resolved(self, batch: pa.RecordBatch, lookups: list[int]) -> pa.RecordBatch:
        """The batch with each lookup column's ids replaced by their text: the first StringIds
        row of that id, as SQLite's subquery finds it; NULL for an id it does not hold."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not lookups:
            return batch
        assert self._string_ids is not None  # `_columnar` asked `_strings` first
        ids, texts = self._string_ids
        columns = list(batch.columns)
        for i in lookups:
            if not pa.types.is_int64(columns[i].type):  # NULLs only come back int64 too
                raise ColumnarUnfit(f"ids read as {columns[i].type}")
            found = pc.index_in(columns[i].cast(pa.int64()), value_set=ids)
            columns[i] = texts.take(found)
        return pa.record_batch(columns, names=batch.schema.names)

    def _adbc_connection(self):
        """ADBC's own connection to the export for this thread, made once (its import and open
        are cheap)."""
        thread = threading.get_ident()
        with self._connecting:
            if thread not in self._adbc:
                import adbc_driver_manager as adbc
                import adbc_driver_sqlite

                database = adbc_driver_sqlite.connect(self.uri)
                self._adbc[thread] = (database, adbc.AdbcConnection(database))
            return self._adbc[thread][1]

    def _fetched(self, query: Query, fields, skip: int = 0) -> Iterator[pa.Table]:
        """The query through `sqlite3`, in BATCH-row batches, less its first `skip` rows (read
        columnar already): the same SQL, so the same rows in the same order."""
        try:
            cursor = self.con.execute(self.resolved(query.sql()), query.params)
            for size in filter(None, [BATCH] * (skip // BATCH) + [skip % BATCH]):
                cursor.fetchmany(size)  # fetchmany(0) would fetch every row
            while rows := cursor.fetchmany(BATCH):
                yield _rows_to_arrow(rows, fields)
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None

    def _damaged(self, exc: sqlite3.DatabaseError) -> UnsupportedReport:
        """Damage SQLite finds only on the page it reads (a flipped bit deep in a table)."""
        return UnsupportedReport(f"{self.path}: corrupt SQLite export ({exc}); export the "
                                 "report again with `nsys export --type sqlite`")

    def close(self) -> None:
        """Close the export. A read a failure left unfinished (its generator suspended, the
        archive's own error on its way) holds a statement open, which ADBC's connection
        refuses to close under: those are closed first, and sqlite3's connection always."""
        try:
            for statement in list(self._reading):
                statement.close()
            self._reading.clear()
            for handles in self._adbc.values():
                for handle in reversed(handles):
                    handle.close()
            self._adbc.clear()
        finally:
            self.con.close()


class ColumnarUnfit(Exception):
    """A query the columnar read cannot give exactly as `sqlite3`'s rows convert it."""


def _executed(statement, sql: str, params: list):
    """The statement run (SQLite steps to its first row: for an ORDER BY, the whole sort, the
    GIL released), its Arrow stream; integer parameters are written into the SQL, so that a
    statement binds (which needs pyarrow) only values of other types."""
    import adbc_driver_manager as adbc

    parts = sql.split("?")
    if all(type(p) is int for p in params) and len(parts) == len(params) + 1:
        sql = "".join(f"{part}({value})" for part, value
                      in zip(parts[:-1], params, strict=True)) + parts[-1]
        params = []
    try:
        statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH)})
        statement.set_sql_query(sql)
        if params:
            import pyarrow as pa

            statement.bind(pa.record_batch([pa.array([p]) for p in params],
                                           names=[f"p{i}" for i in range(len(params))]))
        return statement.execute_query()[0]
    except (adbc.Error, OSError) as exc:
        raise ColumnarUnfit(str(exc)) from None


def _typed(batch: pa.RecordBatch, fields) -> pa.Table:
    """One ADBC batch as triage's fields, or ColumnarUnfit. A column of only NULLs comes back
    int64 whatever it holds; text keeps the export's bytes, so it is decoded as `sqlite3`'s
    rows are (`utf8`); a column typed otherwise holds values `_coerce` converts (a float or
    text in an integer column, integers in a text column). The one value the driver converts
    itself is a float in a text column (SQLite's digits, not Python's `str`): no nsys export
    holds one there."""
    import pyarrow as pa

    arrays = []
    for column, (name, kind) in zip(batch.columns, fields, strict=True):
        if kind == "int" and pa.types.is_int64(column.type):
            arrays.append(column)
        elif kind == "str" and (pa.types.is_string(column.type) or pa.types.is_binary(column.type)):
            arrays.append(utf8(column.cast(pa.binary())))
        elif column.null_count == len(column):
            arrays.append(pa.nulls(len(column), pa.int64() if kind == "int" else pa.string()))
        else:
            raise ColumnarUnfit(f"column {name} is read as {column.type}")
    return pa.table(arrays, names=[name for name, _ in fields])


def _file_url(path: str) -> str:
    """A path as an SQLite URI path, quoted byte by byte (a name whose bytes are not UTF-8
    too): what `urllib.request.pathname2url` gives on POSIX, without importing urllib.request
    (0.015-0.02 s, its HTTP machinery) into every archive of a `.sqlite`; Windows' drive
    letters and backslashes take pathname2url's own rules."""
    if os.name == "nt":
        from urllib.request import pathname2url

        return pathname2url(path)
    return quote(os.fsencode(path))


def _rows_to_arrow(rows: list[tuple], fields):
    """One fetched batch as an Arrow table, converted in C++ unless the values are unusual."""
    import pyarrow as pa

    try:
        struct = pa.struct([pa.field(name, pa.int64() if kind == "int" else pa.binary())
                            for name, kind in fields])
        arrays = pa.array(rows, type=struct).flatten()
        arrays = [utf8(a) if kind == "str" else a
                  for a, (_, kind) in zip(arrays, fields, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arrays = [_coerce(col, kind)
                  for col, (_, kind) in zip(zip(*rows, strict=True), fields, strict=True)]
    return pa.table(arrays, names=[name for name, _ in fields])


def _coerce(values, kind):
    """Slow path for a batch whose SQLite values do not have their declared types."""
    import pyarrow as pa

    if kind == "int":
        return pa.array([int(v) if isinstance(v, int) or (isinstance(v, float) and abs(v) < 2**63)
                         else None for v in values], pa.int64())
    return pa.array([as_text(v) if isinstance(v, bytes) or v is None else str(v) for v in values],
                    pa.string())
