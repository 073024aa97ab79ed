"""`triage verify` and `triage gc` on stores made from real corpus reports."""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from helpers import corpus_file, table_file
from triage.archive import integrity
from triage.archive.files import StoreFiles
from triage.archive.store import Store
from triage.base.timeutil import parse_duration

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
FLIPS_PER_FILE = 12


def archived(triage, name: str = SMALL) -> tuple[Store, str, dict]:
    run = triage.json("archive", corpus_file(name))[0]
    store = Store.open(os.environ["TRIAGE_STORE"])
    return store, run["id"], store.runs.read_manifest(run["id"])


def has(store: Store, sha: str) -> bool:
    return store.files.exists(store.objects.key(sha))


def make_old(path, seconds: float = 7200) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def orphan_object(store: Store, data: bytes = b"left by a crashed archive") -> str:
    sha, _size = store.objects.put_bytes(data)
    make_old(store.objects.path(sha))
    return sha


def test_a_fresh_store_verifies_clean(triage):
    store, run_id, manifest = archived(triage)
    report = triage.json("verify")
    assert report["ok"] is True and report["errors"] == [] and report["leftovers"] == []
    assert report["runs"] == 1
    assert report["objects"] == 1 + len(manifest["tables"])
    assert triage.json("verify", run_id[:8])["scope"] == "runs"


def test_a_missing_table_is_an_error_with_exit_1(triage):
    store, run_id, manifest = archived(triage)
    table_file(store.root, run_id, "metrics").unlink()
    result = triage("verify", "--json", expect=1)
    found = json.loads(result.stdout)["errors"]
    assert [(f["kind"], f["run"]) for f in found] == [("missing", run_id)]
    assert "table metrics" in found[0]["detail"]
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("triage: error: 1 problem")


def test_leftovers_are_reported_but_not_errors(triage):
    store, _run_id, _manifest = archived(triage)
    sha = orphan_object(store)
    (store.root / "objects" / ".tmp-crashed-kernels.parquet").write_bytes(b"PAR1")
    store.annotations.path("0" * 64).write_text("{}")
    report = triage.json("verify")
    assert report["ok"] is True
    kinds = sorted((f["kind"], f["path"]) for f in report["leftovers"])
    assert kinds == [("orphan", f"annotations/{'0' * 64}.json"),
                     ("orphan", f"objects/{sha[:2]}/{sha[2:]}"),
                     ("temp", "objects/.tmp-crashed-kernels.parquet")]


