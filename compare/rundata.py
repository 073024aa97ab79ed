"""A run as the comparison code sees it: its record and lazily read tables."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive.model import RunRecord
from triage.archive.runs import load_record
from triage.archive.store import Store
from triage.archive.tables import BATCH_ROWS, conform
from triage.base.errors import CorruptObject, TriageError
from triage.schemas.tables import arrow_schema

if TYPE_CHECKING:
    from triage.compare.launch_stats import NcuTables


class RunData:
    """One archived run: its typed record; tables load on demand."""

    def __init__(self, store: Store, ref: str):
        self.store = store
        self.record: RunRecord = load_record(store, ref)
        self.id = self.record.id
        if self.record.failed_capture:
            raise TriageError(f"run {self.id[:12]} is a capture attempt that produced no report; "
                              f"there is nothing to compare or explain (`triage show "
                              f"{self.id[:12]}` says what happened)")

    @property
    def tool(self) -> str:
        return self.record.tool

    def has(self, name: str) -> bool:
        return name in self.record.tables

    def parquet(self, name: str, dictionary: tuple[str, ...] = ()) -> pq.ParquetFile | None:
        """The stored table's file; `dictionary` columns read dictionary-encoded."""
        ref = self.record.tables.get(name)
        if ref is None:
            return None
        try:
            path = self.store.tables.local(self.id, name, ref.sha256)
            return pq.ParquetFile(path, read_dictionary=list(dictionary) or None)
        except (OSError, pa.ArrowInvalid) as exc:
            raise self._damaged(name, exc) from None

    def _damaged(self, name: str, exc: Exception) -> CorruptObject:
        return CorruptObject(f"run {self.id[:12]}: its {name} table is missing or damaged "
                             f"({str(exc).splitlines()[0][:80]}); `triage verify` checks the store")

    def table(self, name: str, columns: list[str] | None = None,
              dictionary: tuple[str, ...] = ()) -> pa.Table | None:
        """A stored table, or None if the run has none."""
        source = self.parquet(name, dictionary)
        if source is None:
            return None
        try:
            return source.read(columns=columns)
        except (OSError, pa.ArrowInvalid) as exc:
            raise self._damaged(name, exc) from None

    def batches(self, name: str, columns: list[str],
                dictionary: tuple[str, ...] = ()) -> Iterator[pa.RecordBatch]:
        """A stored table's rows a batch at a time (none if the run has no such table): what
        reads a launch-level table through holds one batch of it, not the whole."""
        source = self.parquet(name, dictionary)
        if source is None:
            return
        try:
            yield from source.iter_batches(batch_size=BATCH_ROWS, columns=columns,
                                           use_threads=False)
        except (OSError, pa.ArrowInvalid) as exc:
            raise self._damaged(name, exc) from None

    @cached_property
    def ncu(self) -> NcuTables:
        """The run's ncu tables as DuckDB queries them (one connection per run)."""
        from triage.compare.launch_stats import NcuTables

        return NcuTables(self)

    @cached_property
    def kernels(self) -> pa.Table:
        """Each launch: its indices, names, duration and launch configuration (grid, block)."""
        columns = ["report_index", "kernel_index", "name", "short_name", "duration_ns",
                   *(f"{part}_{axis}" for part in ("grid", "block") for axis in "xyz")]
        source = self.parquet("kernels")
        if source is None:
            return self.table("kernels", columns=columns)  # None: no kernels table
        schema = arrow_schema("kernels")
        stored = [c for c in columns if c in source.schema_arrow.names]
        table = self.table("kernels", columns=stored)
        return conform(table, pa.schema([schema.field(c) for c in columns]))
