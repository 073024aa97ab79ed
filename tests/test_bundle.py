"""`triage export` / `triage import`: bundles of real corpus runs, and bundles that lie."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import corpus_file
from triage.archive import bundle

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def listing(root: Path) -> dict[str, str]:
    """Every file under a directory with the sha256 of its bytes."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def exported(triage, store_dir, tmp_path):
    """Two runs (one labelled) in a store, exported with labels to bundle.tar."""
    first = triage.json("archive", corpus_file(SMALL), "--label", "baseline")[0]["id"]
    second = triage.json("archive", corpus_file(OTHER), "--note", "after the fix")[0]["id"]
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
        assert shown == {**before[run_id], "labels": []}
    assert [r["id"] for r in triage.json("ls")] == exported["ids"]
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
    manifest = triage.json("show", exported["ids"][0])
    path = exported["source"] / "objects" / manifest["tables"]["kernels"]["sha256"][:2] / \
        manifest["tables"]["kernels"]["sha256"][2:]
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
