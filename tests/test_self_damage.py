"""One bad file never takes the store down (issue 15, item 8), on real corpus runs: the damage a
user can do by hand or by following `verify`'s advice. Each reader goes on with the other runs
and names what is wrong, in one line, without a traceback."""

from __future__ import annotations

import json
import os

import pytest

from helpers import corpus_file, table_file
from triage.archive import catalog
from triage.archive.store import Store

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def two_runs(triage) -> tuple[Store, str, str]:
    first = triage.json("archive", corpus_file(SMALL))[0]["id"]
    second = triage.json("archive", corpus_file(OTHER))[0]["id"]
    return Store.open(os.environ["TRIAGE_STORE"]), first, second


def assert_readers_go_on(triage, first: str, second: str) -> None:
    """ls, show and query still serve both runs."""
    assert [r["id"] for r in triage.json("ls")] == [second, first]
    assert triage.json("show", first)["id"] == first
    rows = triage.json("query", "select id from runs order by archived")
    assert [r["id"] for r in rows] == [first, second]


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_run_without_its_kernel_summary_is_listed_and_named(triage, damage):
    """A kernel_summary object gone or overwritten, then the catalog segments removed (what
    `verify` advises for a bad segment): `ls` used to fail for every run."""
    store, first, second = two_runs(triage)
    path = table_file(store.root, first, "kernel_summary")
    if damage == "missing":
        path.unlink()
    else:
        os.chmod(path, 0o644)
        path.write_bytes(b"PAR1" + bytes(200) + b"PAR1")
    for segment in (store.root / "index").glob("catalog-*.parquet"):
        segment.unlink()
    for _again in range(2):  # the partial row is not written: named on every read until repaired
        result = triage("ls")
        where = path.relative_to(store.root).as_posix()
        assert result.stderr == (f"triage: warning: run {first[:12]}: its kernel_summary table "
                                 f"{where} is {damage}, so it is listed without its kernel "
                                 "ranking; `triage verify` lists what is damaged\n")
        assert first[:12] in result.stdout and second[:12] in result.stdout
    assert_readers_go_on(triage, first, second)
    ranked = triage.json("query", "select distinct run_id from kernel_summary")
    assert [r["run_id"] for r in ranked] == [second]
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert [(f["path"], f["run"]) for f in report["errors"]] == [(where, first)]


@pytest.mark.parametrize("damage", ["kernel_summary", "manifest"])
def test_a_run_a_merge_could_not_index_whole_is_still_named_after_it(triage, damage):
    """A merge (of the 33rd segment, or `migrate`) finds a run it cannot index whole: its
    segment, which readers trust without listing runs/, names that run, so `ls` still lists
    it (or names its manifest); repaired, the run is indexed whole once and listed as any."""
    store, first, second = two_runs(triage)
    path = table_file(store.root, first, "kernel_summary") if damage == "kernel_summary" \
        else store.runs.path(first)
    good = path.read_bytes()
    os.chmod(path, 0o644)
    path.write_bytes(good.replace(b'"source":"archive"', b'"source":"ARCHIVE"')
                     if damage == "manifest" else b"PAR1" + bytes(200) + b"PAR1")
    for segment in (store.root / "index").glob("catalog-*.parquet"):
        segment.unlink()
    catalog.merge(store)
    assert len(catalog.segments(store)) == 1
    for _again in range(2):
        result = triage("ls")
        assert second[:12] in result.stdout and result.stderr.count("\n") == 1
        assert f"run {first[:12]}" in result.stderr
        assert (first[:12] in result.stdout) == (damage == "kernel_summary")
    path.write_bytes(good)
    assert [r["id"] for r in triage.json("ls")] == [second, first]
    assert len(catalog.segments(store)) == 2  # the repaired run's row, written once
    result = triage("ls")
    assert result.stderr == "" and first[:12] in result.stdout
    ranked = triage.json("query", "select distinct run_id from kernel_summary order by 1")
    assert [r["run_id"] for r in ranked] == sorted([first, second])


