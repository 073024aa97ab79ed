"""`triage publish` and `triage serve` (issue 37), without a browser: the site of a store with
series, a step and planted HTML; incremental and atomic publishing; the server's read-only
routes. The browser checks are in test_console_browser.py."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from console_store import HOSTILE, make_store
from triage.views.site import run_path


@pytest.fixture(scope="module")
def console_store(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("console")
    return root / "store", make_store(root / "store", root / "work")


def site_files(site: Path) -> dict[str, Path]:
    """Every page of a published site by its path (run pages are in linked shard folders)."""
    found = {}
    for folder, _dirs, files in os.walk(site, followlinks=True):
        for name in files:
            if name != ".triage-site.json":
                path = Path(folder, name)
                found[str(path.relative_to(site))] = path
    return found


def published(triage, store: Path, site: Path) -> tuple[int, int]:
    """Publish; the pages written and kept, as the command says them."""
    text = triage("--store", store, "publish", site).stdout
    found = re.search(r"(\d+) page\(s\) written, (\d+) unchanged", text)
    assert found, text
    return int(found[1]), int(found[2])


def test_publish_writes_every_page_and_escapes_every_planted_name(triage, console_store,
                                                                   tmp_path):
    store, ids = console_store
    site = tmp_path / "site"
    written, kept = published(triage, store, site)
    assert kept == 0 and written == len(site_files(site))
    planted = ids["planted"][0]
    assert (site / run_path(planted)).is_file()
    pages = [p for p in site_files(site).values() if p.suffix in (".html", ".atom")]
    assert [str(p) for p in pages if HOSTILE in p.read_text() or "<script>" in p.read_text()
            or "onerror=" in p.read_text().replace("onerror=alert", "")] == []
    escaped = "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"
    run_page = (site / run_path(planted)).read_text()
    assert run_page.count(escaped) >= 2  # its command and its kernel or NVTX name
    before_1 = (site / run_path(ids["before"][0])).read_text()
    assert escaped in before_1  # the note
    (review_file,) = (site / "compare").glob(f"*{planted}*.html")  # planted/1 vs planted/2
    review = review_file.read_text()
    assert escaped in review and "Performance review" in review
    # a run id links to its page wherever it appears
    assert f'href="../{run_path(planted)}"' in review
    index = (site / "index.html").read_text()
    assert all(f'href="{run_path(run_id)}"' in index for run_id in ids["before"])


def test_the_nightly_series_steps_up_and_is_a_regression_in_the_feed(triage, console_store,
                                                                     tmp_path):
    store, ids = console_store
    site = tmp_path / "site"
    published(triage, store, site)
    history = (site / "history" / "nightly.html").read_text()
    assert re.search(r"step at run 6 \(nightly/6\): \+\d+\.\d%", history)
    assert f'href="../{run_path(ids["nightly"][0])}"' in history
    regressions = (site / "regressions.html").read_text()
    assert f'href="{run_path(ids["nightly"][0])}"' in regressions
    import xml.etree.ElementTree as ET

    feed = ET.parse(site / "regressions.atom").getroot()
    entries = feed.findall("{http://www.w3.org/2005/Atom}entry")
    assert entries and all("nightly/*" in e.findtext("{http://www.w3.org/2005/Atom}title")
                           for e in entries)
    pairs = (site / "compare" / "index.html").read_text()
    families = "(before|after|planted|nightly)"  # in capture order, unknown times last
    assert re.search(rf'href="{families}-\w+--{families}-\w+\.html"', pairs)  # family vs family


def test_publishing_again_writes_only_what_changed(triage, console_store, tmp_path,
                                                   monkeypatch):
    store, ids = console_store
    work = tmp_path / "store"
    import shutil

    shutil.copytree(store, work, symlinks=True)
    monkeypatch.chdir(tmp_path)
    site = Path("site")  # relative: the generations are found again all the same
    written, _kept = published(triage, work, site)
    assert published(triage, work, site) == (0, written)
    from helpers import corpus_file

    new = triage.json("--store", work, "archive",
                      corpus_file("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"))[0]["id"]
    # its page, the newest runs (index and runs/0), the filter's chunk and its count
    assert published(triage, work, site) == (5, written - 4)  # 4 rewritten, 1 new
    assert new in (site / "index.html").read_text()
    triage("--store", work, "label", "after/9", ids["after"][0])
    again, kept = published(triage, work, site)
    # every page that names the run's labels: its series' histories and comparisons too
    assert 5 < again < written / 2, (again, kept)
    assert "after/9" in (site / run_path(ids["after"][0])).read_text()
    # the last generation is removed, and the shards only it used; each series' regressions
    # are kept beside them, the current ones only, and the templates' compiled code
    assert sorted(p.name for p in site.resolve().parent.iterdir()) == \
        sorted([site.resolve().name, "regressions", "shards", "templates"])
    assert len(list((site.resolve().parent / "regressions").iterdir())) == 4  # 4 series
    assert len(list((site.resolve().parent / "shards").iterdir())) == \
        len({run_id[:2] for run_id in [new, *(i for v in ids.values() for i in v)]})


def test_each_change_rewrites_exactly_the_pages_it_changes(triage, console_store, tmp_path,
                                                           monkeypatch):
    """A new run, a note, a new label and a moved label: each publish renders the pages whose
    inputs changed and links every other from the last one (same inode), says how many it
    rendered, and the site it leaves is byte for byte the one a first publish makes."""
    import shutil

    from helpers import corpus_file

    from triage.archive import catalog
    from triage.archive.store import Store

    store, ids = console_store
    work, site = tmp_path / "store", tmp_path / "site"
    shutil.copytree(store, work, symlinks=True)
    catalog.merge(Store.open(work))  # a merged segment, whose rows a publish keeps
    published(triage, work, site)
    kept = tmp_path / ".site.generations" / "rows"
    (first_rows,) = kept.iterdir()
    report = corpus_file("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep")

    def rewritten(*command: object) -> set[str]:
        before = {name: p.stat().st_ino for name, p in site_files(site).items()}
        triage("--store", work, *command)
        written, _kept = published(triage, work, site)
        after = {name: p.stat().st_ino for name, p in site_files(site).items()}
        changed = {name for name, inode in after.items() if before.get(name) != inode}
        assert written == len(changed), (written, changed)
        return changed

    newest = {"index.html", "runs/0.html", "data/runs-0.js"}  # the list's pages that show it
    assert rewritten("ls") == set()
    changed = rewritten("archive", report)
    new = Path(next(iter(changed - newest - {"data/index.js"}))).stem
    assert changed == {run_path(new), "data/index.js", *newest}  # the count: a new run
    assert list(kept.iterdir()) == [first_rows]  # the new run's row: a segment of its own
    changed = rewritten("archive", "--note", "<b>why</b>", report)
    assert changed == {run_path(new), *newest}
    catalog.merge(Store.open(work))  # the same rows in a new merged segment: kept anew
    assert rewritten("ls") == set()
    assert [p.name for p in kept.iterdir()] != [first_rows.name]
    assert rewritten("label", "solo/1", new) == {run_path(new), *newest}
    planted, before = ids["planted"][0], ids["before"]
    from triage.views import site_history

    original, followed = site_history.series_history, []

    def counted(site, series):
        followed.append(series.name)
        return original(site, series)

    monkeypatch.setattr(site_history, "series_history", counted)
    changed = rewritten("label", "planted/2", before[2])  # moved from the planted run
    # only the series it changed had their histories made again: the regressions of the
    # others were kept from the last publish
    assert sorted(followed) == ["before", "planted"]
    # the runs whose labels or comparisons changed, and no other run's page
    assert {p for p in changed if p.startswith("run/")} == \
        {run_path(planted), run_path(before[1]), run_path(before[2])}
    assert {"history/planted.html", "history/before.html", "compare/index.html"} <= changed
    assert not {"history/after.html", "history/nightly.html"} & changed
    fresh = tmp_path / "fresh"
    published(triage, work, fresh)
    assert {name: p.read_bytes() for name, p in site_files(site).items()} == \
        {name: p.read_bytes() for name, p in site_files(fresh).items()}


def test_a_killed_publish_leaves_the_last_site(triage, console_store, tmp_path, monkeypatch):
    """A publish that dies half-way (here: an error in the middle of the pages) leaves the
    last site as it was; the next publish clears what it left."""
    store, _ids = console_store
    site = tmp_path / "site"
    published(triage, store, site)
    before = {name: p.read_bytes() for name, p in site_files(site).items()}
    from triage.views import site as site_module

    calls = {"n": 0}
    original = site_module.Site.run_page

    def dies(self, run_id):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, run_id)

    monkeypatch.setattr(site_module.Site, "run_page", dies)
    monkeypatch.setattr(site_module, "SITE_FORMAT", "changed")  # every page to be rewritten
    with pytest.raises(KeyboardInterrupt):
        site_module.publish(__import__("triage.archive.store", fromlist=["Store"])
                            .Store.open(store), site)
    after = {name: p.read_bytes() for name, p in site_files(site).items()}
    assert after == before
    # the run pages die while their shards are made, before the switch: the new generation
    # is abandoned there and then, not left for the next publish to find
    live = site.resolve()
    assert sorted(p.name for p in live.parent.iterdir()) == \
        sorted([live.name, "regressions", "shards", "templates"])
    monkeypatch.undo()
    generations = site.resolve().parent
    leftover = generations / "g9"
    leftover.mkdir()  # what a SIGKILL would leave
    published(triage, store, site)
    assert sorted(p.name for p in generations.iterdir()) == \
        sorted([site.resolve().name, "regressions", "shards", "templates"])


def test_arrow_puts_the_runs_in_the_capture_order_of_capture_key():
    """`capture_rows` (Arrow) sorts as `capture_key` does: the report's time, else the archive
    time, unknown last; then the archive time; then the id. A time in a form other than the
    store's is left to `capture_key`."""
    import pyarrow as pa

    from triage.archive.console import ConsoleRun, capture_key, capture_rows

    rows = [("c", "2025-01-02T00:00:00Z", "2025-01-05T00:00:00.000001Z"),
            ("b", "2025-01-02T00:00:00Z", "2025-01-05T00:00:00Z"),  # as a: by id
            ("a", "2025-01-02T00:00:00Z", "2025-01-05T00:00:00Z"),
            ("e", None, None),  # nothing known: the newest
            ("d", None, "2025-01-01T00:00:00.500Z"),  # no report time: when archived
            ("f", "2024-12-31T23:59:59.999999Z", "2025-01-09T00:00:00Z")]
    table = pa.table({name: [row[at] for row in rows]
                      for at, name in enumerate(("id", "created", "archived"))})
    runs = [ConsoleRun(run_id, "ncu", None, created, archived, *[None] * 8)
            for run_id, created, archived in rows]
    assert [r.id for r in sorted(runs, key=capture_key)] == ["f", "d", "a", "b", "c", "e"]
    assert [rows[at][0] for at in capture_rows(table) or []] == ["f", "d", "a", "b", "c", "e"]
    for other in ("2025-01-02T01:00:00+01:00", "2025-01-02T00:00:00.123456789Z",
                  "2025-02-30T00:00:00Z", "2025-01-02T24:00:00Z", "0000-01-02T00:00:00Z"):
        assert capture_rows(table.set_column(1, "created", pa.array([other] * 6))) is None


