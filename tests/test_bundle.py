"""`triage export` / `triage import`: bundles of real corpus runs, and bundles that lie."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import corpus_file, table_file
from triage.archive import bundle
from triage.archive.canonical import canonical_json
from triage.archive.objects import Objects
from triage.archive.run_manifests import manifest_file, manifest_id

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def listing(root: Path) -> dict[str, str]:
    """Every file under a directory with the sha256 of its bytes."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def exported(triage, archived, store_dir, tmp_path):
    """Two runs (one labelled) in a store, exported with labels to bundle.tar."""
    first, second = archived((SMALL, "--label", "baseline"), (OTHER, "--note", "after the fix"))
    out = tmp_path / "bundle.tar"
    triage("export", "baseline", second[:10], "-o", out, "--labels")
    return {"ids": [first, second], "path": out, "source": store_dir}


def use_store(monkeypatch, path: Path) -> Path:
    monkeypatch.setenv("TRIAGE_STORE", str(path))
    return path


def test_bundle_layout(exported):
    with tarfile.open(exported["path"]) as tar:
        names = tar.getnames()
        doc = json.loads(tar.extractfile("bundle.json").read())
        assert all(m.isreg() and m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert names[0] == "bundle.json" and names[-2:] == [f"runs/{i}.json" for i in exported["ids"]]
    assert doc["format"] == "triage-bundle" and doc["version"] == bundle.BUNDLE_VERSION
    assert doc["runs"] == exported["ids"] and doc["labels"] == {"baseline": exported["ids"][0]}
    assert {"created"} <= set(doc)


def test_round_trip_to_a_colleague(triage, exported, tmp_path, monkeypatch):
    before = {i: triage.json("show", i) for i in exported["ids"]}
    use_store(monkeypatch, tmp_path / "colleague")
    added = triage.json("import", exported["path"])
    assert added["runs_added"] == exported["ids"] and added["objects_added"] > 0
    assert added["labels_skipped"] == {"baseline": exported["ids"][0]}
    for run_id in exported["ids"]:
        shown = triage.json("show", run_id)
        assert shown["arrived"] == f"import from {exported['path']}"  # foreign here
        assert shown == {**before[run_id], "labels": [], "arrived": shown["arrived"]}
    assert [r["id"] for r in triage.json("ls")] == exported["ids"][::-1]  # newest first
    assert triage.json("verify")["leftovers"] == [] and triage.json("verify")["ok"]
    rows = triage.json("query", "select count(*) n from kernels")
    assert rows[0]["n"] > 0


def test_import_twice_adds_nothing(triage, exported, tmp_path, monkeypatch):
    store = use_store(monkeypatch, tmp_path / "colleague")
    triage("import", exported["path"])
    before = listing(store)
    again = triage.json("import", exported["path"])
    assert again["runs_added"] == [] and again["objects_added"] == 0
    assert again["runs_present"] == exported["ids"]
    assert listing(store) == before
    # ...and into the store it came from.
    use_store(monkeypatch, exported["source"])
    before = listing(exported["source"])
    assert triage.json("import", exported["path"])["runs_added"] == []
    assert listing(exported["source"]) == before


def test_labels_only_when_asked(triage, exported, tmp_path, monkeypatch):
    use_store(monkeypatch, tmp_path / "colleague")
    out = triage("import", exported["path"]).stdout
    assert "labels not set (pass --labels): baseline" in out
    assert triage.json("import", exported["path"], "--labels")["labels_set"] == {
        "baseline": exported["ids"][0]}
    assert triage.json("show", "baseline")["id"] == exported["ids"][0]


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz"])
def test_gzip_bundle(triage, exported, tmp_path, monkeypatch, suffix):
    out = tmp_path / f"b{suffix}"
    triage("export", exported["ids"][1], "-o", out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    use_store(monkeypatch, tmp_path / "colleague")
    assert triage.json("import", out)["runs_added"] == [exported["ids"][1]]


def test_zstd_bundle(triage, exported, tmp_path, monkeypatch):
    out = tmp_path / "b.tar.zst"
    triage("export", exported["ids"][0], "-o", out)
    assert out.read_bytes()[:4] == bundle.ZSTD_MAGIC
    use_store(monkeypatch, tmp_path / "colleague")
    assert triage.json("import", out)["runs_added"] == [exported["ids"][0]]


def test_zstd_missing_is_a_clear_error(triage, exported, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    out = tmp_path / "b.tar.zst"
    result = triage("export", exported["ids"][0], "-o", out, expect=1)
    assert result.stderr == ("triage: error: .tar.zst bundles need the zstandard module "
                             "(pip install zstandard); or use .tar or .tar.gz\n")
    zst = tmp_path / "fake.tar.zst"
    zst.write_bytes(bundle.ZSTD_MAGIC + b"\0" * 64)
    assert "zstandard" in triage("import", zst, expect=1).stderr
    assert triage("export", exported["ids"][0], "-o", tmp_path / "b.zip", expect=2).stderr


def test_export_refuses_a_damaged_object(triage, exported, tmp_path):
    path = table_file(exported["source"], exported["ids"][0], "kernels")
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    out = tmp_path / "damaged.tar"
    result = triage("export", exported["ids"][0], "-o", out, expect=1)
    assert "does not match its hash" in result.stderr and not out.exists()
    assert not list(tmp_path.glob(".tmp-*"))


# -- bundles that lie --------------------------------------------------------------------------


def members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


def write_tar(path: Path, items: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in items:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


def newer_doc(items):
    info, data = items[0]
    doc = json.loads(data)
    return [regular("bundle.json", json.dumps({**doc, "version": 99}).encode())] + items[1:]


def flip_object(items):
    out = list(items)
    index = next(i for i, (m, _d) in enumerate(out) if m.name.startswith("objects/"))
    info, data = out[index]
    out[index] = regular(info.name, data[:-1] + bytes([data[-1] ^ 1]))
    return out


def flip_manifest(items):
    info, data = items[-1]
    return items[:-1] + [regular(info.name, data.replace(b'"kind":"triage.run"',
                                                          b'"kind":"triage.ruN"'))]


def drop_object(items):
    index = next(i for i, (m, _d) in enumerate(items) if m.name.startswith("objects/"))
    return items[:index] + items[index + 1:]


def rewrite_run(items, manifest=None, notes=None):
    """A hostile bundle made from a real export: the second run's manifest and/or annotations
    replaced by code (`manifest`/`notes` map the parsed document, or return raw bytes). A run id
    stands for its manifest (its identity, sealed), so the manifest is renamed to its new id and
    bundle.json, the annotations and the labels follow it: only the schema can refuse what
    results."""
    doc = json.loads(items[0][1])
    old = doc["runs"][-1]
    data = {m.name: d for m, d in items}
    body = data[f"runs/{old}.json"]
    if manifest is not None:
        body = manifest(json.loads(body))
        body = body if isinstance(body, bytes) else manifest_file(body)[1]
    new = manifest_id(body)
    note = data[f"annotations/{old}.json"]
    if notes is not None:
        note = notes(json.loads(note))
        note = note if isinstance(note, bytes) else canonical_json(note)
    doc["runs"][-1] = new
    doc["labels"] = {k: (new if v == old else v) for k, v in doc.get("labels", {}).items()}
    renamed = {f"runs/{old}.json": (f"runs/{new}.json", body),
               f"annotations/{old}.json": (f"annotations/{new}.json", note),
               "bundle.json": ("bundle.json", canonical_json(doc))}
    return [regular(*renamed[m.name]) if m.name in renamed else (m, d) for m, d in items]


def with_field(path: str, value):
    """A manifest change: set one (dotted; [0] for a list's first item) field."""
    def change(manifest: dict) -> dict:
        *parents, last = path.split(".")
        node = manifest
        for part in parents:
            node = node[0] if part == "[0]" else node[part]
        node[int(last[1:-1]) if last.startswith("[") else last] = value
        return manifest
    return change


def table_is_the_report(manifest: dict) -> dict:
    """kernel_summary pointed at the run's report: hash-valid, in the bundle, not a table."""
    manifest["tables"]["kernel_summary"]["sha256"] = manifest["reports"][0]["sha256"]
    return manifest


def rename_table(name: str):
    """A manifest change: kernel_summary listed under another name (a path, once a traceback)."""
    def change(manifest: dict) -> dict:
        manifest["tables"][name] = manifest["tables"].pop("kernel_summary")
        return manifest
    return change


def duplicate_object(items):
    """An object member again, with other bytes: import used to keep the first silently."""
    index = next(i for i, (m, _d) in enumerate(items) if m.name.startswith("objects/"))
    info, data = items[index]
    return items[:index + 1] + [regular(info.name, data[:-1] + b"\0")] + items[index + 1:]


HOSTILE = {  # hash-valid bundles that used to break import and then every reader of the store
    "notes-string": (lambda i: rewrite_run(i, notes=lambda _n: {"notes": "x"}),
                     "does not match its schema"),
    "notes-number": (lambda i: rewrite_run(i, notes=lambda _n: {"notes": [1]}),
                     "does not match its schema"),
    "archived-number": (lambda i: rewrite_run(i, notes=lambda _n: {"archived": 5}),
                        "(archived: expected string, got integer)"),
    "notes-deep": (lambda i: rewrite_run(i, notes=lambda _n: b"[" * 200_000),
                   "nested more than 64 levels deep"),
    "environment-string": (lambda i: rewrite_run(i, with_field("environment", "x")),
                           "(environment: expected object, got string)"),
    "kernels-string": (lambda i: rewrite_run(i, with_field("kernels", "many")),
                       "(kernels: expected integer, got string)"),
    "kernels-huge": (lambda i: rewrite_run(i, with_field("kernels", 1 << 70)),
                     "(kernels: expected integer, got an integer beyond 64 bits)"),
    "report-name-number": (lambda i: rewrite_run(i, with_field("reports.[0].name", 5)),
                           "(reports[0].name: expected string, got integer)"),
    "version-string": (lambda i: rewrite_run(i, with_field("schema_version", "1")),
                       "(schema_version: must be one of 1, 2, 3, 4)"),
    "kernels-nan": (lambda i: rewrite_run(i, lambda m: canonical_json(m).replace(
        b'"kernels":%d' % m["kernels"], b'"kernels":NaN')), "NaN is not a JSON number"),
    "manifest-deep": (lambda i: rewrite_run(i, lambda _m: b"[" * 200_000),
                      "nested more than 64 levels deep"),
    "table-is-a-report": (lambda i: rewrite_run(i, table_is_the_report),
                          "table kernel_summary of run"),
    "duplicate-object": (duplicate_object, "appears twice"),
    "table-name-dotdot": (lambda i: rewrite_run(i, rename_table("../../x")),
                          "table name '../../x' is not one"),
}

OBJ = "objects/ab/" + "c" * 62
TAMPERED = {
    "dotdot": (lambda items: items[:1] + [regular("objects/../../escaped", b"x")] + items[1:],
               "refusing member"),
    "absolute": (lambda items: items[:1] + [regular("/tmp/triage-escaped", b"x")] + items[1:],
                 "refusing member"),
    "symlink": (lambda items: items[:1] + [special(OBJ, tarfile.SYMTYPE, "/etc/passwd")]
                + items[1:], "not a regular file"),
    "hardlink": (lambda items: items[:1] + [special(OBJ, tarfile.LNKTYPE, "bundle.json")]
                 + items[1:], "not a regular file"),
    "device": (lambda items: items[:1] + [special(OBJ, tarfile.CHRTYPE)] + items[1:],
               "not a regular file"),
    "fifo": (lambda items: items[:1] + [special(OBJ, tarfile.FIFOTYPE)] + items[1:],
             "not a regular file"),
    "directory": (lambda items: items[:1] + [special("objects", tarfile.DIRTYPE)] + items[1:],
                  "not a regular file"),
    "stranger": (lambda items: items[:1] + [regular("labels/baseline", b"f" * 64)] + items[1:],
                 "refusing member"),
    "doc-not-first": (lambda items: items[1:2] + items[:1] + items[2:], "must be the first"),
    "no-doc": (lambda items: items[1:], "must be the first"),
    "newer-version": (newer_doc, "bundle format version 99 is newer than this triage"),
    "object-hash": (flip_object, "does not match its hash"),
    "manifest-hash": (flip_manifest, "does not match its id"),
    "missing-object": (drop_object, "the bundle lacks the"),
    "missing-manifest": (lambda items: items[:-1], "lists 2 runs but the bundle holds 1"),
    **HOSTILE,
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_import_refuses_a_tampered_bundle(triage, exported, tmp_path, monkeypatch, case):
    tamper, message = TAMPERED[case]
    bad = write_tar(tmp_path / f"{case}.tar", tamper(members(exported["path"])))
    store = use_store(monkeypatch, tmp_path / "colleague")  # with a run of its own
    triage.json("archive", corpus_file("Lashi0812__CudaProgramming__simpleAOS.ncu-rep"))
    before = listing(store)
    result = triage("import", bad, expect=1)
    assert message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("triage: error: ")
    assert listing(store) == before, case
    assert not Path("/tmp/triage-escaped").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("case", ["empty", "random", "truncated", "report"])
def test_import_refuses_what_is_not_a_bundle(triage, exported, tmp_path, monkeypatch, case):
    data = exported["path"].read_bytes()
    contents = {"empty": b"", "random": os.urandom(5000), "truncated": data[:len(data) // 2],
                "report": corpus_file(SMALL).read_bytes()}[case]
    bad = tmp_path / f"{case}.tar"
    bad.write_bytes(contents)
    store = use_store(monkeypatch, tmp_path / "colleague")
    triage("import", exported["path"])
    before = listing(store)
    result = triage("import", bad, expect=1)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("triage: error: ")
    assert listing(store) == before
    assert triage("import", tmp_path, expect=1).stderr.endswith("not a regular file; pass a "
                                                                 "bundle from `triage export`\n")


# -- a store is never bricked, never deleted ---------------------------------------------------


def test_readers_survive_bad_records_in_the_store(triage, exported):
    """A store that an older import left with hash-valid but odd manifests and bad notes (as
    issue 15 found them): the other runs still list, show and query; verify names each."""
    store = exported["source"]
    first, second = exported["ids"]
    odd = json.loads((store / "runs" / f"{second}.json").read_bytes())
    odd["kernels"] = "many"
    odd["reports"][0]["sha256"] = 5  # verify must not try to open object "5"
    odd_id, data = manifest_file(odd)
    (store / "runs" / f"{odd_id}.json").write_bytes(data)
    deep = b"[" * 200_000
    deep_id = hashlib.sha256(deep).hexdigest()
    (store / "runs" / f"{deep_id}.json").write_bytes(deep)
    notes = store / "annotations" / f"{second}.json"
    os.chmod(notes, 0o644)
    notes.write_bytes(b'{"notes":"x"}')
    assert [r["id"] for r in triage.json("ls")] == [second, first]
    # the damaged file's fields are dropped; a note is a file of its own (notes/) and stays
    assert [n["text"] for n in triage.json("show", second)["notes"]] == ["after the fix"]
    assert triage.json("query", "select count(*) n from kernels")[0]["n"] > 0
    refused = triage("show", odd_id, expect=1).stderr
    assert "is not a valid manifest (kernels: expected integer, got string)" in refused
    assert refused.count("\n") == 1
    report = triage("verify", "--json", expect=1)
    errors = {e["path"]: e["detail"] for e in json.loads(report.stdout)["errors"]}
    assert set(errors) == {f"runs/{odd_id}.json", f"runs/{deep_id}.json",
                           f"annotations/{second}.json"}
    assert "kernels: expected integer" in errors[f"runs/{odd_id}.json"]


def refused_bundle(exported, tmp_path: Path) -> Path:
    return write_tar(tmp_path / "refused.tar", drop_object(members(exported["path"])))


def test_a_refused_import_never_deletes_a_run_archived_meanwhile(triage, exported, tmp_path,
                                                                 monkeypatch):
    """The store path did not exist; while the import checks its bundle, another process
    archives a report there. Refusing the bundle must leave that run alone (it used to rmtree
    the whole store, 4 times in 4)."""
    store = use_store(monkeypatch, tmp_path / "new-store")
    check_complete = bundle.check_complete

    def archive_meanwhile(*args):
        subprocess.run([sys.executable, "-m", "triage", "archive", str(corpus_file(OTHER))],
                       env={**os.environ, "TRIAGE_STORE": str(store)}, check=True,
                       capture_output=True)
        return check_complete(*args)

    monkeypatch.setattr(bundle, "check_complete", archive_meanwhile)
    assert "the bundle lacks the" in triage("import", refused_bundle(exported, tmp_path),
                                            expect=1).stderr
    assert [r["id"] for r in triage.json("ls")] == [exported["ids"][1]]
    assert triage.json("verify")["ok"] is True


def test_a_refused_import_keeps_the_users_empty_store_folder(triage, exported, tmp_path,
                                                             monkeypatch):
    folder = use_store(monkeypatch, tmp_path / "my-store")
    folder.mkdir()
    triage("import", refused_bundle(exported, tmp_path), expect=1)
    assert folder.is_dir() and not list((folder / "objects").rglob("*"))
    assert triage.json("ls") == []


def test_a_label_clash_is_refused_before_anything_is_written(triage, exported, tmp_path,
                                                             monkeypatch):
    store = use_store(monkeypatch, tmp_path / "colleague")
    triage("archive", corpus_file("Lashi0812__CudaProgramming__simpleAOS.ncu-rep"),
           "--label", "baseline/old")
    before = listing(store)
    result = triage("import", exported["path"], "--labels", expect=2)
    assert result.stderr.endswith("label 'baseline' clashes with label 'baseline/old' (one "
                                  "would be a folder of the other); import without --labels\n")
    assert listing(store) == before


def test_labels_that_clash_inside_one_bundle_are_refused_whole(triage, exported, tmp_path,
                                                               monkeypatch):
    items = members(exported["path"])
    doc = json.loads(items[0][1])
    doc["labels"] = {"team": exported["ids"][0], "team/a": exported["ids"][1]}
    bad = write_tar(tmp_path / "clash.tar", [regular("bundle.json", canonical_json(doc)),
                                             *items[1:]])
    store = use_store(monkeypatch, tmp_path / "colleague")
    triage("archive", corpus_file("Lashi0812__CudaProgramming__simpleAOS.ncu-rep"))
    before = listing(store)
    assert "label 'team' clashes with label 'team/a'" in triage("import", bad, "--labels",
                                                                expect=2).stderr
    assert listing(store) == before


def test_a_clash_never_names_a_temp_file_as_a_label(triage, store_dir):
    run_id = triage.json("archive", corpus_file(SMALL))[0]["id"]
    being_written = store_dir / "labels" / "team" / ".tmp-abc123"  # `label RUN team/x` midway
    being_written.parent.mkdir(parents=True)
    being_written.write_text(run_id + "\n")
    result = triage("label", run_id, "team", expect=2)
    assert "clashes with label 'team' " in result.stderr and ".tmp-" not in result.stderr


def test_a_decompression_bomb_is_refused_before_it_is_written(triage, exported, tmp_path,
                                                              monkeypatch):
    """A real export plus one 100 MiB object of zeros, gzipped to about 100 kB: more than a
    bundle may expand to (100 times its size, at least 64 MiB). It used to be written whole."""
    size = 100 << 20
    digest = hashlib.sha256(bytes(size)).hexdigest()
    items = members(exported["path"])
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=1) as tar:
        for info, data in items[:1]:
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"objects/{digest[:2]}/{digest[2:]}")
        info.size = size
        tar.addfile(info, io.BytesIO(bytes(size)))
        for info, data in items[1:]:
            tar.addfile(info, io.BytesIO(data))
    assert bomb.stat().st_size < 1 << 20
    store = use_store(monkeypatch, tmp_path / "colleague")
    triage("archive", corpus_file("Lashi0812__CudaProgramming__simpleAOS.ncu-rep"))
    before = listing(store)
    written = []
    monkeypatch.setattr(bundle, "stage_object", lambda *a: written.append(a) or 1 / 0)
    result = triage("import", bomb, expect=1)
    assert f"expands past {bundle.EXPANSION_FLOOR:,} bytes at member objects/" in result.stderr
    assert written == [] and listing(store) == before


def test_a_member_longer_than_declared_is_refused():
    capped = bundle._Capped(io.BytesIO(b"x" * 10), Path("b.tar"), "runs/x.json", 4)
    with pytest.raises(bundle.TriageError, match="holds more bytes than its header declares"):
        capped.read()


def test_runs_added_counts_only_what_this_import_added(triage, exported, tmp_path, monkeypatch):
    """Another import of the same bundle finishes while this one publishes its objects: each
    run is added once, by the other one."""
    store = use_store(monkeypatch, tmp_path / "colleague")
    publish, others = Objects.publish, []

    def import_meanwhile(self, staged, key=None):
        if not others:
            others.append(subprocess.run(
                [sys.executable, "-m", "triage", "import", str(exported["path"]), "--json"],
                env={**os.environ, "TRIAGE_STORE": str(store)}, check=True,
                capture_output=True, text=True))
        return publish(self, staged, key)

    monkeypatch.setattr(Objects, "publish", import_meanwhile)
    result = triage.json("import", exported["path"])
    assert json.loads(others[0].stdout)["runs_added"] == exported["ids"]
    assert result["runs_added"] == [] and result["runs_present"] == exported["ids"]
    assert triage.json("verify")["ok"] is True
