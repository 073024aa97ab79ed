"""`triage history` over real nsys captures of tests/programs/nvtx_steps.c made here.

The series: 8 `triage capture`s of one command line in a git repository, labelled h/1..h/8, in
turn. Runs 1-4 are built from commit A (the program as it is); runs 5-8 from commit B, whose
"forward" spins twice as long (a slow-down brought by a commit, not by the command line: the
workload is the same in every run). "backward" is the same in every run.

Why nothing here depends on timing luck: a run's value is the median of its 40 launches, which
preemption on a loaded 2-core machine moves only if it hits more than 20 of them. Forward goes
from 200 us to 400 us, so every run after the step is above every run before it, which is all
the step test needs (4 runs a side at 95%). An unchanged range shows no step unless its runs'
medians drift apart by 5% (--min-step), 10 us on a 400 us spin.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape as html_escape
from html import unescape as html_unescape
from pathlib import Path

import jsonschema
import pytest

from helpers import checked_schema, derive_run
from test_report import MEASURE_LAYOUT, assert_self_contained, chromium
from triage.archive import catalog
from triage.archive.run_manifests import Runs
from triage.archive.runs import resolve
from triage.archive.store import Store
from triage.base.errors import CaptureFailed

RUNS, SLOW_FROM = 8, 5  # runs h/5..h/8 are slower
COMMAND = ["nsys", "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "--force-overwrite", "true", "-o", "step", "./nvtx_steps", "40", "200", "400"]


def _git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit(work: Path, source: str, message: str) -> str:
    """Commit the program's source and build it (the binary and reports are ignored)."""
    from nvtx_capture import build_program

    (work / "steps.c").write_text(source)
    _git(work, "add", "steps.c", ".gitignore")
    _git(work, "commit", "-qm", message)
    build_program(work, work / "steps.c")
    return _git(work, "rev-parse", "HEAD")


def _capture(store: Path, work: Path, label: str) -> None:
    """One capture, tried up to three times (an nsys session started by another process at the
    same moment can leave no report: the attempt is recorded, the label moves on)."""
    from triage.archive.captured import capture
    from triage.capture.session import CaptureRequest

    for attempt in range(3):
        try:
            capture(CaptureRequest(COMMAND, store=str(store), label=label, cwd=work),
                    on_output=lambda _line: None, on_warning=lambda _w: None)
            return
        except CaptureFailed:
            if attempt == 2:
                raise


@pytest.fixture(scope="module")
def series(nvtx_program, nsys_exe, tmp_path_factory) -> dict:
    """The store of h/1..h/8 and the commits of the two halves."""
    from nvtx_capture import SOURCE

    root = tmp_path_factory.mktemp("history")
    work, store = root / "work", root / "store"
    work.mkdir()
    _git(work, "init", "-q")
    _git(work, "config", "user.email", "t@example.com")
    _git(work, "config", "user.name", "t")
    (work / ".gitignore").write_text("nvtx_steps\n*.nsys-rep\n*.qdstrm\n")
    source = SOURCE.read_text()
    assert source.count("spin(forward);") == 1
    commits = [_commit(work, source, "A")]
    for i in range(1, RUNS + 1):
        if i == SLOW_FROM:
            commits.append(_commit(work, source.replace("spin(forward);", "spin(2 * forward);"),
                                   "B: forward twice as long"))
        _capture(store, work, f"h/{i}")
    return {"store": store, "commits": commits}


def history_json(triage, store: Path, *args: str) -> dict:
    return json.loads(triage("history", "h/*", *args, "--json", "--store", store).stdout)


@pytest.fixture(scope="module")
def schema() -> dict:
    return checked_schema("history.schema.json")


