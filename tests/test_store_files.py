"""The store's own files on real corpus runs: a damaged catalog segment, an edited manifest, keys
after an import, and the permissions a team sharing a store needs."""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import pytest

from helpers import corpus_file
from triage.archive import catalog
from triage.archive.files import StoreFiles
from triage.archive.run_manifests import Runs
from triage.archive.store import STORE_MARKER, STORE_VERSION, Store

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def archive(triage, name: str, *options) -> str:
    return triage.json("archive", corpus_file(name), *options)[0]["id"]


def open_store() -> Store:
    return Store.open(os.environ["TRIAGE_STORE"])


def one_line_error(result) -> str:
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    return result.stderr


# -- a damaged catalog segment -------------------------------------------------------------


@pytest.mark.parametrize("damage", [b"garbage\n", b""], ids=["garbage", "empty"])
def test_a_damaged_catalog_segment_is_rebuilt_from_runs(triage, damage):
    first, second = archive(triage, SMALL), archive(triage, OTHER)
    store = open_store()
    segments = sorted((store.root / "index").glob("catalog-*.parquet"))
    for segment in segments:
        segment.write_bytes(damage)
    assert [r["id"] for r in triage.json("ls")] == [second, first]
    assert triage.json("show", "latest")["id"] == second
    rows = triage.json("query", "select id from runs order by archived")
    assert [r["id"] for r in rows] == [first, second]
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert sorted(f["path"] for f in report["errors"]) == sorted(
        s.relative_to(store.root).as_posix() for s in segments)


def test_a_damaged_segment_is_indexed_again_only_once(triage, monkeypatch):
    """`ls` stays a catalog read: after one repair no manifest is opened again."""
    archive(triage, SMALL)
    store = open_store()
    next((store.root / "index").glob("catalog-*.parquet")).write_bytes(b"garbage\n")
    triage("ls")
    opened = []
    original = Runs.read_manifest
    monkeypatch.setattr(Runs, "read_manifest",
                        lambda self, run_id: opened.append(run_id) or original(self, run_id))
    assert len(triage.json("ls")) == 1 and opened == []


def test_a_reader_that_keeps_losing_races_with_merges_still_lists_every_run(triage, monkeypatch):
    """Eight writers merging on a loaded machine can move every segment away between listing
    and reading, again and again (CI saw it): the listing falls back to the manifests."""
    first, second = archive(triage, SMALL), archive(triage, OTHER)
    original = catalog.read_segment
    races = iter(range(3 * catalog.READ_ATTEMPTS))

    def merged_away(path, schema):
        if next(races, None) is None:
            return original(path, schema)
        path.rename(path.with_name(f"{catalog.SEGMENT_PREFIX}{secrets.token_hex(32)}.parquet"))
        raise FileNotFoundError(path)

    monkeypatch.setattr(catalog, "read_segment", merged_away)
    assert [r["id"] for r in triage.json("ls")] == [second, first]


# -- imported runs dedup like archived ones ----------------------------------------------


def test_archiving_an_imported_report_finds_the_imported_run(triage, tmp_path, monkeypatch):
    run_id = archive(triage, SMALL)
    bundle = tmp_path / "b.tar"
    triage("export", run_id, "-o", bundle)
    monkeypatch.setenv("TRIAGE_STORE", str(tmp_path / "colleague"))
    triage("import", bundle)
    again = triage.json("archive", corpus_file(SMALL))
    assert [(r["id"], r["new"]) for r in again] == [(run_id, False)]
    assert [r["id"] for r in triage.json("ls")] == [run_id]
    assert triage.json("verify")["ok"] is True


def test_an_imported_run_archived_with_redact_is_found_only_with_the_same_patterns(
        triage, tmp_path, monkeypatch):
    redacted = archive(triage, SMALL, "--redact", "HOME")
    assert open_store().runs.read_manifest(redacted)["redact_patterns"] == ["HOME"]
    assert "redact_patterns" not in open_store().runs.read_manifest(archive(triage, OTHER))
    bundle = tmp_path / "b.tar"
    triage("export", redacted, "-o", bundle)
    monkeypatch.setenv("TRIAGE_STORE", str(tmp_path / "colleague"))
    triage("import", bundle)
    assert triage.json("archive", corpus_file(SMALL), "--redact", "HOME")[0]["id"] == redacted
    assert triage.json("archive", corpus_file(SMALL))[0]["new"] is True


