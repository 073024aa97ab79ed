"""Parquet tables: streaming writers for the Arrow tables readers hand over, and reading back.

Readers yield Arrow tables with the named columns of their schema (`triage.schemas.tables`);
a TableSet writes each into a ParquetWriter in row groups, so no report is ever held in memory
whole. Finished files move into the store as content-addressed objects.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive import lease
from triage.archive.objects import Staged
from triage.archive.store import Store
from triage.base.errors import StoreError
from triage.schemas.tables import arrow_schema, check_columns

BATCH_ROWS = 65536
# Deterministic bytes for the same rows: a fixed codec, level and row-group size (a run's
# tables add an encoding per column, `table_options`; the catalog keeps dictionaries).
PARQUET_OPTIONS: dict[str, Any] = dict(compression="zstd", compression_level=3,
                                       use_dictionary=True, write_statistics=True)
# The encoding of a table's integer columns (`column_encodings`).
INTEGER_ENCODING = "DELTA_BINARY_PACKED"


class TableWriter:
    """Streams the Arrow tables a reader hands over for one table into a Parquet file.

    Tables arrive in batches of any size; row groups are always BATCH_ROWS rows, so the file's
    bytes depend on the rows alone, not on how a reader happened to batch them (the same
    capture archived from its .nsys-rep or from its .sqlite export gives the same objects).
    """

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.schema = arrow_schema(name)
        self.count = 0
        self.closed = False
        # What sees each batch as it is written (a summary computed from the rows streaming
        # past rather than from the finished file read back: `TableSet.follow`).
        self.followers: list[Callable[[pa.Table], None]] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        # A worker thread for full row groups, started by the first one.
        self._encoder: ThreadPoolExecutor | None = None
        self._encoding: Future[None] | None = None  # the row group being encoded there
        # An open sink, not a path string: pyarrow resolves a path's filesystem on every
        # writer, which costs more than writing a small table.
        self._sink = pa.OSFile(str(path), "wb")
        try:  # the writer writes the file's magic at once: a full disk fails here
            self._writer = pq.ParquetWriter(self._sink, self.schema, **table_options(self.schema))
        except BaseException:
            self._sink.close()  # else the removed temp's space stays held by the open file
            raise

    def write_arrow(self, table: pa.Table | pa.RecordBatch) -> None:
        """Append rows with the schema's named columns (in any order; each one given)."""
        self._check_open()
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        check_columns(self.name, table.column_names)
        table = table.select(self.schema.names)
        # Cast only when needed: the first cast imports pyarrow.compute (60 ms per command).
        table = table if table.schema.equals(self.schema) else table.cast(self.schema)
        for follower in self.followers:
            follower(table)
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
                self._write(final=True)
                self._wait()
                self._writer.close()
            finally:
                if self._encoder is not None:
                    self._encoder.shutdown(wait=True)
                self._sink.close()
        return self.count


def column_encodings(schema: pa.Schema) -> dict[str, Any]:
    """Parquet options giving each column of a flat table the encoding its data suits.

    Dictionaries only for text, whose values repeat (kernel, API and range names): building
    them for start/end timestamps, nearly all unique, was more than half the encoding's CPU
    (benchmarks/bench_encoding.py: per column, 0.43x the CPU and 0.53x the bytes of 1M NVTX
    ranges). Integers are delta encoded (timestamps rising by small steps, ids and indexes that
    rarely change pack into a few bits each), floats and booleans stored plain. Run ids do not
    hash table bytes (docs/store.md "Run identity"), so this changes no run's id; DuckDB, Spark
    and pyarrow read all three.
    """
    text = [f.name for f in schema if pa.types.is_string(f.type)]
    encoding = {f.name: INTEGER_ENCODING if pa.types.is_integer(f.type) else "PLAIN"
                for f in schema if f.name not in text}
    return dict(use_dictionary=text, column_encoding=encoding)