def test_a_run_with_a_damaged_manifest_is_named_by_ls(triage):
    store, first, second = two_runs(triage)
    path = store.runs.path(first)
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"source":"archive"', b'"source":"ARCHIVE"'))
    for segment in (store.root / "index").glob("catalog-*.parquet"):
        segment.unlink()
    result = triage("ls")
    assert second[:12] in result.stdout and first[:12] not in result.stdout
    assert result.stderr.startswith(f"triage: warning: manifest of run {first[:12]} does not "
                                    "match its id") and result.stderr.count("\n") == 1


def test_a_label_that_is_not_text_is_named_and_hides_nothing(triage):
    store, first, second = two_runs(triage)
    triage("label", second, "good")
    (store.root / "labels" / "bad").write_bytes(b"\xff\xfe\x00not text\n")
    assert_readers_go_on(triage, first, second)
    assert triage.json("ls")[0]["labels"] == ["good"]
    result = triage("show", "bad", expect=1)
    assert result.stderr == ("triage: error: label 'bad' is damaged (it holds no run id); "
                             "`triage label bad RUN` points it at a run again\n")
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert [(f["kind"], f["path"]) for f in report["errors"]] == [("corrupt", "labels/bad")]
    triage("label", first, "bad")
    assert triage.json("show", "bad")["id"] == first and triage.json("verify")["ok"]


def test_a_label_file_whose_name_is_not_text_is_no_label(triage):
    store, first, second = two_runs(triage)
    (store.root / "labels").mkdir()
    with open(os.path.join(os.fsencode(store.root / "labels"), b"\xffteam"), "wb") as stream:
        stream.write(f"{first}\n".encode())
    assert_readers_go_on(triage, first, second)
    assert [r["labels"] for r in triage.json("ls")] == [[], []]
    result = triage("verify", expect=1)
    assert "not a label name" in result.stdout and "Traceback" not in result.output


def test_annotations_that_are_not_text_hide_nothing(triage):
    store, first, second = two_runs(triage)
    path = store.annotations.path(first)
    path.write_bytes(b'{"archived":"\xff\xfe","notes":[]}')
    assert_readers_go_on(triage, first, second)
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert [(f["kind"], f["path"]) for f in report["errors"]] == [
        ("corrupt", f"annotations/{first}.json")]


def test_an_empty_folder_where_a_label_goes_is_no_clash(triage):
    """`mkdir labels/team`, then `triage label RUN team` (it raised StopIteration)."""
    store, first, _second = two_runs(triage)
    (store.root / "labels" / "team").mkdir(parents=True)
    assert triage("label", first, "team").stdout == f"team -> {first[:12]}\n"
    assert triage.json("show", "team")["id"] == first
    (store.root / "labels" / "squad" / "inner").mkdir(parents=True)
    result = triage("label", first, "squad", expect=2)
    assert result.stderr == ("triage: error: label 'squad' clashes with label 'squad' being "
                             "written, or with a folder labels/squad that holds no label; remove "
                             "the folder or choose another name\n")
    assert triage.json("verify")["ok"]


def test_a_damaged_run_archived_again_keeps_its_notes(triage):
    """Its manifest damaged and its dedup key lost, a run archived again is rebuilt under the
    same id; the notes a user added stay (its annotations are read, not taken for a new run's)."""
    store, first, _second = two_runs(triage)
    triage("archive", corpus_file(SMALL), "--note", "baseline before the fix")
    path = store.runs.path(first)
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"source":"archive"', b'"source":"ARCHIVE"'))
    for key in (store.root / "keys").iterdir():
        key.unlink()
    again = triage.json("archive", corpus_file(SMALL))[0]
    assert again["id"] == first
    notes = [n["text"] for n in store.annotations.read(first)["notes"]]
    assert notes == ["baseline before the fix"]

