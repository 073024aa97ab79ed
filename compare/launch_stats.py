"""An ncu run's metrics where they lie: statistics per group of launches, computed by DuckDB.

A full-set profile of a real workload holds thousands of launches of hundreds of metrics each
(two million values in a 200 MB report). `explain`, `diff` (and `report`, which is a diff) and
`history` never read them into Python rows: DuckDB scans the stored Parquet and returns, per
group of launches and metric, the mean, count, unit and first text (and, where asked, median,
quartiles and the values in launch order a significance test needs). What comes back is one row
per group and metric, as Arrow, turned into Python one group at a time (`GroupStats.raw`). Only
the few metrics that classify each launch (its configuration, ncu's SOLBottleneck inputs) come
back per launch (`NcuTables.facts`).

The numbers are those of the old Python loops: a metric's mean is over the launches with a
numeric value (NaN included, as Python's sum counts it), its unit that of the first launch that
has the metric, its text the first launch's text where no launch has a number.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from triage.base.duck import fetch_arrow, query_database, sql_string
from triage.capture.ncu import measured_metric
from triage.compare.matching import Launch
from triage.compare.noise import Sample, Spread, thinned

if TYPE_CHECKING:
    import duckdb

    from triage.compare.rundata import RunData

RawValues = dict[str, tuple]  # metric name -> (value or text, unit)
Group = tuple[Launch, ...]
_LAUNCH = pa.schema([("report_index", pa.int32()), ("kernel_index", pa.int64()),
                     ("grp", pa.int32()), ("pos", pa.int32())])
_QUARTILES = "quantile_cont(m.value, [0.25, 0.5, 0.75])"
_CURSORS = threading.Lock()


@dataclass(frozen=True)
class MetricStat:
    """One metric over a group's launches: the mean of the numeric values (else the first
    text), the unit, how many launches had a number; with `spread`, their median, quartiles
    and extremes, and every value in launch order (what `compare.noise` tests)."""

    mean: float | str | None
    unit: str | None
    n: int
    spread: Spread | None = None
    values: tuple[float, ...] = ()

    def sample(self) -> Sample | None:
        """The launches' values as `compare.noise` compares them (None without numbers or
        without `spread`)."""
        return Sample(self.spread, thinned(self.values)) if self.spread else None


def _spans(groups: np.ndarray) -> dict[int, tuple[int, int]]:
    """Group -> (offset, length) of its rows in a column ordered by group: the boundaries found
    by NumPy, not by a Python loop over every group's hundreds of metric rows."""
    starts = np.concatenate(([0], np.flatnonzero(groups[1:] != groups[:-1]) + 1))
    ends = np.append(starts[1:], len(groups))
    return {int(groups[start]): (int(start), int(end - start))
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True)}


class GroupStats:
    """The statistics of each group asked for, as DuckDB returned them (one Arrow row per group
    and metric, ordered by group); `raw` and `of` turn one group's rows into Python at a
    time."""

    def __init__(self, table: pa.Table,
                 sections: Callable[[], dict[int, set[str]]] = dict) -> None:
        self._table = table
        self._spans = _spans(table.column("grp").to_numpy()) if table.num_rows else {}
        self._read_sections = sections
        self._sections: dict[int, set[str]] | None = None
        self._last: tuple[int, RawValues] | None = None
        self._columns_for_raw: _RawColumns | None = None

    def sections(self, index: int) -> set[str]:
        """The ids of the sections collected for any launch of group `index` (read on the
        first call: `history` never asks)."""
        if self._sections is None:
            self._sections = self._read_sections()
        return self._sections.get(index, set())

    def _rows(self, index: int) -> pa.Table:
        offset, length = self._spans.get(index, (0, 0))
        return self._table.slice(offset, length)

    def _columns(self, index: int) -> dict[str, list]:
        rows = self._rows(index)
        return {name: rows.column(name).to_pylist() for name in rows.column_names
                if name != "grp"}

    def of(self, index: int) -> dict[str, MetricStat]:
        """Metric name -> its statistics over group `index` (the group's place in the list
        given to `NcuTables.stats`)."""
        columns = self._columns(index)
        names = columns.pop("name")
        return {name: _stat(**{key: columns[key][i] for key in columns})
                for i, name in enumerate(names)}

    def raw(self, index: int) -> RawValues:
        """Metric name -> (mean, else text; unit) over group `index`: what `explain` and
        `diff` read, without a `MetricStat` per metric (hundreds of kernels of hundreds of
        metrics each); the last group asked for is kept."""
        if self._last is not None and self._last[0] == index:
            return self._last[1]
        offset, length = self._spans.get(index, (0, 0))
        if length and self._columns_for_raw is None:
            self._columns_for_raw = _RawColumns(self._table)
        raw = self._columns_for_raw.group(offset, offset + length) \
            if self._columns_for_raw and length else {}
        self._last = (index, raw)
        return raw


