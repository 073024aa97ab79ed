"""The console's history pages: each series' kernels over its runs (the chart and table of
`triage history --html`), the regressions list (steps that got slower, newest first) and its
Atom feed. A series follows the TOP_KERNELS kernels (or NVTX ranges) of most total time in its
newest run (read from the catalog's kernel ranking), a series of bench runs every metric its
newest run measured; each is a `triage history` of the series' runs."""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import asdict, dataclass

from triage.archive import atomic
from triage.archive.console import Series
from triage.base.errors import TriageError
from triage.compare.history import HistoryResult, HistoryStep, Measure
from triage.views.site import Page, Site, _html, _key

TOP_KERNELS = 3


@dataclass(frozen=True)
class SeriesHistory:
    """A series and the history of each kernel it follows."""

    series: Series
    results: tuple[HistoryResult, ...]
    higher: frozenset[str] = frozenset()  # bench metrics better higher: a fall is a regression

    def slower(self, result: HistoryResult, step: HistoryStep) -> bool:
        """Whether a step is a regression: a rise, or a fall of a metric better higher."""
        change = step.noise.change_pct or 0
        return change < 0 if result.measure.metric in self.higher else change > 0


@dataclass(frozen=True)
class Regression:
    """A step that got slower, as the regressions list and its feed show it: when, in which
    series, what, from which run on, how much. Plain values: a publish keeps each series' own
    beside the site by the series' key (`regressions`)."""

    when: str
    series: str  # its selector
    slug: str
    what: str  # the kernel, range or metric
    run: str
    labels: tuple[str, ...]
    change_pct: float


def measures(site: Site, series: Series) -> tuple[list[Measure], frozenset[str]]:
    """What a series follows, and the metrics of those that are better higher: the kernels of
    most total time in the series' newest run (its catalog row); an nsys run without kernels:
    its NVTX ranges of most total time (its nvtx_summary table); a series of bench runs: every
    metric its newest run measured (its bench_samples table, which says each one's direction)."""
    newest = series.runs[-1].id
    if series.tool == "bench":
        rows = _rows(site, newest, "bench_samples", ["metric", "better"])
        names = dict.fromkeys(row["metric"] for row in rows if row["metric"])
        return ([Measure(metric=name) for name in names],
                frozenset(row["metric"] for row in rows if row["better"] == "higher"))
    top = [row["name"] for row in site._top(newest) if row.get("name")][:TOP_KERNELS]
    if top or series.tool != "nsys":
        return [Measure(kernel=f"^{re.escape(name)}$") for name in top], frozenset()
    ranked = sorted(_rows(site, newest, "nvtx_summary", ["text", "total_ns"]),
                    key=lambda row: -(row["total_ns"] or 0))
    names = dict.fromkeys(row["text"] for row in ranked if row["text"])
    return [Measure(nvtx=name) for name in list(names)[:TOP_KERNELS]], frozenset()


def _rows(site: Site, run_id: str, table: str, columns: list[str]) -> list[dict]:
    """Some columns of one table of a run; none where the run has no such table."""
    from triage.compare.rundata import RunData

    found = RunData(site.store, run_id).table(table, columns)
    return found.to_pylist() if found is not None else []


def series_history(site: Site, series: Series) -> SeriesHistory:
    """Each kernel's history over the series' runs; a kernel no run can follow is left out."""
    selector = ",".join(run.id for run in series.runs)
    followed, higher = measures(site, series)
    results = []
    for measure in followed:
        try:
            results.append(_named(site, series, measure, selector))
        except TriageError:
            continue
    return SeriesHistory(series, tuple(results), higher)


def _named(site: Site, series: Series, measure: Measure, selector: str) -> HistoryResult:
    """The history, its selector shown as the series' label glob (the ids are what it read)."""
    from dataclasses import replace

    from triage.compare.history import history

    return replace(history(site.store, selector, measure), selector=series.selector)


def history_of(site: Site, series: Series) -> SeriesHistory:
    """A series' history, made once per Site (its page and its regressions read it)."""
    made = site.__dict__.setdefault("_histories", {})
    if series.slug not in made:
        made[series.slug] = series_history(site, series)
    return made[series.slug]


def series_regressions(site: Site, series: Series) -> list[Regression]:
    """The steps of one series that got slower (or, of a metric better higher, lower)."""
    found, out = history_of(site, series), []
    for result in found.results:
        for step in filter(functools.partial(found.slower, result), result.steps):
            run = result.points[step.at].run
            out.append(Regression(run.created or run.archived or "", series.selector,
                                  series.slug, result.measure.describe(), run.id,
                                  tuple(run.labels), step.noise.change_pct or 0.0))
    return out


def regressions(site: Site) -> list[Regression]:
    """Every series' regressions, newest first, made once per Site. A publish keeps each
    series' beside the site (`Site.keep`), by the series' key: a series whose key is unchanged
    is read from there, and only those that changed get their history made again (a new run
    of one series of many costs that series' history, not all of them)."""
    made = site.__dict__.get("_regressions")
    if made is None:
        found = [r for s in site.console.series for r in _kept_regressions(site, s)]
        made = site.__dict__["_regressions"] = sorted(found, key=lambda r: r.when, reverse=True)
        if site.keep is not None and site.keep.is_dir():
            current = {f"{_series_key(s)}.json" for s in site.console.series}
            for other in site.keep.iterdir():
                if other.name not in current:
                    other.unlink(missing_ok=True)
    return made


def _kept_regressions(site: Site, series: Series) -> list[Regression]:
    if site.keep is None:
        return series_regressions(site, series)
    path = site.keep / f"{_series_key(series)}.json"
    try:
        return [Regression(**dict(row, labels=tuple(row["labels"])))
                for row in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    found = series_regressions(site, series)
    with atomic.temp_file_in(site.keep, ".json") as (stream, temp):
        stream.write(json.dumps([asdict(r) for r in found]).encode())
        stream.close()
        os.replace(temp, path)
    return found


def _series_key(series: Series) -> str:
    return _key("series", series.slug, series.total, *(r.stamp() for r in series.runs))


def pages(site: Site) -> list[Page]:
    """The history pages, the regressions list and its feed, each with its key."""
    every = [_series_key(s) for s in site.console.series]
    out = [Page("history/index.html", _key("histories", *every),
                lambda: _html("site_series.html.j2", "../", series=site.console.series))]
    out += [Page(f"history/{s.slug}.html", _series_key(s),
                 functools.partial(history_page, site, s)) for s in site.console.series]
    out += [Page("regressions.html", _key("regressions", *every),
                 lambda: _html("site_regressions.html.j2", "", found=regressions(site))),
            Page("regressions.atom", _key("feed", *every),
                 lambda: _html("site_feed.xml.j2", "", found=regressions(site)))]
    return out


def render(site: Site, path: str) -> bytes | None:
    """A history page by its path (the server), or None."""
    return next((page.render() for page in pages(site) if page.path == path), None)


def history_page(site: Site, series: Series) -> bytes:
    from triage.views.history import boundary_lines, headers, rows, step_lines
    from triage.views.history_page import trend

    found = history_of(site, series)
    shown = [{"result": r, "chart": trend(r), "rows": rows(r),
              "headers": headers(r), "steps": step_lines(r),
              "boundaries": boundary_lines(r)} for r in found.results]
    return _html("site_history.html.j2", "../", series=series, shown=shown)