def test_the_console_is_the_same_whichever_way_capture_order_is_found(console_store,
                                                                      monkeypatch):
    from triage.archive import console
    from triage.archive.store import Store

    store, _ids = console_store
    found = console.read_console(Store.open(store))
    assert len(found.series) >= 4
    monkeypatch.setattr(console, "capture_rows", lambda table: None)
    assert console.read_console(Store.open(store)) == found


@pytest.fixture
def new_process():
    """`forget()`: the process' template environment forgotten, as a publish in a new process
    starts (tests share one process, which has compiled every template long before)."""
    from triage.views import report

    report._environment.cache_clear()
    yield report._environment.cache_clear
    report._environment.cache_clear()


def test_a_publish_reads_the_templates_the_last_one_compiled(triage, console_store, tmp_path,
                                                             monkeypatch, new_process):
    """A new process renders pages from the code the last publish compiled, compiling none;
    a template whose text changed, or a torn file (a power loss), is compiled anew."""
    import jinja2

    from triage.archive.store import Store
    from triage.views.compiled import compiled_templates
    from triage.views.site import Site, layout

    store, ids = console_store
    site = tmp_path / "site"
    published(triage, store, site)
    home = tmp_path / ".site.generations" / "templates"
    (folder,) = home.iterdir()
    assert len(list(folder.glob("__jinja2_*.cache"))) >= 8  # the pages' templates, included ones
    page = run_path(ids["planted"][0])

    def rendered(path: str) -> bytes | None:
        new_process()
        with compiled_templates(home, layout()):
            return Site(Store.open(store)).render(path)

    def refused(*_args, **_kwargs):
        raise AssertionError("a template compiled")

    with monkeypatch.context() as patch:
        patch.setattr(jinja2.Environment, "compile", refused)
        assert rendered(page) == (site / page).read_bytes()
        assert rendered("history/nightly.html") == (site / "history/nightly.html").read_bytes()
    for kept in folder.glob("__jinja2_*.cache"):  # torn within the template's checksum
        kept.write_bytes(kept.read_bytes()[:len(jinja2.bccache.bc_magic) + 3])
    assert rendered(page) == (site / page).read_bytes()
    original = jinja2.PackageLoader.get_source

    def edited(self, environment, name):
        source, filename, uptodate = original(self, environment, name)
        return source.replace("</footer>", "<p>edited</p></footer>"), filename, uptodate

    monkeypatch.setattr(jinja2.PackageLoader, "get_source", edited)
    assert b"<p>edited</p></footer>" in rendered(page)


