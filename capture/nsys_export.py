"""Nsight Systems exports, opened for SQL: SQLite files and nsys's Arrow export.

Both formats carry the same tables and columns (StringIds, TARGET_INFO_*, CUPTI_ACTIVITY_KIND_*,
NVTX_EVENTS, ...), so the readers in `nsys_tables` and `nsys` build one SQL text for either:

- `SqliteExport`: a `.sqlite` export (the user's own, or one nsys wrote for triage), its
  launch-level tables read columnar into Arrow by ADBC's SQLite driver, the rest (and what the
  driver cannot read exactly) with the standard `sqlite3` module, row batches converted to Arrow;
- `ArrowExport`: `nsys export --type arrow` (one Arrow IPC stream per table in one file),
  memory-mapped and queried by an in-memory DuckDB that never loads an extension. Results come
  back as Arrow batches: no Python object per value, which is what reading SQLite costs.

Export schemas differ across nsys versions (tables absent when empty, columns added, renamed,
or holding text inline instead of a StringIds id), so every query is built from the columns
the export actually has (`columns`, `col`, `string`).
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload
from urllib.parse import quote
from urllib.request import pathname2url

from triage.errors import UnsupportedReport

if TYPE_CHECKING:
    import pyarrow as pa

BATCH = 65536
# An Arrow export's table is queried this many batches' rows at a time: each DuckDB query costs
# 2-4 ms however few its rows (21 slices of one batch for 1M NVTX rows), while a slice's
# resident pages and result grow with it (peak RSS at 3M ranges: 270-280 MB in slices of two
# batches, 276-301 MB in slices of four).
SLICE_BATCHES = 2
NOT_NSYS = ("an SQLite database but not an Nsight Systems export (no StringIds / TARGET_INFO_* "
            "tables); pass the file written by `nsys export --type sqlite REPORT.nsys-rep`")


@overload
def as_text(value: None) -> None: ...


@overload
def as_text(value: str | bytes | int | float) -> str: ...


def as_text(value: object) -> str | None:
    """Export text as str; exports can hold bytes that are not UTF-8. NULL stays None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


@dataclass(frozen=True)
class Query:
    """One launch-level SELECT kept in its parts, so that an engine may run it over slices of
    its table: the rows of `table` (named `alias`) that pass `where`, in `order` (whose last
    key is the export's own row order, which makes the order total)."""

    table: str
    alias: str
    select: tuple[str, ...]
    order: tuple[str, ...] = ()
    where: str = ""
    select_params: tuple[Any, ...] = ()
    where_params: tuple[Any, ...] = ()

    def sql(self, source: str | None = None, order: tuple[str, ...] | None = None) -> str:
        """The SELECT over the table (or over `source`, a slice of it), in `order` if given."""
        keys = self.order if order is None else order
        return (f"SELECT {', '.join(self.select)} FROM {source or self.table} {self.alias}"
                + (f" WHERE {self.where}" if self.where else "")
                + (f" ORDER BY {', '.join(keys)}" if keys else ""))

    @property
    def params(self) -> list[Any]:
        """The parameters in the order their `?` appear: the select list's, then the filter's."""
        return [*self.select_params, *self.where_params]


