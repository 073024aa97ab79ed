"""Each command's --json document obeys its schema in schemas/, on real corpus reports run
through the CLI. The schemas close every shape they can (additionalProperties: false), so a key
added to or dropped from an output without its schema fails here. (`top` and `explain` are
checked on every corpus report they read, in test_top and test_explain.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from helpers import assert_valid, corpus_file

NCU = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER_NCU = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
NSYS = "Lashi0812__CudaProgramming__streamSimple.sqlite"


# -- sharing: remotes, push, pull, import ------------------------------------------------------


@pytest.fixture
def shared(triage, tmp_path) -> dict[str, Path]:
    """A store of two real runs, one labelled, with a remote and a bundle of both."""
    root = tmp_path / "local"
    triage("--store", root, "archive", corpus_file(NCU), "--label", "base")
    triage("--store", root, "archive", corpus_file(OTHER_NCU), "--note", "fixed")
    triage("--store", root, "remote", "add", "origin", tmp_path / "team")
    triage("--store", root, "export", "base", "latest", "-o", tmp_path / "b.tar", "--labels")
    return {"root": root, "team": tmp_path / "team", "bundle": tmp_path / "b.tar"}


def test_remote_list(triage, shared):
    listed = triage.json("--store", shared["root"], "remote", "list")
    assert_valid("remotes.schema.json", listed)
    assert listed == [{"name": "origin", "url": str(shared["team"])}]
    triage("--store", shared["root"], "remote", "remove", "origin")
    assert triage.json("--store", shared["root"], "remote", "list") == []


def test_push_and_pull(triage, shared, tmp_path):
    pushed = triage.json("--store", shared["root"], "push", "origin")
    assert_valid("sync.schema.json", pushed)
    assert len(pushed["runs_sent"]) == 2 and pushed["labels"]["base"] in pushed["runs_sent"]
    again = triage.json("--store", shared["root"], "push", "--label", "base")
    assert_valid("sync.schema.json", again)
    assert again["runs_sent"] == [] and again["objects_sent"] == 0
    pulled = triage.json("--store", tmp_path / "mine", "pull", shared["team"], "--label", "base")
    assert_valid("sync.schema.json", pulled)
    assert pulled["direction"] == "pull" and pulled["remote"] == str(shared["team"])


def test_import(triage, shared, tmp_path):
    first = triage.json("--store", tmp_path / "other", "import", shared["bundle"])
    assert_valid("import.schema.json", first)
    assert len(first["runs_added"]) == 2 and list(first["labels_skipped"]) == ["base"]
    again = triage.json("--store", tmp_path / "other", "import", shared["bundle"], "--labels")
    assert_valid("import.schema.json", again)
    assert again["runs_added"] == [] and list(again["labels_set"]) == ["base"]


# -- filing runs and keeping the store: archive, capture, verify, gc ---------------------------


def test_archive(triage):
    runs = triage.json("archive", corpus_file(NCU), corpus_file(NSYS))
    assert_valid("archive.schema.json", runs)
    assert [(r["tool"], r["new"]) for r in runs] == [("ncu", True), ("nsys", True)]
    again = triage.json("archive", corpus_file(NCU))
    assert_valid("archive.schema.json", again)
    assert again[0]["new"] is False and again[0]["id"] == runs[0]["id"]


def test_capture(triage, nsys_exe, nvtx_program, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = json.loads(triage("capture", "--json", "--", "nsys", "profile", "--trace=nvtx",
                            "--sample=none", "--cpuctxsw=none", "-o", "step", nvtx_program, "2",
                            "10").stdout)
    assert_valid("archive.schema.json", run)
    assert run["tool"] == "nsys" and run["reports"] == ["step.nsys-rep"]


def test_verify_and_gc(triage, store_dir):
    run = triage.json("archive", corpus_file(NCU))[0]
    assert_valid("verify.schema.json", triage.json("verify"))
    assert_valid("verify.schema.json", triage.json("verify", run["id"]))
    orphan, temp = store_dir / "objects" / "ab" / ("c" * 62), store_dir / "objects" / ".tmp-x"
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"no run references it")
    temp.write_bytes(b"")
    old = time.time() - 7200
    for path in (orphan, temp):
        os.utime(path, (old, old))
    manifest = store_dir / "runs" / f"{run['id']}.json"
    manifest.chmod(0o644)
    manifest.write_bytes(manifest.read_bytes().replace(b'"ncu"', b'"nsys"', 1))
    damaged = triage("verify", "--json", expect=1)
    found = json.loads(damaged.stdout)
    assert_valid("verify.schema.json", found)
    assert not found["ok"] and found["errors"] and len(found["leftovers"]) == 2
    dry = triage.json("gc", "--dry-run")
    assert_valid("gc.schema.json", dry)
    assert (dry["files"], dry["kept_recent"]) == (2, 0)
    done = triage.json("gc", "--grace", "0")
    assert_valid("gc.schema.json", done)
    assert not done["dry_run"] and done["removed"] == dry["removed"]


# -- this machine: env -------------------------------------------------------------------------


def test_env(triage, tmp_path, monkeypatch):
    """As this machine is (no GPU), then with an nvidia-smi on PATH that plays back a real
    one's output (tests/data/nvidia-smi): the GPU cannot exist here, its report can."""
    assert_valid("env.schema.json", triage.json("env"))
    data = Path(__file__).parent / "data" / "nvidia-smi" / "a100-sxm4-80gb-535.54.03-mig.xml"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat '{data}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    report = triage.json("env")
    assert_valid("env.schema.json", report)
    assert report["checklist"][0] == {"check": "GPU visible", "ok": True,
                                      "detail": "NVIDIA A100-SXM4-80GB"}
    assert "NVIDIA A100-SXM4-80GB: SM 1275/1410 MHz, persistence False, MIG True" in \
        triage("env").stdout


# -- the demo ----------------------------------------------------------------------------------


def test_demo(triage, tmp_path):
    """The bundled captures: `valid` is a diff document itself; `gate` and `caution` are diff
    documents with their exit codes added."""
    doc = triage.json("demo", "-o", tmp_path / "review.html")
    assert_valid("demo.schema.json", doc)
    for side, code in (("gate", "exit_code"), ("caution", "strict_caution_exit_code")):
        assert_valid("diff.schema.json", {k: v for k, v in doc[side].items() if k != code})


# -- listing and querying runs -----------------------------------------------------------------


def test_ls_and_query(triage):
    """ls --json streams: its schema says what each row is (LIST_COLUMNS, then labels)."""
    from triage.archive.listing import LIST_COLUMNS

    triage("archive", corpus_file(NCU), "--label", "base", "--note", "first")
    triage("archive", corpus_file(NSYS))
    listed = triage.json("ls")
    assert_valid("ls.schema.json", listed)
    assert [list(row) for row in listed] == [[*LIST_COLUMNS, "labels"]] * 2
    rows = triage.json("query", "select id, tool, kernels, gpu_count from runs order by id")
    assert_valid("query.schema.json", rows)
    assert [list(row) for row in rows] == [["id", "tool", "kernels", "gpu_count"]] * 2
