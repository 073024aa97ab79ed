"""What arrives from another store cannot take this one over (issue 44): a clock that ran ahead
cannot pin a label, concurrent notes are all kept, a merge says every label it moves, a run that
came from elsewhere is marked (rerun asks first: tests/test_rerun.py), a new store is private,
and the rough edges each give one clear line.

The skewed clock is injected (triage.archive.labels.utc_now, what every move is dated by; no
faketime here); the notes are written by real concurrent `triage archive` processes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers import corpus_file
from triage.archive import labels as labels_module
from triage.archive.store import Store, os_error

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
WRITERS = 10


def _ahead(monkeypatch, days: int) -> None:
    """This process's label clock `days` ahead of the wall clock (a colleague's machine)."""
    def skewed(precise: bool = False) -> str:
        return (datetime.now(timezone.utc) + timedelta(days=days)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")
    monkeypatch.setattr(labels_module, "utc_now", skewed)


@pytest.fixture
def two_runs(triage, archived) -> list[str]:
    return archived((SMALL,), (OTHER,))


def _moved_a_month_ahead(triage, store_dir: Path, tmp_path: Path, monkeypatch, mine: str,
                         theirs: str) -> Path:
    """Label `a` on `mine` here; a colleague's copy of this store where a clock 30 days ahead
    moved it to `theirs`; the copy's path."""
    triage("label", "a", mine)
    colleague = tmp_path / "colleague"
    shutil.copytree(store_dir, colleague)
    with monkeypatch.context() as skew:
        _ahead(skew, 30)
        triage("--store", colleague, "label", "a", theirs)
    return colleague


def test_a_move_dated_a_month_ahead_is_refused_at_pull(triage, two_runs, store_dir, tmp_path,
                                                      monkeypatch):
    mine, theirs = two_runs
    colleague = _moved_a_month_ahead(triage, store_dir, tmp_path, monkeypatch, mine, theirs)
    pulled = triage("pull", colleague)
    assert "refused a move of label a" in pulled.stdout and "ahead of this clock" in pulled.stdout
    assert json.loads(triage("pull", colleague, "--json").stdout)["moves_refused"][0]["run"] \
        == theirs
    assert Store.open(store_dir).labels.all()["a"] == mine  # not pinned
    triage("label", "a", theirs)  # a local move still takes effect
    assert Store.open(store_dir).labels.all()["a"] == theirs


def _an_old_pull(store_dir: Path, colleague: Path, name: str) -> None:
    """What a triage before issue 44 left after pulling a skewed colleague: their moves in the
    history, the label on the newest."""
    for move in (colleague / "label-history" / name).iterdir():
        target = store_dir / "label-history" / name / move.name
        if not target.exists():
            shutil.copy(move, target)
    shutil.copy(colleague / "labels" / name, store_dir / "labels" / name)


def test_a_skewed_move_already_here_cannot_pin_the_label(triage, two_runs, store_dir, tmp_path,
                                                         monkeypatch):
    mine, theirs = two_runs
    colleague = _moved_a_month_ahead(triage, store_dir, tmp_path, monkeypatch, mine, theirs)
    _an_old_pull(store_dir, colleague, "a")
    assert triage("label").stdout.strip() == f"a -> {theirs[:12]}"
    moved = triage("label", "a", mine).stdout
    assert moved.strip() == f"a -> {mine[:12]} (was {theirs[:12]})"
    assert triage("label").stdout.strip() == f"a -> {mine[:12]}"  # it did move
    assert triage("label", "-d", "a").stdout.startswith("deleted label a")
    assert "no labels yet" in triage("label").stdout  # it is gone
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    ahead = [f for f in report["errors"] if "ahead" in f["detail"]]
    assert len(ahead) == 1 and ahead[0]["path"].startswith("label-history/a/")


def test_a_move_overtaken_is_never_reported_as_done(triage, two_runs, store_dir, monkeypatch):
    """Another writer's move lands after ours: `label` says so and exits 1, not `a -> RUN`."""
    mine, theirs = two_runs
    write = labels_module.Labels._write_move

    def and_another_writer(self, name, move):
        write(self, name, move)
        if move.run_id == mine:
            later = (datetime.now(timezone.utc) + timedelta(seconds=1)).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")
            write(self, name, labels_module.LabelMove(later, "other-1-abcd", theirs))

    monkeypatch.setattr(labels_module.Labels, "_write_move", and_another_writer)
    lost = triage("label", "a", mine, expect=1)
    assert lost.stdout == "" and "did not move" in lost.stderr and "other-1-abcd" in lost.stderr
    assert Store.open(store_dir).labels.all()["a"] == theirs