def fake(series: dict, tmp_path: Path, changes: dict) -> Path:
    """A copy of the store in which each labelled run's manifest is changed by its function in
    `changes` (a new run: an id is its manifest's hash), its label moved to it. The reports are
    not touched."""
    copy = tmp_path / "store"
    shutil.copytree(series["store"], copy)
    store = Store.open(copy)
    for label, change in changes.items():
        old = resolve(store, label)
        manifest = store.runs.read_manifest(old)
        change(manifest)
        new = derive_run(store, old, manifest)
        annotations = store.annotations.annotate(new, store.annotations.read(old)["archived"], None)
        catalog.add_rows(store, [catalog.catalog_row(store, new, manifest, annotations)])
        store.labels.point(label, new)
    return copy


def newer_nsys(manifest: dict) -> None:
    manifest["tool_version"] = "2024.1.1.59"


def on_gpu(name: str):
    def change(manifest: dict) -> None:
        manifest["environment"]["gpus"] = [{"name": name, "sm_count": 108}]
    return change


def two_gpus(series: dict, tmp_path: Path) -> Path:
    """h/1-4 recorded on one GPU, h/5-8 on another."""
    return fake(series, tmp_path, {f"h/{i}": on_gpu("NVIDIA A100-SXM4-80GB" if i < SLOW_FROM
                                                    else "NVIDIA H100 80GB HBM3")
                                   for i in range(1, RUNS + 1)})


def steps_of(doc: dict) -> list[tuple[int, float, list[float]]]:
    return [(s["at"], s["change_pct"], s["ci_pct"]) for s in doc["steps"]]


def test_the_slow_down_is_one_step_at_the_fifth_run(triage, series, schema):
    doc = history_json(triage, series["store"], "--nvtx", "forward")
    jsonschema.validate(doc, schema)
    points = doc["points"]
    assert [p["label"] for p in points] == [f"h/{i}" for i in range(1, RUNS + 1)]
    assert [p["index"] for p in points] == list(range(RUNS))
    assert all(p["spread"]["n"] == 40 and p["unit"] == "ns" for p in points)
    first, second = series["commits"]
    assert [p["commit"] for p in points] == [first] * 4 + [second] * 4
    assert not any(p["dirty"] for p in points)
    assert [p["boundary"] for p in points] == [None] * RUNS  # one workload, one machine
    [(at, change, ci)] = steps_of(doc)
    assert at == SLOW_FROM - 1 and 80 < change < 120 and ci[0] > 50  # twice as long: +100%
    assert doc["segments"] == [[0, RUNS]] and doc["order"] == "capture_time"
    assert doc["method"]["steps"].startswith("pettitt") and doc["method"]["confidence"] == 0.95
    slower = points[SLOW_FROM - 1]["change"]
    assert slower["significance"] == "significant" and slower["ci_pct"][0] > 50
    text = triage("history", "h/*", "--nvtx", "forward", "--store", series["store"]).stdout
    step = next(line.strip() for line in text.splitlines() if line.strip().startswith("step at"))
    assert step.startswith("step at run 5 (h/5): +") and "(4 runs before, 4 from it on)" in step
    assert "Pettitt" in text and first[:10] in text and second[:10] in text


def test_an_unchanged_range_shows_no_step(triage, series, schema):
    doc = history_json(triage, series["store"], "--nvtx", "backward")
    jsonschema.validate(doc, schema)
    assert len(doc["points"]) == RUNS and doc["steps"] == []
    text = triage("history", "h/*", "--nvtx", "backward", "--store", series["store"]).stdout
    assert "no step: every run is at one level within noise" in text


