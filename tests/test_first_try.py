"""What a new user types first (issue 19, items 2 and 6), on real corpus reports: report paths
where a RUN goes (`triage diff a.ncu-rep b.ncu-rep`), and numbers that tell launches apart."""

from __future__ import annotations

import json
import re

from helpers import corpus_file

BEFORE = "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"
AFTER = "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep"
MLP = [f"armleth__cuda-mlp-inference__mlp_{v}.ncu-rep"
       for v in ("v1", "v2", "v3_loop_unroll", "v4_8_per_thread")]


def said(result) -> list[str]:
    """The stderr lines of a command: where a report named as RUN went."""
    return result.stderr.splitlines()


def run_ids(triage) -> set[str]:
    return {run["id"] for run in triage.json("ls")}


# -- item 2: a report path wherever a RUN goes -------------------------------------------------


def test_diff_of_two_report_paths_archives_them_and_says_so_on_stderr(triage):
    a, b = corpus_file(BEFORE), corpus_file(AFTER)
    first = triage("diff", a, b, "--json")
    doc = json.loads(first.stdout)  # stdout is the diff alone
    assert said(first) == [f"triage: {a}: archived as run {doc['a'][:12]}",
                           f"triage: {b}: archived as run {doc['b'][:12]}"]
    assert run_ids(triage) == {doc["a"], doc["b"]}
    again = triage("diff", a, b)
    assert said(again) == [f"triage: {a}: run {doc['a'][:12]} (archived before)",
                           f"triage: {b}: run {doc['b'][:12]} (archived before)"]
    assert again.stdout.startswith(f"A: {doc['a'][:12]} ({BEFORE}) ncu ")
    assert run_ids(triage) == {doc["a"], doc["b"]}  # found by hash: no new run


def test_a_report_archived_before_is_found_by_hash_and_nothing_is_written(triage, store_dir):
    archived = triage.json("archive", corpus_file(BEFORE))[0]["id"]
    files = {p: p.stat().st_mtime_ns for p in store_dir.rglob("*")}
    shown = triage("show", corpus_file(BEFORE), "--json")
    assert json.loads(shown.stdout)["id"] == archived
    assert said(shown) == [f"triage: {corpus_file(BEFORE)}: run {archived[:12]} (archived before)"]
    assert {p: p.stat().st_mtime_ns for p in store_dir.rglob("*")} == files  # a read-only store


def test_report_paths_in_the_runs_of_a_side(triage):
    paths = [corpus_file(name) for name in MLP]
    doc = triage.json("diff", f"{paths[0]},{paths[1]}", f"{paths[2]}, {paths[3]}")
    ids = {run["report_names"]: run["id"] for run in triage.json("ls")}
    assert doc["sides"] == {"a": [ids[MLP[0]], ids[MLP[1]]], "b": [ids[MLP[2]], ids[MLP[3]]]}


def test_label_explain_and_report_take_a_report_path(triage, tmp_path, monkeypatch):
    path = corpus_file(BEFORE)
    labelled = triage("label", "naive", path)
    run = triage.json("show", "naive")["id"]
    assert labelled.stdout == f"naive -> {run[:12]}\n"
    assert said(labelled) == [f"triage: {path}: archived as run {run[:12]}"]
    assert triage.json("explain", path)["run"] == run
    triage("report", path, corpus_file(AFTER), "-o", tmp_path / "review.md")
    md_name = BEFORE.replace("_", r"\_")  # a side given as a path is named by its file
    assert f"Performance review: {md_name} vs " in (tmp_path / "review.md").read_text()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "naive").write_bytes(path.read_bytes())  # a file named like the label
    assert (triage("show", "naive").stderr, triage.json("show", "naive")["id"]) == ("", run)


def test_top_takes_an_nsys_export_path(triage):
    path = corpus_file("Lashi0812__CudaProgramming__streamSimple.sqlite")
    result = triage("top", path, "--json")
    run = json.loads(result.stdout)["run"]
    assert said(result) == [f"triage: {path}: archived as run {run[:12]}"]