def _noted_concurrently(report: Path, env: dict) -> None:
    """WRITERS real `triage archive REPORT --note` processes at once, each with its note."""
    writers = [subprocess.Popen([sys.executable, "-m", "triage", "archive", str(report),
                                 "--note", f"note {i}"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE) for i in range(WRITERS)]
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * WRITERS, errors


def _assert_every_note_kept(triage, run_id: str) -> None:
    notes = triage.json("show", run_id)["notes"]
    assert sorted(n["text"] for n in notes) == sorted(f"note {i}" for i in range(WRITERS))
    assert [n["time"] for n in notes] == sorted(n["time"] for n in notes)  # in time order


def test_concurrent_notes_are_all_kept_on_local_disk(triage, store_dir):
    run_id = triage.json("archive", corpus_file(SMALL))[0]["id"]
    _noted_concurrently(corpus_file(SMALL), {**os.environ, "TRIAGE_STORE": str(store_dir)})
    _assert_every_note_kept(triage, run_id)
    assert triage.json("verify")["ok"]


def test_concurrent_notes_are_all_kept_on_s3(triage, s3_store):
    run_id = triage.json("archive", corpus_file(SMALL))[0]["id"]
    _noted_concurrently(corpus_file(SMALL), dict(os.environ))
    _assert_every_note_kept(triage, run_id)


def test_notes_travel_whole_by_bundle_and_pull(triage, store_dir, tmp_path):
    run_id = triage.json("archive", corpus_file(SMALL), "--note", "first")[0]["id"]
    triage("archive", corpus_file(SMALL), "--note", "second")
    triage("export", run_id, "-o", tmp_path / "b.tar")
    other = tmp_path / "other"
    triage("--store", other, "import", tmp_path / "b.tar")
    shown = triage("--store", other, "show", run_id, "--json")
    assert [n["text"] for n in json.loads(shown.stdout)["notes"]] == ["first", "second"]
    triage("archive", corpus_file(SMALL), "--note", "third")
    triage("--store", other, "pull", store_dir)
    shown = triage("--store", other, "show", run_id, "--json")
    assert [n["text"] for n in json.loads(shown.stdout)["notes"]] == ["first", "second", "third"]


def test_import_labels_says_what_each_label_replaced(triage, two_runs, tmp_path):
    mine, theirs = two_runs
    triage("label", "x", theirs)
    triage("export", theirs, "-o", tmp_path / "b.tar", "--labels")
    other = tmp_path / "other"
    triage("--store", other, "import", tmp_path / "b.tar")  # the run, not the label
    triage("--store", other, "archive", corpus_file(SMALL), "--label", "x")
    said = triage("--store", other, "import", tmp_path / "b.tar", "--labels").stdout
    assert f"x -> {theirs[:12]} (was {mine[:12]})" in said.splitlines()
    report = json.loads(triage("--store", other, "import", tmp_path / "b.tar", "--labels",
                               "--json").stdout)
    assert report["labels_was"] == {"x": theirs}


def test_pull_and_push_say_what_each_label_replaced(triage, two_runs, store_dir, tmp_path):
    mine, theirs = two_runs
    triage("label", "x", mine)
    team = tmp_path / "team"
    triage("push", team)
    triage("--store", team, "label", "x", theirs)
    assert f"x -> {theirs[:12]} (was {mine[:12]})" in triage("pull", team).stdout.splitlines()
    triage("label", "x", mine)
    assert f"x -> {mine[:12]} (was {theirs[:12]})" in triage("push", team).stdout.splitlines()


def test_runs_that_arrived_are_marked_foreign(triage, two_runs, store_dir, tmp_path):
    mine, _theirs = two_runs
    triage("export", mine, "-o", tmp_path / "b.tar")
    imported, pulled = tmp_path / "imported", tmp_path / "pulled"
    triage("--store", imported, "import", tmp_path / "b.tar")
    triage("--store", pulled, "pull", store_dir, mine)
    for store, how in ((imported, "import from"), (pulled, "pull from")):
        shown = triage("--store", store, "show", mine).stdout
        assert f"arrived          by {how}" in shown
        assert json.loads(triage("--store", store, "show", mine, "--json").stdout)["arrived"] \
            .startswith(how)
    assert "arrived" not in triage("show", mine).stdout  # made here
    assert json.loads(triage("show", mine, "--json").stdout)["arrived"] is None


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_store_is_private_whatever_the_umask(triage, store_dir, umask_022):
    triage("archive", corpus_file(SMALL), "--label", "base", "--note", "a note")
    assert store_dir.stat().st_mode & 0o777 == 0o700
    modes = {p.relative_to(store_dir).parts[0]: p.stat().st_mode & 0o777
             for p in store_dir.rglob("*") if p.is_file() and p.parts[-2] != "leases"}
    assert set(modes) >= {"objects", "tables", "runs", "labels", "notes", "triage-store.json"}
    assert {mode & 0o077 for mode in modes.values()} == {0}, modes  # 0600 and 0400 only


def test_a_team_store_is_group_readable_when_asked(triage, store_dir, umask_022, monkeypatch):
    monkeypatch.setenv("TRIAGE_STORE_SHARED", "group")
    triage("archive", corpus_file(SMALL))
    assert store_dir.stat().st_mode & 0o7777 == 0o2770
    monkeypatch.setenv("TRIAGE_STORE_SHARED", "world")
    refused = triage("--store", store_dir.parent / "another", "archive", corpus_file(SMALL),
                     expect=2)
    assert "TRIAGE_STORE_SHARED" in refused.stderr and len(refused.stderr.splitlines()) == 1


def _one_line(result, *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(word in lines[0] for word in words), lines[0]


def test_rough_edges_say_one_clear_line(triage, two_runs, monkeypatch):
    _one_line(triage("ls", "--since", "99999999d", expect=2), "--since", "before year 1")
    _one_line(triage("label", "abcd", "latest", expect=2), "both name runs")
    assert "invalid label 'latest'" not in triage("label", "abcd", "latest", expect=2).stderr
    monkeypatch.setenv("TRIAGE_STORE", "")
    _one_line(triage("ls", expect=2), "$TRIAGE_STORE is set but empty")


def test_query_text_tells_infinity_huge_and_nan_apart_from_null(triage, two_runs):
    out = triage("query", "select 1.0/0 as inf, -1.0/0 as ninf, 1e300 as big, "
                 "'NaN'::double as nan, null as nothing").stdout.splitlines()
    assert out[-1].split() == ["inf", "-inf", "1e+300", "NaN", "-"]


def test_a_read_only_file_system_is_named_as_such(tmp_path):
    said = str(os_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), tmp_path, "write"))
    assert "read-only file system" in said and "permission" not in said


