"""Summary tables computed by SQL over a run's own tables (what `nsys stats` shows).

Computed once at archive time and stored as Parquet, so `diff`, `top` and cross-run queries never
rescan launch-level tables. Ingest runs those that add floats single-threaded, so that the sums,
and so the stored bytes, do not depend on thread scheduling; those whose every value is exact in
any order (`ANY_ORDER`) run on every core.

An ncu run's only summary, kernel_summary of a few kernels, is computed in Python instead
(`kernel_summary`), to DuckDB's last bit: importing and connecting DuckDB costs more than the
rest of archiving a small report. What can be gathered from a table's batches as they are
written is (`follow_summaries`: that kernel_summary, gpu_gaps and nvtx_summary in NumPy), on the
thread that writes them while the reader waits on SQLite or nsys, instead of read back from the
finished Parquet: an NVTX capture without CUDA calls imports no DuckDB. (DuckDB imported on a
thread meanwhile, for the rest, made a 1M-range `.sqlite` archive slower: the import holds the
GIL that the thread stepping SQLite needs between batches.)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from triage.base.arrays import arrow_array
from triage.base.duck import fetch_arrow, sql_string, summary_connection
from triage.schemas.tables import arrow_schema, rows_table

if TYPE_CHECKING:
    import pyarrow as pa

    from triage.archive.tables import TableSet

KERNEL_SUMMARY = """
WITH k AS (SELECT name, short_name, duration_ns AS d FROM {kernels}),
     t AS (SELECT sum(d) AS total FROM k)
SELECT name, min(short_name) AS short_name, count(*) AS instances, sum(d) AS total_ns,
       avg(d) AS avg_ns, median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns,
       stddev_samp(d) AS stddev_ns, sum(d) / nullif(any_value(t.total), 0) AS share
FROM k, t GROUP BY name ORDER BY total_ns DESC NULLS LAST, name
"""

# Aggregated per name first, the share's total summed from those aggregates, as NVTX_SUMMARY
# below: a CTE of the calls read twice is materialized (peak 725 MB archiving 10M API calls).
# Durations are integers, so the sums, and the stored bytes, are the same either way.
API_SUMMARY = """
WITH g AS (SELECT api, name, count(*) AS calls, sum(duration_ns) AS total_ns,
                  avg(duration_ns) AS avg_ns, median(duration_ns) AS median_ns,
                  min(duration_ns) AS min_ns, max(duration_ns) AS max_ns
           FROM {api_calls} GROUP BY api, name)
SELECT *, total_ns / nullif(sum(total_ns) OVER (), 0) AS share
FROM g ORDER BY total_ns DESC, api, name
"""

MEMOP_SUMMARY = """
WITH g AS (SELECT op, kind, count(*) AS count, sum(duration_ns) AS total_ns,
                  avg(duration_ns) AS avg_ns, median(duration_ns) AS median_ns,
                  min(duration_ns) AS min_ns, max(duration_ns) AS max_ns,
                  sum(bytes) AS total_bytes, avg(bytes) AS avg_bytes, min(bytes) AS min_bytes,
                  max(bytes) AS max_bytes
           FROM {memops} GROUP BY op, kind)
SELECT *, total_ns / nullif(sum(total_ns) OVER (), 0) AS share
FROM g ORDER BY total_ns DESC, op, kind
"""

# Aggregated per range first, the share's per-kind total summed from those aggregates: a CTE of
# the ranges read twice (for the groups and for the totals) is materialized by DuckDB, which
# held every range's strings in memory (peak 320 MB at 3M ranges, 789 MB at 10M). Integer
# sums are exact, so the totals, and the stored bytes, are the same either way.
NVTX_SUMMARY = """
WITH g AS (SELECT coalesce(domain, '') AS domain, text, kind, count(*) AS instances,
                  sum(duration_ns) AS total_ns, avg(duration_ns) AS avg_ns,
                  median(duration_ns) AS median_ns, min(duration_ns) AS min_ns,
                  max(duration_ns) AS max_ns
           FROM {nvtx_ranges} WHERE duration_ns IS NOT NULL GROUP BY ALL)
SELECT nullif(g.domain, '') AS domain, text, kind, instances, total_ns, avg_ns, median_ns,
       min_ns, max_ns, total_ns / nullif(sum(total_ns) OVER (PARTITION BY kind), 0) AS share