def table_options(schema: pa.Schema) -> dict[str, Any]:
    """The ParquetWriter options of a run's table: the fixed ones, and its columns' encodings."""
    return {**PARQUET_OPTIONS, **column_encodings(schema)}


class TableSet:
    """The tables of one run being written: temp files under the store, adopted on finish."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writers: dict[str, TableWriter] = {}
        self._temps: list[Path] = []
        self._sealed: dict[str, Staged] = {}
        # Summary tables gathered while their source was written (`summaries.follow_summaries`):
        # name -> the table, or None where the SQL over the finished source must compute it.
        self.streamed: dict[str, Callable[[], pa.Table | None]] = {}

    def __enter__(self) -> TableSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def writer(self, name: str) -> TableWriter:
        if name not in self.writers:
            temp = self.store.objects.new_temp(f"-{name}.parquet")
            self._temps.append(temp)
            self.writers[name] = TableWriter(name, temp)
        return self.writers[name]

    def follow(self, name: str, follower: Callable[[pa.Table], None]) -> None:
        """Hand every batch of table `name` to `follower` as well, in the order written, as
        the table's schema has it (before any row of it is written)."""
        self.writer(name).followers.append(follower)

    def path(self, name: str) -> Path:
        """The finished temp file of a table (closed, no more rows), e.g. for SQL summaries."""
        self.writer(name).close()
        return self._written(name)

    def close(self) -> None:
        """Write every table's footer: all their bytes are on disk, none is visible yet."""
        for writer in self.writers.values():
            writer.close()

    def bytes_written(self) -> int:
        """What the temp files hold now (what the run needed when the disk filled up)."""
        return sum(temp.stat().st_size for temp in self._temps if temp.exists())

    def seal(self) -> dict[str, dict]:
        """Close every table and hash it; {name: {sha256, rows, bytes}} for the manifest. Still
        nothing is visible: the tables' keys name the run, whose id the manifest gives."""
        names = sorted(self.writers)
        rows = [self.writers[name].close() for name in names]
        self._sealed = {name: self._staged(name) for name in names}
        return {name: {"sha256": staged.sha256, "rows": count, "bytes": staged.bytes}
                for name, count, staged in zip(names, rows, self._sealed.values(), strict=True)}

    def publish(self, run_id: str) -> None:
        """Move the sealed tables into the store under the run's id (tables/<name>/run_id=<id>),
        side by side: on S3 each PUT waits milliseconds on the server (the 6 tables of an ncu
        run were most of its archive there). A remote store's uploads stay in the local cache:
        the catalog row reads kernel_summary back at once, and a `show` or `diff` next."""
        for name, staged in self._sealed.items():
            if not staged.temp.exists():
                raise self._removed(name)
        lease.side_by_side([partial(self.store.objects.publish, staged,
                                    self.store.tables.key(run_id, name, staged.sha256), cache=True)
                            for name, staged in self._sealed.items()])

    def _written(self, name: str) -> Path:
        """A closed table's temp file, which `triage gc --grace 0` may have removed meanwhile
        (it removes every temp file, however new): say so, not DuckDB's or the OS's error."""
        path = self.writers[name].path
        if not path.exists():
            raise self._removed(name)
        return path

    def _staged(self, name: str) -> Staged:
        try:
            return self.store.objects.stage_temp(self._written(name))
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


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table read from a file of an older schema, in `schema`'s columns and order: a column
    added since reads as nulls, so a run archived before it still diffs and queries (readers
    then fall back, e.g. from sections.metric_label to metric_name). Types are left as stored."""
    for field in schema:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names)


def read_table(store: Store, run_id: str, name: str, sha256: str,
               columns: list[str] | None = None) -> pa.Table:
    """Read one stored table of a run."""
    # ParquetFile, not pq.read_table: that one imports pyarrow.dataset and pyarrow.compute
    # (about 60 ms on every command) to read a single file.
    return pq.ParquetFile(store.tables.local(run_id, name, sha256)).read(columns=columns)
