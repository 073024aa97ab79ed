"""Run identity two people agree on (issue 17, item 2): a run id hashes what the run is (its
reports, provenance, redaction patterns, table schema version), not how its tables came out as
Parquet bytes or which library versions wrote them. The tables are attached by their own
hashes, which a sealed manifest and `verify` still check."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import corpus_file
from triage.archive import ingest, tables
from triage.archive.store import Store

REPORTS = ["LakshyaSingh354__CudaCode__report.ncu-rep", "0x822a5b87__test-cuda__report1.sqlite"]


def other_writer(monkeypatch) -> None:
    """A colleague's machine: another Parquet codec and row-group size, other library versions."""
    monkeypatch.setattr(tables, "PARQUET_OPTIONS", dict(compression="snappy",
                                                        use_dictionary=False))
    monkeypatch.setattr(tables, "BATCH_ROWS", 7)
    monkeypatch.setattr(ingest, "_library_versions",
                        lambda tool: {"pyarrow": "0.0.1", "duckdb": "0.0.2", "ncu-report": None})


def archive(triage, store, name: str) -> dict:
    return triage.json("--store", store, "archive", corpus_file(name))[0]


def manifest(store, run_id: str) -> dict:
    return json.loads((store / "runs" / f"{run_id}.json").read_bytes())


@pytest.mark.parametrize("name", REPORTS)
def test_two_writers_agree_on_the_run_id(triage, tmp_path, monkeypatch, name):
    mine = archive(triage, tmp_path / "mine", name)
    other_writer(monkeypatch)
    theirs = archive(triage, tmp_path / "theirs", name)
    assert theirs["id"] == mine["id"]
    ours, their = manifest(tmp_path / "mine", mine["id"]), manifest(tmp_path / "theirs", mine["id"])
    # the same run written differently: other table bytes, other library versions
    assert ours["tables"]["kernels"]["sha256"] != their["tables"]["kernels"]["sha256"]
    assert ours["tables"]["kernels"]["rows"] == their["tables"]["kernels"]["rows"]
    assert ours["extractor"] != their["extractor"]
    for store in ("mine", "theirs"):
        triage("--store", tmp_path / store, "verify")


def test_a_second_writer_of_the_same_run_is_a_no_op(triage, tmp_path, monkeypatch):
    """Another node archives the same report into the shared store without seeing the first
    one's dedup key (it raced, or the key was lost): first writer wins, nothing is replaced."""
    store = tmp_path / "shared"
    first = archive(triage, store, REPORTS[0])
    before = (store / "runs" / f"{first['id']}.json").read_bytes()
    shutil.rmtree(store / "keys")
    other_writer(monkeypatch)
    second = archive(triage, store, REPORTS[0])
    assert (second["id"], second["new"]) == (first["id"], False)
    assert (store / "runs" / f"{first['id']}.json").read_bytes() == before
    assert [r["id"] for r in triage.json("--store", store, "ls")] == [first["id"]]
    out = triage("--store", store, "archive", corpus_file(REPORTS[0])).stdout
    assert "(already archived)" in out, out


def test_verify_catches_a_table_swapped_in_the_manifest(triage, tmp_path):
    """The id no longer hashes the table references, so the seal must: a manifest whose
    kernels table was pointed at another object (id unchanged) is damaged, not the run."""
    store = tmp_path / "store"
    run_id = archive(triage, store, REPORTS[0])["id"]
    path = store / "runs" / f"{run_id}.json"
    doc = json.loads(path.read_bytes())
    refs = doc["tables"]
    refs["kernels"], refs["kernel_summary"] = refs["kernel_summary"], refs["kernels"]
    path.chmod(0o644)
    path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    found = triage("--store", store, "verify", expect=1).stdout
    assert "do not match their seal" in found, found
    assert "does not match its id" in triage("--store", store, "show", run_id, expect=1).stderr
    assert Store.open(store).runs.manifest_bytes(run_id) is None


def table_files(store) -> set[str]:
    return {p.relative_to(store).as_posix() for p in (store / "tables").rglob("*.parquet")}


def test_a_writer_that_loses_the_race_removes_its_own_tables(triage, tmp_path, monkeypatch):
    """Two nodes archive one report at once, both past the "is it there" check: the other one's
    manifest lands while this one publishes its tables. Engines read tables/ in place, so this
    writer's tables (the same rows in other bytes) must go, and the other's stay whole."""
    theirs, shared = tmp_path / "theirs", tmp_path / "shared"
    with monkeypatch.context() as patch:
        other_writer(patch)
        run_id = archive(triage, theirs, REPORTS[0])["id"]
    real = tables.TableSet.publish

    def meanwhile(self, publishing: str) -> None:
        for key in [*table_files(theirs), f"runs/{run_id}.json"]:
            (shared / key).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(theirs / key, shared / key)
        real(self, publishing)

    monkeypatch.setattr(tables.TableSet, "publish", meanwhile)
    lost = archive(triage, shared, REPORTS[0])
    assert (lost["id"], lost["new"]) == (run_id, False)
    assert table_files(shared) == table_files(theirs)
    checked = triage.json("--store", shared, "verify")
    assert checked["ok"] and checked["leftovers"] == [], checked
    rows = triage.json("--store", shared, "query", "select count(*) as n from kernels")
    assert rows == [{"n": manifest(theirs, run_id)["tables"]["kernels"]["rows"]}]
