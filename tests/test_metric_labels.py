"""What a reader recognises: ncu's own metric labels ("Duration", "L2 Hit Rate") lead the diff's
text, Markdown and HTML, raw names come with --raw-names and in --json, and a section collected
by one run only is one line, not a row per metric. All on real corpus reports."""

from __future__ import annotations

import pyarrow.parquet as pq

from helpers import corpus_file, table_file

GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",  # lakshya-gemm: before, after
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
# lashi-rwoffset: 4 MemoryWorkloadAnalysis sections (A) against --set full (B)
RWOFFSET = ("Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
            "Lashi0812__CudaProgramming__readWriteOffset_cg_setfull.ncu-rep")
DURATION = "gpu__time_duration.sum"
DURATION_ROW = "<td title=\"gpu__time_duration.sum\">Duration</td>"
RAW_DURATION_ROW = "<td class=\"mono\" title=\"gpu__time_duration.sum\">gpu__time_duration.sum</td>"


def archived(triage, *names: str) -> list[str]:
    return [triage.json("archive", corpus_file(n))[0]["id"] for n in names]


def metric_lines(text: str, name: str) -> list[str]:
    """The text diff's metric rows (six spaces in) that start with this metric name or label."""
    return [line for line in text.splitlines() if line.startswith(f"      {name} ")]


def section_json(diff: dict, section: str) -> dict:
    return next(s for s in diff["kernels"][0]["sections"] if s["section"] == section)


def test_the_sections_table_stores_ncus_labels(triage):
    (run,) = archived(triage, GEMM[0])
    rows = triage.json("query", "select metric_name, metric_label from sections where run_id = "
                       f"'{run}' and section_id = 'SpeedOfLight' and kernel_index = 0")
    labels = {r["metric_name"]: r["metric_label"] for r in rows}
    assert labels[DURATION] == "Duration"
    assert labels["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"] == \
        "Memory Throughput"
    # a breakdown's label is a template ncu fills per unit ("{UNIT}: {COMPOUND_NAME}"): none
    assert labels["breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed"] is None
    l2 = triage.json("query", "select distinct metric_label from sections where metric_name = "
                     "'lts__t_sector_hit_rate.pct' and section_id = 'MemoryWorkloadAnalysis'")
    assert l2 == [{"metric_label": "L2 Hit Rate"}]
    same = triage.json("query", "select count(*) n from sections where metric_label = metric_name")
    assert same == [{"n": 0}]  # a label that only repeats the name is null


def test_diff_names_metrics_by_label_and_raw_names_on_request(triage, tmp_path):
    a, b = archived(triage, *GEMM)
    text = triage("diff", a, b).stdout
    assert len(metric_lines(text, "Duration")) == 1 and not metric_lines(text, DURATION)
    assert metric_lines(text, "L2 Hit Rate")
    raw = triage("diff", a, b, "--raw-names").stdout
    assert len(metric_lines(raw, DURATION)) == 1 and not metric_lines(raw, "Duration")
    assert metric_lines(raw, "lts__t_sector_hit_rate.pct")

    markdown = triage("diff", a, b, "--format", "md").stdout
    assert "| Duration | ns |" in markdown and f"`{DURATION}`" not in markdown
    assert f"| `{DURATION}` | ns |" in triage("diff", a, b, "--format", "md", "--raw-names").stdout

    triage("report", a, b, "-o", tmp_path / "labels.html")
    triage("report", a, b, "-o", tmp_path / "raw.html", "--raw-names")
    html, raw_html = ((tmp_path / f"{n}.html").read_text() for n in ("labels", "raw"))
    assert DURATION_ROW in html and RAW_DURATION_ROW not in html  # the raw name as a tooltip
    assert RAW_DURATION_ROW in raw_html and DURATION_ROW not in raw_html
    report_md = triage("report", a, b, "--format", "md").stdout
    assert "| Duration | ns |" in report_md

    duration = next(m for m in section_json(triage.json("diff", a, b), "SpeedOfLight")["metrics"]
                    if m["name"] == DURATION)
    assert duration["label"] == "Duration"  # --json: the raw name, and the label beside it
    assert triage.json("diff", a, b, "--raw-names") == triage.json("diff", a, b)
    by_label = triage.json("diff", a, b, "--metric", "^L2 Hit Rate$")  # --metric: either name
    assert {m["name"] for s in by_label["kernels"][0]["sections"] for m in s["metrics"]} == \
        {"lts__t_sector_hit_rate.pct"}


def test_a_section_collected_on_one_side_only_is_one_line(triage, tmp_path):
    a, b = archived(triage, *RWOFFSET)
    text = triage("diff", a, b).stdout
    assert "    [SpeedOfLight_RooflineChart]: only in B, 13 metrics" in text.splitlines()
    assert "    [MemoryCheck]: only in A, 22 metrics" in text.splitlines()
    # no metric of a one-side section gets a row saying "only in B" (each of them would)
    kernel = text[text.index("\nkernels ("):]
    assert not [line for line in kernel.splitlines()
                if line.startswith("      ") and line.endswith(("only in A", "only in B"))]
    assert "Theoretical DRAM Bytes Accessible" not in text  # a Roofline Chart metric
    assert "Theoretical DRAM Bytes Accessible" not in triage("diff", a, b, "--all").stdout

    markdown = triage("diff", a, b, "--format", "md").stdout
    assert "**GPU Speed Of Light Roofline Chart**: only in B, 13 metrics" in markdown
    assert "Theoretical DRAM Bytes Accessible" not in markdown
    triage("report", a, b, "-o", tmp_path / "review.html")
    html = (tmp_path / "review.html").read_text()
    assert "<strong>GPU Speed Of Light Roofline Chart</strong>: only in B, 13 metrics" in html
    assert "Theoretical DRAM Bytes Accessible" not in html

    roofline = section_json(triage.json("diff", a, b, "--all"), "SpeedOfLight_RooflineChart")
    assert roofline["reason"] == "section.only_b" and len(roofline["metrics"]) == 13


def drop_labels(triage, store_dir, run: str) -> None:
    """Rewrite a run's sections object as tables version 1 wrote it: the same rows without
    metric_label (derived from the real table, as no corpus run predates the column)."""
    path = table_file(store_dir, triage.json("show", run)["id"], "sections")
    table = pq.read_table(path).drop_columns(["metric_label"])
    mode = path.stat().st_mode
    path.chmod(0o644)
    pq.write_table(table, path)
    path.chmod(mode)


def test_runs_archived_before_labels_diff_by_raw_name(triage, store_dir):
    a, b = archived(triage, *RWOFFSET)
    drop_labels(triage, store_dir, a)  # A has no labels, B has: B's are shown
    memory = section_json(triage.json("diff", a, b), "MemoryWorkloadAnalysis")["metrics"]
    assert [(m["name"], m["label"]) for m in memory] == [
        ("dram__bytes.sum.per_second", "Memory Throughput")]
    assert metric_lines(triage("diff", a, b).stdout, "Memory Throughput")

    a, b = archived(triage, *GEMM)  # neither run has labels
    drop_labels(triage, store_dir, a)
    drop_labels(triage, store_dir, b)
    duration = next(m for m in section_json(triage.json("diff", a, b), "SpeedOfLight")["metrics"]
                    if m["name"] == DURATION)
    assert duration["label"] is None
    text = triage("diff", a, b).stdout
    assert len(metric_lines(text, DURATION)) == 1 and not metric_lines(text, "Duration")
    rows = triage.json("query", f"select metric_label from sections where run_id = '{b}'")
    assert rows and all(r["metric_label"] is None for r in rows)