def test_a_new_version_is_shown_and_compiled_apart(triage, console_store, tmp_path,
                                                   monkeypatch, new_process):
    """triage's version names the compiled templates' folder (the last one's is removed) and is
    on every page, though the process' environment was made before."""
    from triage.views import report, site as site_module

    store, _ids = console_store
    site = tmp_path / "site"
    published(triage, store, site)
    home = tmp_path / ".site.generations" / "templates"
    (before,) = home.iterdir()
    for module in (report, site_module):
        monkeypatch.setattr(module, "__version__", "0.0.0-test")
    published(triage, store, site)
    (after,) = home.iterdir()
    assert after.name != before.name and list(after.glob("__jinja2_*.cache"))
    assert "Made by triage 0.0.0-test" in (site / "index.html").read_text()


def test_compiled_code_is_kept_by_how_filters_are_called_and_only_where_private(tmp_path,
                                                                               monkeypatch):
    """Jinja writes into the code whether a filter is passed its eval context: a filter that
    changes that gets a folder of its own. Jinja unpickles what it finds, so a folder others
    may write to is not used."""
    import jinja2

    from triage.views.compiled import compiled_templates
    from triage.views.report import template_environment

    env, home = template_environment(False), tmp_path / "templates"
    with compiled_templates(home, "a layout"):
        assert env.bytecode_cache is not None
    (first,) = home.iterdir()
    assert first.stat().st_mode & 0o777 == 0o700
    number = env.filters["number"]
    monkeypatch.setitem(env.filters, "number",
                        jinja2.pass_eval_context(lambda _context, *args: number(*args)))
    with compiled_templates(home, "a layout"):
        pass
    (second,) = home.iterdir()
    assert second != first
    second.chmod(0o777)
    with compiled_templates(home, "a layout"):
        assert env.bytecode_cache is None