def test_a_different_profiler_version_is_a_caution_boundary(triage, series, schema, tmp_path):
    """h/3 recorded by another nsys: boundaries where it starts and ends; caution does not split
    the series, so the step at run 5 is still found."""
    store = fake(series, tmp_path, {"h/3": newer_nsys})
    doc = history_json(triage, store, "--nvtx", "forward")
    jsonschema.validate(doc, schema)
    assert [p["boundary"] for p in doc["points"]] == [None, None, "caution", "caution"] + \
        [None] * 4
    item = next(i for i in doc["points"][2]["drift"] if i["field"] == "tool_version")
    assert (item["a"], item["b"], item["severity"]) == ("2022.4.2.1", "2024.1.1.59", "caution")
    assert [s["at"] for s in doc["steps"]] == [SLOW_FROM - 1] and doc["segments"] == [[0, RUNS]]
    text = triage("history", "h/*", "--nvtx", "forward", "--store", store).stdout
    assert "run 3 (h/3): caution: tool_version 2022.4.2.1 -> 2024.1.1.59" in text
    assert "run 4 (h/4): caution: tool_version 2024.1.1.59 -> 2022.4.2.1" in text


def test_another_gpu_splits_the_series_and_no_step_is_claimed_across_it(triage, series, schema,
                                                                         tmp_path):
    """h/1-4 recorded on one GPU, h/5-8 on another: an invalidating boundary at run 5, two
    segments, and the level change there is not called a step (the numbers are not
    comparable)."""
    store = two_gpus(series, tmp_path)
    doc = history_json(triage, store, "--nvtx", "forward")
    jsonschema.validate(doc, schema)
    assert [p["boundary"] for p in doc["points"]] == [None] * 4 + ["invalid"] + [None] * 3
    assert doc["points"][4]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert doc["segments"] == [[0, 4], [4, RUNS]] and doc["steps"] == []
    text = triage("history", "h/*", "--nvtx", "forward", "--store", store).stdout
    assert "run 5 (h/5): INVALID: gpu.name NVIDIA [A100-SXM4-80GB → H100 80GB HBM3]" in text
    assert "no step within any of the 2 segments" in text


def test_every_run_of_one_workload(triage, series, tmp_path):
    """--workload h/1: the 8 runs of its program and arguments, not a failed capture of the
    same command (made here in a folder without the program: recorded, no report)."""
    from triage.archive.captured import capture
    from triage.capture.session import CaptureRequest

    store = tmp_path / "store"
    shutil.copytree(series["store"], store)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    with pytest.raises(CaptureFailed):
        capture(CaptureRequest(COMMAND, store=str(store), cwd=empty),
                on_output=lambda _line: None, on_warning=lambda _w: None)
    failed = triage.json("ls", "--store", store)
    assert [r["source"] for r in failed].count("capture-failed") >= 1
    doc = json.loads(triage("history", "h/1", "--workload", "--nvtx", "forward", "--json",
                            "--store", store).stdout)
    assert [p["labels"] for p in doc["points"]] == [[f"h/{i}"] for i in range(1, RUNS + 1)]
    assert [s["at"] for s in doc["steps"]] == [SLOW_FROM - 1]


def test_markdown_has_a_row_per_run(triage, series):
    text = triage("history", "h/*", "--nvtx", "forward", "--format", "md", "--store",
                  series["store"]).stdout
    rows = [line for line in text.splitlines() if line.startswith("| ") and "h/" in line]
    assert len(rows) == RUNS and "- step at run 5 (h/5): +" in text


def test_bad_selectors_and_measures_are_one_line(triage, series):
    store = series["store"]
    cases = [(["h/*"], 2, "give --kernel REGEX, --nvtx NAME or --metric NAME"),
             (["h/*", "--metric", "sm__throughput.avg"], 2, "the series holds nsys runs"),
             (["h/*", "--kernel", "("], 2, "is not a regular expression"),
             (["h/*", "--nvtx", "nope"], 1, "no run of 'h/*' has NVTX range 'nope'"),
             (["nothing/*", "--nvtx", "forward"], 1, "no label matches 'nothing/*'"),
             (["h/*", "--nvtx", "forward", "--html", "x.html", "--json"], 2,
              "--html FILE writes the page; give it alone")]
    for args, code, message in cases:
        result = triage("history", *args, "--store", store, expect=code)
        assert message in result.output and len(result.output.strip().splitlines()) == 1, result


