"""Store format 4 and `triage migrate` (issue 17, items 3 and 4; issue 44, item 5).

Format 1, 2 and 3 stores are made by code from real corpus runs, by the rules of docs/store.md:
in format 3 a run's manifest is version 2 (3 with a derived setting), named by the hash of its
identity less its tables and library versions; in formats 1 and 2 a run's tables are objects
(objects/<sha[:2]>/<sha[2:]>); in format 1 a manifest is version 1 with no seal, named by the
sha256 of its bytes, and keys, labels and annotations name runs by those ids."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from tests.helpers import corpus_file
from triage.archive import catalog
from triage.archive import migrate as migration
from triage.archive.canonical import SEAL, canonical_json, seal_of
from triage.archive.run_manifests import manifest_file
from triage.archive.store import STORE_MARKER, Store

REPORTS = ["LakshyaSingh354__CudaCode__report.ncu-rep",
           "Lashi0812__CudaProgramming__simpleSOA.ncu-rep",
           "0x822a5b87__test-cuda__report1.sqlite"]


def format_3_store(triage, root) -> dict[str, str]:
    """A format 3 store of the REPORTS (label `base` on the first): each run renamed to the id
    its manifest had at version 2 or 3 (its identity less its tables and library versions), its
    tables, annotations, key, label and label history under that id; {report name: run id}."""
    ids = {name: triage.json("--store", root, "archive", corpus_file(name))[0]["id"]
           for name in REPORTS}
    triage("--store", root, "label", "base", ids[REPORTS[0]])
    old_of = {}
    for new in ids.values():
        doc = json.loads((root / "runs" / f"{new}.json").read_bytes())
        doc.pop(SEAL)
        doc["schema_version"] = 3 if "derived" in doc["settings_source"].values() else 2
        old, data = manifest_file(doc)
        old_of[new] = old
        (root / "runs" / f"{old}.json").write_bytes(data)
        (root / "runs" / f"{new}.json").unlink()
        os.replace(root / "annotations" / f"{new}.json", root / "annotations" / f"{old}.json")
        for folder in (root / "tables").glob(f"*/run_id={new}"):
            os.replace(folder, folder.with_name(f"run_id={old}"))
    for path in [*(root / "keys").iterdir(), *(root / "labels").iterdir()]:
        path.write_text(old_of[path.read_text().strip()] + "\n")
    for path in (root / "label-history").rglob("*.move"):
        move = json.loads(path.read_bytes())
        path.write_text(json.dumps({**move, "run": old_of[move["run"]]}))
    shutil.rmtree(root / "index")
    (root / STORE_MARKER).write_bytes(canonical_json({"format": "triage-store", "version": 3}))
    return {name: old_of[run_id] for name, run_id in ids.items()}


def format_2_store(triage, root) -> dict[str, str]:
    """A format 2 store of the REPORTS: a format 3 one with its tables moved from tables/ into
    objects/; {report name: run id}."""
    ids = format_3_store(triage, root)
    for table in sorted((root / "tables").rglob("*.parquet")):
        sha = table.name.removesuffix(".parquet")
        target = root / "objects" / sha[:2] / sha[2:]
        target.parent.mkdir(exist_ok=True)
        os.replace(table, target)
    shutil.rmtree(root / "tables")
    (root / STORE_MARKER).write_bytes(canonical_json({"format": "triage-store", "version": 2}))
    return ids


def format_1_store(triage, root) -> dict[str, str]:
    """A format 1 store of the REPORTS (label `base` on the first); {report name: old id}."""
    ids = format_2_store(triage, root)
    store = Store.open(root, upgrade=True)
    old_of = {}
    for run_id in store.runs.ids():
        doc = json.loads(store.runs.path(run_id).read_bytes())
        doc.pop(SEAL)
        data = canonical_json({**doc, "schema_version": 1})
        old = hashlib.sha256(data).hexdigest()
        old_of[run_id] = old
        store.runs.path(old).write_bytes(data)
        os.chmod(store.runs.path(old), 0o444)
        store.runs.path(run_id).unlink()
        store.annotations.path(run_id).rename(store.annotations.path(old))
    for folder in (store.root / "keys", store.root / "labels"):
        for path in folder.iterdir():
            path.write_text(old_of[path.read_text().strip()] + "\n")
    shutil.rmtree(store.root / "label-history")  # format 1 kept no label history
    (root / STORE_MARKER).write_bytes(canonical_json({"format": "triage-store", "version": 1}))
    return {name: old_of[run_id] for name, run_id in ids.items()}


def files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def check_migrated(triage, root, old: dict[str, str], renamed: bool = True) -> None:
    """Every run reachable by its old id (full and 12-digit prefix), labels kept, verify clean
    with nothing left over, every table under tables/ and no object that is only a table, and
    archiving a report again finds its run."""
    segments = catalog.segments(Store.open(root))  # one marked segment: readers trust it
    assert len(segments) == 1 and catalog.MERGED in pq.ParquetFile(
        root / segments[0]).metadata.metadata
    new = {name: triage.json("--store", root, "show", old_id)["id"] for name, old_id in old.items()}
    assert set(new.values()).isdisjoint(old.values()) == renamed
    assert sorted(r["id"] for r in triage.json("--store", root, "ls")) == sorted(new.values())
    for name, old_id in old.items():
        assert triage.json("--store", root, "show", old_id[:12])["id"] == new[name]
    assert triage.json("--store", root, "show", "base")["id"] == new[REPORTS[0]]
    a, b = old[REPORTS[0]], old[REPORTS[1]]
    assert triage("--store", root, "diff", a, b).exit_code == 0
    checked = triage.json("--store", root, "verify")
    assert checked["ok"] and checked["leftovers"] == [], checked
    tabled = {p.name.removesuffix(".parquet") for p in (root / "tables").rglob("*.parquet")}
    reports = {r["sha256"] for run in new.values()
               for r in triage.json("--store", root, "show", run)["reports"]}
    objects = {p.parent.name + p.name for p in (root / "objects").glob("*/*")}
    assert objects == reports and tabled and not tabled & objects  # tables moved, none lost
    again = triage.json("--store", root, "archive", corpus_file(REPORTS[2]))[0]
    assert (again["id"], again["new"]) == (new[REPORTS[2]], False)


@pytest.mark.parametrize("version", [2, 3])
def test_migrate_gives_a_format_2_or_3_stores_runs_their_ids_now(triage, tmp_path, version):
    """Format 2 and 3 run ids hashed what triage read from the report; format 4's hash the
    report: every run is renamed, its old id an alias, its label moved with it."""
    root = tmp_path / "store"
    old = (format_2_store if version == 2 else format_3_store)(triage, root)
    refused = triage("--store", root, "ls", expect=1).stderr
    assert f"has format version {version}; run `triage migrate` once to upgrade it to 4" \
        in refused, refused
    assert "3 run(s) got new ids" in triage("--store", root, "migrate").stdout
    check_migrated(triage, root, old)
    assert not list((root / "tables").glob("*/run_id=" + old[REPORTS[0]]))  # moved, not copied
    history = Store.open(root).labels.history("base")  # the label's truth: its newest move
    assert history[-1].run_id == triage.json("--store", root, "show", "base")["id"], history


def test_migrate_carries_a_runs_notes_arrival_and_acceptances(triage, tmp_path):
    """What the store keeps beside a run under its id (notes, the record of its arrival from
    another store, `triage accept`) follows the run to its new id, and nothing stays behind
    under the old one (verify reports no orphan)."""
    root = tmp_path / "store"
    old = format_3_store(triage, root)[REPORTS[0]]
    store = Store.open(root, upgrade=True)
    doc = json.loads((root / "annotations" / f"{old}.json").read_bytes())
    doc.pop(SEAL)
    doc["notes"] = [{"time": doc["archived"], "text": "kept in the file, as format 3 did"}]
    (root / "annotations" / f"{old}.json").write_bytes(
        canonical_json({**doc, SEAL: seal_of(doc)}))
    store.annotations.annotate(old, "2026-01-02T00:00:00Z", "a write-once note")
    store.annotations.arrived(old, "pull", "s3://team/store", "2026-01-03T00:00:00Z")
    store.acceptances.add(old, "exact GELU on purpose", "ci")
    triage("--store", root, "migrate")
    shown = triage.json("--store", root, "show", "base")
    assert shown["id"] != old
    assert {n["text"] for n in shown["notes"]} == {"kept in the file, as format 3 did",
                                                   "a write-once note"}
    assert shown["arrived"] == "pull from s3://team/store"
    accepted = Store.open(root).acceptances.of_run(shown["id"])
    assert [a.reason for a in accepted] == ["exact GELU on purpose"]
    checked = triage.json("--store", root, "verify")
    assert checked["ok"] and checked["leftovers"] == [], checked


def test_migrate_keeps_every_run_reachable(triage, tmp_path):
    root = tmp_path / "store"
    old = format_1_store(triage, root)
    before = files(root)
    refused = triage("--store", root, "archive", corpus_file(REPORTS[0]), expect=1).stderr
    assert refused.count("\n") == 1 and "run `triage migrate` once" in refused, refused
    assert "run `triage migrate`" in triage("--store", root, "ls", expect=1).stderr
    assert files(root) == before  # refused before anything was written
    out = triage("--store", root, "migrate").stdout
    assert "3 run(s) got new ids" in out, out
    check_migrated(triage, root, old)
    assert "nothing to do" in triage("--store", root, "migrate").stdout
    fresh = triage.json("--store", tmp_path / "fresh", "archive", corpus_file(REPORTS[1]))[0]
    assert triage.json("--store", root, "show", old[REPORTS[1]])["id"] == fresh["id"]


class Killed(BaseException):
    """A kill: nothing after it runs (BaseException, so no `except Exception` catches it)."""


# (step, which call of it dies): the first marker write, midway through the runs, between keys
# and labels, and with everything done but the catalog and the final marker
KILLS = [("_write", 1), ("_migrate_run", 1), ("_migrate_run", 3), ("_carry_entries", 2),
         ("_drop_entries", 2), ("_repoint", 2),
         ("_copied", 5), ("_rebuild_catalog", 1)]


@pytest.mark.parametrize(("step", "calls"), KILLS)
def test_a_migration_killed_midway_finishes_on_rerun(triage, tmp_path, monkeypatch, step, calls):
    """Killed at the `calls`-th call of each step: the store is refused ("run `triage migrate`
    to finish") or already whole, and migrate run again finishes it."""
    root = tmp_path / "store"
    old = format_1_store(triage, root)
    real, seen = getattr(migration, step), []

    def dies(*args, **kwargs):
        seen.append(step)
        if len(seen) == calls:
            raise Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(migration, step, dies)
    with pytest.raises(Killed):
        triage("--store", root, "migrate")
    monkeypatch.setattr(migration, step, real)
    marker = json.loads((root / STORE_MARKER).read_bytes())
    if marker.get("version") == 4 and "migrating_from" not in marker:
        pytest.fail("a killed migration left a store marked as done")
    stopped = triage("--store", root, "ls", expect=1).stderr
    assert "run `triage migrate`" in stopped, stopped
    triage("--store", root, "migrate")
    check_migrated(triage, root, old)


def test_a_newer_format_is_refused_in_one_line(triage, tmp_path):
    root = tmp_path / "store"
    triage("--store", root, "archive", corpus_file(REPORTS[0]))
    (root / STORE_MARKER).write_bytes(canonical_json({"format": "triage-store", "version": 5}))
    for command in (["ls"], ["migrate"], ["archive", corpus_file(REPORTS[1])]):
        refused = triage("--store", root, *command, expect=1).stderr
        assert refused.count("\n") == 1, refused
        assert "format version 5, newer than this triage (4); upgrade triage" in refused


def _as_written_before(root, columns: list[str]) -> None:
    """Each catalog segment rewritten as triage wrote it before segments carried their version
    (and, with `columns`, before the catalog had those): the columns dropped, no version mark
    (a merged segment keeps its merge marks), renamed by the hash of its new bytes."""
    for path in sorted((root / "index").glob("catalog-*.parquet")):
        source = pq.ParquetFile(path)
        marks = {k: v for k, v in (source.metadata.metadata or {}).items()
                 if k.startswith(b"triage.") and k != catalog.VERSION}
        table = source.read().drop_columns(columns).replace_schema_metadata(marks or None)
        temp = path.with_name("rewritten.tmp")
        pq.write_table(table, temp)
        path.unlink()
        sha = hashlib.sha256(temp.read_bytes()).hexdigest()
        os.replace(temp, path.with_name(f"catalog-{sha}.parquet"))


def test_a_catalog_indexed_before_investigation_is_refused_until_migrate_reindexes_it(
        triage, tmp_path, monkeypatch):
    """`diff inv:NAME` selects runs by the catalog's investigation column: rows an older
    triage indexed read it as null, so a catalog holding them is refused in one line naming
    `triage migrate`, which re-indexes it from the runs; a merge of old rows stays refused."""
    root = tmp_path / "store"
    monkeypatch.setenv("TRIAGE_STORE", str(root))
    monkeypatch.chdir(tmp_path)
    for side in ("a", "b"):
        for i in range(5):
            triage("bench", "--repeat", 1, "--investigation", f"fuse-{side}", "--", "echo", i)
    found = triage.json("diff", "inv:fuse-a", "inv:fuse-b")
    assert [len(found["sides"][s]) for s in "ab"] == [5, 5]
    _as_written_before(root, [])  # unmarked, every column: rows made from manifests
    store = Store.open(str(root))
    assert len(catalog.segments(store)) == 10 and not catalog.stale(store)
    _as_written_before(root, ["investigation", "rerun_of"])
    assert catalog.stale(store)
    catalog.merge(store)  # the old rows merged keep their version
    assert len(catalog.segments(store)) == 1 and catalog.stale(store)
    refused = triage("diff", "inv:fuse-a", "inv:fuse-b", expect=None)
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert refused.output.strip().splitlines() == [
        "triage: error: inv:fuse-a: the catalog holds rows indexed by an older triage, without "
        "the investigation and rerun_of of their runs; run `triage migrate` once to re-index it"]
    assert "re-indexed its catalog" in triage("migrate").output
    assert not catalog.stale(Store.open(str(root)))
    assert triage.json("diff", "inv:fuse-a", "inv:fuse-b")["sides"] == found["sides"]
    assert "nothing to do" in triage("migrate").output
    triage("verify")


def test_a_killed_reindex_is_finished_by_migrate_and_a_merge_never_claims_a_newer_version(
        triage, tmp_path, monkeypatch):
    """A re-index killed after it dropped the old segments leaves none: `migrate` again
    re-indexes (it is not "nothing to do"). A merge by this triage of a segment marked by a
    newer one marks its rows with this triage's version, whose columns it wrote."""
    root = tmp_path / "store"
    monkeypatch.setenv("TRIAGE_STORE", str(root))
    monkeypatch.chdir(tmp_path)
    for i in range(3):
        triage("bench", "--repeat", 1, "--investigation", "fuse", "--", "echo", i)
    _as_written_before(root, ["investigation", "rerun_of"])
    store = Store.open(str(root))
    real = catalog.merge
    monkeypatch.setattr(catalog, "merge", lambda _store: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        triage("migrate")
    monkeypatch.setattr(catalog, "merge", real)
    assert catalog.segments(store) == []
    assert "re-indexed its catalog" in triage("migrate").output
    assert [len(s) for s in triage.json("diff", "inv:fuse", "inv:fuse")["sides"].values()] \
        == [3, 3]
    newer = catalog.CATALOG_VERSION + 1
    for path in (root / "index").glob("catalog-*.parquet"):
        table = pq.read_table(path)
        marks = {**(table.schema.metadata or {}), catalog.VERSION: str(newer).encode()}
        pq.write_table(table.replace_schema_metadata(marks), path)
    assert {catalog.segment_version(store, k) for k in catalog.segments(store)} == {newer}
    catalog.merge(store)
    assert {catalog.segment_version(store, k) for k in catalog.segments(store)} == \
        {catalog.CATALOG_VERSION}
