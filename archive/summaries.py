"""Summary tables computed by SQL over a run's own tables (what `nsys stats` shows).

Computed once at archive time and stored as Parquet, so `diff`, `top` and cross-run queries never
rescan launch-level tables. Ingest runs these single-threaded so float sums, and so the stored
bytes and the run id, do not depend on thread scheduling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage.duck import fetch_arrow, sql_string, summary_connection

if TYPE_CHECKING:
    from triage.archive.tables import TableSet

KERNEL_SUMMARY = """
WITH k AS (SELECT name, short_name, duration_ns AS d FROM {kernels}),
     t AS (SELECT sum(d) AS total FROM k)
SELECT name, min(short_name) AS short_name, count(*) AS instances, sum(d) AS total_ns,
       avg(d) AS avg_ns, median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns,
       stddev_samp(d) AS stddev_ns, sum(d) / nullif(any_value(t.total), 0) AS share
FROM k, t GROUP BY name ORDER BY total_ns DESC NULLS LAST, name
"""

API_SUMMARY = """
WITH a AS (SELECT api, name, duration_ns AS d FROM {api_calls}),
     t AS (SELECT sum(d) AS total FROM a)
SELECT api, name, count(*) AS calls, sum(d) AS total_ns, avg(d) AS avg_ns,
       median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns,
       sum(d) / nullif(any_value(t.total), 0) AS share
FROM a, t GROUP BY api, name ORDER BY total_ns DESC, api, name
"""

MEMOP_SUMMARY = """
WITH m AS (SELECT op, kind, duration_ns AS d, bytes AS b FROM {memops}),
     t AS (SELECT sum(d) AS total FROM m)
SELECT op, kind, count(*) AS count, sum(d) AS total_ns, avg(d) AS avg_ns,
       median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns, sum(b) AS total_bytes,
       avg(b) AS avg_bytes, min(b) AS min_bytes, max(b) AS max_bytes,
       sum(d) / nullif(any_value(t.total), 0) AS share
FROM m, t GROUP BY op, kind ORDER BY total_ns DESC, op, kind
"""

NVTX_SUMMARY = """
WITH r AS (SELECT coalesce(domain, '') AS domain, text, kind, duration_ns AS d
           FROM {nvtx_ranges} WHERE duration_ns IS NOT NULL),
     t AS (SELECT kind, sum(d) AS total FROM r GROUP BY kind)
SELECT nullif(r.domain, '') AS domain, text, r.kind, count(*) AS instances, sum(d) AS total_ns,
       avg(d) AS avg_ns, median(d) AS median_ns, min(d) AS min_ns, max(d) AS max_ns,
       sum(d) / nullif(any_value(t.total), 0) AS share
FROM r JOIN t USING (kind) GROUP BY r.domain, text, r.kind
ORDER BY total_ns DESC, domain, text, r.kind
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


def compute_summaries(tables: TableSet, names: list[str]) -> None:
    """Compute the named summary tables from the TableSet's own temp files and add them to it."""
    con = summary_connection()
    for name in names:
        sql, sources = SUMMARIES[name]
        views = {src: f"read_parquet({sql_string(tables.path(src))})" for src in sources}
        tables.writer(name).write_arrow(fetch_arrow(con, sql.format(**views)))

