"""What a new user tries first (issue 19, items 8, 10 and 11), on real corpus runs: labels that
read like git tags, one name for a run's key in every query view, and one answer to one mistake
however it is written."""

from __future__ import annotations

import pytest

from helpers import corpus_file

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
DEPRECATED = "triage: warning: `triage label RUN NAME` is deprecated; write `triage label {} {}` " \
             "(NAME first, like git tag)\n"


@pytest.fixture
def runs(triage, archived) -> tuple[str, str]:
    """Two real ncu runs, archived in this order: `latest` is the second."""
    return tuple(archived((SMALL,), (OTHER,)))


def label_files(store_dir) -> list[str]:
    """Every file under labels/, temp files included: what a label write or delete left."""
    folder = store_dir / "labels"
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# -- item 8: `triage label NAME [RUN]` ---------------------------------------------------------


def test_label_name_alone_points_at_the_latest_run(triage, runs):
    result = triage("label", "rc1")
    assert (result.stdout, result.stderr) == (f"rc1 -> {runs[1][:12]}\n", "")
    assert triage.json("show", "rc1")["id"] == runs[1]


def test_a_label_that_moves_says_where_it_was(triage, runs):
    triage("label", "rc1", runs[0])
    moved = triage("label", "rc1", runs[1][:8])
    assert moved.stdout == f"rc1 -> {runs[1][:12]} (was {runs[0][:12]})\n"
    assert triage("label", "rc1", "latest").stdout == f"rc1 -> {runs[1][:12]}\n"  # no move


def test_label_d_deletes_it_and_leaves_nothing_behind(triage, runs, store_dir):
    triage("label", "rel/v1", runs[0])
    result = triage("label", "-d", "rel/v1")
    assert (result.stdout, result.stderr) == (f"deleted label rel/v1 (was {runs[0][:12]})\n", "")
    assert label_files(store_dir) == [] and [r["labels"] for r in triage.json("ls")] == [[], []]
    triage("show", "rel/v1", expect=1)
    assert triage.json("verify")["ok"]
    triage("label", "rel", runs[1])  # the folder it left is in the way of nothing
    assert label_files(store_dir) == ["rel"]


def test_deleting_a_label_that_is_not_there_is_one_line(triage, runs):
    result = triage("label", "-d", "nope", expect=1)
    assert (result.stdout, result.stderr) == (
        "", "triage: error: label 'nope' not found; `triage label` lists labels\n")
    result = triage("label", "-d", "nope", runs[0], expect=2)
    assert result.stderr == "triage: error: -d deletes one label: triage label -d NAME\n"


def test_bare_label_lists_the_labels(triage, runs):
    assert triage("label").stdout == \
        "no labels yet; `triage label NAME [RUN]` points one at a run\n"
    triage("label", "rc2", runs[1])
    triage("label", "base", runs[0])
    assert triage("label").stdout == f"base -> {runs[0][:12]}\nrc2 -> {runs[1][:12]}\n"


@pytest.mark.parametrize("ref", ["id", "prefix", "latest"])
def test_the_old_order_still_works_with_a_note(triage, runs, ref):
    """RUN NAME where RUN is what no label can be: the new order cannot be meant."""
    given, meant = {"id": (runs[0], runs[0]), "prefix": (runs[0][:8], runs[0]),
                    "latest": ("latest", runs[1])}[ref]
    result = triage("label", given, "old")
    assert result.stdout == f"old -> {meant[:12]}\n"
    assert result.stderr == DEPRECATED.format("old", given)
    assert triage.json("show", "old")["id"] == meant


def test_two_words_either_order_could_mean_are_name_then_run(triage, runs):
    """`base` is a label (a RUN) and a label name: NAME RUN wins, whatever the store holds, so
    a mistyped RUN is an error, never a new label pointing at the run NAME names."""
    triage("label", "base", runs[0])
    result = triage("label", "other", "base")
    assert (result.stdout, result.stderr) == (f"other -> {runs[0][:12]}\n", "")
    result = triage("label", "base", "bsae", expect=1)
    assert result.stderr.startswith("triage: error: run 'bsae' not found")
    assert "bsae" not in triage("label").stdout
    assert "any other two words are read as NAME RUN" in \
        " ".join(triage("label", "--help").stdout.split())


# -- item 10: `run_id` in every view -----------------------------------------------------------


def test_runs_is_keyed_by_run_id_like_every_view(triage, runs):
    one = "where run_id in (select run_id from runs limit 1)"
    assert triage.json("query", f"select count(*) n from runs {one}") == [{"n": 1}]
    # Under `id`, the inner run_id was the kernels' own: every run matched, in silence.
    assert triage.json("query", f"select count(distinct run_id) n from kernels {one}") == [{"n": 1}]
    rows = triage.json("query", "select run_id, id from runs order by archived")
    assert [(r["run_id"], r["id"]) for r in rows] == [(r, r) for r in runs]  # `id`: deprecated


# -- item 11: one answer to one mistake --------------------------------------------------------


def test_query_joins_the_words_of_unquoted_sql(triage, runs):
    assert triage("query", "select", "count(*)", "n", "from", "runs", "--csv").stdout == "n\n2\n"
    assert triage("query", "select", "3", "-1", "n", "--csv").stdout == "n\n2\n"  # -1 is SQL
    assert "SQL..." in triage("query", "--help").stdout


@pytest.mark.parametrize("given", ["--store after", "--store before", "$TRIAGE_STORE"])
def test_a_store_path_that_is_a_file_is_one_error_however_given(triage, tmp_path, monkeypatch,
                                                                 given):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a store")
    args = {"--store after": ["ls", "--store", blocker], "--store before": ["--store", blocker,
                                                                            "ls"]}.get(given)
    monkeypatch.setenv("TRIAGE_STORE", str(blocker) if args is None else str(tmp_path / "unused"))
    result = triage(*(args or ["ls"]), expect=1)
    assert result.stderr == (f"triage: error: store path {blocker} is a file, not a directory; "
                             "give a store directory with --store or $TRIAGE_STORE\n")
    assert blocker.read_text() == "not a store"


@pytest.mark.parametrize("given", ["--store", "$TRIAGE_STORE"])
def test_a_store_url_is_refused_not_made_a_local_folder(triage, tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    url = "gs://team-bucket/profiles"  # s3:// is a store (tests/test_s3_store.py)
    if given == "$TRIAGE_STORE":
        monkeypatch.setenv("TRIAGE_STORE", url)
    args = ["archive", corpus_file(SMALL), *(["--store", url] if given == "--store" else [])]
    result = triage(*args, expect=1)
    assert result.stderr == (f"triage: error: store {url}: gs:// stores are not supported; "
                             "give a directory or s3://bucket/prefix with --store or "
                             "$TRIAGE_STORE\n")
    assert list(tmp_path.iterdir()) == []  # no `s3:` folder archived into


# -- item 7: the label the user typed names the side -----------------------------------------


def test_the_diff_names_each_side_by_the_label_typed(triage, runs, tmp_path):
    for name in ("conv/naive", "conv/again"):
        triage("label", name, runs[0])
    text = triage("diff", "conv/naive", runs[1]).stdout
    assert text.startswith(f"A: {runs[0][:12]} (conv/naive, conv/again) ")
    assert triage("diff", "conv/again", runs[1]).stdout.startswith(
        f"A: {runs[0][:12]} (conv/again, conv/naive) ")
    triage("report", "conv/naive", runs[1], "-o", tmp_path / "review.md")
    assert "Performance review: conv/naive vs " in (tmp_path / "review.md").read_text()
