"""Diff of two nsys runs from their stored summaries: kernels, NVTX, memory operations, API, GPU
idle time. Each list is ranked by absolute time changed, new and vanished entries included.
Kernels match as in the ncu diff (`compare/matching.py`): the user's --pair first, then by name
up to spacing, then kernels gone from A and new in B, in equal number, by order of first launch
(a renamed kernel: a guess, with its evidence). A side of several runs is read as one: each
summary row the median over its runs (`compare/aggregate.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from triage.compare.aggregate import median_gpu, median_rows
from triage.compare.drift import CAUTION, compared
from triage.compare.matching import (TWO_NAMES, Facts, FirstLaunch, Named, dims,
                                     match_key, match_named)
from triage.compare.result import (NVTX_RANGES, DiffOptions, DriftItem, GpuChange, GpuTime,
                                   KernelDiff, KernelSide, NsysDiff, SummaryChange,
                                   relative_change)
from triage.compare.rundata import RunData

Row = dict[str, Any]
# summary -> (table, key columns, value columns: the count first); each ranks by the change of
# total_ns; `runs` is how many of a side's runs have the row
SUMMARY_DIFFS = {
    "nvtx": ("nvtx_summary", ("domain", "text", "kind"),
             ("instances", "total_ns", "avg_ns", "median_ns", "share", "runs")),
    "memops": ("memop_summary", ("op", "kind"), ("count", "total_ns", "avg_ns", "total_bytes",
                                                 "share", "runs")),
    "api": ("api_summary", ("api", "name"), ("calls", "total_ns", "avg_ns", "median_ns", "share",
                                             "runs")),
}
LAUNCH_COLUMNS = ["name", "start_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                  "block_z"]


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
    return {v: row.get(v) for v in values} if row else None


def _total(row: Row | None) -> float:
    """A summary row's total time; 0 for a row the run does not have."""
    return row["total_ns"] or 0 if row else 0


def side_rows(runs: Sequence[RunData], table: str, keys: Sequence[str],
              count: str) -> list[Row]:
    """A summary table of a side's runs as one: each row the median over the runs that have
    it (one run: its rows), keyed by `keys`."""
    return median_rows([table_rows(run, table) for run in runs],
                       lambda r: tuple(r[k] for k in keys), (count,))


def kernel_rows_of(runs: Sequence[RunData]) -> list[Row]:
    """The kernel ranking of a side's runs as one (by match key: spacing aside)."""
    return median_rows([table_rows(run, "kernel_summary") for run in runs],
                       lambda r: match_key(r["name"]), ("instances",))


def gpu_time(run: RunData) -> GpuTime:
    """Kernel time, idle gaps between kernels, and the largest gap."""
    gaps = run.table("gpu_gaps", columns=["gap_ns"])
    gap_values = gaps.column("gap_ns").to_pylist() if gaps is not None else []
    kernels = table_rows(run, "kernel_summary")
    return GpuTime(sum(r["total_ns"] or 0 for r in kernels), sum(gap_values), len(gap_values),
                   max(gap_values) if gap_values else 0)


def first_launches(run: RunData) -> Facts:
    """Kernel name -> its first launch (start and launch configuration), read for the names
    asked only: the order and evidence of renamed kernels."""
    def read(names: Sequence[str]) -> dict[str, FirstLaunch]:
        table = run.table("kernels", columns=LAUNCH_COLUMNS)
        if table is None or not names:
            return {}
        table = table.filter(pc.is_in(table["name"], value_set=pa.array(list(names))))
        order = pc.sort_indices(table, [("start_ns", "ascending")]).to_pylist()
        firsts: dict[str, int] = {}
        for index, name in zip(order, table.column("name").take(order).to_pylist(),
                               strict=True):
            firsts.setdefault(name, index)
        rows = table.take(list(firsts.values())).to_pylist()
        return {row["name"]: FirstLaunch(row["start_ns"], dims(row, "grid"), dims(row, "block"))
                for row in rows}

    return read


def _side(summary: Row | None) -> KernelSide | None:
    """A kernel_summary row (a side's median row) as one side of a kernel."""
    if not summary:
        return None
    return KernelSide(summary["avg_ns"], summary["total_ns"], summary["instances"],
                      summary.get("median_ns"), summary.get("share"), summary.get("runs", 1))


def summary_kernels(rows_a: Sequence[Row], rows_b: Sequence[Row], opts: DiffOptions | None = None,
                    facts: tuple[Facts, Facts] | None = None) -> list[KernelDiff]:
    """Two kernel rankings matched (`matching.match_named`: --pair, names, and with `facts`
    the renamed kernels by first launch unless --no-rename-pairing): matched, only_a and
    only_b kernels, by |time changed| (the nsys path, and both sides of a mixed pair)."""
    opts = opts or DiffOptions()

    def named(rows: Sequence[Row]) -> list[Named]:
        return [Named(r["name"], r.get("short_name"), r.get("avg_ns"), r) for r in rows]

    found = match_named(named(rows_a), named(rows_b), opts.pairs,
                        guess=facts is not None and opts.rename_pairing, facts=facts)
    kernels = []
    for f in found:
        first = f.a or f.b
        assert first is not None  # a kernel found has a side
        renamed: Row | None = f.b if f.by in TWO_NAMES else None
        kernels.append(KernelDiff(
            first["name"], "matched" if f.a and f.b else "only_a" if f.a else "only_b",
            f.by, _side(f.a), _side(f.b), name_b=renamed["name"] if renamed else None,
            short_name=first.get("short_name"),
            short_name_b=renamed.get("short_name") if renamed else None, pairing=f.evidence))
    return sorted(kernels, key=lambda k: -k.time_changed)


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


def diff_nsys(runs_a: Sequence[RunData], runs_b: Sequence[RunData],
              opts: DiffOptions | None = None) -> tuple[list[KernelDiff], NsysDiff]:
    """The kernel ranking (renamed kernels paired), and the summaries only nsys has; each side
    the median of its runs."""
    kernels = summary_kernels(kernel_rows_of(runs_a), kernel_rows_of(runs_b), opts,
                              (first_launches(runs_a[0]), first_launches(runs_b[0])))
    joined = {name: tuple(join_summaries(side_rows(runs_a, table, keys, values[0]),
                                         side_rows(runs_b, table, keys, values[0]), keys, values))
              for name, (table, keys, values) in SUMMARY_DIFFS.items()}
    gpu = GpuChange(median_gpu([gpu_time(r) for r in runs_a]),
                    median_gpu([gpu_time(r) for r in runs_b]))
    return kernels, NsysDiff(joined["nvtx"], joined["memops"], joined["api"], gpu)