def test_publish_refuses_a_folder_it_did_not_write(triage, console_store, tmp_path):
    store, _ids = console_store
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    result = triage("--store", store, "publish", tmp_path / "mine", expect=2)
    assert "is not a site `triage publish` wrote" in result.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.fixture(scope="module")
def server(console_store):
    """`triage serve`'s app under uvicorn on a free loopback port, in a thread; its base URL."""
    import socket
    import threading
    import time

    import uvicorn

    from triage.archive.store import Store
    from triage.views.server import make_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store, _ids = console_store
    config = uvicorn.Config(make_app(lambda: Store.open(store)), host="127.0.0.1", port=port,
                            log_level="warning")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.started
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(30)


def fetch(url: str, method: str = "GET") -> tuple[int, str, str]:
    """Status, content type and body of one request."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method)) as answer:
            return answer.status, answer.headers["content-type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["content-type"], error.read().decode()


def files_of(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_serve_answers_get_and_head_only_and_any_pair(server, console_store):
    store, ids = console_store
    before = files_of(store)
    status, kind, text = fetch(server + "/")
    assert status == 200 and "text/html" in kind
    assert f'href="{run_path(ids["planted"][0])}"' in text
    status, _kind, text = fetch(f"{server}/{run_path(ids['planted'][0])}")
    assert status == 200 and HOSTILE not in text and "&lt;script&gt;" in text
    assert fetch(server + "/index.html", "HEAD")[0] == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert fetch(server + "/index.html", method)[0] == 405
    status, _kind, text = fetch(f"{server}/diff/{ids['after'][2][:12]}/{ids['before'][4][:12]}")
    assert status == 200 and "Performance review" in text and 'href="../../run/' in text
    status, _kind, text = fetch(server + "/diff/abcdef012345/" + ids["after"][0][:12])
    assert status == 404 and "abcdef012345" in text
    assert fetch(server + "/run/..%2F..%2Fetc%2Fpasswd")[0] == 404
    assert fetch(f"{server}/run/00/{ids['planted'][0]}.html")[0] == 404  # not its shard
    assert fetch(server + "/history/nightly.html")[0] == 200
    assert "triageRuns(0," in fetch(server + "/data/runs-0.js")[2]
    assert files_of(store) == before  # read-only: not a file of the store written


def test_serve_binds_loopback_by_default():
    from triage.cli.console import serve

    host = next(p for p in serve.params if p.name == "host")
    assert host.default == "127.0.0.1"
    assert os.path.basename(__file__)  # the CLI's own default, not a config's


def bench(triage, store: Path, ms: float, *options: str) -> str:
    """A bench run (5 runs: what history needs to judge a step) of one command that prints the
    step time `ms` (read from a file: the command line stays the same), as `step_ms` and as
    `rate`, a metric better higher; its id."""
    step = store.parent / "step"
    step.write_text(str(ms))
    pattern = "re:step time: (?P<v>[0-9.]+) ms"
    done = triage("--store", store, "bench", "--json", "--repeat", "5", *options,
                  "--metric", f"step_ms:ms={pattern}", "--metric", f"rate:ops:higher={pattern}",
                  "--", sys.executable, "-c",
                  f"print('step time:', open({str(step)!r}).read(), 'ms')")
    return json.loads(done.stdout)["run"]["id"]


def test_a_run_page_lists_its_reruns_and_investigation_and_bench_series_chart_metrics(
        triage, tmp_path):
    store, site = tmp_path / "bench-store", tmp_path / "site"
    runs = [bench(triage, store, 1.0 if i <= 4 else 2.0, "--label", f"steps/{i}",
                  *(("--investigation", "fast-io") if i <= 2 else ()))
            for i in range(1, 9)]  # 4 runs a side: what a step needs (compare/steps.py)
    first, second, third = runs[:3]
    rerun = triage.json("--store", store, "rerun", first)["new_runs"][0]
    published(triage, store, site)

    page = (site / run_path(first)).read_text()
    assert f"reruns: <a class=\"mono\" href=\"../../{run_path(rerun)}\"" in page
    assert "investigation fast-io" in page and run_path(second) in page
    assert run_path(third) not in page  # not of the investigation, not a rerun
    again = (site / run_path(rerun)).read_text()
    assert f"rerun of <a class=\"mono\" href=\"../../{run_path(first)}\"" in again
    assert "investigation fast-io" in (site / run_path(second)).read_text()

    history = (site / "history" / "steps.html").read_text()
    for metric in ("step_ms", "rate", "wall_time"):
        assert f"metric &#39;{metric}&#39;" in history
    assert "<svg" in history and "step at run 5 (steps/5): +100.0%" in history
    regressions = (site / "regressions.html").read_text()
    assert "step_ms" in regressions  # 1.0 ms, then 2.0 ms: slower
    assert "rate" not in regressions  # the same rise of a metric better higher: faster

    # one command line: a workload series, the runs `triage history --workload` follows
    followed = triage.json("--store", store, "history", "--workload", first, "--metric",
                           "step_ms")
    assert len(followed["points"]) == len(runs) + 1  # the rerun ran it too
    (workload,) = [p for p in (site / "history").glob("*.html")
                   if "History of workload " in p.read_text()]
    shown = set(re.findall(r"run/\w\w/(\w{64})\.html", workload.read_text()))
    assert shown == {point["run"] for point in followed["points"]}
    assert "step at run 5" in workload.read_text()
    assert workload.name in (site / run_path(rerun)).read_text()  # a series of the rerun too
    assert workload.name in (site / "history" / "index.html").read_text()
