"""A team archive on S3 (issue 17 item 6 and its Acceptance), end to end through the CLI against
the real SeaweedFS server: one person pushes local runs to the team's S3 store, a colleague pulls
one into an empty store of their own and diffs it against a run of theirs, and a push with a
wrong key is refused in one line with nothing left behind. docs/usage.md "A team archive" runs these
commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from test_s3_store import OTHER, SMALL, keys

from helpers import corpus_file


@pytest.fixture
def pushed(triage, s3_store, tmp_path):
    """Two corpus runs archived into a local store (one labelled `base`), with the S3 store added
    as its remote `team`, as the team section of docs/usage.md does."""
    mine = tmp_path / "mine"
    first = triage.json("--store", mine, "archive", corpus_file(SMALL), "--label", "base")[0]
    second = triage.json("--store", mine, "archive", corpus_file(OTHER))[0]
    triage("--store", mine, "remote", "add", "team", s3_store)
    return {"root": mine, "url": s3_store, "ids": [first["id"], second["id"]]}


def test_a_push_to_s3_lists_there_and_a_second_push_sends_nothing(triage, pushed, s3_server):
    root, url, ids = pushed["root"], pushed["url"], pushed["ids"]
    first = triage.json("--store", root, "push", "team")
    assert sorted(first["runs_sent"]) == sorted(ids) and first["objects_sent"] > 0
    assert {r["id"] for r in triage.json("--store", url, "ls")} == set(ids)
    assert triage.json("--store", url, "show", "base")["id"] == ids[0]
    before = keys(s3_server, url)
    again = triage.json("--store", root, "push", "team")
    assert (again["objects_sent"], again["bytes_sent"], again["runs_sent"]) == (0, 0, [])
    assert sorted(again["runs_present"]) == sorted(ids)
    assert keys(s3_server, url) == before  # not one key written


def test_a_colleague_pulls_a_run_and_diffs_it_against_their_own(triage, pushed, tmp_path):
    root, url, (base, _other) = pushed["root"], pushed["url"], pushed["ids"]
    triage("--store", root, "push", "team")
    theirs = tmp_path / "colleague"
    triage("--store", theirs, "remote", "add", "team", url)
    pulled = triage.json("--store", theirs, "pull", "team", "--label", "ba*")
    assert pulled["runs_sent"] == [base] and pulled["labels"] == {"base": base}
    own = triage.json("--store", theirs, "archive", corpus_file(OTHER), "--label", "mine")[0]
    assert {r["id"] for r in triage.json("--store", theirs, "ls")} == {own["id"], base}
    assert triage("--store", theirs, "diff", "base", "mine").exit_code == 0  # 0: the diff ran
    for name, run in (("by-label", "base"), ("by-id", base[:12])):  # README: pull team RUN
        other = tmp_path / name
        triage("--store", other, "remote", "add", "team", url)
        assert triage.json("--store", other, "pull", "team", run)["runs_sent"] == [base]
        assert triage.json("--store", other, "verify")["ok"]


def test_a_push_with_a_wrong_key_is_one_line_naming_the_endpoint(triage, pushed, s3_server,
                                                                   monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    refused = triage("--store", pushed["root"], "push", "team", expect=1)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert s3_server.endpoint in lines[0] and "AWS_SECRET_ACCESS_KEY" in lines[0], lines
    assert keys(s3_server, pushed["url"]) == []  # nothing visible remotely, not even the marker
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.env()["AWS_SECRET_ACCESS_KEY"])
    assert sorted(triage.json("--store", pushed["root"], "push", "team")["runs_sent"]) == \
        sorted(pushed["ids"])  # the right key: the same command completes


def test_an_s3_stores_own_remotes_are_one_object_each(triage, s3_store, s3_server, tmp_path):
    """`remote add` on a store in S3 writes remotes/<name> through the store's file layer (one
    PUT each, no file of every remote), and `remote remove` empties it."""
    triage("--store", s3_store, "archive", corpus_file(SMALL))
    for name in ("a", "b"):
        triage("--store", s3_store, "remote", "add", name, tmp_path / name)
    assert [k for k in keys(s3_server, s3_store) if k.startswith("remotes")] == [
        "remotes/a", "remotes/b"]
    triage("--store", s3_store, "remote", "remove", "a")
    assert triage.json("--store", s3_store, "remote", "list") == [
        {"name": "b", "url": str(tmp_path / "b")}]
    assert triage.json("--store", s3_store, "verify")["ok"]


PUSHED = [SMALL, OTHER, "spymaster2h__spyinfer__report.ncu-rep",
          "iamcoleman__monte-carlo-pi__profile.ncu-rep",
          "bwd29__self-join-MiSTIC__nodeCalc_profile.out.ncu-rep",
          "cornflexxx__HomCmprsr__report.ncu-rep"]


def test_a_server_killed_during_a_push_shows_no_partial_run_and_the_push_then_completes(
        triage, private_s3_server, tmp_path, monkeypatch):
    """SIGKILL a private SeaweedFS once the push's first object has landed there (seen by
    listing, not by timing): one line naming the endpoint, exit 1; after a restart on the same
    data and ports no run is visible that is not whole, and the same push completes."""
    server = private_s3_server
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    server.create_bucket("team")
    url = "s3://team/store"
    mine = tmp_path / "mine"
    ids = {triage.json("--store", mine, "archive", corpus_file(name))[0]["id"]
           for name in PUSHED}
    triage("--store", mine, "remote", "add", "team", url)
    push = [sys.executable, "-m", "triage", "--store", str(mine), "push", "team"]
    proc = subprocess.Popen(push, env={**os.environ}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not any(
                k.startswith("objects/") for k in keys(server, url)):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)  # held still while its server dies: no race
        assert proc.poll() is None, "the push finished before the kill: push more runs"
        server.kill()
        os.kill(proc.pid, signal.SIGCONT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if server.process is None:
            server.start()
    lines = err.strip().splitlines()
    assert proc.returncode == 6 and len(lines) == 1, err  # Unreachable: rerun it
    assert server.endpoint in lines[0] and "Traceback" not in err, err
    assert "cannot clean" not in lines[0]  # the failed write's error, not its lease's cleanup
    visible = {r["id"] for r in triage.json("--store", url, "ls")}
    assert visible <= ids and len(visible) < len(ids)
    assert triage.json("--store", url, "verify")["ok"]  # every visible run is whole
    done = subprocess.run(push, env={**os.environ}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {r["id"] for r in triage.json("--store", url, "ls")} == ids
    assert triage.json("--store", url, "verify")["ok"]
