"""`nsys export --type arrow` (one Arrow IPC stream per table in one file) as an `Export`:
memory-mapped and queried by an in-memory DuckDB that never loads an extension. Results come
back as Arrow batches: no Python object per value, which is what reading SQLite costs.

What is the Arrow export's alone lives here (reading its streams, rowids made per slice, the
slicing that keeps memory flat), apart from the `Export` both readers are (`nsys_export`), whose
`open_export` imports this reader only for an Arrow export.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from triage.capture.nsys_export import BATCH, Export, Query, by_base_name, utf8
from triage.base.errors import UnsupportedReport

if TYPE_CHECKING:
    import pyarrow as pa

# An Arrow export's table is queried this many batches' rows at a time: each DuckDB query costs
# 2-4 ms however few its rows (21 slices of one batch for 1M NVTX rows), while a slice's
# resident pages and result grow with it (peak RSS at 3M ranges: 270-280 MB in slices of two
# batches, 276-301 MB in slices of four).
SLICE_BATCHES = 2
# Once a slice keeps under 1/16 of its rows (the domain names' pass keeps a handful of 1M), the
# query's next slices are this many batches long: its fixed cost per slice was most of its time
# (0.067 s of CPU for 1M ranges, 0.032 s in slices of 16), and what a slice maps is released
# after it, however long.
SELECTIVE_SLICE_BATCHES = 16


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

        from triage.base.duck import connect, interrupted

        self._map: mmap.mmap | None = None
        self.arrow: dict[str, pa.Table] = {}
        self.con = connect(temp_directory=spill_directory)  # in memory: nothing of the file yet
        try:
            with open(arrow_path, "rb") as file:
                self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            self.arrow = _read_streams(pa.BufferReader(pa.py_buffer(self._map)))
            self.arrow.update({base: self.arrow[real]  # `X` for `X_V2`: registered as both
                               for base, real in by_base_name(set(self.arrow)).items()})
            for name, table in self.arrow.items():
                self.con.register(name, table)
        except Exception as exc:  # noqa: BLE001 - pyarrow and DuckDB raise many kinds
            self.close()
            if interrupted(exc):  # a Ctrl-C, not an export to read as SQLite instead
                raise KeyboardInterrupt from None
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
        results = self._sliced(query, table) if self.in_order(query, table) else \
            self._sorted(query, table)
        for batch in results:
            # Unsigned ids cast bit for bit: one above 2**63 must not stop the archive.
            arrays = [utf8(col) if kind == "str" else col.cast(pa.int64(), safe=False)
                      for col, (_, kind) in zip(batch.columns, fields, strict=True)]
            yield pa.table(arrays, names=[name for name, _ in fields])

    def in_order(self, query: Query, table: pa.Table) -> bool:
        """Whether the rows the query selects already come in its order: at once when its
        first key is a column that rises strictly down the whole table (no ties, no NULLs: the
        other keys never decide), else by sorting every slice (`slices_in_order`)."""
        return self.rises(table, _leading_column(query)) or self.slices_in_order(query, table)

    def rises(self, table: pa.Table, column: str | None) -> bool:
        """Whether an integer column holds no NULL and rises strictly from row to row: read
        slice by slice (each overlapping the next by a row), 5 ms for 1M rows where sorting
        the slices in DuckDB takes 0.2 s."""
        import pyarrow as pa

        if column not in table.column_names:
            return False
        values = table.column(column)
        if not pa.types.is_integer(values.type) or values.null_count:
            return False
        for offset in range(0, len(values), BATCH):
            part = values.slice(offset, BATCH + 1)
            rising = _rising(part)
            self._release()
            if not rising:
                return False
        return True

    def slices_in_order(self, query: Query, table: pa.Table) -> bool:
        """Whether each slice sorted by DuckDB itself (its own NULL and tie rules), with the
        last selected row of the slice before it, gives back its rows in export order."""
        import pyarrow as pa

        check = Query(query.table, query.alias, (f"{query.alias}.rowid",), query.order,
                      query.where, where_params=query.where_params)
        last: pa.Table | None = None
        for part in self._slices(table):
            found = self.run_sql(check.sql("_slice"), pa.concat_tables([last, part])
                              if last is not None else part, check.params)
            rowids = pa.chunked_array([b.column(0) for b in found], pa.int64())
            if not _rising(rowids):
                return False
            if len(rowids):
                last = _numbered(table, rowids[-1].as_py(), 1)
        return True

    def _sorted(self, query: Query, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """The query over the whole table, DuckDB sorting it (spilling when it must): for an
        export whose rows are not in the query's order, the only case that needs every row."""
        from triage.base.duck import arrow_batches

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

        numbered = replace(query, select=(*query.select, f"{query.alias}.rowid"))
        self.con.execute("SET threads = 1")
        slices = self._slices(table)
        try:
            part = next(slices, None)
            while part is not None:
                found = self.run_sql(numbered.sql("_slice", order=()), part, numbered.params)
                rowids = pa.chunked_array([b.column(b.num_columns - 1) for b in found],
                                          pa.int64())
                if not _rising(rowids):
                    found = self.run_sql(numbered.sql("_slice", order=(f"{query.alias}.rowid",)),
                                      part, numbered.params)
                yield from (pa.RecordBatch.from_arrays(b.columns[:-1], b.schema.names[:-1])
                            for b in found)
                part = _sent(slices, len(rowids))
        finally:
            slices.close()
            if self.arrow:  # not closed (a generator dropped unfinished ends here later)
                self.con.execute("RESET threads")  # the whole-table sort uses them all

    def _slices(self, table: pa.Table) -> Generator[pa.Table, int | None, None]:
        """Slices of a table (no copies but their rowid), its pages released after each; sent
        how many rows a slice kept, the next ones are longer when that was few of them."""
        size, offset = BATCH * SLICE_BATCHES, 0
        while offset < table.num_rows:
            kept = yield _numbered(table, offset, size)
            self._release()
            offset += size
            if kept is not None and kept * 16 < size:
                size = BATCH * SELECTIVE_SLICE_BATCHES

    def run_sql(self, sql: str, part: pa.Table, params: list[Any]) -> list[pa.RecordBatch]:
        """A query over one slice, registered as `_slice`: its whole (small) result."""
        from triage.base.duck import arrow_batches

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


def _sent(slices: Generator[pa.Table, int | None, None], kept: int) -> pa.Table | None:
    """The next slice, the generator told how many rows of the last one a query kept."""
    try:
        return slices.send(kept)
    except StopIteration:
        return None


def _rising(values: pa.Array | pa.ChunkedArray) -> bool:
    """Whether each value is above the one before it (nothing to compare: it is)."""
    import pyarrow.compute as pc

    return len(values) < 2 or pc.all(pc.greater(values[1:], values[:-1])).as_py()


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
