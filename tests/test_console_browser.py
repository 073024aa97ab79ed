"""The console in a real browser (issue 37 item 4): Playwright driving Debian's Chromium
(`executable_path`, no browser download) over the published site from file://. One browser for
the module; each check opens a page of its own."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from console_store import HOSTILE, make_store
from triage.views.site import run_path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTHS = (1400, 800)
# Every element's right edge within the window (a table cell may scroll inside its table only
# if the table itself fits): the widest element and how far it reaches.
OVERFLOW = """() => { const w = document.documentElement.clientWidth; let worst = null;
  for (const e of document.querySelectorAll('body *')) { const r = e.getBoundingClientRect();
    if (r.width && r.right > w + 1 && !e.closest('svg')) { worst = {tag: e.tagName,
      cls: e.className && String(e.className), right: r.right, width: w}; break; } }
  return {worst, scroll: document.documentElement.scrollWidth, width: w}; }"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    from triage.archive.store import Store
    from triage.views.site import publish

    root = tmp_path_factory.mktemp("console-browser")
    ids = make_store(root / "store", root / "work")
    publish(Store.open(root / "store"), root / "site")
    return root / "site", ids


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("TRIAGE_REQUIRE_TOOLS"):
            pytest.fail("chromium not found (apt-get install chromium)")
        pytest.skip("chromium not found")
    sync = pytest.importorskip("playwright.sync_api")
    with sync.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    """A page at 1400 px that records console errors, page errors and dialogs."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.problems = []
    opened.on("console", lambda m: m.type == "error" and opened.problems.append(m.text))
    opened.on("pageerror", lambda e: opened.problems.append(str(e)))
    opened.on("dialog", lambda d: (opened.problems.append(f"dialog {d.message}"), d.dismiss()))
    yield opened
    context.close()


def fits(page, shots: Path, name: str) -> None:
    """At 1400 and 800 px: nothing wider than the window, and a screenshot of that size."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        measured = page.evaluate(OVERFLOW)
        assert measured["worst"] is None and measured["scroll"] <= width, (name, measured)
        shot = shots / f"{name}-{width}.png"
        page.screenshot(path=str(shot))
        head = shot.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000
        assert struct.unpack(">II", head[16:24]) == (width, 900)
    page.set_viewport_size({"width": 1400, "height": 900})


def test_runs_list_to_run_to_comparison_to_history_with_a_step(page, site, tmp_path):
    folder, ids = site
    page.goto((folder / "index.html").as_uri())
    assert page.title() == "triage: runs"
    fits(page, tmp_path, "runs")
    planted = ids["planted"][0]
    page.click(f'a[href="{run_path(planted)}"]')
    assert page.locator("h1").inner_text().startswith(f"Run {planted[:12]}")
    assert HOSTILE in page.locator("pre.show").inner_text()  # shown as text, not run
    fits(page, tmp_path, "run")
    page.click("text=review")
    assert "Performance review" in page.locator("h1").first.inner_text()
    fits(page, tmp_path, "review")
    page.click("nav.site >> text=history")
    page.click("text=nightly/*")
    steps = page.locator("li", has_text="step at run 6 (nightly/6)")
    assert steps.count() >= 1 and "+" in steps.first.inner_text()
    assert page.locator("figure svg").count() >= 1
    fits(page, tmp_path, "history")
    page.click("nav.site >> text=regressions")
    assert page.locator("td.worse").count() >= 1
    assert page.problems == [] and page.title() != "pwned"


def test_the_filters_narrow_the_list_and_show_names_as_text(page, site, tmp_path):
    # Playwright's retrying assertions, not wait_for_function with a string: its later polls
    # eval the string in the page, which the site's Content-Security-Policy refuses (a failure
    # whenever the filter had not finished at the first poll).
    from playwright.sync_api import expect

    folder, ids = site
    page.goto((folder / "index.html").as_uri())
    rows = page.locator("#runs tbody tr")
    assert rows.count() == sum(map(len, ids.values()))
    page.fill("input[name=label]", "nightly/*")
    page.click("button[type=submit]")
    expect(page.locator("#matched")).to_contain_text("10 of 16")
    expect(rows).to_have_count(10)
    page.fill("input[name=label]", "")
    page.fill("input[name=workload]", "pwned")
    page.click("button[type=submit]")
    expect(rows).to_have_count(1)
    assert HOSTILE in rows.first.inner_text()
    page.select_option("select[name=tool]", "ncu")
    page.fill("input[name=workload]", "")
    page.click("button[type=submit]")
    expect(rows).to_have_count(0)
    fits(page, tmp_path, "filtered")
    assert page.problems == [] and page.title() != "pwned"


def test_every_page_reads_without_javascript(browser, site):
    """Without scripts the lists, a run and a history read in full; only the filter is gone."""
    folder, ids = site
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto((folder / "index.html").as_uri())
    assert page.locator("#runs tbody tr").count() == sum(map(len, ids.values()))
    assert not page.locator("#filters").is_visible()
    page.goto((folder / run_path(ids["nightly"][0])).as_uri())
    assert "nightly/*" in page.inner_text("body")
    page.goto((folder / "history" / "nightly.html").as_uri())
    assert page.locator("figure svg").count() >= 1
    context.close()
