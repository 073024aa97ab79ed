"""Summary tables computed by SQL over a run's own tables (what `nsys stats` shows).

Computed once at archive time and stored as Parquet, so `diff`, `top` and cross-run queries never
rescan launch-level tables. Ingest runs those that add floats single-threaded, so that the sums,
and so the stored bytes, do not depend on thread scheduling; those whose every value is exact in
any order (`ANY_ORDER`) run on every core.

An ncu run's only summary, kernel_summary of a few kernels, is computed in Python instead
(`kernel_summary`), to DuckDB's last bit: importing and connecting DuckDB costs more than the
rest of archiving a small report.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from triage.base.duck import fetch_arrow, sql_string, summary_connection
from triage.schemas.tables import rows_table

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


def compute_summaries(tables: TableSet, names: list[str]) -> None:
    """Compute the named summary tables from the TableSet's own temp files and add them to it."""
    if names == ["kernel_summary"]:
        kernels = pq.ParquetFile(tables.path("kernels"))
        if kernels.metadata.num_rows <= PYTHON_SUMMARY_ROWS:
            rows = kernels.read(columns=["name", "short_name", "duration_ns"])
            tables.writer("kernel_summary").write_arrow(kernel_summary(rows))
            return
    for name in names:
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
