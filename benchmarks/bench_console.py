"""Benchmark: `triage publish` and `triage serve` on large stores (issue 37; targets of issue 41).

Stores of `--runs` clones of one archived corpus report are built as bench_catalog.py builds
them (kept under `--stores DIR` for the next call). For each size:

- publish: the first publish into a new folder, then again after one new run (one more clone,
  archived after the others, indexed in a segment of its own as an archive indexes it; it stays
  in the kept store): incremental, target INCREMENTAL_S at 100,000 runs;
- the first page: the bytes index.html loads before any filter (the page and console.js),
  target FIRST_PAGE_BYTES; Debian's Chromium (Playwright) loading it from file:// until its
  load event, target LOAD_S;
- serve, in process: the runs list and a run page asked of a warm server (the catalog read
  once), and the first request of a fresh one; target SERVE_S.

    python benchmarks/bench_console.py [--runs 1000 100000] [--stores DIR]

Each line prints the target, the figure and their ratio (under 1 meets the target)."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench_catalog import _link_tables, _write_run, stores

INCREMENTAL_S, FIRST_PAGE_BYTES, LOAD_S, SERVE_S = 2.0, 200_000, 1.0, 0.3


def line(what: str, target: float | None, figure: float, unit: str) -> None:
    ratio = f"{figure / target:6.2f}" if target else "     -"
    shown = f"{target:g} {unit}" if target else "-"
    print(f"  {what:<44} target {shown:>12}  measured {figure:>10.3f} {unit}  ratio {ratio}",
          flush=True)


def add_newest_run(store_root: Path) -> None:
    """One more clone of the store's newest run, archived a second after it."""
    import json
    from datetime import datetime, timedelta

    from triage.archive import catalog
    from triage.archive.store import Store

    store = Store.open(store_root)
    table = catalog.open_view(store, ["archived"]).table()
    newest = table.slice(table.num_rows - 1).to_pylist()[0]
    manifest = json.loads(json.dumps(store.runs.read_manifest(newest["id"])))
    manifest["redact_patterns"] = [f"BENCH_CONSOLE_NEW_RUN_{time.time_ns()}"]
    archived = (datetime.strptime(newest["archived"], "%Y-%m-%dT%H:%M:%S.%fZ")
                + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    run_id = _write_run(store, manifest, {"archived": archived, "notes": []})
    _link_tables(store, newest["id"], run_id, manifest, Path("/nonexistent"), {})
    catalog.add_rows(store, [catalog.catalog_row(store, run_id, manifest,
                                                 store.annotations.read(run_id))])


def publish_times(store_root: Path, site: Path) -> None:
    from triage.archive.store import Store
    from triage.views.site import publish

    start = time.perf_counter()
    first = publish(Store.open(store_root), site)
    line(f"first publish ({first.written:,} pages)", None, time.perf_counter() - start, "s")
    add_newest_run(store_root)
    start = time.perf_counter()
    again = publish(Store.open(store_root), site)
    line(f"publish after one new run ({again.written} written)", INCREMENTAL_S,
         time.perf_counter() - start, "s")


def first_page(site: Path) -> None:
    weight = sum((site / name).stat().st_size for name in ("index.html", "console.js"))
    line("first page weight (index.html + console.js)", FIRST_PAGE_BYTES / 1000, weight / 1000,
         "kB")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=shutil.which("chromium"),
                                         args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((site / "index.html").as_uri())  # warms the browser's own start
        start = time.perf_counter()
        page.goto((site / "index.html").as_uri(), wait_until="load")
        line("first page load in Chromium (to its load event)", LOAD_S,
             time.perf_counter() - start, "s")
        browser.close()


def serve_times(store_root: Path) -> None:
    from triage.archive.store import Store
    from triage.views.server import Console
    from triage.views.site import run_path

    console = Console(lambda: Store.open(store_root))
    start = time.perf_counter()
    console.site().render("index.html")
    line("serve: runs list, first request", None, time.perf_counter() - start, "s")
    newest = console.site().console.runs[-1].id
    for what, path in (("runs list", "index.html"), ("run page", run_path(newest))):
        start = time.perf_counter()
        assert console.site().render(path)
        line(f"serve: {what}, warm", SERVE_S, time.perf_counter() - start, "s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--stores", type=Path, help="keep the built stores here")
    args = parser.parse_args()
    folder = args.stores or Path(tempfile.mkdtemp(prefix="bench-console-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for size, root in stores(folder, args.runs, 1000).items():
            print(f"{size:,} runs", flush=True)
            site = folder / f"site-{size}"
            site.unlink(missing_ok=True)  # a link to its generation: rmtree refuses links
            shutil.rmtree(folder / f".site-{size}.generations", ignore_errors=True)
            publish_times(root, site)
            first_page(site)
            serve_times(root)
    finally:
        if args.stores is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
