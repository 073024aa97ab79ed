"""Benchmark: `triage publish` and `triage serve` on large stores (issue 37; targets of issue 41).

Stores of `--runs` clones of one archived corpus report are built as bench_catalog.py builds
them (kept under `--stores DIR` for the next call). Every clone carries the report's command
line: the store's runs are one workload series. For each size:

- publish: the first publish into a new folder (in this process), then `--rounds` rounds of
  three incremental publishes, each after one new run (a clone of the newest, archived after the
  others and indexed in a segment of its own as an archive indexes it; they stay in the kept
  store): a run with a command line of its own, a second run of that command line (it joins a
  small series: its history and review pages are made) and a run of the store's workload. Each
  publish is a fresh `python -m triage publish`, timed whole ("+imp") and as its publish call;
  target INCREMENTAL_S at 100,000 runs for a run that joins a series. `--baseline PYTHON`
  publishes a copy of the site (hard links) with that interpreter's triage after every new run
  too, the two legs' order turned each round;
- the first page: the bytes index.html loads before any filter (the page and console.js),
  target FIRST_PAGE_BYTES; Debian's Chromium (Playwright) loading it from file:// until its
  load event, target LOAD_S;
- serve, in process: the runs list and a run page asked of a warm server (the catalog read
  once), and the first request of a fresh one; target SERVE_S.

    python benchmarks/bench_console.py [--runs 1000 100000] [--stores DIR] [--rounds 3]
                                       [--baseline PYTHON] [--reuse-site]

Each line prints the target, the figure and their ratio (under 1 meets the target)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_catalog import _link_tables, _write_run, stores
from benchlib import compile_legs

INCREMENTAL_S, FIRST_PAGE_BYTES, LOAD_S, SERVE_S = 2.0, 200_000, 1.0, 0.3


def line(what: str, target: float | None, figure: float, unit: str) -> None:
    ratio = f"{figure / target:6.2f}" if target else "     -"
    shown = f"{target:g} {unit}" if target else "-"
    print(f"  {what:<44} target {shown:>12}  measured {figure:>10.3f} {unit}  ratio {ratio}",
          flush=True)


def add_newest_run(store_root: Path, command: str) -> None:
    """One more clone of the store's newest run with `command` as its command line, archived
    a second after it."""
    from datetime import datetime, timedelta

    from triage.archive import catalog
    from triage.archive.store import Store

    store = Store.open(store_root)
    table = catalog.open_view(store, ["archived"]).table()
    newest = table.slice(table.num_rows - 1).to_pylist()[0]
    manifest = json.loads(json.dumps(store.runs.read_manifest(newest["id"])))
    manifest["redact_patterns"] = [f"BENCH_CONSOLE_NEW_RUN_{time.time_ns()}"]
    manifest["command"] = command
    archived = (datetime.strptime(newest["archived"], "%Y-%m-%dT%H:%M:%S.%fZ")
                + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    run_id = _write_run(store, manifest, {"archived": archived, "notes": []})
    _link_tables(store, newest["id"], run_id, manifest, Path("/nonexistent"), {})
    catalog.add_rows(store, [catalog.catalog_row(store, run_id, manifest,
                                                 store.annotations.read(run_id))])


# The code a fresh publish process runs: the publish call timed apart from the imports.
PUBLISH = """import json, sys, time
from triage.archive.store import Store
from triage.views.site import publish
start = time.perf_counter()
done = publish(Store.open(sys.argv[1]), sys.argv[2])
print(json.dumps([time.perf_counter() - start, done.written]))"""
KINDS = ("a run of its own", "a run joining a small series", "a run joining the workload")


def first_publish(store_root: Path, site: Path) -> None:
    from triage.archive.store import Store
    from triage.views.site import publish

    start = time.perf_counter()
    first = publish(Store.open(store_root), site)
    line(f"first publish ({first.written:,} pages)", None, time.perf_counter() - start, "s")


def copy_site(site: Path, name: str) -> Path:
    """A copy of a published site under `name`, its pages hard-linked (a publish never writes
    a file in place), so that a second leg starts from the same site without a first publish."""
    home, copy = site.parent / f".{site.name}.generations", site.parent / name
    copy.unlink(missing_ok=True)
    shutil.rmtree(site.parent / f".{name}.generations", ignore_errors=True)
    shutil.copytree(home, site.parent / f".{name}.generations", symlinks=True,
                    copy_function=os.link)
    copy.symlink_to(Path(f".{name}.generations", site.resolve().name))
    return copy


def fresh_publish(python: str, store_root: Path, site: Path) -> tuple[float, float, int]:
    """One publish in a new process (run from the stores' folder, not a checkout): the whole
    process's seconds, the publish call's and the pages it wrote."""
    start = time.perf_counter()
    done = subprocess.run([python, "-c", PUBLISH, str(store_root), str(site)], check=True,
                          capture_output=True, text=True, cwd=store_root.parent)
    whole = time.perf_counter() - start
    call, written = json.loads(done.stdout.strip().splitlines()[-1])
    return whole, call, written


def workload_of(store_root: Path) -> str:
    """The command line every clone of the built store carries (its oldest run's)."""
    from triage.archive import catalog
    from triage.archive.store import Store

    table = catalog.open_view(Store.open(store_root), ["command"]).table()
    return table.column("command")[0].as_py()


def publish_rounds(store_root: Path, legs: dict[str, tuple[str, Path]], rounds: int) -> None:
    """`rounds` rounds of a new run of each kind, every leg publishing after each."""
    for python, site in legs.values():
        fresh_publish(python, store_root, site)  # each leg's own state (its compiled templates)
    timed: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    load = [os.getloadavg()[0]]
    workload = workload_of(store_root)
    for number in range(rounds):
        own = f"{workload} --bench-console-{time.time_ns()}"
        for kind, command in zip(KINDS, (own, own, workload), strict=True):
            add_newest_run(store_root, command)
            order = list(legs)[number % len(legs):] + list(legs)[:number % len(legs)]
            for name in order:
                python, site = legs[name]
                timed.setdefault((kind, name), []).append(fresh_publish(python, store_root, site))
        load.append(os.getloadavg()[0])
    print(f"  {rounds} rounds, load {min(load):.1f}-{max(load):.1f}", flush=True)
    for (kind, name), times in timed.items():
        calls, wholes = [t[1] for t in times], [t[0] for t in times]
        written = sorted({t[2] for t in times})
        print(f"  publish after {kind}, {name}: {min(calls):.2f} / "
              f"{statistics.median(calls):.2f} s (+imp {min(wholes):.2f} / "
              f"{statistics.median(wholes):.2f} s), {'-'.join(map(str, written))} written",
              flush=True)
    for kind in KINDS[1:]:
        calls = [t[1] for t in timed[kind, "this tree"]]
        line(f"publish after {kind.removeprefix('a run ')}, median", INCREMENTAL_S,
             statistics.median(calls), "s")


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
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of incremental publishes (three new runs each)")
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="an interpreter whose triage publishes a copy of the site too")
    parser.add_argument("--reuse-site", action="store_true",
                        help="publish on the site a previous call left in --stores instead of "
                             "a first publish (7-14 minutes at 100,000 runs)")
    args = parser.parse_args()
    compile_legs(args.baseline)
    folder = args.stores or Path(tempfile.mkdtemp(prefix="bench-console-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for size, root in stores(folder, args.runs, 1000).items():
            print(f"{size:,} runs", flush=True)
            site = folder / f"site-{size}"
            if not (args.reuse_site and site.is_dir()):
                site.unlink(missing_ok=True)  # a link to its generation: rmtree refuses links
                shutil.rmtree(folder / f".site-{size}.generations", ignore_errors=True)
                first_publish(root, site)
            legs = {"this tree": (sys.executable, site)}
            if args.baseline:
                legs["baseline"] = (args.baseline, copy_site(site, f"site-{size}-baseline"))
            publish_rounds(root, legs, args.rounds)
            first_page(site)
            serve_times(root)
    finally:
        if args.stores is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