def test_damaged_catalog_segment_and_dangling_pointers_are_errors(triage):
    store, run_id, _manifest = archived(triage)
    segment = next((store.root / "index").glob("catalog-*.parquet"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x01
    segment.write_bytes(bytes(data))
    (store.root / "labels").mkdir()
    (store.root / "labels" / "gone").write_text("f" * 64 + "\n")
    (store.root / "keys" / ("e" * 64)).write_text("half-writ")
    report = json.loads(triage("verify", "--json", expect=1).stdout)
    assert sorted((f["kind"], f["path"].split("/")[0]) for f in report["errors"]) == [
        ("corrupt", "index"), ("dangling", "keys"), ("dangling", "labels")]


def test_a_manifest_that_does_not_hash_to_its_id_is_corrupt(triage):
    store, run_id, manifest = archived(triage)
    path = store.runs.path(run_id)
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"source":"archive"', b'"source":"ARCHIVE"'))
    report = json.loads(triage("verify", run_id, "--json", expect=1).stdout)
    assert [(f["kind"], f["path"]) for f in report["errors"]] == [
        ("corrupt", f"runs/{run_id}.json")]


def stored_files(store: Store, run_id: str, manifest: dict) -> list:
    """Every object, table and the manifest of a run."""
    paths = [store.objects.path(r["sha256"]) for r in manifest["reports"]]
    paths += [store.root / store.tables.key(run_id, name, t["sha256"])
              for name, t in manifest["tables"].items()]
    return paths + [store.runs.path(run_id)]


def test_every_single_byte_flip_is_detected(triage):
    """A sample of positions in every object, table and manifest of two runs, each flipped
    alone: verify must name that file as corrupt."""
    store, first, manifest = archived(triage)
    _store, second, other = archived(triage, OTHER)
    rng = random.Random(1234)
    files = stored_files(store, first, manifest) + stored_files(store, second, other)
    flips = 0
    for path in files:
        size = path.stat().st_size
        positions = {0, size - 1, size // 2} | {rng.randrange(size) for _ in range(FLIPS_PER_FILE)}
        original = path.read_bytes()
        os.chmod(path, 0o644)
        for pos in sorted(positions):
            damaged = bytearray(original)
            damaged[pos] ^= 1 << rng.randrange(8) if pos % 2 else 0xFF
            path.write_bytes(bytes(damaged))
            report = integrity.verify(store)
            rel = path.relative_to(store.root).as_posix()
            found = [(f.kind, f.path) for f in report.errors]
            # A flip inside a manifest's object reference also makes that object "missing".
            assert found[0] == ("corrupt", rel) and all(k == "missing" for k, _ in found[1:]), \
                (rel, pos, found)
            flips += 1
        path.write_bytes(original)
        os.chmod(path, 0o444)
    assert integrity.verify(store).ok and flips >= 10 * len(files)
    print(f"\nbyte flips: {flips} in {len(files)} files, every one detected")


def test_gc_removes_only_old_unreferenced_files(triage):
    store, run_id, manifest = archived(triage)
    triage("label", run_id, "keep")
    old, _size = store.objects.put_bytes(b"old orphan")
    make_old(store.objects.path(old), 45 * 60)
    fresh, _size = store.objects.put_bytes(
        b"fresh orphan: an archive may be writing its manifest now")
    temp = store.root / "objects" / ".tmp-stale"
    temp.write_bytes(b"x" * 100)
    make_old(temp, 45 * 60)
    dry = triage.json("gc", "--dry-run")
    assert dry["removed"] == [] and dry["kept_recent"] == 3  # default grace 1h: none is old
    dry = triage.json("gc", "--dry-run", "--grace", "30m")
    assert sorted(i["path"] for i in dry["removed"]) == sorted(
        [f"objects/{old[:2]}/{old[2:]}", "objects/.tmp-stale"])
    assert dry["bytes"] == len(b"old orphan") + 100 and dry["kept_recent"] == 1
    assert has(store, old) and temp.exists()
    done = triage.json("gc", "--grace", "30m")
    assert done["files"] == 2 and not has(store, old) and not temp.exists()
    assert has(store, fresh)
    triage.json("gc", "--grace", "0")
    assert not has(store, fresh)
    report = triage.json("verify")
    assert report["ok"] and report["leftovers"] == [] and report["runs"] == 1
    assert triage.json("show", "keep")["id"] == run_id


def test_gc_text_output_says_what_and_how_many_bytes(triage):
    store, _run_id, _manifest = archived(triage)
    sha = orphan_object(store, b"12345")
    out = triage("gc", "--dry-run", "--grace", "0").stdout
    assert f"would remove orphan  objects/{sha[:2]}/{sha[2:]}  5 B" in out
    assert "would remove 1 file(s), 5 B" in out
    assert triage("gc", "--grace", "soon", expect=2).stderr.startswith("triage: error: invalid")


def test_gc_refuses_when_a_manifest_is_unreadable(triage):
    store, run_id, manifest = archived(triage)
    path = store.runs.path(run_id)
    os.chmod(path, 0o644)
    path.write_bytes(b"{not json")
    result = triage("gc", "--grace", "0", expect=1)
    assert "gc cannot tell what it references" in result.stderr
    assert (store.root / store.tables.key(run_id, "kernels",
                                         manifest["tables"]["kernels"]["sha256"])).is_file()


def test_gc_puts_back_an_object_an_archive_republished_meanwhile(triage, monkeypatch):
    """The race gc must lose: between its scan and its delete, an archive of the same report
    renames a fresh copy of the orphan into place and then writes the manifest that needs it."""
    store, run_id, manifest = archived(triage)
    sha = orphan_object(store, b"a report whose first archive crashed")
    real_move = StoreFiles.move
    calls = []

    def racing_move(files, src, dst):
        calls.append((src, dst))
        if len(calls) == 1:  # the concurrent archive publishes its copy just before gc's rename
            store.objects.put_bytes(b"a report whose first archive crashed")
        return real_move(files, src, dst)

    monkeypatch.setattr(StoreFiles, "move", racing_move)
    report = integrity.gc(store, grace_seconds=60)
    assert report.restored == 1 and report.removed == () and has(store, sha)


def test_gc_puts_back_an_object_a_new_manifest_references(triage, monkeypatch):
    store, run_id, manifest = archived(triage)
    sha = orphan_object(store, b"table of a run being written")
    real = integrity.referenced_keys
    calls = []

    def with_new_run(st, run_ids):
        calls.append(1)
        refs = real(st, run_ids)
        landed = {store.objects.key(sha)}  # the manifest landed after the scan
        return refs | landed if len(calls) == 2 else refs

    monkeypatch.setattr(integrity, "referenced_keys", with_new_run)
    report = integrity.gc(store, grace_seconds=60)
    assert report.restored == 1 and has(store, sha)


@pytest.mark.parametrize("text,seconds", [("0", 0), ("90", 90), ("90s", 90), ("30m", 1800),
                                          ("1h", 3600), ("2d", 172800), ("1.5h", 5400)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


ANNOTATION_FLIPS = 15


def test_every_flip_in_annotations_is_detected(triage):
    """Annotations change (notes are added), so no run id hashes them: each write seals them
    with the hash of the rest. 15 seeded single-byte flips of a run's annotations with a note,
    then one in every byte: verify must name the file every time (e554ee4 named 4 of 15)."""
    store, run_id, _manifest = archived(triage)
    triage("archive", corpus_file(SMALL), "--note", "baseline, before the fix")
    path = store.annotations.path(run_id)
    original = path.read_bytes()
    rng = random.Random(15)
    positions = rng.sample(range(len(original)), ANNOTATION_FLIPS) + list(range(len(original)))
    named = []
    for pos in positions:
        damaged = bytearray(original)
        damaged[pos] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(damaged))
        found = [(f.kind, f.path) for f in integrity.verify(store).errors]
        named.append(found == [("corrupt", f"annotations/{run_id}.json")])
    path.write_bytes(original)
    assert integrity.verify(store).ok
    assert all(named), [p for p, ok in zip(positions, named, strict=True) if not ok]
    print(f"\nannotation flips named: {sum(named[:ANNOTATION_FLIPS])}/{ANNOTATION_FLIPS} "
          f"sampled, {sum(named[ANNOTATION_FLIPS:])}/{len(original)} one in every byte")


def test_annotations_of_an_older_triage_verify_and_a_note_leaves_them_alone(triage):
    """Without a seal only the schema, the field names and the canonical form can be checked:
    a flip inside a value of such annotations cannot be told from an edit. A note added later
    is a file of its own (notes/), so they are not rewritten."""
    store, run_id, _manifest = archived(triage)
    path = store.annotations.path(run_id)
    doc = json.loads(path.read_bytes())
    unsealed = {k: v for k, v in doc.items() if k != "sha256"}
    path.write_bytes(json.dumps(unsealed, sort_keys=True, separators=(",", ":")).encode())
    assert triage.json("verify")["ok"]
    triage("archive", corpus_file(SMALL), "--note", "seals them")
    assert json.loads(path.read_bytes()) == unsealed and triage.json("verify")["ok"]
    assert [n["text"] for n in triage.json("show", run_id)["notes"]] == ["seals them"]


def test_every_flip_in_the_store_marker_is_refused_or_named(triage):
    """The marker is one fixed document. A flip either makes the store unopenable (one line,
    exit 1) or is one `Store.open` accepts (a key name, so the version reads as 0): verify names
    those."""
    store, _run_id, _manifest = archived(triage)
    marker = store.root / "triage-store.json"
    original = marker.read_bytes()
    rng = random.Random(9)
    named = 0
    for pos in range(len(original)):
        damaged = bytearray(original)
        damaged[pos] ^= 1 << rng.randrange(8)
        marker.write_bytes(bytes(damaged))
        result = triage("verify", "--json", expect=1)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, pos
        if result.stdout:
            errors = json.loads(result.stdout)["errors"]
            assert [(f["kind"], f["path"]) for f in errors] == [("corrupt", "triage-store.json")]
            named += 1
    marker.write_bytes(original)
    assert triage.json("verify")["ok"]
    print(f"\nstore marker flips: {len(original)}/{len(original)} refused or named "
          f"({named} opened and named by verify)")


# -- repair by archiving again (issue 15, item 9) ------------------------------------------------


def test_archiving_again_rewrites_a_lost_table_and_repair_mends_a_flipped_bit(triage):
    """verify's advice works: a run whose table is gone is repaired by archiving its report
    again (a stat per object finds it); a same-size flipped bit needs `archive --repair`."""
    store, run_id, manifest = archived(triage)
    table_file(store.root, run_id, "metrics").unlink()
    result = triage("verify", expect=1)
    assert "archive --repair" in result.stderr
    again = triage.json("archive", corpus_file(SMALL))[0]
    assert (again["id"], again["new"], again["repaired"]) == (run_id, False, True)
    assert triage.json("verify")["ok"] is True
    blob = store.objects.path(manifest["reports"][0]["sha256"])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x10
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(data))
    assert triage.json("archive", corpus_file(SMALL))[0]["repaired"] is False
    assert json.loads(triage("verify", "--json", expect=1).stdout)["ok"] is False
    line = triage("archive", "--repair", corpus_file(SMALL)).stdout
    assert line.rstrip().endswith("(repaired)") and line.startswith(run_id[:12])
    assert triage.json("verify")["ok"] is True
    assert store.runs.ids() == [run_id]


def test_archiving_an_sqlite_export_again_rewrites_its_missing_objects(triage):
    sqlite = corpus_file("mabdullahsoyturk__cardiac-simulation__report1.sqlite")
    first = triage.json("archive", sqlite)[0]
    store = Store.open(os.environ["TRIAGE_STORE"])
    manifest = store.runs.read_manifest(first["id"])
    for name in manifest["tables"]:
        table_file(store.root, first["id"], name).unlink()
    for ref in manifest["reports"]:
        store.objects.path(ref["sha256"]).unlink()
    again = triage.json("archive", sqlite)[0]
    assert (again["id"], again["repaired"]) == (first["id"], True)
    assert triage.json("verify")["ok"] is True