def test_the_schema_shares_the_diff_definitions(schema):
    diff = checked_schema("diff.schema.json")
    for name in ("run_id", "spread", "noise", "number", "names", "drift_item", "tool"):
        assert schema["$defs"][name] == diff["$defs"][name], name


# Runs in a page beside the history pages (theirs forbid scripts): per page, the chart's points
# (x), spread bars, boundary markers (kind, x) and steps (x).
MEASURE_CHART = """
addEventListener("load", () => {
  const found = [];
  for (const frame of document.querySelectorAll("iframe")) {
    const svg = frame.contentDocument.querySelector("svg.chart");
    const x = (nodes, at) => Array.from(nodes).map(n => parseFloat(n.getAttribute(at)));
    found.push({frame: frame.name, scripts: frame.contentDocument.scripts.length,
                points: x(svg.querySelectorAll("circle.point"), "cx"),
                spreads: svg.querySelectorAll("line.spread").length,
                boundaries: Array.from(svg.querySelectorAll("line.boundary")).map(
                  l => [l.classList[1], parseFloat(l.getAttribute("x1"))]),
                steps: x(svg.querySelectorAll("g.step line"), "x1")});
  }
  const out = document.createElement("pre");
  out.id = "chart";
  out.textContent = JSON.stringify(found);
  document.body.append(out);
});
"""


def before(points: list[float], x: float) -> int:
    """The run (1-based) a marker at `x` stands before."""
    return next(i + 1 for i, p in enumerate(points) if p > x)


def test_html_page_in_chromium(triage, series, tmp_path):
    """The page of the series with a profiler change at run 3 and of the series on two GPUs,
    each at 1400 and 800 px in one Chromium start: one point and one spread bar per run, a
    boundary marker between the runs where the record changes (amber for the profiler, red for
    the GPU), a step marker between runs 4 and 5 only where a step is named; nothing wider than
    its box; no script, nothing loaded from anywhere."""
    pages = {"profiler": fake(series, tmp_path / "profiler", {"h/3": newer_nsys}),
             "gpu": two_gpus(series, tmp_path / "gpu")}
    frames = []
    for name, store in pages.items():
        out = tmp_path / f"{name}.html"
        triage("history", "h/*", "--nvtx", "forward", "--html", out, "--store", store)
        html = out.read_text(encoding="utf-8")
        assert_self_contained(html)
        frames += [f'<iframe name="{name} @ {width} px" width="{width}" height="900" '
                   f'srcdoc="{html_escape(html)}"></iframe>' for width in (1400, 800)]
    page = tmp_path / "history.html"
    page.write_text(f"<!DOCTYPE html><html><body>{''.join(frames)}<script>{MEASURE_LAYOUT}"
                    f"</script><script>{MEASURE_CHART}</script></body></html>", encoding="utf-8")
    dom = chromium(page, tmp_path, "--disable-quic", "--window-size=1400,900", "--dump-dom")
    found = {tag: json.loads(html_unescape(re.search(rf'<pre id="{tag}">(.*?)</pre>', dom.stdout,
                                                     re.S).group(1)))
             for tag in ("layout", "chart")}
    assert [(f["frame"], f["over"]) for f in found["layout"] if f["over"]] == []
    assert len(found["chart"]) == 4
    for chart in found["chart"]:
        points = chart["points"]
        assert len(points) == RUNS == chart["spreads"] and points == sorted(points)
        assert chart["scripts"] == 0

        marks = [(kind, before(points, x)) for kind, x in chart["boundaries"]]
        steps = [before(points, x) for x in chart["steps"]]
        if chart["frame"].startswith("profiler"):
            assert marks == [("caution", 3), ("caution", 4)] and steps == [SLOW_FROM]
        else:
            assert marks == [("invalid", SLOW_FROM)] and steps == []


