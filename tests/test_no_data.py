"""Failed profiles are named, never "renamed" (issue 16, item 2).

Some corpus results carry no metric values: ncu recorded every counter and launch attribute as
NaN (the profiler collected nothing for them). Found by scanning every ncu report of the corpus:
result 2 of the ray tracer (`rtracer::trace`) and result 44 of the transpose occupancy sweep.
The archive says so in a notice; a diff names such a kernel side `no_data` (kernel, section and
metric level, in every format) and never blames renaming; `explain` says "no data".
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from helpers import CORPUS, corpus_file
from triage.archive.ingest import archive_files
from triage.archive.store import Store
from triage.capture.formats import prepare_report
from triage.compare.diff import diff_runs
from triage.compare.drift import CAUTION, INVALIDATES, no_data_drift, verdict
from triage.compare.result import KERNEL_NO_DATA, DiffOptions

TRACER = "wtzhang23__gpu-ray-tracer__report.ncu-rep"
SWEEP = "2388612861__GPU-DEMO__transpose_detailed_occupancy.ncu-rep"
TRACE = "rtracer::trace(renv::Scene*)"
# Profiled with no section: launch statistics only (configuration and occupancy limits, known
# before the kernel ran), no counter: nothing measured.
LAUNCH_ONLY = "AlpriElse__cs599k__silu-2025-04-19-v1_nosections.ncu-rep"
NOTICE = "1 of {} results carry no metric values (the profiler collected nothing for them)"


def _notices(path: Path) -> list[str]:
    report = prepare_report(path)
    try:
        for _table, _batch in report.batches(0):
            pass
        return report.provenance().get("notices", [])
    finally:
        report.close()


def test_scanning_the_corpus_finds_exactly_the_failed_results():
    """Every ncu report of the corpus read: only these three have results without values (a
    result whose only values are device, launch, profiler or section-group entries, occupancy
    limits or peaks has none)."""
    found = {path.name: _notices(path) for path in sorted((CORPUS / "ncu").iterdir())}
    assert {name: n for name, n in found.items() if n} == {
        SWEEP: [NOTICE.format(45)], TRACER: [NOTICE.format(3)],
        LAUNCH_ONLY: [NOTICE.replace("1 of", "3 of").format(3)]}


@pytest.fixture(scope="module")
def tracer(tmp_path_factory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("nodata") / "store"
    (run,) = archive_files(store, [str(corpus_file(TRACER))])
    return store, run.id


def test_archive_records_the_notice(triage, tracer):
    store, run = tracer
    shown = triage.json("show", run, "--store", store)
    assert shown["notices"] == [NOTICE.format(3)]
    assert f"note: {NOTICE.format(3)}" in triage("show", run, "--store", store).stdout


def test_text_diff_names_no_data_never_renamed(triage, tracer):
    store, run = tracer
    text = triage("diff", run, run, "--store", store).stdout
    assert text.splitlines()[2] == "VERDICT: CAUTION - comparable with care (see caution below)"
    drift = " ".join(text.split("\nkernels")[0].split())
    assert f"kernels.no_data 1 without data in A -> 1 without data in B no data in one run or " \
           f"both (the profiler collected nothing) for: {TRACE}" in drift
    assert "renamed" not in text and "only in A" not in text
    before, trace = text.split("\nkernels (", 1)[1].split(TRACE, 1)
    assert "note: no data in A and B: the profiler collected nothing for these launches" in trace
    assert "[SpeedOfLight]  NOT COMPARABLE: no data in A and B" in trace
    # the kernels with data are compared as before
    assert "[SourceCounters]  (7 unchanged)\n" in before
    every = triage("diff", run, run, "--all", "--store", store).stdout.rsplit(TRACE, 1)[1]
    assert "Branch Instructions Ratio" in every and "no data" in every  # by ncu's label


def test_json_diff_says_no_data_at_every_level(triage, tracer):
    store, run = tracer
    from importlib import resources

    schema = json.loads(resources.files("triage.schemas").joinpath("diff.schema.json")
                        .read_text("utf-8"))
    for args in ((), ("--all",)):
        document = json.loads(triage("diff", run, run, "--json", *args,
                                     "--store", store).stdout)
        jsonschema.validate(document, schema)
        assert document["verdict"] == "caution"
        item = next(i for i in document["drift"] if i["code"] == KERNEL_NO_DATA)
        assert item["severity"] == CAUTION and item["kernels"] == {"a": [TRACE], "b": [TRACE]}
        kernels = {k["name"]: k for k in document["kernels"]}
        trace = kernels.pop(TRACE)
        assert trace["no_data"] == ["a", "b"] and KERNEL_NO_DATA in trace["notes"]
        assert {s["reason"] for s in trace["sections"]} == {"section.no_data"}
        assert not any(i["code"].startswith("section.") for i in document["drift"])
        statuses = {m["status"] for s in trace["sections"] for m in s["metrics"]}
        assert statuses == ({"no_data"} if args else set())
        assert all(k["no_data"] == [] for k in kernels.values())
        every = [m["status"] for k in document["kernels"] for s in k["sections"]
                 for m in s["metrics"]]
        assert "only_a" not in every and "only_b" not in every


def test_markdown_and_html_name_no_data_and_are_never_green(triage, tracer, tmp_path):
    store, run = tracer
    md = triage("report", run, run, "--format", "md", "--store", store).stdout
    assert "no data in A and B: the profiler collected nothing for these launches" in md
    assert "not comparable: no data in A and B" in md and "renamed" not in md
    assert "kernels.no_data" in md or "no data in one run or both" in md
    page = tmp_path / "r.html"
    triage("report", run, run, "-o", page, "--all", "--store", store)
    html = page.read_text()
    assert 'class="verdict v-caution"' in html and "✓ Comparable" not in html
    assert "no data in A and B: the profiler collected nothing for these launches" in html
    assert "no data</span>" in html and "renamed or not collected" not in html


def test_explain_says_no_data(triage, tracer):
    store, run = tracer
    text = triage("explain", run, "--store", store).stdout
    trace = text.split(TRACE, 1)[1]
    assert trace.strip() == "1 launch, no data: the profiler collected nothing for it"
    assert "named differently" not in text.split(TRACE, 1)[1]
    result = triage.json("explain", run, "--store", store)
    kernels = {k["name"]: k for k in result["kernels"]}
    assert kernels[TRACE]["no_data"] is True and kernels[TRACE]["conclusion"] is None
    assert [s["status"] for s in kernels[TRACE]["steps"]] == ["no_data"] * 5
    assert not any(k["no_data"] for n, k in kernels.items() if n != TRACE)


def test_nothing_to_compare_is_invalid(tracer):
    """No corpus pair has only failed kernels: the rule is checked on the real diff's kernels,
    narrowed to the one without data (the verdict reads every matched kernel)."""
    store, run = tracer
    diff = diff_runs(Store.open(store), run, run, DiffOptions())
    trace = [k for k in diff.kernels if k.name == TRACE]
    (item,) = no_data_drift(trace)
    assert item.severity == INVALIDATES and verdict([item]) == "invalid"
    assert item.why.startswith("nothing to compare: no matched kernel has data in both runs")
    one_side = [replace(trace[0], no_data=("b",))] + [k for k in diff.kernels if k.name != TRACE]
    (item,) = no_data_drift(one_side)
    assert item.severity == CAUTION and item.kernels_a == (TRACE,)
    assert (item.a, item.b) == ("0 without data in A", "1 without data in B")
    assert no_data_drift([k for k in diff.kernels if k.name != TRACE]) == []


def test_a_kernel_with_some_launches_without_data_is_compared(triage, tmp_path):
    """The sweep's one failed launch is one of 45 of its kernel: the kernel has data, so it is
    compared (the notice still names the failed result)."""
    store = tmp_path / "store"
    (run,) = archive_files(store, [str(corpus_file(SWEEP))])
    document = json.loads(triage("diff", run.id, run.id, "--json", "--store", store).stdout)
    assert [k["no_data"] for k in document["kernels"]] == [[]]
    assert not any(i["code"] == KERNEL_NO_DATA for i in document["drift"])


def test_a_metric_without_a_value_on_either_side_is_no_data(triage, tmp_path):
    """Twisty's long kernel lists five SpeedOfLight metrics it recorded no value for: compared
    with itself that section used to be 'renamed or not collected'; now they are no_data and
    the section is comparable (the kernel has data)."""
    store = tmp_path / "store"
    (run,) = archive_files(store, [str(corpus_file("BrennenTaylor__Twisty__profile"
                                                   ".nsight-cuprof-report"))])
    document = json.loads(triage("diff", run.id, run.id, "--json", "--store", store).stdout)
    assert document["verdict"] == "comparable"
    assert not any(i["code"].startswith("section.") for i in document["drift"])
    (long,) = [k for k in document["kernels"] if k["a"]["duration_ns"] > 1e9]
    (speed,) = [s for s in long["sections"] if s["section"] == "SpeedOfLight"]
    assert speed["comparable"] and long["no_data"] == []
    assert [m["status"] for m in speed["metrics"]] == ["no_data"] * 5
    text = triage("diff", run.id, run.id, "--store", store).stdout
    assert "renamed" not in text and "      SOL TEX" in text and "no data" in text  # tex__sol_pct
