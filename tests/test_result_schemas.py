"""Each command's --json document obeys its schema in schemas/, on real corpus reports run
through the CLI. The schemas close every shape they can (additionalProperties: false), so a key
added to or dropped from an output without its schema fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_valid, corpus_file

NCU = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER_NCU = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


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