class Export(ABC):
    """An open export: its tables and their columns (probed once), and SQL over them."""

    def __init__(self, path, tables: set[str]):
        self.path, self.tables = path, tables
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = self._table_columns(table) if table in self.tables else set()
        return self._columns[table]

    def col(self, table: str, name: str, alias: str = "t") -> str:
        """`alias.name` when the table has that column, else NULL."""
        return f"{alias}.{name}" if name in self.columns(table) else "NULL"

    def pairs(self, table: str) -> list[tuple[str, str]]:
        if not {"name", "value"} <= self.columns(table):
            return []
        _names, rows = self.rows(f"SELECT name, value FROM {table}")
        return [(as_text(name), as_text(value)) for name, value in rows]

    def check_is_nsys(self) -> None:
        if "StringIds" not in self.tables or not any(t.startswith("TARGET_INFO_")
                                                     for t in self.tables):
            raise UnsupportedReport(f"{self.path}: {NOT_NSYS}")

    def string(self, table: str, column: str, alias: str = "t") -> str:
        """SQL for a column holding a StringIds id, resolved to its text (older exports held
        the text itself)."""
        expr = self.col(table, column, alias)
        lookup = f"(SELECT value FROM StringIds WHERE id = {expr})"
        holds_id = self._holds_integers(table, column)
        if holds_id is None:
            return f"(CASE WHEN typeof({expr}) = 'integer' THEN {lookup} ELSE {expr} END)"
        return lookup if holds_id else expr

    # -- what each engine supplies ------------------------------------------------------------

    @abstractmethod
    def _table_columns(self, table: str) -> set[str]:
        """The column names of a table the export has."""

    @abstractmethod
    def _holds_integers(self, table: str, column: str) -> bool | None:
        """Whether a column holds integers; None when only each row's value can tell."""

    @abstractmethod
    def row_order(self, table: str, alias: str) -> str | None:
        """SQL for the export's own order of a table's rows, when it has one."""

    @abstractmethod
    def rows(self, sql: str, params=()) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a small query."""

    @abstractmethod
    def batches(self, query: Query, fields) -> Iterator[pa.Table]:
        """The query's rows as Arrow tables of at most BATCH rows, columns named and typed by
        `fields` ((name, "int" | "str") pairs); never the whole result at once."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection and whatever the export maps."""


# -- SQLite ------------------------------------------------------------------------------------


class SqliteExport(Export):
    """A `.sqlite` export: read-only, immutable. Launch-level queries are read columnar, by
    ADBC's SQLite driver straight into Arrow (`_columnar`); small queries, views and any
    query whose columns hold values of another type than triage reads them as, through the
    `sqlite3` module, text as bytes, row batches converted to Arrow (`_fetched`)."""

    def __init__(self, path, sqlite_path=None):
        self.uri = f"file:{_file_url(os.path.abspath(sqlite_path or path))}?mode=ro&immutable=1"
        self.con = None
        self._adbc: tuple | None = None  # (database, connection), opened by the first query
        self._reading: set = set()  # ADBC statements of reads not finished (closed first)
        self._lookups: dict[str, str] = {}  # SQL of a StringIds lookup -> the id column's
        self._string_ids: tuple[pa.Array, pa.Array] | None = None
        self._string_ids_read = False
        try:
            # Batches are fetched on a worker thread (`nsys_tables.prefetched`), one query at a
            # time: never two threads on the connection at once.
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
        return None if table in self.views else f"{alias}.rowid"

    def rows(self, sql: str, params=()) -> tuple[list[str], list[tuple]]:
        try:
            cursor = self.con.execute(sql, params)
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
        if query.table not in self.views:
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
        if lookups and self._strings() is None:
            raise ColumnarUnfit("StringIds ids that are not all integers")
        ids = replace(query, select=tuple(self._lookups.get(e, e) for e in query.select))
        for batch in self._adbc_batches(ids):
            yield _typed(self._resolved(batch, lookups), fields)

    def _adbc_batches(self, query: Query) -> Iterator[pa.RecordBatch]:
        """The query's BATCH-row Arrow batches as ADBC reads them. The driver guesses each
        column's type from the first batch and holds later batches to it: a later value of
        another type fails the read (ColumnarUnfit), and `batches` carries on from there with
        `sqlite3`."""
        import adbc_driver_manager as adbc
        import pyarrow as pa

        try:
            statement = adbc.AdbcStatement(self._adbc_connection())
        except adbc.Error as exc:
            raise ColumnarUnfit(str(exc)) from None
        self._reading.add(statement)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH)})
            statement.set_sql_query(query.sql())
            if query.params:
                statement.bind(pa.record_batch([pa.array([p]) for p in query.params],
                                               names=[f"p{i}" for i in range(len(query.params))]))
            stream, _count = statement.execute_query()
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
        import pyarrow as pa

        if not self._string_ids_read:
            self._string_ids_read = True
            if "StringIds" not in self.views and {"id", "value"} <= self.columns("StringIds") \
                    and not self.rows("SELECT count(*) FROM StringIds "
                                      "WHERE typeof(id) != 'integer'")[1][0][0]:
                read = Query("StringIds", "s", ("s.id", "s.value"), ("s.rowid",))
                table = pa.concat_tables(self.batches(read, [("id", "int"), ("value", "str")]))
                self._string_ids = (table["id"].combine_chunks(),
                                    table["value"].combine_chunks())
        return self._string_ids

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
        """ADBC's own connection to the export, made once (its import and open are cheap)."""
        if self._adbc is None:
            import adbc_driver_manager as adbc
            import adbc_driver_sqlite

            database = adbc_driver_sqlite.connect(self.uri)
            self._adbc = (database, adbc.AdbcConnection(database))
        return self._adbc[1]

    def _fetched(self, query: Query, fields, skip: int = 0) -> Iterator[pa.Table]:
        """The query through `sqlite3`, in BATCH-row batches, less its first `skip` rows (read
        columnar already, in whole batches): the same SQL, so the same rows in the same order."""
        try:
            cursor = self.con.execute(query.sql(), query.params)
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
            if self._adbc is not None:
                for handle in reversed(self._adbc):
                    handle.close()
                self._adbc = None
        finally:
            self.con.close()