FROM g ORDER BY total_ns DESC, domain, text, kind
"""

# Busy intervals per device = union of kernel intervals over all streams; a gap is the time
# from the furthest end seen so far to the next kernel's start.
GPU_GAPS = """
WITH k AS (
  SELECT coalesce(device_id, 0) AS device_id, start_ns, end_ns, name, kernel_index
  FROM {kernels} WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL),
w AS (
  SELECT *, max(end_ns) OVER (PARTITION BY device_id ORDER BY start_ns, kernel_index
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until,
            arg_max(name, end_ns) OVER (PARTITION BY device_id ORDER BY start_ns, kernel_index
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_name
  FROM k)
SELECT device_id, busy_until AS start_ns, start_ns AS end_ns, start_ns - busy_until AS gap_ns,
       prev_name AS before_kernel, name AS after_kernel
FROM w WHERE busy_until IS NOT NULL AND start_ns > busy_until
ORDER BY device_id, start_ns
"""

SUMMARIES = {
    "kernel_summary": (KERNEL_SUMMARY, ("kernels",)),
    "api_summary": (API_SUMMARY, ("api_calls",)),
    "memop_summary": (MEMOP_SUMMARY, ("memops",)),
    "nvtx_summary": (NVTX_SUMMARY, ("nvtx_ranges",)),
    "gpu_gaps": (GPU_GAPS, ("kernels",)),
}


# The summaries whose values do not depend on the order rows are added in, so on the threads:
# integer sums and counts, DuckDB's avg of integers (an exact integer sum, divided once), exact
# medians, min and max, and an ORDER BY that ranks every group. kernel_summary (stddev_samp adds
# floats) and gpu_gaps (arg_max over ties) stay on one thread. 2 threads: 0.09-0.16 s where one
# took 0.22 s for nvtx_summary of 1M ranges.
ANY_ORDER = frozenset({"api_summary", "memop_summary", "nvtx_summary"})


# Up to this many kernels, kernel_summary alone (an ncu run) is computed in Python. Beyond it
# DuckDB stays: its hash aggregate may then combine partial states, which adds floats in
# another order than `kernel_summary` does (and the time DuckDB costs no longer matters).
PYTHON_SUMMARY_ROWS = 65536
KERNEL_SUMMARY_COLUMNS = ("name", "short_name", "instances", "total_ns", "avg_ns", "median_ns",
                          "min_ns", "max_ns", "stddev_ns", "share")


def follow_summaries(tables: TableSet, names: list[str]) -> None:
    """Before a run's rows are written: the named summaries that can be computed from their
    source's batches as they stream past follow them (`GpuGaps`), on the thread that writes
    them, so that this work overlaps the reading (SQLite stepping its statement, nsys's export)
    instead of reading the finished Parquet back after it."""
    if names == ["kernel_summary"]:  # an ncu run's: few kernels, summed in Python
        kernels = KernelRows()
        tables.follow("kernels", kernels.add)
        tables.streamed["kernel_summary"] = kernels.summary
        return
    if "gpu_gaps" in names:
        gaps = GpuGaps()
        tables.follow("kernels", gaps.add)
        tables.streamed["gpu_gaps"] = gaps.table
    if "nvtx_summary" in names:
        ranges = NvtxSummary()
        tables.follow("nvtx_ranges", ranges.add)
        tables.streamed["nvtx_summary"] = ranges.table


def compute_summaries(tables: TableSet, names: list[str]) -> None:
    """Compute the named summary tables and add them to the TableSet: those followed while
    their source was written (`follow_summaries`) from what they gathered, the rest from the
    TableSet's own temp files."""
    gathered = {name: tables.streamed[name]() for name in names if name in tables.streamed}
    for name, table in gathered.items():
        if table is not None:
            tables.writer(name).write_arrow(table)
    for name in [name for name in names if gathered.get(name) is None]:
        sql, sources = SUMMARIES[name]
        if not any(tables.writer(src).close() for src in sources):
            tables.writer(name)  # every summary of no rows is no rows: no file to read back
            continue
        views = {src: f"read_parquet({sql_string(tables.path(src))})" for src in sources}
        tables.writer(name).write_arrow(_summary(sql.format(**views), name in ANY_ORDER))


def _summary(sql: str, any_order: bool) -> pa.Table:
    """A summary query on the summaries' connection: on every core when its values are exact
    in any order, else on its one thread."""
    connection = summary_connection()
    if not any_order:
        return fetch_arrow(connection, sql)
    connection.execute(f"SET threads = {os.cpu_count() or 1}")
    try:
        return fetch_arrow(connection, sql)
    finally:
        connection.execute("SET threads = 1")


NVTX_SUMMARY_COLUMNS = ("domain", "text", "kind", "instances", "total_ns", "avg_ns", "median_ns",
                        "min_ns", "max_ns", "share")


class NvtxSummary:
    """NVTX_SUMMARY gathered from the ranges as they are written: per (domain, text, kind) the
    durations, 8 bytes a range, then DuckDB's aggregates of integers to its bits: exact sums,
    the mean and the share as quotients of doubles, the median as `_median` interpolates,
    ranked as its ORDER BY (NULLs last; tests/test_streamed_summaries.py holds it to DuckDB).
    Past GROUPS distinct ranges (a text per range) or ROWS ranges, None: the SQL then reads
    the finished table, without a Python object per group or the durations held meanwhile."""

    GROUPS = 65536
    ROWS = 2_000_000  # 16 MB of durations: a capture's peak RSS stays flat beyond (the SQL's)

    def __init__(self) -> None:
        self.durations: dict[tuple[str, str | None, str], list] = {}
        self.rows = 0
        self.overflowed = False

    def add(self, ranges: pa.Table) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows += ranges.num_rows
        if self.overflowed or self.rows > self.ROWS:
            self.overflowed, self.durations = True, {}
            return
        timed = ranges.filter(pc.is_valid(ranges["duration_ns"]))
        keyed = pa.table({"domain": pc.fill_null(timed["domain"], ""), "text": timed["text"],
                          "kind": timed["kind"], "d": timed["duration_ns"]})
        grouped = keyed.group_by(["domain", "text", "kind"], use_threads=False) \
            .aggregate([("d", "list")])
        lists = grouped["d_list"].combine_chunks()
        for domain, text, kind, durations in zip(
                *(grouped[c].to_pylist() for c in ("domain", "text", "kind")), lists,
                strict=True):
            self.durations.setdefault((domain, text, kind), []).append(durations.values)
        if len(self.durations) > self.GROUPS:
            self.overflowed, self.durations = True, {}

    def table(self) -> pa.Table | None:
        import numpy as np

        if self.overflowed:
            return None
        groups = []
        for (domain, text, kind), parts in self.durations.items():
            values = np.sort(np.concatenate([p.to_numpy() for p in parts]))
            total = _exact_sum(values)
            groups.append((domain or None, text, kind, len(values), total,
                           float(total) / len(values),
                           _median_of_sorted(values), int(values[0]), int(values[-1])))
        totals: dict[str, int] = {}
        for group in groups:
            totals[group[2]] = totals.get(group[2], 0) + group[4]
        rows = [(*g, float(g[4]) / float(totals[g[2]]) if totals[g[2]] else None)
                for g in groups]
        rows.sort(key=lambda r: (-r[4], r[0] is None, r[0] or "", r[1] is None, r[1] or "",
                                 r[2]))
        return rows_table("nvtx_summary", NVTX_SUMMARY_COLUMNS, rows)


def _exact_sum(values) -> int:
    """The sum of int64 values as DuckDB's HUGEINT has it: NumPy's, unless it could overflow."""
    import numpy as np

    if max(abs(int(values[0])), abs(int(values[-1]))) * len(values) < 1 << 63:
        return int(values.sum(dtype=np.int64))
    return sum(int(v) for v in values)


def _median_of_sorted(values) -> float:
    """DuckDB's median of sorted integers: the middle one, or lo * 0.5 + hi * 0.5 in doubles."""
    half = len(values) // 2
    if len(values) % 2:
        return float(values[half])
    return float(values[half - 1]) * 0.5 + float(values[half]) * 0.5


class KernelRows:
    """An ncu run's kernels as they are written (name, short name, duration), for its
    kernel_summary in Python (`kernel_summary`), not the finished table read back; None past
    PYTHON_SUMMARY_ROWS kernels (DuckDB's SQL then)."""

    COLUMNS = ["name", "short_name", "duration_ns"]

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []
        self.rows = 0

    def add(self, kernels: pa.Table) -> None:
        self.rows += kernels.num_rows
        if self.rows <= PYTHON_SUMMARY_ROWS:
            self.parts.append(kernels.select(self.COLUMNS))

    def summary(self) -> pa.Table | None:
        import pyarrow as pa

        if self.rows > PYTHON_SUMMARY_ROWS:
            return None
        empty = arrow_schema("kernels").empty_table().select(self.COLUMNS)
        return kernel_summary(pa.concat_tables([empty, *self.parts]))


@dataclass
class _Kernel:
    """One kernel name's aggregates, updated row by row as DuckDB's (single-threaded) are."""

    short_name: str | None = None
    instances: int = 0
    durations: list[float] = field(default_factory=list)  # the non-null ones, in row order
    total: float = 0.0
    mean: float = 0.0  # Welford's running mean and sum of squared deviations (stddev_samp)
    dsquared: float = 0.0

    def add(self, short_name: str | None, duration: float | None) -> None:
        self.instances += 1
        if short_name is not None and (self.short_name is None or short_name < self.short_name):
            self.short_name = short_name
        if duration is None:
            return
        self.durations.append(duration)
        self.total += duration
        mean = self.mean + (duration - self.mean) / len(self.durations)
        self.dsquared += (duration - mean) * (duration - self.mean)
        self.mean = mean

    def row(self, name: str | None, all_total: float | None) -> tuple[Any, ...]:
        count = len(self.durations)
        total = self.total if count else None
        return (name, self.short_name, self.instances, total,
                self.total / count if count else None, _median(self.durations),
                _min(self.durations), _max(self.durations),
                _sqrt(self.dsquared / (count - 1)) if count > 1 else None,
                total / all_total if total is not None and all_total else None)


def kernel_summary(kernels: pa.Table) -> pa.Table:
    """KERNEL_SUMMARY of a kernels table (name, short_name, duration_ns), bit for bit as DuckDB
    gives it: floats added in row order (not `sum`, which compensates, nor math.fsum), NULL
    durations skipped, NaN above every number (min skips it, max and median take it), the
    median interpolated as DuckDB does, rows ranked by total (NaN first, NULL last), then name.
    tests/test_summaries.py holds it to DuckDB on every corpus report."""
    groups: dict[str | None, _Kernel] = {}
    all_total, any_duration = 0.0, False
    for name, short_name, duration in zip(*(kernels[c].to_pylist()
                                            for c in ("name", "short_name", "duration_ns")),
                                          strict=True):
        groups.setdefault(name, _Kernel()).add(short_name, duration)
        if duration is not None:
            all_total += duration
            any_duration = True
    rows = [kernel.row(name, all_total if any_duration else None)
            for name, kernel in groups.items()]
    rows.sort(key=_ranking)
    return rows_table("kernel_summary", KERNEL_SUMMARY_COLUMNS, rows)


def _ranking(row: tuple[Any, ...]) -> tuple[int, float, int, str]:
    """ORDER BY total_ns DESC NULLS LAST, name (NULLS LAST): DuckDB sorts NaN above +inf."""
    name, total = row[0], row[3]
    if total is None:
        first = (2, 0.0)
    elif math.isnan(total):
        first = (0, 0.0)
    else:
        first = (1, -total)
    return (*first, name is None, name or "")


INT64_MIN = -(1 << 63)


class GpuGaps:
    """GPU_GAPS computed from the kernels as they are written, batch by batch, in NumPy: per
    device the furthest end so far (`max(end_ns)` over the kernels before) and the first named
    kernel to reach it (DuckDB's `arg_max` skips NULL names and keeps the first of equal ends);
    a gap wherever a kernel starts after that end. Integers only, so the rows are the SQL's.

    The SQL orders each device's kernels by start, then kernel_index (which numbers one
    report's kernels in the order they are written); the batches stream in that order only for
    one report whose kernels come by start, as every nsys reader writes them. Kernels of a
    second report, or a start before the last one, or more than GAPS gaps, and `table` gives
    None: the SQL then reads the finished table."""

    GAPS = 1_000_000  # gaps held (two names each) before the SQL is left to find them

    def __init__(self) -> None:
        self.report: int | None = None
        self.last_start = INT64_MIN
        self.in_order = True
        self.furthest: dict[int, int] = {}  # device -> the furthest end so far
        # device -> the end and name of the first named kernel to reach the furthest named end
        self.leaders: dict[int, tuple[int, str]] = {}
        self.parts: list[pa.Table] = []

    def add(self, kernels: pa.Table) -> None:
        import pyarrow.compute as pc

        if not self.in_order or not kernels.num_rows:
            return
        if sum(part.num_rows for part in self.parts) > self.GAPS:
            self.in_order, self.parts = False, []  # held during the read: the SQL's instead
            return
        reports = pc.unique(kernels["report_index"]).to_pylist()
        if self.report is None:
            self.report = reports[0]
        if reports != [self.report]:
            self.in_order = False
            return
        timed = pc.and_(pc.is_valid(kernels["start_ns"]), pc.is_valid(kernels["end_ns"]))
        if not pc.all(timed).as_py():
            kernels = kernels.filter(timed)
        if not kernels.num_rows:
            return
        start = kernels["start_ns"].to_numpy()
        if start[0] < self.last_start or (start[1:] < start[:-1]).any():
            self.in_order = False
            return
        self.last_start = int(start[-1])
        end = kernels["end_ns"].to_numpy()
        devices = pc.fill_null(kernels["device_id"], 0).to_numpy()
        names = kernels["name"].combine_chunks()
        named = names.is_valid().to_numpy(zero_copy_only=False)
        for device in sorted(set(devices.tolist())):
            rows = (devices == device).nonzero()[0]
            self._device(device, rows, start[rows], end[rows], named[rows], names)

    def _device(self, device: int, rows, start, end, named, names: pa.Array) -> None:
        """One device's kernels of a batch, in order."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        furthest = self.furthest.get(device)
        reached = np.maximum.accumulate(end)
        before = np.empty_like(end)  # the furthest end of the kernels before each
        before[0], before[1:] = INT64_MIN if furthest is None else furthest, reached[:-1]
        if furthest is not None:
            before = np.maximum(before, furthest)
        gaps = start > before
        if furthest is None:
            gaps[0] = False
        self.furthest[device] = int(reached[-1]) if furthest is None \
            else max(furthest, int(reached[-1]))
        # The first named kernel to reach each furthest named end so far: a later one takes
        # over only past it.
        carried = self.leaders.get(device)
        named_end = np.where(named, end, INT64_MIN)
        prior = np.maximum.accumulate(np.concatenate(([carried[0] if carried else INT64_MIN],
                                                      named_end)))
        takes_over = named & (named_end > prior[:-1])
        if carried is None and named.any():  # the first named kernel leads, whatever its end
            takes_over[int(named.argmax())] = True
        leader = np.maximum.accumulate(np.where(takes_over, np.arange(len(end)), -1))
        if takes_over.any():
            last = int(leader[-1])
            self.leaders[device] = (int(named_end[last]), names[int(rows[last])].as_py())
        where = gaps.nonzero()[0]
        if not len(where):
            return
        previous = np.full(len(where), -1)
        later = where > 0
        previous[later] = leader[where[later] - 1]
        chosen = arrow_array(rows[np.maximum(previous, 0)], previous < 0)
        before_kernel = names.take(chosen)
        if carried is not None:
            before_kernel = pc.fill_null(before_kernel, carried[1])
        self.parts.append(pa.table({
            "device_id": arrow_array(np.full(len(where), device, np.int32)),
            "start_ns": arrow_array(before[where].astype(np.int64)),
            "end_ns": arrow_array(start[where].astype(np.int64)),
            "gap_ns": arrow_array((start[where] - before[where]).astype(np.int64)),
            "before_kernel": before_kernel,
            "after_kernel": names.take(arrow_array(rows[where])),
        }))

    def table(self) -> pa.Table | None:
        """The gaps in the SQL's order (device, then start), or None when the kernels did not
        stream in the order the SQL reads them."""
        import pyarrow as pa

        if not self.in_order:
            return None
        schema = arrow_schema("gpu_gaps")
        if not self.parts:
            return schema.empty_table()
        gaps = pa.concat_tables(self.parts)  # a stable sort: each device's gaps stay in order
        return gaps.sort_by([("device_id", "ascending"), ("start_ns", "ascending")]).cast(schema)


def _median(values: list[float]) -> float | None:
    """DuckDB's median: the middle value, or lo * (1 - d) + hi * d between the two middle ones
    (d = 0.5), NaN sorted last."""
    if not values:
        return None
    ordered = sorted(v for v in values if not math.isnan(v))
    ordered += [math.nan] * (len(values) - len(ordered))
    position = (len(ordered) - 1) * 0.5
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    fraction = position - low
    return ordered[low] * (1.0 - fraction) + ordered[high] * fraction


def _min(values: list[float]) -> float | None:
    """DuckDB's min: NaN only when every value is NaN."""
    numbers = [v for v in values if not math.isnan(v)]
    return min(numbers) if numbers else (math.nan if values else None)


def _max(values: list[float]) -> float | None:
    """DuckDB's max: NaN when any value is NaN."""
    if not values:
        return None
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def _sqrt(value: float) -> float:
    """sqrt as C has it: NaN, not an error, below zero (rounding can make dsquared -0.000...1)."""
    return math.sqrt(value) if value >= 0 or math.isnan(value) else math.nan
