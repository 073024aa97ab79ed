"""`triage ls`: a store's runs newest first, filtered and paged, from the catalog alone.

A store of 100,000 runs shows its newest page without converting the others to Python: the
catalog is paged from its newest row (`catalogview.View.newest`), only the columns the caller shows
are read, and `ls --json` of every run streams, a row group at a time. Filters are Arrow
operations over the catalog's columns.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from triage.archive import catalog, catalogview
from triage.archive.runs import labels_by_run
from triage.archive.store import Store
from triage.base.errors import UsageError

# `ls --json`/`--csv`, in this order, then `labels` (docs/usage.md lists them)
LIST_COLUMNS = ("id", "tool", "tool_version", "created", "archived", "source", "gpu",
                "driver_version", "cuda_version", "host", "command", "kernels", "reports",
                "report_names", "clock_control", "cache_control", "replay_mode", "capture_group",
                "investigation", "notes")
DEFAULT_PAGE = 50  # runs the text listing shows unless `-n` says otherwise
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
    """`triage ls`: the runs listed, newest first, as batches of dicts (an iterator when every
    run is listed: it is read as it is printed); how many matched (the listing holds the newest
    `limit` of them) and how many the store holds; one line per run that is listed only in
    part, or not at all, because a file of it is damaged."""

    listed: Iterable[list[dict]]
    labels: dict[str, list[str]]
    matched: int
    total: int
    problems: tuple[str, ...]

    def batches(self) -> Iterator[list[dict]]:
        """The runs as dicts with their `labels`, a batch at a time: 100,000 runs never become
        one list of dicts or one string."""
        for batch in self.listed:
            for row in batch:
                row["labels"] = self.labels.get(row["id"], [])
            yield batch

    def rows(self) -> list[dict]:
        """Every run listed, as dicts (for a page; a full listing goes by `batches`)."""
        return [row for batch in self.batches() for row in batch]


def list_runs(store: Store, filters: RunFilter = RunFilter(), limit: int | None = None,
              columns: Sequence[str] = LIST_COLUMNS) -> RunList:
    """The newest `limit` runs (None: every one) that `filters` match, newest first, with
    `columns` (id and archived first); no manifest is opened. Unfiltered, the catalog is paged
    from its newest row and only the rows listed are converted (`View.newest`)."""
    view = catalog.open_view(store, [*columns, *filters.columns()])
    if filters != RunFilter():
        return _filtered(store, view, filters, limit, columns)
    listed: Iterable[list[dict]] = view.newest(columns, limit or catalogview.BATCH_ROWS)
    if limit is not None:
        listed = [next(iter(listed), [])[:limit]]
    return RunList(listed, labels_by_run(store), view.count, view.count, view.problems)


def _filtered(store: Store, view: catalogview.View, filters: RunFilter, limit: int | None,
              columns: Sequence[str]) -> RunList:
    """A filtered listing: the filters and the order are Arrow operations over the whole
    catalog's columns (how many match is part of the answer)."""
    table = view.table(ordered=False)
    table = table.filter(_mask(table, filters, store))
    order = catalogview.oldest_first(table)
    newest = order.slice(max(len(order) - limit, 0)) if limit is not None else order
    backwards = newest.take(pa.array(range(len(newest) - 1, -1, -1), type=pa.int64()))
    listed = table.take(backwards).select(list(columns))
    batches = listed.to_batches(max_chunksize=catalogview.BATCH_ROWS)
    return RunList((b.to_pylist() for b in batches),
                   labels_by_run(store), table.num_rows, view.count, view.problems)


def _mask(table: pa.Table, filters: RunFilter, store: Store) -> pa.ChunkedArray:
    """Which rows the filters keep (a run without the value filtered on is left out)."""
    import pyarrow.compute as pc

    conditions = []
    if filters.tool is not None:
        conditions.append(pc.equal(table.column("tool"), filters.tool))
    if filters.gpu is not None:
        conditions.append(pc.match_substring(table.column("gpu"), filters.gpu,
                                             ignore_case=True))
    if filters.since is not None:
        conditions.append(pc.greater_equal(table.column("archived"), filters.since))
    if filters.label is not None:
        runs = {run for name, run in store.labels.all().items()
                if fnmatch.fnmatchcase(name, filters.label)}
        conditions.append(pc.is_in(table.column("id"), value_set=pa.array(sorted(runs),
                                                                          type=pa.string())))
    return functools.reduce(pc.and_kleene, conditions)


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
        try:
            since = now - timedelta(**{AGE_UNITS[age.group(2)]: int(age.group(1))})
        except OverflowError:  # before year 1: every run is that recent
            raise UsageError(f"--since {text!r}: an age that reaches back before year 1; give "
                             "a smaller one (7d, 52w) or a date (2026-01-31)") from None
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