def test_a_file_that_is_no_report_where_a_run_goes_is_one_line_and_archives_nothing(
        triage, tmp_path, store_dir):
    notes = tmp_path / "notes.txt"
    notes.write_text("what I changed\n")
    result = triage("diff", corpus_file(BEFORE), notes, expect=1)
    assert result.stdout == ""
    assert result.stderr.startswith(f"triage: error: {notes}: not an Nsight Compute or Nsight "
                                    "Systems report")
    assert len(result.stderr.splitlines()) == 1
    assert not store_dir.exists()  # the good report was not archived either


# -- item 6: launch counts in ncu diffs, digits enough to tell values apart -------------------


def test_an_ncu_diff_shows_each_kernels_launch_counts(triage):
    runs = [triage.json("archive", corpus_file(f"Lashi0812__CudaProgramming__readWriteOffset_"
                                               f"{variant}.ncu-rep"))[0]["id"]
            for variant in ("ca", "cg")]
    text = triage("diff", *runs).stdout
    head = next(line for line in text.splitlines() if line.startswith("  readOffset("))
    assert re.search(r" us +[-+][0-9.]+% +3 -> 3$", head), head
    assert "kernels (1; mean duration per launch, launches, ranked by time changed):" in text


def test_query_text_tells_the_min_mean_and_max_of_launches_apart(triage):
    run = triage.json("archive", corpus_file(AFTER))[0]["id"]
    sql = "select min_ns, avg_ns, max_ns from kernel_summary"
    exact = triage.json("query", "--run", run, sql)[0]
    assert len(set(exact.values())) == 3  # two launches: min < mean < max
    cells = triage("query", "--run", run, sql).stdout.splitlines()[2].split()
    assert cells == ["4.6469M", "4.6477M", "4.6484M"]  # not 4.647M, 4.648M, 4.648M


# -- item 2, leftovers: a side given as a path is named by its file; every RUN takes a path -----


def test_a_diff_names_a_side_given_as_a_path_by_its_file_name(triage, tmp_path):
    a, b = corpus_file(BEFORE), corpus_file(AFTER)
    triage("label", "naive", a)
    text = triage("diff", a, b).stdout.splitlines()
    run_a, run_b = (triage.json("show", ref)["id"] for ref in (a, b))
    assert text[0].startswith(f"A: {run_a[:12]} ({BEFORE}, naive) ncu ")
    assert text[1].startswith(f"B: {run_b[:12]} ({AFTER}) ncu ")
    assert triage("diff", "naive", b).stdout.startswith(f"A: {run_a[:12]} (naive) ncu ")
    triage("report", a, b, "-o", tmp_path / "review.md")
    md_names = [name.replace("_", r"\_") for name in (BEFORE, AFTER)]
    assert "Performance review: {} vs {}".format(*md_names) in (tmp_path / "review.md").read_text()


def test_query_verify_and_export_take_a_report_path(triage, tmp_path):
    path = corpus_file(BEFORE)
    queried = triage("query", "--run", path, "select distinct run_id from kernels", "--json")
    run = json.loads(queried.stdout)[0]["run_id"]
    assert said(queried) == [f"triage: {path}: archived as run {run[:12]}"]
    triage.json("archive", corpus_file(AFTER))
    checked = triage.json("verify", path)
    assert checked["runs"] == 1
    triage("export", path, "-o", tmp_path / "one.tar")
    assert triage.json("import", tmp_path / "one.tar")["runs_present"] == [run]  # that run only


def test_capture_from_takes_a_report_path(triage, nsys_exe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = corpus_file(BEFORE)
    result = triage("capture", "--from", path, "--", nsys_exe, "profile", "--trace=osrt",
                    "--sample=none", "--cpuctxsw=none", "-o", "followup", "true", expect=None)
    run = triage.json("show", path)["id"]
    assert f"triage: {path}: archived as run {run[:12]}" in said(result)
    captured = triage.json("show", "latest")
    assert captured["capture"]["from_run"] == run