class _RawColumns:
    """The columns `GroupStats.raw` reads, made ready once for every group: means and which rows
    are text as NumPy; names and units as Python strings per group, those of the group before
    taken again where they are the same (every kernel of a run has the same few hundred
    metrics: one string each, their hashes computed once, not one per group and metric)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.means = table.column("mean").to_numpy()  # NULL (no number) as NaN: see `texts`
        self.unmeasured = np.flatnonzero(table.column("n").to_numpy() == 0)  # text metrics
        self.texts = table.column("text").to_numpy(zero_copy_only=False)[
            self.unmeasured].tolist()
        self.before: dict[str, tuple[pa.ChunkedArray, list]] = {}

    def _strings(self, column: str, start: int, end: int) -> list:
        cells = self.table.column(column).slice(start, end - start)
        before = self.before.get(column)
        if before is None or not before[0].equals(cells):
            before = self.before[column] = (cells, cells.to_pylist())
        return before[1]

    def group(self, start: int, end: int) -> RawValues:
        values = self.means[start:end].tolist()
        first, last = np.searchsorted(self.unmeasured, [start, end]).tolist()
        for at, text in zip(self.unmeasured[first:last].tolist(), self.texts[first:last],
                            strict=True):
            values[at - start] = text
        return dict(zip(self._strings("name", start, end),
                        zip(values, self._strings("unit", start, end), strict=True),
                        strict=True))


def _stat(mean: float | None, text: str | None, unit: str | None, n: int,
          quartiles: list[float] | None = None, low: float | None = None,
          high: float | None = None, launch_values: list[float] | None = None) -> MetricStat:
    spread = None
    if quartiles and low is not None and high is not None and n:
        q1, median, q3 = quartiles
        spread = Spread(n, median, low, high, q1, q3)
    return MetricStat(mean if n else text, unit, n, spread, tuple(launch_values or ()))


class NcuTables:
    """One ncu run's metrics, sections and rules tables, queried where they are stored."""

    _names = count()

    def __init__(self, run: RunData) -> None:
        self.run = run
        self._con: duckdb.DuckDBPyConnection | None = None
        self._facts: dict[tuple[str, ...], tuple[dict[Launch, RawValues], set[Launch]] | None] = {}

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """This run's cursor of the process's query database (runs may be read on threads:
        `compare.repeats`, and DuckDB's connection is not thread-safe, even to hand out
        cursors)."""
        if self._con is None:
            with _CURSORS:
                self._con = query_database().cursor()
        return self._con

    def _source(self, table: str, columns: Sequence[str], ordered: bool = False) -> str | None:
        """A FROM item for the stored table in these columns (NULL for those an older schema
        lacks; with `ordered`, the row's place in the file as `row`), or None when the run has
        no such table."""
        source = self.run.parquet(table)
        if source is None:
            return None
        stored = set(source.schema_arrow.names)
        listed = ", ".join(c if c in stored else f"NULL AS {c}" for c in columns)
        path = self.run.store.tables.local(self.run.id, table,
                                           self.run.record.tables[table].sha256)
        if ordered:
            listed += ", file_row_number AS row"
        return f"(SELECT {listed} FROM read_parquet({sql_string(path)}, " \
            f"file_row_number = {str(ordered).lower()}))"

    def _wanted(self, groups: Iterable[Sequence[Launch]]) -> str:
        """Register (launch, group, position) rows as a view; its name."""
        groups = list(groups)
        sizes = np.array([len(group) for group in groups], np.int64)
        launches = [launch for group in groups for launch in group]
        report, kernel = zip(*launches, strict=True) if launches else ((), ())
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        columns = (report, kernel, np.repeat(np.arange(len(groups)), sizes),
                   np.arange(len(launches)) - starts)
        name = f"wanted_{next(self._names)}"
        self.con.register(name, pa.table([pa.array(c, f.type) for c, f in zip(
            columns, _LAUNCH, strict=True)], schema=_LAUNCH))
        return name

    def _named(self, names: Iterable[str]) -> str:
        """Register metric names as a one-column view (a SEMI JOIN with it is many times
        faster than an IN list of strings over millions of rows); its name."""
        name = f"names_{next(self._names)}"
        self.con.register(name, pa.table({"name": pa.array(list(names), pa.string())}))
        return name

    def _query(self, sql: str, views: Sequence[str] = ()) -> pa.Table:
        try:
            return fetch_arrow(self.con, sql)
        finally:
            for view in views:
                self.con.unregister(view)

    def stats(self, groups: Sequence[Sequence[Launch]], names: Sequence[str] | None = None,
              spread: bool = False) -> GroupStats:
        """Per group of launches (a launch may be in several), per metric (those named, else
        all): `MetricStat`s; with `spread`, quartiles, extremes and the values too."""
        source = self._source("metrics", ("report_index", "kernel_index", "name", "unit",
                                          "value", "text"))
        if source is None or not groups:
            return GroupStats(pa.table({"grp": pa.array([], pa.int32())}))
        wanted = self._wanted(groups)
        extra = (f", {_QUARTILES} AS quartiles, min(m.value) AS low, max(m.value) AS high, "
                 "list(m.value ORDER BY w.pos) FILTER (WHERE m.value IS NOT NULL) "
                 "AS launch_values") if spread else ""
        named = [self._named(names)] if names else []
        only = f"SEMI JOIN {named[0]} USING (name)" if named else ""
        table = self._query(
            f"SELECT w.grp, m.name, avg(m.value) AS mean, count(m.value) AS n, "
            f"arg_min_null(m.unit, w.pos) AS unit, arg_min(m.text, w.pos) AS text{extra} "
            f"FROM (SELECT * FROM {source} {only}) AS m JOIN {wanted} AS w "
            f"USING (report_index, kernel_index) GROUP BY w.grp, m.name ORDER BY w.grp, m.name",
            [wanted, *named])
        return GroupStats(table, lambda: self._section_ids(groups))

    def _section_ids(self, groups: Sequence[Sequence[Launch]]) -> dict[int, set[str]]:
        source = self._source("sections", ("report_index", "kernel_index", "section_id"))
        if source is None:
            return {}
        wanted = self._wanted(groups)
        table = self._query(f"SELECT DISTINCT w.grp, s.section_id FROM {source} AS s "
                            f"JOIN {wanted} AS w USING (report_index, kernel_index)", [wanted])
        found: dict[int, set[str]] = {}
        for group, section in zip(table.column("grp").to_pylist(),
                                  table.column("section_id").to_pylist(), strict=True):
            found.setdefault(group, set()).add(section)
        return found

    def with_data(self, launches: Iterable[Launch]) -> set[Launch] | None:
        """Those of these launches whose results carry a value of a measured metric
        (`capture.ncu`'s measure, the one the archive's notice counts); None for a run that
        stored no metrics table."""
        facts = next(iter(self._facts.values()), None) or self.facts(())
        return None if facts is None else facts[1].intersection(launches)

    def facts(self, keep: tuple[str, ...]) -> tuple[dict[Launch, RawValues], set[Launch]] | None:
        """Of every launch of the run, in one scan: the `keep` metrics (value, else text; and
        unit: a few per launch, such as those that classify it), and which launches carry a
        value of a measured metric; None for a run that stored no metrics table."""
        if keep not in self._facts:
            self._facts[keep] = self._scan(keep)
        return self._facts[keep]

    def _scan(self, keep: tuple[str, ...]) -> tuple[dict[Launch, RawValues], set[Launch]] | None:
        source = self._source("metrics", ("report_index", "kernel_index", "name", "unit",
                                          "value", "text"))
        if source is None:
            return None
        measured = self._named([n for n in self._query(f"SELECT DISTINCT name FROM {source}")
                                .column("name").to_pylist() if n and measured_metric(n)])
        table = self._query(
            f"SELECT DISTINCT report_index, kernel_index FROM {source} SEMI JOIN {measured} "
            "USING (name) WHERE value IS NOT NULL OR text IS NOT NULL", [measured])
        with_data = set(zip(table.column("report_index").to_pylist(),
                            table.column("kernel_index").to_pylist(), strict=True))
        kept = self._named(keep)
        table = self._query(f"SELECT report_index, kernel_index, name, value, text, unit FROM "
                            f"{source} SEMI JOIN {kept} USING (name)", [kept])
        values: dict[Launch, RawValues] = {}
        for report, kernel, name, value, text, unit in zip(
                *(table.column(c).to_pylist() for c in table.column_names), strict=True):
            launch = values.get((report, kernel))
            if launch is None:  # not setdefault: its new dict per row cost more than the rest
                launch = values[report, kernel] = {}
            launch[name] = (value if value is not None else text, unit)
        return values, with_data

    def rows(self, table: str, launches: Iterable[Launch], where: str = "") -> list[dict[str,
                                                                                      Any]]:
        """The rows of a per-launch table (sections, rules) for a few launches, in stored
        order, as dicts; `where` narrows them further (a SQL condition on the table's
        columns)."""
        from triage.schemas.tables import arrow_schema

        columns = arrow_schema(table).names
        source = self._source(table, columns, ordered=True)
        if source is None:
            return []
        wanted = self._wanted([list(launches)])
        found = self._query(
            f"SELECT {', '.join(columns)} FROM {source} AS t SEMI JOIN {wanted} AS w "
            f"USING (report_index, kernel_index) {'WHERE ' + where if where else ''} "
            "ORDER BY row", [wanted])
        # Table.to_pylist builds each row in a Python comprehension: 3x slower than zipping
        return [dict(zip(columns, row, strict=True)) for row in zip(
            *(found.column(c).to_pylist() for c in columns), strict=True)]
