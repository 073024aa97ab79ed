"""Bad requests get one line, the right exit code and no side effects (found by review)."""

from __future__ import annotations

import json

import pytest

from helpers import corpus_file
from triage.demo import demo_file

GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")


@pytest.fixture
def pair(triage, archived):
    return archived(*((n,) for n in GEMM))


def one_line(result, needle: str) -> None:
    assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("options, code, needle", [
    (["--kernel", "("], 2, "not a regular expression"),
    (["--metric", "["], 2, "not a regular expression"),
    (["--kernel", "no_such_kernel"], 1, "no kernel of either run matches"),
    (["--section", "NoSuchSection"], 1, "no section named NoSuchSection"),
    (["--metric", "no_such_metric"], 1, "no metric the sections of either run show matches"),
    (["--json", "--format", "md"], 2, "two formats"),
])
def test_diff_refuses_filters_that_cannot_work(triage, pair, options, code, needle):
    result = triage("diff", *pair, *options, expect=code)
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_diff_option_ranges_are_checked(triage, pair):
    for options in (["--threshold", "-5"], ["--threshold", "nan"], ["--limit", "-1"]):
        result = triage("diff", *pair, *options, expect=2)
        assert "Invalid value" in result.stderr or "percentage >= 0" in result.stderr


def test_diff_output_paths(triage, pair, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    one_line(triage("diff", *pair, "-o", blocker / "d.md", expect=1), "cannot write")
    assert "is a directory" in triage("diff", *pair, "-o", tmp_path, expect=2).stderr
    result = triage("diff", *pair, "-o", tmp_path / "d.html", expect=2)
    assert "triage report" in result.stderr
    triage("diff", *pair, "-o", tmp_path / "d.md")
    assert (tmp_path / "d.md").read_text().startswith("#")


def test_nsys_diff_rejects_ncu_filters(triage):
    runs = [triage.json("archive", demo_file(n))[0]["id"] for n in ("before.sqlite",
                                                                    "after.sqlite")]
    one_line(triage("diff", *runs, "--section", "SpeedOfLight", expect=2), "filter ncu diffs")


@pytest.mark.parametrize("sql, refusal", [
    ("copy (select 1) to 'x.csv'", "(not COPY)"), ("attach 'x.db' as x", "(not ATTACH)"),
    ("install httpfs", "(not INSTALL)"), ("-- note\n/* x */ install httpfs", "(not INSTALL)"),
    ("set threads = 1", "(not SET)"),
    ("pivot runs on tool using count(*)", "(not PIVOT; use GROUP BY)"),
    ("select 1; select 2", "one read-only SELECT statement"), ("   ", "empty query")])
def test_query_runs_one_read_only_select(triage, pair, sql, refusal, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    one_line(triage("query", sql, expect=2), refusal)
    assert not list(work.iterdir())


def test_query_names_a_mistyped_option(triage, pair):
    one_line(triage("query", "--jsn", "select 1", expect=2), "no such option: --jsn")
    one_line(triage("query", "select", "1", "-j", expect=2), "no such option: -j")


def test_query_may_start_with_an_sql_comment(triage, pair):
    """Pasted from a .sql file: `--` opens a comment there, not an option."""
    assert triage("query", "-- how many\nselect count(*) n from runs", "--csv").stdout == "n\n2\n"


def test_query_cannot_read_files_outside_the_store(triage, pair):
    one_line(triage("query", "select * from read_csv('/etc/passwd')", expect=1),
             "query failed")


def test_json_output_is_always_valid_json(triage, pair):
    text = triage("query", "select 'nan'::double x, 'inf'::double y", "--json").stdout
    assert json.loads(text) == [{"x": None, "y": None}]


@pytest.mark.parametrize("name", ["latest", "..", "a//b", "a/", "0e7d", "cafe1234", "a/./b"])
def test_labels_that_would_shadow_ids_or_paths_are_refused(triage, pair, name):
    triage("label", pair[0], name, expect=2)


def test_label_length_is_said(triage, pair):
    triage("label", pair[0], "g" * 128)
    one_line(triage("label", pair[0], "g" * 129, expect=2), "use at most 128 letters")


def test_label_clash_and_missing_target(triage, pair, store_dir):
    triage("label", pair[0], "rel/v1")
    one_line(triage("label", pair[0], "rel", expect=2), "clashes with label 'rel/v1'")
    (store_dir / "labels" / "gone").write_text("f" * 64 + "\n")
    one_line(triage("show", "gone", expect=1), "not in this store")


def test_archive_checks_the_label_before_archiving(triage, store_dir):
    triage("archive", "--label", "latest", corpus_file(GEMM[0]), expect=2)
    assert not store_dir.exists()


def test_a_bare_strict_before_the_runs_says_where_it_goes(triage, pair):
    result = triage("diff", "--strict", *pair, expect=2)
    assert "a bare --strict goes after the runs (or write --strict=invalid)" in result.stderr
    assert triage("diff", "--strict=invalid", *pair).exit_code == 0


def test_section_and_metric_filters_on_runs_with_no_kernel_in_common(triage, pair):
    """Only matched kernels have sections: no match is not 'no such metric'."""
    other = triage.json("archive", corpus_file(
        "shortstheory__cuda-experiments__reduce_report2.ncu-rep"))[0]["id"]
    triage("diff", other, pair[0], "--metric", "gpu__time_duration")
    one_line(triage("diff", *pair, "--section", "Nope", "--metric", "sm__", expect=1),
             "no section named Nope")