def test_export_refuses_a_run_with_damaged_annotations(triage, two_runs, store_dir, tmp_path):
    mine, _theirs = two_runs
    notes = store_dir / "annotations" / f"{mine}.json"
    os.chmod(notes, 0o644)
    notes.write_text('{"notes": "x"}')
    refused = triage("export", mine, "-o", tmp_path / "b.tar", expect=1)
    _one_line(refused, "annotations", mine[:12], "damaged")
    assert not (tmp_path / "b.tar").exists()


def test_notes_and_arrivals_of_no_run_are_leftovers_gc_removes(triage, two_runs, store_dir,
                                                                tmp_path):
    mine, _theirs = two_runs
    triage("export", mine, "-o", tmp_path / "b.tar")
    other = tmp_path / "other"
    triage("--store", other, "import", tmp_path / "b.tar")
    triage("--store", other, "archive", corpus_file(SMALL), "--note", "kept until the run goes")
    manifest = other / "runs" / f"{mine}.json"
    os.chmod(manifest, 0o644)
    manifest.unlink()  # the run gone (by hand): its note and arrival record are leftovers
    found = json.loads(triage("--store", other, "verify", "--json", expect=None).stdout)[
        "leftovers"]
    assert {f["path"].split("/")[0] for f in found} >= {"notes", "arrivals"}
    triage("--store", other, "gc", "--grace", "0s")
    assert not list((other / "notes").rglob("*.note"))
    assert not (other / "arrivals" / f"{mine}.json").exists()