def test_triage_redact_counts_like_redact(triage, monkeypatch):
    """$TRIAGE_REDACT redacts, so it is part of the run's key and manifest like --redact."""
    monkeypatch.setenv("TRIAGE_REDACT", "HOME,^PATH$")
    redacted = archive(triage, SMALL)
    assert open_store().runs.read_manifest(redacted)["redact_patterns"] == ["HOME", "^PATH$"]
    assert archive(triage, SMALL, "--redact", "HOME") == redacted  # the same patterns
    monkeypatch.delenv("TRIAGE_REDACT")
    assert triage.json("archive", corpus_file(SMALL))[0]["new"] is True


# -- an edited manifest -----------------------------------------------------------------


def tamper(store: Store, run_id: str) -> Path:
    path = store.runs.path(run_id)
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"source":"archive"', b'"source":"EDITED"'))
    return path


def test_an_edited_manifest_is_refused_not_shown(triage):
    first, second = archive(triage, SMALL), archive(triage, OTHER)
    tamper(open_store(), first)
    for command in (["show", first[:10]], ["diff", first[:10], second[:10]]):
        message = one_line_error(triage(*command, expect=1))
        assert first[:12] in message and "does not match its id" in message
        assert "triage verify" in message
    assert triage.json("show", second)["id"] == second


def test_archiving_the_report_again_repairs_an_edited_manifest(triage):
    run_id = archive(triage, SMALL)
    path = tamper(open_store(), run_id)
    again = triage.json("archive", corpus_file(SMALL))[0]
    assert again["id"] == run_id
    assert triage.json("show", run_id)["source"] == "archive"
    assert stat.S_IMODE(path.stat().st_mode) == 0o400  # read-only, and private as its store
    assert triage.json("verify")["ok"] is True


def test_a_run_with_an_edited_manifest_is_not_indexed(triage):
    first, second = archive(triage, SMALL), archive(triage, OTHER)
    store = open_store()
    tamper(store, first)
    for segment in (store.root / "index").glob("catalog-*.parquet"):
        segment.unlink()
    assert [r["id"] for r in triage.json("ls")] == [second]


# -- permissions -------------------------------------------------------------------------


@pytest.fixture
def umask():
    def set_mask(mask: int) -> int:
        os.umask(mask)
        return mask

    previous = os.umask(0o022)
    yield set_mask
    os.umask(previous)


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_mutable_files_follow_the_umask_immutable_ones_are_read_only(triage, umask, mask,
                                                                     monkeypatch):
    """In a team store (TRIAGE_STORE_SHARED=group: 2770), within what its folder grants; a
    private store's files are 0600 and 0400 (tests/test_trust.py)."""
    monkeypatch.setenv("TRIAGE_STORE_SHARED", "group")
    umask(mask)
    run_id = archive(triage, SMALL, "--label", "baseline", "--note", "first try")
    store = open_store()
    mutable = [store.root / "labels" / "baseline", store.annotations.path(run_id),
               store.root / "triage-store.json", *(store.root / "keys").iterdir(),
               *(store.root / "index").glob("catalog-*.parquet")]
    assert len(mutable) == 5
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in mutable} == {
        p.name: 0o666 & ~mask & 0o770 for p in mutable}
    immutable = [store.runs.path(run_id),
                 *(p for p in (store.root / "objects").rglob("*") if p.is_file())]
    assert {stat.S_IMODE(p.stat().st_mode) for p in immutable} == {0o440}


def test_imported_files_follow_the_umask(triage, umask, tmp_path, monkeypatch):
    run_id = archive(triage, SMALL, "--note", "first try")
    bundle = tmp_path / "b.tar"
    triage("export", run_id, "-o", bundle)
    umask(0o022)
    colleague = tmp_path / "colleague"
    monkeypatch.setenv("TRIAGE_STORE", str(colleague))
    monkeypatch.setenv("TRIAGE_STORE_SHARED", "group")  # a team store: 2770
    triage("import", bundle)
    store = open_store()
    mutable = [store.annotations.path(run_id), *(store.root / "keys").iterdir(),
               *(store.root / "index").glob("catalog-*.parquet")]
    assert len(mutable) == 3
    assert {stat.S_IMODE(p.stat().st_mode) for p in mutable} == {0o640}
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o644


def test_a_store_created_meanwhile_is_opened_not_refused(tmp_path, monkeypatch):
    """Writers creating one new (S3) store at once: the marker was not there when this one
    looked, and is by the time it lists the prefix, beside the other writer's lease. That is
    the store being born, not a stranger's folder (4 archivers on a new S3 store lost runs)."""
    root = tmp_path / "store"
    Store.open(root, create=True)
    real = StoreFiles.exists
    monkeypatch.setattr(StoreFiles, "exists",
                        lambda files, key: key != STORE_MARKER and real(files, key))
    assert Store.open(root, create=True).format_version() == STORE_VERSION
