"""A side of several runs is read as one (issue 34, item 6): every number shown for it is the
median over its runs, named so, and agrees with the significance line beside it.

On the bundled demo captures (5 runs of "before", 5 of "after": tests/test_demo.py), on three
real ncu reports of one corpus family, and --json, text, Markdown and HTML say the same.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import Triage
from helpers import corpus_file
from triage.views.text import fmt_ns, fmt_pct

RUNS = 5
RANGES = ("epoch", "step", "forward", "backward")
RWOFFSET = ("Lashi0812__CudaProgramming__readWriteOffset_ca.ncu-rep",
            "Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
            "Lashi0812__CudaProgramming__readWriteOffset_cg_setfull.ncu-rep")


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """The demo's throwaway store (before/1..5, after/1..5), kept for this module."""
    page = tmp_path_factory.mktemp("groups") / "review.html"
    result = Triage()("demo", "--keep", "-o", page)
    store = Path(re.search(r"--store (\S+)", result.stderr).group(1))
    yield store
    shutil.rmtree(store.parent)  # the demo's own temp folder


def diff_json(triage, store: Path, a: str, b: str, *args: str) -> dict:
    return json.loads(triage("diff", a, b, "--json", *args, "--store", store).stdout)


def nvtx(diff: dict) -> dict[str, dict]:
    return {e["text"]: e for e in diff["nsys"]["nvtx"]}


def per_run_totals(triage, store: Path, side: str) -> dict[str, list[float]]:
    """Each range's total in each run of a side, read one run at a time."""
    totals: dict[str, list[float]] = {}
    for i in range(1, RUNS + 1):
        one = diff_json(triage, store, f"{side}/{i}", f"{side}/{i}")
        for text, entry in nvtx(one).items():
            totals.setdefault(text, []).append(entry["a"]["total_ns"])
    return totals


def test_every_number_of_a_group_is_its_median(triage, demo_store):
    diff = diff_json(triage, demo_store, "before/*", "after/*")
    assert diff["aggregate"]["statistic"] == "median"
    for side, name in (("a", "before"), ("b", "after")):
        assert diff["aggregate"][side]["runs"] == RUNS
        assert diff["aggregate"][side]["names"] == [f"{name}/{i}" for i in range(1, RUNS + 1)]
        assert diff["aggregate"][side]["ids"] == diff["sides"][side]
    totals = {"a": per_run_totals(triage, demo_store, "before"),
              "b": per_run_totals(triage, demo_store, "after")}
    entries = nvtx(diff)
    assert set(entries) == set(RANGES)
    for text, entry in entries.items():
        for side in "ab":
            assert entry[side]["runs"] == RUNS
            assert entry[side]["total_ns"] == statistics.median(totals[side][text])
        expected = (entry["b"]["total_ns"] - entry["a"]["total_ns"]) / entry["a"]["total_ns"]
        assert entry["delta_pct"] == pytest.approx(expected * 100)
        assert entry["delta_ns"] == entry["b"]["total_ns"] - entry["a"]["total_ns"]
    # ranked by the change of the medians, not of the first runs
    changes = [abs(e["delta_ns"]) for e in diff["nsys"]["nvtx"]]
    assert changes == sorted(changes, reverse=True)
    gpu = diff["nsys"]["gpu"]
    assert gpu["a"]["runs"] == gpu["b"]["runs"] == RUNS


def test_a_group_agrees_with_its_significance_line(triage, demo_store):
    """The demo used to print `backward -2.6%` (before/1 vs after/1) above `-0.0% within noise`:
    now each change has the sign and size of the change measured over the runs."""
    entries = nvtx(diff_json(triage, demo_store, "before/*", "after/*"))
    for text, entry in entries.items():
        noise = entry["noise"]
        assert noise["samples"] == "runs" and noise["a"]["n"] == noise["b"]["n"] == RUNS
        if noise["significance"] == "significant":
            assert (entry["delta_pct"] < 0) == (noise["change_pct"] < 0), text
            assert abs(entry["delta_pct"] - noise["change_pct"]) < 5, text
        else:
            assert abs(entry["delta_pct"]) < 1 and abs(noise["change_pct"]) < 1, text
    assert entries["forward"]["noise"]["significance"] == "significant"
    assert entries["backward"]["noise"]["significance"] == "within_noise"


def summary_row(text: str, name: str) -> str:
    """The text view's line of an NVTX range (the line above its noise)."""
    return next(line for line in text.splitlines() if line.split()[:1] == [name])


