"""The team's console: every page of `triage publish` and `triage serve`, by path.

Both commands ask the same `Site` for the same paths, so the static site and the server show
the same pages from the same templates. Every page is built from the catalog (archive/console.py)
except a run's own page (its manifest, read when that page is written), a comparison (the
review page of `triage report`, from `diff_runs`) and a series' history (compare/history.py).
Each page has a key, a hash of what it is made from: `publish` rewrites only the pages whose key
changed. Paths are relative and every page links with `root` (the way back to the site's top),
so the site opens from file://, from any static host and from the server alike.

Strings from reports and users reach a page only through Jinja's autoescape (and `printable`,
the templates' finalize) or, in the filter's JavaScript, through `textContent`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from triage.archive.console import Console, ConsoleRun, Pair, Series, read_console, stamp_of
from triage.archive.site_files import Published
from triage.archive.store import Store
from triage.base.version import __version__
from triage.views.report import template_environment

PAGE_ROWS = 100      # runs per page of the runs list
CHUNK_ROWS = 2000    # runs per script the list's filter loads
TOP_BLOCK = 2048     # runs whose kernel ranking is read at once
SITE_FORMAT = "1"    # part of every key: a new page layout rewrites every page


@dataclass(frozen=True)
class Page:
    """One file of the site: its path, its key and how to make it."""

    path: str
    key: str
    render: Callable[[], bytes]


@dataclass(frozen=True)
class Related:
    """A run's kin on its page: the other ranks of its capture group, the runs `triage rerun`
    made of it, the other runs of its investigation (each in the catalog's order)."""

    group: tuple[ConsoleRun, ...] = ()
    reruns: tuple[ConsoleRun, ...] = ()
    investigation: tuple[ConsoleRun, ...] = ()

    def runs(self) -> tuple[ConsoleRun, ...]:
        return self.group + self.reruns + self.investigation


@dataclass(frozen=True)
class SiteLinks:
    """What a page needs to link the rest of the site: the way back to the top."""

    root: str

    def run(self, run_id: str) -> str:
        return f"{self.root}{run_path(run_id)}"

    def nav(self) -> Markup:
        return Markup(_template("site_nav.html.j2").render(site=self))


def _template(name: str):
    """A template of the process' one HTML environment (views/report.py)."""
    return template_environment(False).get_template(name)


def _html(name: str, root: str, **context) -> bytes:
    return _template(name).render(site=SiteLinks(root), **context).encode()


def run_path(run_id: str) -> str:
    """A run's page, in the shard of its id's first two digits (archive/site_files.py)."""
    return f"run/{run_id[:2]}/{run_id}.html"


def layout() -> str:
    """What every page's look depends on: the page format, triage's version, the templates."""
    return stamp_of(SITE_FORMAT, __version__, _templates_digest())


def _key(*parts: object) -> str:
    return stamp_of(layout(), *parts)


@functools.cache
def _templates_digest() -> str:
    """The templates' text: an edited template (a development install) rewrites every page."""
    from importlib import resources

    files = sorted((f.name, f.read_bytes()) for f in resources.files("triage.templates").iterdir()
                   if f.name.endswith(".j2"))
    return stamp_of(*(f"{name}:{data.hex()}" for name, data in files))


class Site:
    """The pages of one store's console, each made when asked for."""

    def __init__(self, store: Store, console: Console | None = None, keep: Path | None = None):
        self.store = store
        self.keep = keep  # where a publish keeps what the next one reuses (site_history)
        self.console = console or read_console(store)
        self.runs = self.console.by_id()
        self.order = {run_id: at for at, run_id in enumerate(self.runs)}
        self.series_of: dict[str, list[Series]] = {}
        self.pairs_of: dict[str, list[Pair]] = {}
        self.groups: dict[str, list[ConsoleRun]] = {}
        self.reruns: dict[str, list[ConsoleRun]] = {}  # by the run they re-executed
        self.investigations: dict[str, list[ConsoleRun]] = {}
        for series in self.console.series:
            for run in series.runs:
                self.series_of.setdefault(run.id, []).append(series)
        for pair in self.console.pairs:
            for side in {pair.a, pair.b}:
                self.pairs_of.setdefault(side, []).append(pair)
        for run in self.console.runs:
            if run.capture_group:
                self.groups.setdefault(run.capture_group, []).append(run)
            if run.rerun_of:
                self.reruns.setdefault(run.rerun_of, []).append(run)
            if run.investigation:
                self.investigations.setdefault(run.investigation, []).append(run)
        self.tops: dict[str, list[dict]] = {}

    @functools.cached_property
    def links(self) -> dict[str, str]:
        """What a run's page links to beyond its own row (its comparisons, series and kin), of
        the runs that have any: most of 100,000 runs have none, and their page's key is their
        row's stamp alone."""
        linked = {*self.pairs_of, *self.series_of, *self.reruns}
        linked.update(r.id for runs in (*self.groups.values(), *self.investigations.values())
                      if len(runs) > 1 for r in runs)
        found = {}
        for run_id in linked:
            run = self.runs.get(run_id)
            if run is not None:
                found[run_id] = " ".join(
                    [p.slug for p in self.pairs_of.get(run_id, ())]
                    + [s.slug for s in self.series_of.get(run_id, ())]
                    + [r.id for r in self.related(run).runs()])
        return {run_id: text for run_id, text in found.items() if text}

    # -- the page set ------------------------------------------------------------------------

    def pages(self) -> Iterator[Page]:
        """Every page but the runs' (`run_pages`), with its key (cheap: nothing is rendered
        until a page's `render`)."""
        from triage.views import site_history

        yield Page("console.js", _key(_asset("console.js.j2")), lambda: _asset("console.js.j2"))
        runs, stamps = self.console.runs, self.stamps
        yield Page("index.html", _key("index", *stamps[-PAGE_ROWS:], len(runs),
                                      self._series_shown()),
                   lambda: self.index_page())
        for number in range(self.page_count()):
            last = number + 1 == self.page_count()  # links to a newer page, or to the newest
            rows = stamps[number * PAGE_ROWS:(number + 1) * PAGE_ROWS][::-1]
            yield Page(f"runs/{number}.html", _key("runs", number, last, *rows),
                       functools.partial(self.runs_page, number))
        for number in range(self.chunk_count()):
            chunk = stamps[number * CHUNK_ROWS:(number + 1) * CHUNK_ROWS]
            yield Page(f"data/runs-{number}.js", _key("chunk", *chunk),
                       functools.partial(self.chunk_script, number))
        yield Page("data/index.js", _key("data", len(runs), self.chunk_count()),
                   self.data_index)
        yield Page("compare/index.html", _key("pairs", *map(self._pair_stamp, self.console.pairs)),
                   self.pairs_page)
        for pair in self.console.pairs:
            yield Page(f"compare/{pair.slug}.html", self._pair_stamp(pair),
                       functools.partial(self.compare_page, pair))
        yield from site_history.pages(self)

    @functools.cached_property
    def stamps(self) -> list[str]:
        """Each run's stamp, in the catalog's order: made once, four keys are made of each."""
        return [run.stamp() for run in self.console.runs]

    def run_pages(self) -> list[tuple[str, str, str]]:
        """Every run's page as `(path, key, run id)`, for `SiteWriter.shard_pages`. A run
        page's key is plain text, not a hash: what it shows that can change (its row's index
        time, its labels) and the pages it links to (the layout is recorded once for them
        all)."""
        links = self.links
        return [(run_path(run.id), f"{stamp}|{links[run.id]}" if run.id in links else stamp,
                 run.id) for run, stamp in zip(self.console.runs, self.stamps, strict=True)]

    def render(self, path: str) -> bytes | None:
        """The page at `path` (the server's one question), or None where there is none: made
        straight from the path, without the keys of every other page."""
        from triage.views import site_history

        fixed = {"index.html": self.index_page, "data/index.js": self.data_index,
                 "compare/index.html": self.pairs_page,
                 "console.js": lambda: _asset("console.js.j2")}
        if path in fixed:
            return fixed[path]()
        found = re.fullmatch(r"(runs/|data/runs-)(\d+)\.(html|js)", path)
        if found and int(found[2]) < (self.page_count() if found[1] == "runs/"
                                      else self.chunk_count()):
            number = int(found[2])
            return self.runs_page(number) if found[1] == "runs/" else self.chunk_script(number)
        found = re.fullmatch(r"run/[0-9a-f]{2}/([0-9a-f]{64})\.html", path)
        if found and path == run_path(found[1]) and found[1] in self.runs:
            return self.run_page(found[1])
        pair = next((p for p in self.console.pairs if path == f"compare/{p.slug}.html"), None)
        if pair is not None:
            return self.compare_page(pair)
        return site_history.render(self, path)

    # -- the runs list -----------------------------------------------------------------------

    def page_count(self) -> int:
        return max(1, -(-len(self.console.runs) // PAGE_ROWS))

    def chunk_count(self) -> int:
        return -(-len(self.console.runs) // CHUNK_ROWS)

    def _page_rows(self, number: int) -> tuple[ConsoleRun, ...]:
        """Page `number` counts from the oldest, so a new run changes the newest page only;
        its rows are shown newest first."""
        return self.console.runs[number * PAGE_ROWS:(number + 1) * PAGE_ROWS][::-1]

    def _series_shown(self) -> list[str]:
        """What the first page says of each series (its key's part)."""
        return [f"{s.slug} {len(s.runs)}" for s in self.console.series]

    def index_page(self) -> bytes:
        rows = self.console.runs[-PAGE_ROWS:][::-1]
        older = self.page_count() - 2 if len(self.console.runs) > PAGE_ROWS else None
        return _html("site_runs.html.j2", "", rows=rows, page=None, older=older, newer=None,
                     total=len(self.console.runs), series=self.console.series,
                     problems=self.console.problems, pages=self.page_count())

    def runs_page(self, number: int) -> bytes:
        """Page `number` of the list: made from its own runs alone (not the store's count, nor
        the series), so that a new run leaves every older page as it was."""
        return _html("site_runs.html.j2", "../", rows=self._page_rows(number), page=number,
                     older=number - 1 if number else None,
                     newer=number + 1 if number + 1 < self.page_count() else None,
                     total=None, series=(), problems=(), pages=None)

    def chunk_script(self, number: int) -> bytes:
        """One script of the filter's index: compact rows, oldest first."""
        chunk = self.console.runs[number * CHUNK_ROWS:(number + 1) * CHUNK_ROWS]
        rows = [[r.id, r.tool, r.gpu or "", r.archived or "", " ".join(r.labels), r.workload,
                 r.kernels] for r in chunk]
        return f"triageRuns({number},{json.dumps(rows, separators=(',', ':'))});\n".encode()

    def data_index(self) -> bytes:
        return f"triageIndex({self.chunk_count()},{len(self.console.runs)});\n".encode()

    # -- a run -------------------------------------------------------------------------------

    def run_page(self, run_id: str) -> bytes:
        from triage.archive.runs import load_record
        from triage.views.report import provenance_rows
        from triage.views.show import render_show

        record = load_record(self.store, run_id)
        run = self.runs[run_id]
        return _html("site_run.html.j2", "../../", run=run, record=record,
                     show=render_show(record), provenance=provenance_rows([record]),
                     top=self._top(run_id), series=self.series_of.get(run_id, []),
                     pairs=self.pairs_of.get(run_id, []),
                     related=self.related(run), runs=self.runs)

    def related(self, run: ConsoleRun) -> Related:
        """The runs a run's page links as its own kin, from the catalog's columns."""
        def others(runs: list[ConsoleRun]) -> tuple[ConsoleRun, ...]:
            return tuple(r for r in runs if r.id != run.id)

        return Related(others(self.groups.get(run.capture_group or "", [])),
                       tuple(self.reruns.get(run.id, ())),
                       others(self.investigations.get(run.investigation or "", [])))

    def _top(self, run_id: str) -> list[dict]:
        """The run's kernels by total time, from its catalog row (no table opened). Pages are
        made in the catalog's order, so the rows of the TOP_BLOCK runs from this one on are
        read together (a row group or two of the merged segment, not one per run)."""
        if run_id not in self.tops:
            from triage.archive import catalog

            at = self.order.get(run_id, 0)
            block = [r.id for r in self.console.runs[at:at + TOP_BLOCK]] \
                if run_id in self.order else [run_id]
            table = catalog.open_view(self.store, ["kernel_summary"]).rows_of(block)
            self.tops = dict(zip(table.column("id").to_pylist(),
                                 table.column("kernel_summary").to_pylist(), strict=True))
        rows = self.tops.get(run_id) or []
        return sorted(rows, key=lambda r: -(r.get("total_ns") or 0))[:20]

    # -- comparisons -------------------------------------------------------------------------

    @functools.cached_property
    def _series_of(self) -> dict[str, list]:
        """The series by selector, once: each pair's stamp looks its two sides up."""
        found: dict[str, list] = {}
        for series in self.console.series:
            found.setdefault(series.selector, []).append(series)
        return found

    def _pair_stamp(self, pair: Pair) -> str:
        sides = [s for side in dict.fromkeys((pair.a, pair.b))
                 for s in self._series_of.get(side, [])]
        runs = [r.stamp() for s in sides for r in s.runs] + \
            [self.runs[i].stamp() for i in (pair.a, pair.b) if i in self.runs]
        return _key("pair", pair.a, pair.b, *runs)

    def pairs_page(self) -> bytes:
        return _html("site_pairs.html.j2", "../", pairs=self.console.pairs, runs=self.runs)

    def compare_page(self, pair: Pair) -> bytes:
        return render_pair(self.store, pair.a, pair.b, "../")


def render_pair(store: Store, a: str, b: str, root: str) -> bytes:
    """The review page of `triage report A B` (every metric a diff lists; unchanged ones
    hidden), with the site's navigation and run links."""
    from triage.compare.result import DiffOptions
    from triage.views.report import diff_series, render_html

    diffs = diff_series(store, [a, b], DiffOptions(show_all=True))
    return render_html(diffs, show_unchanged=False, site=SiteLinks(root)).encode()


@functools.cache
def _asset(name: str) -> bytes:
    """A file of the templates package served as is (the filter's script)."""
    from importlib import resources

    return resources.files("triage.templates").joinpath(name).read_bytes()


def publish(store: Store, dest) -> Published:
    """Write the site of `store` to `dest`: a new generation beside the last one, only the pages
    whose key changed rendered, then one switch (archive/site_files.py)."""
    from triage.archive.site_files import REGRESSIONS, ROWS, TEMPLATES, SiteWriter
    from triage.views.compiled import compiled_templates

    writer = SiteWriter(Path(dest), layout())
    with cyclic_gc_paused(), compiled_templates(writer.home / TEMPLATES, layout()):
        try:
            site = Site(store, read_console(store, keep=writer.home / ROWS),
                        keep=writer.home / REGRESSIONS)
            for page in site.pages():
                writer.page(page.path, page.key, page.render)
            writer.shard_pages(site.run_pages(), site.run_page)
        except BaseException:
            writer.abandon()
            raise
        return writer.switch()


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector paused while a publish holds a few objects per run: each of its
    passes walks every object alive, and 100,000 runs' rows, keys and pages made it half of
    an incremental publish. The pages hold no cycles to collect meanwhile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
