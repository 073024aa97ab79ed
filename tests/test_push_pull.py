"""`triage remote`, `triage push`, `triage pull` (issue 17 item 6) between local stores of real
corpus runs: incremental by content, resumable after a kill, checked on arrival, labels merged
by their move histories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import corpus_file
from tests.test_progress import on_terminal
from triage.archive.canonical import canonical_json
from triage.archive.run_manifests import run_parts
from triage.archive.store import STORE_MARKER, Store

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def files(root: Path) -> dict[str, bytes]:
    """Every file of a store but its leases (a push takes one there and removes it)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).as_posix().startswith("leases/")}


def object_file(root: Path, sha: str) -> Path:
    return root / "objects" / sha[:2] / sha[2:]


@pytest.fixture
def local(triage, archived, tmp_path):
    """A store of two runs, one labelled `base` and one with a note, and a remote `origin`
    (an empty directory) added to it."""
    root = tmp_path / "local"
    ids = archived((SMALL, "--label", "base"), (OTHER, "--note", "fixed"), into=root)
    triage("--store", root, "remote", "add", "origin", tmp_path / "team")
    return {"root": root, "team": tmp_path / "team", "ids": ids}


def test_remotes_are_kept_in_the_store(triage, local, tmp_path, monkeypatch):
    root = local["root"]
    monkeypatch.chdir(tmp_path)
    triage("--store", root, "remote", "add", "nfs", "shared/store")  # relative: made absolute
    listed = triage.json("--store", root, "remote", "list")
    assert listed == [{"name": "nfs", "url": str(tmp_path / "shared/store")},
                      {"name": "origin", "url": str(local["team"])}]
    assert (root / "remotes" / "nfs").read_text() == listed[0]["url"]  # a file of its own
    assert not (root / "remotes.json").exists()
    triage("--store", root, "remote", "remove", "nfs")
    assert [r["name"] for r in triage.json("--store", root, "remote", "list")] == ["origin"]
    triage("--store", root, "remote", "add", "nfs", "elsewhere")  # a removed name is free again
    assert triage.json("--store", root, "remote", "list")[0] == {
        "name": "nfs", "url": str(tmp_path / "elsewhere")}
    assert triage.json("--store", root, "verify")["ok"]


NAMES = 10
ADDER = """
import subprocess, sys
store, who = sys.argv[1], sys.argv[2]
for i in range(int(sys.argv[3])):
    subprocess.run([sys.executable, "-m", "triage", "--store", store, "remote", "add",
                    f"{who}-{i}", f"{store}-{who}-{i}"], check=True, stdout=subprocess.DEVNULL)
"""


def test_two_processes_adding_remotes_at_once_lose_none(triage, local):
    """Each `remote add` writes only its own name's file: two writers adding ten names each to
    one store keep all twenty, however their writes interleave."""
    root = local["root"]
    adders = [subprocess.Popen([sys.executable, "-c", ADDER, str(root), who, str(NAMES)])
              for who in ("a", "b")]
    assert [a.wait(timeout=600) for a in adders] == [0, 0]
    listed = triage.json("--store", root, "remote", "list")
    expected = {f"{who}-{i}": f"{root}-{who}-{i}" for who in ("a", "b") for i in range(NAMES)}
    assert {r["name"]: r["url"] for r in listed} == {**expected, "origin": str(local["team"])}


def test_an_older_stores_remotes_json_is_still_honoured(triage, local, tmp_path):
    """A store whose remotes an older triage kept in one remotes.json: they are read as they
    are, the file is never rewritten, and a name's own file wins over it."""
    root, team = local["root"], local["team"]
    old = canonical_json({"remotes": {"legacy": str(team), "gone": "/old/place"}})
    (root / "remotes.json").write_bytes(old)
    assert [r["name"] for r in triage.json("--store", root, "remote", "list")] == [
        "gone", "legacy", "origin"]
    assert "exists" in refused(triage, "--store", root, "remote", "add", "legacy", "x", code=2)
    triage("--store", root, "remote", "remove", "gone")
    triage("--store", root, "remote", "add", "new", tmp_path / "new")
    assert {r["name"]: r["url"] for r in triage.json("--store", root, "remote", "list")} == {
        "legacy": str(team), "new": str(tmp_path / "new"), "origin": str(team)}
    assert (root / "remotes.json").read_bytes() == old
    pushed = triage.json("--store", root, "push", "legacy")
    assert sorted(pushed["runs_sent"]) == sorted(local["ids"])


