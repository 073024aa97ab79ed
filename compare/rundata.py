"""A run as the comparison code sees it: its record and lazily read tables."""

from __future__ import annotations

from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from triage.archive.runs import show
from triage.archive.store import Store


class RunData:
    """One archived run: `record` is what `triage show --json` prints; tables load on demand."""

    def __init__(self, store: Store, ref: str):
        self.store = store
        self.record = show(store, ref)
        self.id = self.record["id"]

    @property
    def tool(self) -> str:
        return self.record["tool"]

    def has(self, name: str) -> bool:
        return name in (self.record.get("tables") or {})

    def table(self, name: str, columns: list[str] | None = None, where=None) -> pa.Table | None:
        """A stored table (or None if the run has none), optionally filtered on read."""
        ref = (self.record.get("tables") or {}).get(name)
        if not ref:
            return None
        path = self.store.object_path(ref["sha256"])
        return pq.read_table(path, columns=columns, filters=where)

    @cached_property
    def kernels(self) -> pa.Table:
        return self.table("kernels", columns=["report_index", "kernel_index", "name", "short_name",
                                              "duration_ns"])

    def rows_for(self, name: str, kernel_indices: list[int], columns=None) -> pa.Table:
        """Rows of a per-kernel table for some kernels (pushdown filter on kernel_index)."""
        table = self.table(name, columns=columns,
                           where=[("kernel_index", "in", sorted(set(kernel_indices)))])
        return table if table is not None else pa.table({})


def column(table: pa.Table, name: str) -> list:
    return table.column(name).to_pylist()


def mask_in(table: pa.Table, name: str, values) -> pa.Table:
    return table.filter(pc.is_in(table.column(name), value_set=pa.array(list(values))))