MLP = [f"armleth__cuda-mlp-inference__mlp_{v}.ncu-rep"
       for v in ("v1", "v2", "v3_loop_unroll", "v4_8_per_thread")]
NSYS_PAIR = ["0x822a5b87__test-cuda__report1.sqlite", "0x822a5b87__test-cuda__report2.sqlite"]


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory) -> Path:
    """The four versions of the corpus MLP kernel (ncu) as mlp/1..4, and an nsys pair as ns/1..2."""
    from helpers import corpus_file
    from triage.archive.ingest import archive_files

    store = tmp_path_factory.mktemp("history-corpus") / "store"
    for prefix, files in (("mlp", MLP), ("ns", NSYS_PAIR)):
        for i, name in enumerate(files, 1):
            archive_files(store, [str(corpus_file(name))], label=f"{prefix}/{i}")
    return store


def test_an_ncu_metric_and_a_kernel_of_corpus_runs(triage, corpus_store, schema):
    """The ncu metric gpu__time_duration.sum of the MLP kernel across its four versions (what
    `triage query` reads from the metrics table), and an nsys kernel's launches."""
    doc = json.loads(triage("history", "mlp/*", "--kernel", "matrix", "--metric",
                            "gpu__time_duration.sum", "--json", "--store", corpus_store).stdout)
    jsonschema.validate(doc, schema)
    stored = triage.json("query", "select m.value from metrics m join runs r using (run_id) "
                         "where m.name = 'gpu__time_duration.sum' order by r.created",
                         "--store", corpus_store)
    assert [p["value"] for p in doc["points"]] == [row["value"] for row in stored]
    assert [p["label"] for p in doc["points"]] == ["mlp/1", "mlp/2", "mlp/3", "mlp/4"]
    assert all(p["unit"] == "ns" and p["spread"]["n"] == 1 for p in doc["points"])
    assert doc["measure"] == {"kind": "metric", "kernel": "matrix", "nvtx": None,
                              "metric": "gpu__time_duration.sum"}
    nsys = json.loads(triage("history", "ns/*", "--kernel", ".", "--json", "--store",
                             corpus_store).stdout)
    jsonschema.validate(nsys, schema)
    launches = triage.json("query", "select r.created, k.duration_ns from kernels k join runs r "
                           "using (run_id) where r.tool = 'nsys'", "--store", corpus_store)
    for point in nsys["points"]:
        mine = sorted(row["duration_ns"] for row in launches if row["created"] ==
                      point["created"])
        assert point["spread"]["n"] == len(mine) and point["spread"]["max"] == mine[-1]
    mixed = triage("history", "mlp/1,ns/1", "--kernel", ".", "--store", corpus_store, expect=2)
    assert "the series holds ncu and nsys runs" in mixed.output
    refused = triage("history", "mlp/*", "--metric", "nope", "--store", corpus_store, expect=1)
    assert "`triage query \"select distinct name from metrics\"` lists the metrics" in \
        refused.output


def test_only_the_series_runs_and_tables_are_read(triage, corpus_store, monkeypatch):
    """A history of ns/* opens the manifests of those two runs and their kernels tables alone,
    not the MLP runs' beside them."""
    from triage.compare.rundata import RunData

    series = {resolve(Store.open(corpus_store), f"ns/{i}") for i in (1, 2)}
    manifests, tables = [], []
    real_manifest, real_parquet = Runs.read_manifest, RunData.parquet
    monkeypatch.setattr(Runs, "read_manifest",
                        lambda self, run_id: manifests.append(run_id) or
                        real_manifest(self, run_id))
    monkeypatch.setattr(RunData, "parquet",
                        lambda self, name, dictionary=(): tables.append((self.id, name)) or
                        real_parquet(self, name, dictionary))
    triage("history", "ns/*", "--kernel", ".", "--store", corpus_store)
    assert set(manifests) == series
    assert sorted(tables) == sorted((run_id, "kernels") for run_id in series)
