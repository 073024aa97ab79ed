"""Parquet tables: their Arrow schemas (from schemas/tables.json) and streaming writers.

Readers append rows (tuples in schema order) to a TableSet; rows are flushed to a ParquetWriter
in batches, so no report is ever held in memory whole. Finished files move into the store as
content-addressed objects.
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive import atomic
from triage.archive.store import Store
from triage.errors import StoreError

BATCH_ROWS = 65536
ARROW_TYPES = {
    "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
    "string": pa.string(), "bool": pa.bool_(),
}
# Deterministic bytes for the same rows: a fixed codec, level and row-group size.
PARQUET_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=True,
                       write_statistics=True)


@lru_cache(maxsize=1)
def table_specs() -> dict:
    """schemas/tables.json, parsed once."""
    text = resources.files("triage.schemas").joinpath("tables.json").read_text()
    return json.loads(text)


def tables_version() -> int:
    return table_specs()["version"]


def tables_for_tool(tool: str) -> list[str]:
    """The tables every run of this tool has (possibly empty), in declaration order."""
    return [name for name, spec in table_specs()["tables"].items() if tool in spec["tools"]]


def _spec(name: str) -> dict:
    specs = table_specs()
    return specs["catalog"] if name == "catalog" else specs["tables"][name]


def _arrow_type(kind: str) -> pa.DataType:
    """An Arrow type from its declaration; 'list:T' is a list of rows of table T."""
    if kind.startswith("list:"):
        return pa.list_(pa.struct(list(arrow_schema(kind[5:]))))
    return ARROW_TYPES[kind]


@lru_cache(maxsize=None)
def arrow_schema(name: str) -> pa.Schema:
    """The Arrow schema of one table (or of the catalog), from its declaration."""
    return pa.schema([pa.field(col, _arrow_type(kind)) for col, kind, _doc in _spec(name)["columns"]])


def rows_table(schema: pa.Schema, rows: list[tuple]) -> pa.Table:
    """Python row tuples as an Arrow table of `schema`, converted in one C++ pass (as a struct
    array) rather than column by column.

    Text that was not UTF-8 in the report reaches Python with surrogate escapes (`ncu_report`
    decodes that way), which Arrow refuses: such a batch is converted again with those bytes
    as U+FFFD, as text read from SQLite exports is.
    """
    struct = pa.struct(list(schema))
    try:
        return pa.Table.from_struct_array(pa.array(rows, type=struct))
    except UnicodeEncodeError:
        return pa.Table.from_struct_array(pa.array([tuple(map(_valid_text, row)) for row in rows],
                                                   type=struct))


def _valid_text(value):
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


class TableWriter:
    """Streams rows of one table into a Parquet file.

    Rows arrive as Python tuples (`append`, `extend`) or Arrow tables (`write_arrow`) in
    batches of any size; row groups are always BATCH_ROWS rows, so the file's bytes depend on
    the rows alone, not on how a reader happened to batch them (the same capture archived from
    its .nsys-rep or from its .sqlite export gives the same table objects).
    """

    def __init__(self, name: str, path: Path):
        self.name = name
        self.path = path
        self.schema = arrow_schema(name)
        self.rows: list[tuple] = []
        self.count = 0
        self.closed = False
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._encoder = None  # a worker thread for full row groups, started by the first one
        self._encoding = None  # the row group being encoded there
        # An open sink, not a path string: pyarrow resolves a path's filesystem on every
        # writer, which costs more than writing a small table.
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pq.ParquetWriter(self._sink, self.schema, **PARQUET_OPTIONS)

    def append(self, row: tuple) -> None:
        self._check_open()
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def extend(self, rows) -> None:
        self._check_open()
        self.rows.extend(rows)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def write_arrow(self, table: pa.Table) -> None:
        """Append an Arrow table (e.g. a DuckDB result) whose columns match the schema."""
        self._check_open()
        self.flush()
        table = table.select(self.schema.names)
        # Cast only when needed: the first cast imports pyarrow.compute (60 ms per command).
        self._queue(table if table.schema.equals(self.schema) else table.cast(self.schema))

    def flush(self) -> None:
        if self.rows:
            table, self.rows = rows_table(self.schema, self.rows), []
            self._queue(table)

    def _queue(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= BATCH_ROWS:
            self._write(final=False)

    def _write(self, final: bool) -> None:
        """Write the whole row groups queued (and, when final, the rest)."""
        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        size = table.num_rows if final else table.num_rows - table.num_rows % BATCH_ROWS
        for offset in range(0, size, BATCH_ROWS):
            group = table.slice(offset, min(BATCH_ROWS, size - offset)).combine_chunks()
            if final:
                self._wait()
                self._writer.write_table(group, row_group_size=BATCH_ROWS)
            else:
                self._encode(group)
        rest = table.slice(size)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
        self.count += size

    def _encode(self, group: pa.Table) -> None:
        """Encode a full row group on the worker thread (Parquet encoding releases the GIL, so
        it overlaps reading the next rows); one at a time, in order."""
        self._wait()
        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(max_workers=1)
        self._encoding = self._encoder.submit(self._writer.write_table, group,
                                              row_group_size=BATCH_ROWS)

    def _wait(self) -> None:
        if self._encoding is not None:
            encoding, self._encoding = self._encoding, None
            encoding.result()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"table {self.name} was closed before all its rows were written")

    def close(self) -> int:
        """Write the footer; idempotent, so a table can be closed early to be read back."""
        if not self.closed:
            self.closed = True
            try:
                self.flush()
                self._write(final=True)
                self._wait()
                self._writer.close()
            finally:
                if self._encoder is not None:
                    self._encoder.shutdown(wait=True)
                self._sink.close()
        return self.count


class TableSet:
    """The tables of one run being written: temp files under the store, adopted on finish."""

    def __init__(self, store: Store):
        self.store = store
        self.writers: dict[str, TableWriter] = {}
        self._temps: list[Path] = []

    def writer(self, name: str) -> TableWriter:
        if name not in self.writers:
            self.store.objects.mkdir(parents=True, exist_ok=True)
            temp = _new_temp(self.store.objects, f"-{name}.parquet")
            self._temps.append(temp)
            self.writers[name] = TableWriter(name, temp)
        return self.writers[name]

    def path(self, name: str) -> Path:
        """The finished temp file of a table (closed, no more rows), e.g. for SQL summaries."""
        self.writer(name).close()
        return self._written(name)

    def finish(self) -> dict[str, dict]:
        """Close every table and move it into the store; return {name: {sha256, rows, bytes}}."""
        names = sorted(self.writers)
        rows = [self.writers[name].close() for name in names]
        adopted = [self._adopted(n) for n in names]
        return {name: {"sha256": sha, "rows": count, "bytes": size}
                for name, count, (sha, size) in zip(names, rows, adopted, strict=True)}

    def _written(self, name: str) -> Path:
        """A closed table's temp file, which `triage gc --grace 0` may have removed meanwhile
        (it removes every temp file, however new): say so, not DuckDB's or the OS's error."""
        path = self.writers[name].path
        if not path.exists():
            raise self._removed(name)
        return path

    def _adopted(self, name: str) -> tuple[str, int]:
        try:
            return self.store.adopt_temp(self._written(name))
        except FileNotFoundError:  # removed between the check and the hashing
            raise self._removed(name) from None

    def _removed(self, name: str) -> StoreError:
        return StoreError(f"{self.writers[name].path}: the {name} table this archive was "
                          "writing was removed while it ran (by `triage gc --grace 0`?); "
                          "archive again")

    def discard(self) -> None:
        """Remove whatever temp files are left (on error or after finish)."""
        for writer in self.writers.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - closing a half-written file during cleanup
                pass
        for temp in self._temps:
            temp.unlink(missing_ok=True)


def _new_temp(directory: Path, suffix: str) -> Path:
    fd, name = tempfile.mkstemp(prefix=atomic.TMP_PREFIX, suffix=suffix, dir=directory)
    os.close(fd)
    return Path(name)


def read_table(store: Store, ref: dict | None, columns: list[str] | None = None) -> pa.Table | None:
    """Read one stored table by its manifest entry, or None when the run has no such table."""
    if not ref:
        return None
    # ParquetFile, not pq.read_table: that one imports pyarrow.dataset and pyarrow.compute
    # (about 60 ms on every command) to read a single file.
    return pq.ParquetFile(store.object_path(ref["sha256"])).read(columns=columns)
