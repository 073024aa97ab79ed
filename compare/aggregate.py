"""A side of several runs read as one: each number the median over the side's runs.

With several runs on a side (`'before/*' 'after/*'`), every number a diff shows for that side
(kernel times and counts, NVTX, memory and API summaries, GPU time, ncu metric values) is the
median of the per-run numbers over the runs that have the row, and `runs` says how many those
are. A count (launches, calls, gaps) takes the lower median: a count one of the runs had. Text
values are the first run's. So a headline, its Δ% and the ranking describe the whole side,
as the noise beside them does (compare/repeats.py measures it over the same runs).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any

from triage.compare.result import GpuTime, KernelSide

Row = dict[str, Any]


def _numbers(values: Iterable[Any]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def median(values: Iterable[Any]) -> float | None:
    """The median of the known numbers, None when none is known."""
    numbers = _numbers(values)
    return statistics.median(numbers) if numbers else None


def count_median(values: Iterable[Any]) -> int | None:
    """The lower median of known counts: a count one of the runs had."""
    numbers = _numbers(values)
    return int(statistics.median_low(numbers)) if numbers else None


def median_value(values: Sequence[Any]) -> Any:
    """Numbers: their median; text: the first run's (None where no run has a value)."""
    numbers = _numbers(values)
    if numbers:
        return statistics.median(numbers)
    return next((v for v in values if v is not None), None)


def median_rows(per_run: Sequence[Sequence[Row]], key_of: Callable[[Row], Hashable],
                counts: Collection[str] = ()) -> list[Row]:
    """Summary rows of several runs as one row per key, in order of first appearance: each
    number the median over the runs that have the key (`counts`: the lower median), text the
    first run's, and `runs` the number of runs that have it. One run: its rows, with runs 1."""
    if len(per_run) == 1:
        return [{**row, "runs": 1} for row in per_run[0]]
    keyed: dict[Hashable, list[Row]] = {}
    for rows in per_run:
        for row in rows:
            keyed.setdefault(key_of(row), []).append(row)
    merged = []
    for rows in keyed.values():
        row = {column: (count_median if column in counts else median_value)(
            [r.get(column) for r in rows]) for column in rows[0]}
        merged.append({**row, "runs": len(rows)})
    return merged


def median_gpu(times: Sequence[GpuTime]) -> GpuTime:
    """Kernel time, idle time, gaps and largest gap of several runs: each the median."""
    if len(times) == 1:
        return times[0]
    return GpuTime(median(t.kernel_ns for t in times) or 0.0,
                   median(t.idle_ns for t in times) or 0.0,
                   count_median(t.gaps for t in times) or 0,
                   median(t.max_gap_ns for t in times) or 0.0, runs=len(times))


def median_side(sides: Sequence[KernelSide]) -> KernelSide:
    """One kernel's numbers in several runs as one side: each the median over the runs."""
    if len(sides) == 1:
        return sides[0]
    return KernelSide(median(s.duration_ns for s in sides), median(s.total_ns for s in sides),
                      count_median(s.launches for s in sides),
                      median(s.median_ns for s in sides), median(s.share for s in sides),
                      runs=len(sides))