def test_text_markdown_and_html_show_the_same_medians(triage, demo_store):
    diff = diff_json(triage, demo_store, "before/*", "after/*")
    text = triage("diff", "before/*", "after/*", "--store", demo_store).stdout
    markdown = triage("report", "before/*", "after/*", "--format", "md", "--store",
                      demo_store).stdout
    page = triage("report", "before/*", "after/*", "--format", "html", "--store",
                  demo_store).stdout
    # titles list the runs, and every view names the aggregate
    assert "A: 5 runs: before/1..before/5, nsys" in text
    assert "B: 5 runs: after/1..after/5, nsys" in text
    assert "numbers: median of 5 runs a side" in text
    assert "NVTX ranges (median of 5 runs a side; by time changed):" in text
    assert markdown.startswith("## Performance review: 5 runs: before/1..before/5 vs 5 runs: "
                               "after/1..after/5\n")
    assert "<title>triage review: 5 runs: before/1..before/5 vs 5 runs: after/1..after/5" \
        "</title>" in page
    assert "before/1 vs after/1" not in page and "before/1 vs after/1" not in markdown
    for view in (markdown, page):
        assert "Every number below is the median of 5 runs a side" in view
        assert "first of 5 runs" in view  # provenance: each side's first run, said so
    for name, entry in nvtx(diff).items():
        shown = (fmt_ns(entry["a"]["total_ns"]), fmt_ns(entry["b"]["total_ns"]),
                 fmt_pct(entry["delta_pct"]))
        line = summary_row(text, name)
        md_row = next(r for r in markdown.splitlines() if r.startswith(f"| `{name}`"))
        html_row = re.search(rf"<tr><td>{name}\b.*?</tr>", page, re.S).group(0)
        for value in shown:
            assert value in line and value in md_row and html.escape(value) in html_row, \
                (name, value)


def test_demo_prints_the_medians(triage):
    """`triage demo` (the README's transcript) shows the group's median change under the
    same heading, never the first runs'."""
    text = triage("demo").stdout
    shutil.rmtree(Path(re.search(r"^wrote (.+\.html)$", text, re.M).group(1)).parent)
    backward = summary_row(text, "backward")
    assert backward.split()[-1] in ("-0.1%", "+0.0%", "-0.0%", "+0.1%"), backward
    assert "-2.6%" not in backward


def test_an_ncu_group_is_the_median_of_its_runs(triage):
    """Three real ncu reports of one family: A is readWriteOffset_ca, B the two cg reports. B's
    kernel numbers and metric values are the medians of what each B run shows alone."""
    ca, cg, setfull = [triage.json("archive", corpus_file(n))[0]["id"] for n in RWOFFSET]
    group = triage.json("diff", ca, f"{cg},{setfull}", "--all")
    assert group["aggregate"]["statistic"] == "median"
    assert group["aggregate"]["a"]["runs"] == 1 and group["aggregate"]["b"]["runs"] == 2
    alone = [triage.json("diff", ca, run, "--all") for run in (cg, setfull)]
    kernel, kernels_alone = group["kernels"][0], [d["kernels"][0] for d in alone]
    assert kernel["a"] == {**kernels_alone[0]["a"], "runs": 1}
    for number in ("duration_ns", "total_ns"):
        assert kernel["b"][number] == statistics.median(k["b"][number] for k in kernels_alone)
    assert kernel["b"]["runs"] == 2
    assert kernel["delta_pct"] == pytest.approx(
        (kernel["b"]["duration_ns"] - kernel["a"]["duration_ns"]) / kernel["a"]["duration_ns"]
        * 100)
    # the significance line tests each run's mean launch: the number the headline shows
    assert kernel["noise"]["samples"] == "runs"
    assert kernel["noise"]["b"]["median"] == kernel["b"]["duration_ns"]
    # each metric value: the median of the B runs' values (where both runs have it)
    def numbers(k: dict) -> dict[str, float]:
        return {m["name"]: m["b"] for s in k["sections"] for m in s["metrics"]
                if isinstance(m["b"], (int, float))}

    medians, each = numbers(kernel), [numbers(k) for k in kernels_alone]
    both = set(medians) & set(each[0]) & set(each[1])
    assert len(both) >= 15 and "dram__bytes.sum.per_second" in both
    for name in both:
        assert medians[name] == pytest.approx(statistics.median(e[name] for e in each)), name
    text = triage("diff", ca, f"{cg},{setfull}").stdout
    assert "B: 2 runs: " in text and "numbers: A: 1 run, B: median of 2 runs" in text
    line = next(x for x in text.splitlines() if x.startswith("  readOffset("))
    assert fmt_ns(kernel["b"]["duration_ns"]) in line and fmt_pct(kernel["delta_pct"]) in line
