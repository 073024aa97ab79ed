"""`triage ls`: a store's runs newest first, filtered and paged, from the catalog alone.

A store of 100,000 runs shows its newest page without converting the others to Python: the
filters and the order are Arrow operations over the catalog's columns, only the columns the
caller shows are read, and the rows it wants are handed out a batch at a time, so `ls --json`
of every run streams.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc

from triage.archive import catalog
from triage.archive.runs import labels_by_run
from triage.archive.store import Store
from triage.errors import UsageError

# `ls --json`/`--csv`, in this order, then `labels` (the README lists them)
LIST_COLUMNS = ("id", "tool", "tool_version", "created", "archived", "source", "gpu",
                "driver_version", "cuda_version", "host", "command", "kernels", "reports",
                "report_names", "clock_control", "cache_control", "replay_mode", "capture_group",
                "notes")
DEFAULT_PAGE = 50  # runs the text listing shows unless `-n` says otherwise
BATCH_ROWS = 1000
AGE_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
AGE = re.compile(r"^(\d+)([mhdw])$")


@dataclass(frozen=True)
class RunFilter:
    """Which runs `ls` lists; a field left None does not filter."""

    tool: str | None = None   # ncu or nsys
    gpu: str | None = None    # a part of the GPU name, in any case: `a100`
    label: str | None = None  # a label glob: runs with a label it matches (`before/*`)
    since: str | None = None  # UTC time, as `parse_since` gives it: archived at or after

    def columns(self) -> list[str]:
        """The catalog columns the filter reads."""
        return [c for c, v in (("tool", self.tool), ("gpu", self.gpu)) if v is not None]


@dataclass(frozen=True)
class RunList:
    """`triage ls`: the runs listed, newest first; how many matched (the listing holds the
    newest `limit` of them) and how many the store holds; one line per run that is listed only
    in part, or not at all, because a file of it is damaged."""

    table: pa.Table
    labels: dict[str, list[str]]
    matched: int
    total: int
    problems: tuple[str, ...]

    def batches(self, rows: int = BATCH_ROWS) -> Iterator[list[dict]]:
        """The runs as dicts with their `labels`, `rows` at a time: 100,000 runs never become
        one list of dicts or one string."""
        for batch in self.table.to_batches(max_chunksize=rows):
            listed = batch.to_pylist()
            for row in listed:
                row["labels"] = self.labels.get(row["id"], [])
            yield listed

    def rows(self) -> list[dict]:
        """Every run listed, as dicts (for a page; a full listing goes by `batches`)."""
        return [row for batch in self.batches() for row in batch]


def list_runs(store: Store, filters: RunFilter = RunFilter(), limit: int | None = None,
              columns: Sequence[str] = LIST_COLUMNS) -> RunList:
    """The newest `limit` runs (None: every one) that `filters` match, newest first, with
    `columns` (id first); no manifest is opened."""
    found = catalog.scan_unordered(store, [*columns, *filters.columns()])
    table = found.table
    mask = _mask(table, filters, store)
    if mask is not None:
        table = table.filter(mask)
    order = catalog.oldest_first(table)
    newest = order.slice(max(len(order) - limit, 0)) if limit is not None else order
    backwards = newest.take(pa.array(range(len(newest) - 1, -1, -1), type=pa.int64()))
    return RunList(table.take(backwards).select(list(columns)), labels_by_run(store),
                   table.num_rows, found.table.num_rows, found.problems)


def _mask(table: pa.Table, filters: RunFilter, store: Store) -> pa.ChunkedArray | None:
    """Which rows the filters keep (a run without the value filtered on is left out); None
    when nothing filters."""
    conditions = []
    if filters.tool is not None:
        conditions.append(pc.equal(table.column("tool"), filters.tool))
    if filters.gpu is not None:
        conditions.append(pc.match_substring(table.column("gpu"), filters.gpu,
                                             ignore_case=True))
    if filters.since is not None:
        conditions.append(pc.greater_equal(table.column("archived"), filters.since))
    if filters.label is not None:
        runs = {run for name, run in store.labels().items()
                if fnmatch.fnmatchcase(name, filters.label)}
        conditions.append(pc.is_in(table.column("id"), value_set=pa.array(sorted(runs),
                                                                          type=pa.string())))
    return functools.reduce(pc.and_kleene, conditions) if conditions else None


def parse_limit(text: str | None, default: int | None) -> int | None:
    """`-n N` or `-n all` (None: every run); `default` when not given."""
    if text is None:
        return default
    if text.lower() == "all":
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise UsageError(f"-n {text!r}: give a number of runs (-n 20) or -n all")


def parse_since(text: str, now: datetime | None = None) -> str:
    """`--since`: a UTC date or time (2026-01-31, 2026-01-31T12:00, with Z or an offset) or
    an age (90m, 12h, 7d, 2w), as the UTC time the catalog's `archived` compares with."""
    now = now or datetime.now(timezone.utc)
    age = AGE.match(text.strip().lower())
    if age:
        since = now - timedelta(**{AGE_UNITS[age.group(2)]: int(age.group(1))})
    else:
        since = _utc_time(text)
    return since.strftime("%Y-%m-%dT%H:%M:%S")


def _utc_time(text: str) -> datetime:
    """A date or time as UTC: one without a zone is UTC, as every time the store shows is."""
    try:
        when = datetime.fromisoformat(text.strip().replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: give a UTC date or time (2026-01-31, "
                         "2026-01-31T12:00) or an age (90m, 12h, 7d, 2w)") from None
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)
