"""Diff of two nsys runs from their stored summaries: kernels, NVTX, memory operations, API, GPU
idle time. Each list is ranked by absolute time changed, new and vanished entries included.
Kernels match as in the ncu diff (`compare/matching.py`): by name up to spacing, and kernels gone
from A and new in B, in equal number, pair by order of first launch (a renamed kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triage.compare.drift import CAUTION, compared
from triage.compare.matching import match_key, pair_leftovers
from triage.compare.result import (NVTX_RANGES, DriftItem, GpuChange, GpuTime, KernelDiff,
                                   KernelSide, NsysDiff, SummaryChange, relative_change)
from triage.compare.rundata import RunData

Row = dict[str, Any]
KERNEL_VALUES = ("instances", "total_ns", "avg_ns", "median_ns", "min_ns", "max_ns", "share")
# summary -> (table, key columns, value columns); each ranks by the change of total_ns
SUMMARY_DIFFS = {
    "nvtx": ("nvtx_summary", ("domain", "text", "kind"),
             ("instances", "total_ns", "avg_ns", "median_ns", "share")),
    "memops": ("memop_summary", ("op", "kind"), ("count", "total_ns", "avg_ns", "total_bytes",
                                                 "share")),
    "api": ("api_summary", ("api", "name"), ("calls", "total_ns", "avg_ns", "median_ns", "share")),
}


def table_rows(run: RunData, table: str) -> list[Row]:
    """A stored summary table's rows; none when the run has no such table."""
    data = run.table(table)
    return data.to_pylist() if data is not None else []


def join_summaries(rows_a: list[Row], rows_b: list[Row], keys: tuple[str, ...],
                   values: tuple[str, ...],
                   key_of: Callable[[Row], tuple[Any, ...]] | None = None) -> list[SummaryChange]:
    """Entries keyed like the summaries, with both sides, change and rank by |delta total_ns|.
    `key_of` makes the key rows join on (the key columns themselves by default); an entry
    shows A's key columns, else B's."""
    join = key_of or (lambda r: tuple(r[k] for k in keys))
    index_a = {join(r): r for r in rows_a}
    index_b = {join(r): r for r in rows_b}
    entries = []
    for key in list(index_a) + [k for k in index_b if k not in index_a]:
        a, b = index_a.get(key), index_b.get(key)
        shown = a if a is not None else b
        assert shown is not None  # every key came from one side
        entries.append(SummaryChange(
            {k: shown[k] for k in keys}, _values(a, values), _values(b, values),
            "new" if not a else "vanished" if not b else "changed",
            _total(b) - _total(a),
            relative_change(a["total_ns"], b["total_ns"]) if a and b else None))
    return sorted(entries, key=lambda e: -abs(e.delta_ns))


def _values(row: Row | None, values: tuple[str, ...]) -> dict[str, Any] | None:
    return {v: row[v] for v in values} if row else None


def _total(row: Row | None) -> float:
    """A summary row's total time; 0 for a row the run does not have."""
    return row["total_ns"] or 0 if row else 0


def gpu_time(run: RunData) -> GpuTime:
    """Kernel time, idle gaps between kernels, and the largest gap."""
    gaps = run.table("gpu_gaps", columns=["gap_ns"])
    gap_values = gaps.column("gap_ns").to_pylist() if gaps is not None else []
    kernels = table_rows(run, "kernel_summary")
    return GpuTime(sum(r["total_ns"] or 0 for r in kernels), sum(gap_values), len(gap_values),
                   max(gap_values) if gap_values else 0)


def first_launches(run: RunData) -> dict[str, int]:
    """Kernel name -> start of its first launch, the order renamed kernels pair in."""
    table = run.table("kernels", columns=["name", "start_ns"])
    if table is None:
        return {}
    first = table.group_by("name").aggregate([("start_ns", "min")])
    return dict(zip(first.column("name").to_pylist(), first.column("start_ns_min").to_pylist(),
                    strict=True))


def pair_renamed(kernels: list[KernelDiff], run_a: RunData,
                 run_b: RunData) -> list[KernelDiff]:
    """Kernels gone from A and new in B, in equal number, paired by first launch: one
    before/after kernel each (with `name_b`), as the ncu diff pairs them."""
    gone = [k for k in kernels if k.match == "only_a"]
    new = [k for k in kernels if k.match == "only_b"]
    if not gone or len(gone) != len(new):
        return kernels
    first = {"a": first_launches(run_a), "b": first_launches(run_b)}
    pairs, _, _ = pair_leftovers(gone, new, lambda k: first["a" if k.a else "b"].get(
        k.name, float("inf")))
    paired = [KernelDiff(a.name, "matched", "launch_order", a.a, b.b, name_b=b.name)
              for a, b in pairs]
    kept = [k for k in kernels if k.match == "matched"] + paired
    return sorted(kept, key=lambda k: -k.time_changed)


def _side(summary: Mapping[str, Any] | None) -> KernelSide | None:
    """A kernel_summary row as one side of a kernel."""
    if not summary:
        return None
    return KernelSide(summary["avg_ns"], summary["total_ns"], summary["instances"],
                      summary["median_ns"], summary["share"])


def summary_kernels(rows_a: Sequence[Row], rows_b: Sequence[Row]) -> list[KernelDiff]:
    """Two kernel rankings joined by match key: matched, only_a and only_b kernels, by
    |time changed| (the nsys path, and the nsys side of a mixed pair)."""
    joined = join_summaries(list(rows_a), list(rows_b), ("name",), KERNEL_VALUES,
                            lambda r: (match_key(r["name"]),))
    match = {"new": "only_b", "vanished": "only_a", "changed": "matched"}
    return [KernelDiff(e.key["name"], match[e.change],
                       "name" if e.change == "changed" else None, _side(e.a), _side(e.b))
            for e in joined]


def nvtx_range_names(run: RunData) -> tuple[str, ...] | None:
    """The names of the NVTX ranges a run recorded, sorted; None where it has no NVTX summary
    (not recorded, which is not the same as no ranges)."""
    table = run.table("nvtx_summary", columns=["text"])
    if table is None:
        return None
    return tuple(sorted({str(t) for t in table.column("text").to_pylist() if t is not None}))


def nvtx_drift(run_a: RunData, run_b: RunData) -> DriftItem:
    """The NVTX range set of two nsys runs compared: other ranges mean other phases ran (or
    the program's annotation changed), and range timings then compare different things."""
    return compared(NVTX_RANGES, nvtx_range_names(run_a), nvtx_range_names(run_b), CAUTION,
                    "different NVTX range set: the program's phases or its annotation changed")


def diff_nsys(run_a: RunData, run_b: RunData) -> tuple[list[KernelDiff], NsysDiff]:
    """The kernel ranking (renamed kernels paired), and the summaries only nsys has."""
    kernels = pair_renamed(summary_kernels(table_rows(run_a, "kernel_summary"),
                                           table_rows(run_b, "kernel_summary")), run_a, run_b)
    joined = {name: tuple(join_summaries(table_rows(run_a, table), table_rows(run_b, table),
                                         keys, values))
              for name, (table, keys, values) in SUMMARY_DIFFS.items()}
    return kernels, NsysDiff(joined["nvtx"], joined["memops"], joined["api"],
                             GpuChange(gpu_time(run_a), gpu_time(run_b)))
