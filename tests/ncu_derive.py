"""Large ncu runs made from a real corpus report, at the table level, through the archive's
normal write path (shared by tests/test_ncu_scale.py and benchmarks/bench_ncu_scale.py).

A full-set profile of a real workload holds thousands of launches; the corpus reports hold a
few. A valid larger .ncu-rep cannot be written here (the format is ncu's own protobuf stream, and
nothing but ncu writes it), so the large run is made one step later: the corpus report is read
by triage's own reader once, and its rows are handed to the archive `copies` times over, each
copy's launches under new kernel indices (and, with `rename`, the launches spread over that many
kernel names: hundreds of distinct kernels rather than many launches of a few). The archive
writes them as it writes any report (Parquet tables, summaries, manifest, catalog): what
`diff`, `explain` and `report` then read is what a report that large would give them.

    from ncu_derive import derive_run
    run_id = derive_run(store, corpus_report, copies=60, variant="b", rename=500)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

NAMED = ("name", "short_name", "mangled_name")


class Replicated:
    """A prepared ncu report whose rows are handed over `copies` times (the PreparedReport
    protocol of `capture.formats`); `scale` multiplies each copy's metric values (the other
    side of a pair differs by it)."""

    tool = "ncu"

    def __init__(self, path: Path, copies: int, rename: int, scale: float) -> None:
        from triage.capture.formats import prepare_report

        self.inner = prepare_report(path)
        self.path, self.format, self.sha256 = path, self.inner.format, self.inner.sha256
        self.copies, self.rename, self.scale = copies, rename, scale

    def batches(self, report_index: int) -> Iterator[tuple[str, pa.Table]]:
        read = list(self.inner.batches(report_index))  # a corpus report: a few MB of rows
        stride = 1 + max((pc.max(t["kernel_index"]).as_py() or 0) for name, t in read
                         if name == "kernels" and t.num_rows)
        return (batch for copy in range(self.copies) for batch in
                (self._copy(name, table, copy, stride) for name, table in read))

    def _copy(self, name: str, table: pa.Table, copy: int, stride: int) -> tuple[str, pa.Table]:
        if "kernel_index" in table.column_names:
            index = table.schema.get_field_index("kernel_index")
            table = table.set_column(index, "kernel_index",
                                     pc.add(table["kernel_index"], copy * stride))
        if name == "metrics" and self.scale != 1.0:
            index = table.schema.get_field_index("value")
            table = table.set_column(index, "value", pc.multiply(table["value"], self.scale))
        if name == "kernels" and self.rename:
            suffix = pc.cast(_modulo(table["kernel_index"], self.rename), pa.string())
            for column in NAMED:
                index = table.schema.get_field_index(column)
                table = table.set_column(index, column, pc.binary_join_element_wise(
                    table[column], pc.binary_join_element_wise("_k", suffix, ""), ""))
        return name, table

    def provenance(self) -> dict[str, Any]:
        return self.inner.provenance()

    def close(self) -> None:
        self.inner.close()


def _modulo(values: pa.ChunkedArray, divisor: int) -> pa.ChunkedArray:
    return pc.subtract(values, pc.multiply(pc.divide(values, divisor), divisor))


def derive_run(store_path: Path, report: Path, copies: int, variant: str,
               rename: int = 0, scale: float = 1.0) -> str:
    """Archive `report`'s rows `copies` times over as one new run of the store; its id.
    `variant` keeps runs made from the same report apart (the archive would otherwise find
    the run it made before: same report, same key)."""
    from triage.archive import lease
    from triage.archive.ingest import ReportInput, RunRequest, Seen, _run_steps, _Steps
    from triage.archive.store import Store

    store = Store.open(store_path, create=True)
    request = RunRequest([ReportInput(report)],
                         redact_patterns=(f"^derived-{copies}-{variant}-{rename}$",))

    @lease.holding("archive")
    def archive(store: Store) -> str:
        prepared = Replicated(report, copies, rename, scale)
        steps = _run_steps(store, request, [prepared], Seen(), None, None)
        return _Steps(steps).finish().id

    return archive(store)