def test_a_second_push_sends_nothing(triage, local):
    root, team = local["root"], local["team"]
    first = triage.json("--store", root, "push")
    assert sorted(first["runs_sent"]) == sorted(local["ids"]) and first["runs_present"] == []
    refs = {part.key for run_id in local["ids"]
            for part in run_parts(run_id, Store.open(root).runs.read_manifest(run_id))}
    assert first["objects_sent"] == len(refs) and first["objects_skipped"] == 0
    assert first["bytes_sent"] == sum((root / key).stat().st_size for key in refs)
    assert first["labels"] == {"base": local["ids"][0]}
    before = files(team)
    again = triage.json("--store", root, "push", "origin")
    assert (again["objects_sent"], again["bytes_sent"], again["runs_sent"]) == (0, 0, [])
    assert sorted(again["runs_present"]) == sorted(local["ids"])
    assert again["objects_skipped"] == len(refs)
    assert files(team) == before  # not one file written, not even a catalog segment


def test_pull_into_an_empty_store_then_diff_and_verify_there(triage, local, tmp_path):
    root, team, (first, second) = local["root"], local["team"], local["ids"]
    triage("--store", root, "push")
    mine = tmp_path / "colleague"
    pulled = triage.json("--store", mine, "pull", str(team))  # a store's path: no remote needed
    assert sorted(pulled["runs_sent"]) == sorted(local["ids"])
    for run_id in local["ids"]:
        shown = triage.json("--store", mine, "show", run_id)
        assert shown["arrived"] == f"pull from {team}"  # foreign there, made here
        assert shown == {**triage.json("--store", root, "show", run_id),
                         "arrived": shown["arrived"]}  # notes, archive time, labels
    assert triage.json("--store", mine, "show", "base")["id"] == first
    assert triage("--store", mine, "diff", first, second).exit_code == 0
    checked = triage.json("--store", mine, "verify")
    assert checked["ok"] and checked["leftovers"] == [] and checked["runs"] == 2
    count = "select count(*) n, sum(duration_ns) t from kernels"
    assert triage.json("--store", mine, "query", count) == \
        triage.json("--store", root, "query", count)
    again = triage.json("--store", mine, "archive", corpus_file(SMALL))[0]
    assert (again["id"], again["new"]) == (first, False)  # the dedup key came along


def test_pull_by_label_glob_brings_those_runs_alone(triage, local, tmp_path):
    triage("--store", local["root"], "push")
    mine = tmp_path / "colleague"
    pulled = triage.json("--store", mine, "pull", str(local["team"]), "--label", "ba*")
    assert pulled["runs_sent"] == [local["ids"][0]] and pulled["labels"] == {
        "base": local["ids"][0]}
    assert [r["id"] for r in triage.json("--store", mine, "ls")] == [local["ids"][0]]