class ColumnarUnfit(Exception):
    """A query the columnar read cannot give exactly as `sqlite3`'s rows convert it."""


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
    """A path as an SQLite URI path; a name whose bytes are not UTF-8 is quoted byte by byte
    (pathname2url takes text only)."""
    try:
        return pathname2url(path)
    except UnicodeEncodeError:
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


def utf8(array):
    """Binary -> string; bytes that are not UTF-8 are decoded with replacement characters.

    Valid text is cast in place; only a chunk holding invalid bytes is rebuilt value by value.
    """
    import pyarrow as pa

    if pa.types.is_string(array.type):
        return array
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([utf8(chunk) for chunk in array.chunks], pa.string())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([as_text(v) for v in array.to_pylist()], pa.string())


# -- nsys's Arrow export -----------------------------------------------------------------------


class ArrowExport(Export):
    """`nsys export --type arrow`: one IPC stream per table, each named by its `table_name`
    metadata. Tables are memory-mapped (not read into memory); the rows a query reads get a
    `rowid` column (their position in the export), so the SQL written for SQLite (which orders
    ties by rowid) means the same here.

    Memory stays flat however long the capture: nsys writes a table as one record batch, so a
    launch-level query runs slice by slice (`_sliced`) when the export already holds its rows
    in the query's order (nsys before 2025.6 writes them by time), instead of DuckDB sorting
    the whole table first; and the map's pages are dropped from this process after each slice
    (`_release`), since resident pages of a map count as the process's memory.
    """

    def __init__(self, path, arrow_path, spill_directory: str | None = None):
        import pyarrow as pa

        from triage.duck import connect

        self._map: mmap.mmap | None = None
        self.arrow: dict[str, pa.Table] = {}
        self.con = connect(temp_directory=spill_directory)  # in memory: nothing of the file yet
        try:
            with open(arrow_path, "rb") as file:
                self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            self.arrow = _read_streams(pa.BufferReader(pa.py_buffer(self._map)))
            for name, table in self.arrow.items():
                self.con.register(name, table)
        except Exception as exc:  # noqa: BLE001 - pyarrow and DuckDB raise many kinds
            self.close()
            raise UnsupportedReport(f"{path}: nsys wrote an Arrow export triage cannot read "
                                    f"({type(exc).__name__}: {exc}); archive its "
                                    "`nsys export --type sqlite` instead") from None
        self._release()
        super().__init__(path, set(self.arrow))

    def _table_columns(self, table: str) -> set[str]:
        return set(self.arrow[table].column_names)

    def _holds_integers(self, table: str, column: str) -> bool | None:
        import pyarrow as pa

        arrow = self.arrow.get(table)
        if arrow is None or column not in arrow.column_names:
            return False
        return pa.types.is_integer(arrow.schema.field(column).type)

    def row_order(self, table: str, alias: str) -> str | None:
        return f"{alias}.rowid"

    def rows(self, sql: str, params=()) -> tuple[list[str], list[tuple]]:
        cursor = self.con.execute(sql, list(params))
        return [d[0] for d in cursor.description], cursor.fetchall()

    def batches(self, query: Query, fields) -> Iterator[pa.Table]:
        import pyarrow as pa


        table = self.arrow[query.table]
        results = self._sliced(query, table) if self._in_order(query, table) else \
            self._sorted(query, table)
        for batch in results:
            # Unsigned ids cast bit for bit: one above 2**63 must not stop the archive.
            arrays = [utf8(col) if kind == "str" else col.cast(pa.int64(), safe=False)
                      for col, (_, kind) in zip(batch.columns, fields, strict=True)]
            yield pa.table(arrays, names=[name for name, _ in fields])

    def _in_order(self, query: Query, table: pa.Table) -> bool:
        """Whether the rows the query selects already come in its order: at once when its
        first key is a column that rises strictly down the whole table (no ties, no NULLs: the
        other keys never decide), else by sorting every slice (`_slices_in_order`)."""
        return self._rises(table, _leading_column(query)) or self._slices_in_order(query, table)

    def _rises(self, table: pa.Table, column: str | None) -> bool:
        """Whether an integer column holds no NULL and rises strictly from row to row: read
        slice by slice (each overlapping the next by a row), 5 ms for 1M rows where sorting
        the slices in DuckDB takes 0.2 s."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if column not in table.column_names:
            return False
        values = table.column(column)
        if not pa.types.is_integer(values.type) or values.null_count:
            return False
        for offset in range(0, len(values), BATCH):
            part = values.slice(offset, BATCH + 1)
            rising = len(part) < 2 or pc.all(pc.greater(part[1:], part[:-1])).as_py()
            self._release()
            if not rising:
                return False
        return True

    def _slices_in_order(self, query: Query, table: pa.Table) -> bool:
        """Whether each slice sorted by DuckDB itself (its own NULL and tie rules), with the
        last selected row of the slice before it, gives back its rows in export order."""
        import pyarrow as pa
        import pyarrow.compute as pc

        check = Query(query.table, query.alias, (f"{query.alias}.rowid",), query.order,
                      query.where, where_params=query.where_params)
        last: pa.Table | None = None
        for part in self._slices(table):
            found = self._run(check.sql("_slice"), pa.concat_tables([last, part])
                              if last is not None else part, check.params)
            rowids = pa.chunked_array([b.column(0) for b in found], pa.int64())
            if len(rowids) > 1 and not pc.all(pc.greater(rowids[1:], rowids[:-1])).as_py():
                return False
            if len(rowids):
                last = _numbered(table, rowids[-1].as_py(), 1)
        return True

    def _sorted(self, query: Query, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """The query over the whole table, DuckDB sorting it (spilling when it must): for an
        export whose rows are not in the query's order, the only case that needs every row."""
        from triage.duck import arrow_batches

        self.con.register("_whole", _numbered(table, 0, table.num_rows))
        try:
            yield from arrow_batches(self.con, query.sql("_whole"), query.params, BATCH)
        finally:
            self.con.unregister("_whole")

    def _sliced(self, query: Query, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """The query run over each slice of its table in turn, rows kept in export order.

        Unsorted first, with each row's rowid, on one DuckDB thread: a single-threaded scan
        keeps its rows' order (preserve_insertion_order; two threads interleave them), so
        rowids that come back rising are the rows in export order, and the sort (0.1 s of
        0.25 s for 1M ranges) runs only when they do not. One thread costs no time here: the
        slices are read on a worker thread beside the shaping and the Parquet encoding."""
        import pyarrow as pa
        import pyarrow.compute as pc

        numbered = replace(query, select=(*query.select, f"{query.alias}.rowid"))
        self.con.execute("SET threads = 1")
        try:
            for part in self._slices(table):
                found = self._run(numbered.sql("_slice", order=()), part, numbered.params)
                rowids = pa.chunked_array([b.column(b.num_columns - 1) for b in found],
                                          pa.int64())
                if len(rowids) > 1 and not pc.all(pc.greater(rowids[1:], rowids[:-1])).as_py():
                    found = self._run(numbered.sql("_slice", order=(f"{query.alias}.rowid",)),
                                      part, numbered.params)
                yield from (pa.RecordBatch.from_arrays(b.columns[:-1], b.schema.names[:-1])
                            for b in found)
        finally:
            if self.arrow:  # not closed (a generator dropped unfinished ends here later)
                self.con.execute("RESET threads")  # the whole-table sort uses them all

    def _slices(self, table: pa.Table) -> Iterator[pa.Table]:
        """Slices of a table (no copies but their rowid), its pages released after each."""
        size = BATCH * SLICE_BATCHES
        for offset in range(0, table.num_rows, size):
            yield _numbered(table, offset, size)
            self._release()

    def _run(self, sql: str, part: pa.Table, params: list[Any]) -> list[pa.RecordBatch]:
        """A query over one slice, registered as `_slice`: its whole (small) result."""
        from triage.duck import arrow_batches

        self.con.register("_slice", part)
        try:
            return list(arrow_batches(self.con, sql, params, BATCH))
        finally:
            self.con.unregister("_slice")

    def _release(self) -> None:
        """Drop the map's pages from this process: they stay in the page cache and fault back
        in when read again, but resident they would count as memory, the whole export's by
        the end of a long capture."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        self.con.close()
        self.arrow = {}
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an Arrow array still points into it: unmapped when freed
                pass


def _leading_column(query: Query) -> str | None:
    """The column a query orders by first, when that key is a plain column of its table in
    ascending order (`e.start`, `t.start NULLS FIRST`); None for any other key."""
    found = re.fullmatch(rf"{re.escape(query.alias)}\.(\w+)(?: NULLS (?:FIRST|LAST))?",
                         query.order[0]) if query.order else None
    return found.group(1) if found else None


def _read_streams(source) -> dict:
    """{table name: Arrow table} of a multi-stream IPC file, text columns as strings."""
    import pyarrow as pa

    tables = {}
    while source.tell() < source.size():
        table = pa.ipc.open_stream(source).read_all()
        metadata = table.schema.metadata
        name = metadata.get(b"table_name", b"").decode() if metadata else ""
        if not name:
            raise pa.ArrowInvalid("a stream without a table_name")
        columns = [utf8(c) if pa.types.is_binary(c.type) or pa.types.is_large_binary(c.type)
                   else c for c in table.columns]
        tables[name] = pa.table(columns, names=table.column_names)
    return tables


def _numbered(table: pa.Table, offset: int, count: int) -> pa.Table:
    """Rows offset.. offset + count - 1 of a table with their `rowid` (their position, 0-based,
    as SQLite numbers an export's rows in order): made per slice, since a whole table's rowid
    column alone is 8 bytes a row (80 MB at 10M ranges). Computed in Arrow (a Python range
    costs 0.1 s per 1M)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    part = table.slice(offset, count)
    ones = pa.repeat(pa.scalar(1, pa.int64()), part.num_rows)
    return part.append_column("rowid", pc.cumulative_sum(ones, start=offset - 1))


def open_export(path, exported=None, fmt: str = "sqlite") -> Export:
    """The export at `exported` (or `path` itself, a user's .sqlite) in the given format. An
    Arrow export's large sorts spill to a folder of the system's temp directory that DuckDB
    makes only when it spills and removes when closed (never into the store, whose layout
    has no place for it)."""
    if fmt == "arrow":
        spill = os.path.join(tempfile.gettempdir(), f"triage-spill-{secrets.token_hex(8)}")
        return ArrowExport(path, exported, spill)
    return SqliteExport(path, exported)