def test_a_push_killed_midway_is_finished_by_a_rerun(triage, local):
    """The push is killed while it waits for the run's last object: its source file is made a
    named pipe that nobody writes, so the kill lands once every other object arrived (watched at
    the destination), whatever the machine's speed."""
    root, team, run_id = local["root"], local["team"], local["ids"][1]
    refs = sorted(p.key for p in run_parts(run_id, Store.open(root).runs.read_manifest(run_id)))
    last = root / refs[-1]  # files go in the order of their keys
    kept = last.read_bytes()
    last.unlink()
    os.mkfifo(last)
    env = {**os.environ, "TRIAGE_STORE": str(root)}
    with subprocess.Popen([sys.executable, "-m", "triage", "push", "origin", run_id], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as pusher:
        deadline = time.monotonic() + 120
        while not all((team / key).is_file() for key in refs[:-1]):
            assert pusher.poll() is None, pusher.stderr.read() if pusher.stderr else ""
            assert time.monotonic() < deadline, "the push never got to its last object"
            time.sleep(0.05)
        pusher.send_signal(signal.SIGKILL)
    assert pusher.returncode == -signal.SIGKILL
    assert triage.json("--store", team, "ls") == []  # nothing partial is visible
    assert triage.json("--store", team, "verify")["ok"]
    last.unlink()
    last.write_bytes(kept)
    finished = triage.json("--store", root, "push", "origin", run_id)
    assert finished["runs_sent"] == [run_id]
    assert (finished["objects_sent"], finished["objects_skipped"]) == (1, len(refs) - 1)
    assert finished["objects_resumed"] == len(refs) - 1  # not read or hashed again (issue 43)
    assert [r["id"] for r in triage.json("--store", team, "ls")] == [run_id]
    assert triage.json("--store", team, "verify")["ok"]


def test_a_damaged_object_at_the_destination_is_named_not_replaced(triage, local):
    """A second run of the same report (other redaction) shares its report object with the
    first: pushed after that object was cut short at the destination, it is refused there (a
    landed object is checked by size; its bytes are `verify`'s to hash)."""
    root, team, first = local["root"], local["team"], local["ids"][0]
    triage("--store", root, "push", "origin", first)
    report = Store.open(root).runs.read_manifest(first)["reports"][0]["sha256"]
    damaged = object_file(team, report)
    os.chmod(damaged, 0o644)
    data = damaged.read_bytes()[:-100]
    damaged.write_bytes(data)
    twin = triage.json("--store", root, "archive", corpus_file(SMALL), "--redact", "NOTHING_")[0]
    assert twin["new"] and report in {r["sha256"] for r in
                                      Store.open(root).runs.read_manifest(twin["id"])["reports"]}
    refused = triage("--store", root, "push", "origin", twin["id"], expect=1)
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert f"object {report[:12]}" in refused.stderr and f"is {len(data)} bytes, not" in \
        refused.stderr
    assert damaged.read_bytes() == data  # left as evidence
    assert twin["id"] not in {r["id"] for r in triage.json("--store", team, "ls")}
    damaged.unlink()  # what the message says to do: the next push sends it again
    done = triage.json("--store", root, "push", "origin", twin["id"])
    assert done["runs_sent"] == [twin["id"]] and done["objects_sent"] >= 1
    assert triage.json("--store", team, "verify")["ok"]


def test_two_pushers_lose_neither_label_move(triage, local, tmp_path):
    """Alice moves `rc` first, Bob later; whoever pushes last, the team store's `rc` is Bob's
    move (newest wins) and its history holds both."""
    alice, team, (first, second) = local["root"], local["team"], local["ids"]
    bob = tmp_path / "bob"
    triage("--store", alice, "push")
    triage("--store", bob, "pull", str(team))
    triage("--store", alice, "label", "rc", first)
    triage("--store", bob, "label", "rc", second)  # later
    triage("--store", bob, "push", str(team))
    triage("--store", alice, "push")  # the older move arrives last
    assert triage.json("--store", team, "show", "rc")["id"] == second
    history = triage("--store", team, "label", "--history", "rc").stdout.splitlines()
    assert len(history) == 2 and history[-1].endswith(second[:12])
    triage("--store", alice, "pull", "origin")
    assert triage.json("--store", alice, "show", "rc")["id"] == second


def test_notes_added_later_are_carried(triage, local):
    root, team, (first, _second) = local["root"], local["team"], local["ids"]
    triage("--store", root, "push")
    triage("--store", root, "archive", corpus_file(SMALL), "--note", "seen on the cluster")
    again = triage.json("--store", root, "push")
    assert again["objects_sent"] == 0
    notes = [n["text"] for n in triage.json("--store", team, "show", first)["notes"]]
    assert notes == ["seen on the cluster"]
    listed = triage.json("--store", team, "ls")
    assert {r["id"]: r["notes"] for r in listed}[first] == "seen on the cluster"


def test_push_on_a_terminal_shows_runs_bytes_and_rate(local, tmp_path):
    code, shown = on_terminal(["--store", local["root"], "push"], tmp_path, local["root"])
    assert code == 0, shown
    assert "pushing to origin (0/2)" in shown and "/s" in shown and " kB" in shown


def format_1(root: Path) -> None:
    """A store marked format 1 (its runs are not: only the refusal is under test)."""
    marker = root / STORE_MARKER
    os.chmod(marker, 0o644)
    marker.write_bytes(canonical_json({"format": "triage-store", "version": 1}))


def refused(triage, *args, code: int = 1) -> str:
    result = triage(*args, expect=code)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_every_bad_input_is_one_line(triage, local, tmp_path):
    root, team = local["root"], local["team"]
    assert "unknown remote 'nowhere'" in refused(triage, "--store", root, "pull", "nowhere")
    lonely = tmp_path / "lonely"
    triage("--store", lonely, "remote", "add", "x", "y")
    triage("--store", lonely, "remote", "remove", "x")
    assert "no remote to push to" in refused(triage, "--store", lonely, "push")
    assert "exists" in refused(triage, "--store", root, "remote", "add", "origin", "x", code=2)
    assert "unknown remote" in refused(triage, "--store", root, "remote", "remove", "nope")
    for bad in ("a b", "a/b", "..", ".", ".tmp-x", "../up", "x" * 65):
        assert "invalid remote name" in refused(triage, "--store", root, "remote", "add", bad,
                                                "x", code=2)
    assert not (root / "remotes" / "a").exists() and not (root.parent / "up").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert "remote " + str(foreign) in refused(triage, "--store", root, "push", str(foreign))
    assert "not a triage store" in refused(triage, "--store", root, "pull", str(foreign))
    assert "run 'nosuch' not found" in refused(triage, "--store", root, "push", "origin",
                                               "nosuch")
    triage("--store", root, "push")
    missing = refused(triage, "--store", tmp_path / "c", "pull", str(team), "cafe1234")
    assert "not found" in missing and f"triage ls --store {team}" in missing
    assert "no label matches" in refused(triage, "--store", root, "push", "--label", "zz*")
    assert "not both" in refused(triage, "--store", root, "push", "origin", "base", "--label",
                                 "b*", code=2)
    format_1(team)
    old = refused(triage, "--store", root, "push")
    assert "format version 1" in old and f"triage migrate --store {team}" in old
    format_1(root)
    assert "triage migrate" in refused(triage, "--store", root, "push")
    assert not (tmp_path / "c" / "runs").exists() or not os.listdir(tmp_path / "c" / "runs")
