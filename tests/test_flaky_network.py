"""The team store on a bad day (issue 43), through the CLI against the suite's real S3 server
(SeaweedFS on 127.0.0.1) behind a fault-injecting proxy of the tests' own (tests/faultproxy.py):
500s, 503s and connections dropped before or after the server acted, on a seeded fraction of the
requests, so each test meets the same faults every run. Each test ends by reading the store
directly (no proxy): a command that said it succeeded must have left everything there.

The stores are small (two or three runs) to keep the module light; the benchmark
(benchmarks/bench_flaky_network.py) pushes and pulls 20 runs at 0, 10 and 30% and times it.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from contextlib import contextmanager

import pytest
from faultproxy import FaultProxy, SilentServer, draw
from test_s3_store import OTHER, SMALL, keys

from helpers import assert_valid, corpus_file
from triage.base.errors import UsageError

SECRET = "wJalrXUtnFEMI-do-not-print"
THIRD = "2388612861__GPU-DEMO__transpose_ncu_report.ncu-rep"


@pytest.fixture
def team(triage, s3_store, s3_server, archived, tmp_path, monkeypatch):
    """Three runs in a local store whose remote `team` is the S3 store; $TRIAGE_STORE is the
    local one. The S3 server is reached through AWS_ENDPOINT_URL (a proxy, in `flaky`)."""
    local = tmp_path / "local"
    ids = archived((SMALL,), (OTHER,), (THIRD,), into=local)
    monkeypatch.setenv("TRIAGE_STORE", str(local))
    triage("remote", "add", "team", s3_store)
    return {"local": local, "url": s3_store, "ids": ids, "server": s3_server}


@contextmanager
def flaky(monkeypatch, server, rate: float, seed: int = 43, **options):
    """The S3 server behind a fault proxy, for the commands run inside."""
    with FaultProxy(server.endpoint, rate, seed=seed, **options) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        yield proxy
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)


def remote_ids(triage, url: str) -> set[str]:
    return {r["id"] for r in triage.json("--store", url, "ls")}


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def until_done(triage, *args, tries: int):
    """Run a command up to `tries` times, until it exits 0; every failure one line, exit 6
    (the network: run it again). The results, in order."""
    results = []
    for _ in range(tries):
        results.append(triage(*args, "--json", expect=None))
        if results[-1].exit_code == 0:
            return results
        assert results[-1].exit_code == 6, results[-1].output
        one_line(results[-1])
    return results


@pytest.mark.parametrize("rate, runs, tries", [(0.1, 3, 1), (0.3, 2, 3)])
def test_push_and_pull_finish_through_faults(triage, team, monkeypatch, tmp_path, rate, runs,
                                             tries):
    """10%: one command each; 30%: at most three. Whatever a command said, the store read
    directly afterwards holds every run it reported, whole."""
    ids, server = team["ids"][:runs], team["server"]
    with flaky(monkeypatch, server, rate) as proxy:
        pushed = until_done(triage, "push", "team", *ids, tries=tries)
        pulled = until_done(triage, "--store", tmp_path / "theirs", "pull", team["url"],
                            tries=tries)
    assert proxy.counts["failed"] > 0, proxy.counts  # the faults were met
    assert pushed[-1].exit_code == 0 and pulled[-1].exit_code == 0
    assert remote_ids(triage, team["url"]) == set(ids)
    assert triage.json("--store", team["url"], "verify")["verdict"] == "ok"
    assert {r["id"] for r in triage.json("--store", tmp_path / "theirs", "ls")} == set(ids)
    assert triage.json("--store", tmp_path / "theirs", "verify")["ok"]
    done = json.loads(pushed[-1].stdout)
    assert set(done["runs_sent"]) | set(done["runs_present"]) == set(ids)


def test_verify_calls_a_failed_read_unreachable_never_corrupt(triage, team, monkeypatch):
    """Every data read failing, then a third of them (one run verified, to keep it short)."""
    run = team["ids"][0]
    triage("push", "team", run)
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "2")
    monkeypatch.setenv("TRIAGE_S3_RETRY_TIME", "0")
    url, data_reads = team["url"], r"^GET .*/(objects|tables)/"
    with flaky(monkeypatch, team["server"], 1.0, only=data_reads):
        failed = triage("--store", url, "verify", run, expect=6)
    assert "nothing read was damaged; run `triage verify` again" in one_line(failed)
    assert "corrupt" not in failed.stdout and "unreachable" in failed.stdout
    with flaky(monkeypatch, team["server"], 1.0, only=data_reads):
        report = json.loads(triage("--store", url, "verify", run, "--json", expect=6).stdout)
    assert_valid("verify.schema.json", report)
    assert report["verdict"] == "unreachable" and report["errors"]
    assert {e["kind"] for e in report["errors"]} == {"unreachable"}
    with flaky(monkeypatch, team["server"], 0.3, only=data_reads):  # some reads fail
        partly = json.loads(triage("--store", url, "verify", run, "--json", expect=None).stdout)
    assert partly["verdict"] in ("ok", "unreachable")
    assert "corrupt" not in {e["kind"] for e in partly["errors"]}
    # real damage is still damage: an object's bytes replaced in the bucket
    table = next(e for e in report["errors"] if "/tables/" in "/" + e["path"])["path"]
    client = team["server"].client()
    with client.open_output_stream(f"{url.removeprefix('s3://')}/{table}") as sink:
        sink.write(b"not the table")
    damaged = triage("--store", url, "verify", run, expect=1)
    assert f"corrupt    {table}" in damaged.stdout and "--repair" in one_line(damaged)


def test_a_pull_or_export_whose_source_fails_names_the_source(triage, team, monkeypatch,
                                                               tmp_path):
    run = team["ids"][0]
    triage("push", "team", run)
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "2")
    monkeypatch.setenv("TRIAGE_S3_RETRY_TIME", "0")
    with flaky(monkeypatch, team["server"], 1.0, only=r"^GET .*/objects/"):
        pulled = triage("--store", tmp_path / "theirs", "pull", team["url"], expect=6)
        exported = triage("--store", team["url"], "export", run, "-o", tmp_path / "b.tar",
                          expect=6)
    for failed in (pulled, exported):
        line = one_line(failed)
        assert line.startswith(f"triage: error: cannot read store {team['url']} at ")
        assert str(tmp_path) not in line and "run the command again" in line
    assert not (tmp_path / "b.tar").exists()


def test_gc_trashes_an_orphan_whose_delete_reply_was_lost(triage, s3_store, s3_server,
                                                         monkeypatch):
    """gc moves an orphan to its trash (on S3 a copy and a delete). The delete's reply is lost
    after the server acted, and again on the client's own retry, so triage's retry takes over:
    it retries the delete alone, the orphan is removed and no trash is left behind. A retry of
    the whole move copied an orphan that was gone, and gc failed. gc runs with no grace, so
    the trash, a copy dated after gc began, is judged by the orphan's own age."""
    run = triage.json("archive", corpus_file(SMALL))[0]["id"]
    orphan = f"objects/00/{'0' * 62}"
    prefix = s3_store.removeprefix("s3://")
    with s3_server.client().open_output_stream(f"{prefix}/{orphan}") as sink:
        sink.write(b"left by a killed writer")
    drawn = f"DELETE {prefix.partition('/')[2]}/{orphan}"
    seed = next(s for s in range(1000)
                if max(draw(s, drawn, 0), draw(s, drawn, 1)) < 0.5 <= draw(s, drawn, 2))
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "1")
    deadline = time.monotonic() + 60
    with flaky(monkeypatch, s3_server, 0.5, seed=seed, only=rf"^DELETE .*/{orphan}$",
               faults=("drop-after",)) as proxy:
        while True:
            cleaned = triage.json("gc", "--grace", "0")
            if proxy.counts["failed"]:
                break
            # SeaweedFS may leave a just-written object out of a listing for a moment: polled
            assert time.monotonic() < deadline, cleaned
            time.sleep(0.2)
    assert orphan in [r["path"] for r in cleaned["removed"]], json.dumps(cleaned)
    left = keys(s3_server, s3_store)
    assert orphan not in left and not any("gc-" in key for key in left), left
    assert triage.json("verify")["ok"] and [r["id"] for r in triage.json("ls")] == [run]


def test_an_interrupted_push_resumes_without_a_traceback(triage, team, monkeypatch):
    """The manifest writes fail (the objects land); the rerun's landed-object checks fail (the
    path that ended in a traceback); then the push resumes what landed."""
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "1")
    monkeypatch.setenv("TRIAGE_S3_RETRY_TIME", "0")
    run = team["ids"][0]
    server = team["server"]
    with flaky(monkeypatch, server, 1.0, only=r"^PUT .*/runs/",
                faults=("500", "503", "drop-before")):  # not after: it would land
        stopped = triage("push", "team", run, expect=6)
    assert "cannot write store" in one_line(stopped)
    assert remote_ids(triage, team["url"]) == set()
    with flaky(monkeypatch, server, 1.0, only=r"^HEAD .*/(objects|tables)/",
                faults=("drop-before", "drop-after")):
        checked = triage("push", "team", run, expect=6)
    assert "cannot read store" in one_line(checked)
    monkeypatch.delenv("TRIAGE_S3_ATTEMPTS")
    monkeypatch.delenv("TRIAGE_S3_RETRY_TIME")
    with flaky(monkeypatch, server, 0.1):
        resumed = triage("push", "team", run)
    assert "resumed: " in resumed.stdout
    assert triage.json("push", "team", run)["runs_present"] == [run]
    assert remote_ids(triage, team["url"]) == {run}


@pytest.mark.parametrize("args", [
    ["remote", "add", "r", f"s3://AKIAEXAMPLE:{SECRET}@bucket/p"],
    ["remote", "add", "r", f"http://user:{SECRET}@127.0.0.1/store"],
    ["remote", "add", "r", "s3://bucket/p", "--endpoint", f"http://u:{SECRET}@127.0.0.1:9"],
    ["--store", f"s3://AKIAEXAMPLE:{SECRET}@bucket/p", "ls"],
    ["--store", f"http://user:{SECRET}@127.0.0.1/store", "ls"],
    ["push", f"s3://AKIAEXAMPLE:{SECRET}@bucket/p"],
    ["pull", f"s3://AKIAEXAMPLE:{SECRET}@bucket/p"],
])
def test_credentials_in_a_url_are_refused_and_never_printed(triage, store_dir, args):
    triage("remote", "add", "origin", store_dir.parent / "origin")
    result = triage(*args, expect=None)
    assert result.exit_code in (1, 2) and SECRET not in result.output
    assert "AWS_ACCESS_KEY_ID" in one_line(result)
    assert [r["name"] for r in triage.json("remote", "list")] == ["origin"]


def test_userinfo_in_aws_endpoint_url_is_never_printed(triage, s3_store, s3_server,
                                                        monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL",
                       s3_server.endpoint.replace("://", f"://user:{SECRET}@"))
    result = triage("--store", s3_store, "ls", expect=1)
    assert SECRET not in result.output and "AWS_ENDPOINT_URL" in one_line(result)


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """A plain web server's handler (its working directory's files), without its log."""

    def log_message(self, *args) -> None:
        pass


def test_a_server_that_is_not_s3_is_named_so(triage, s3_store, monkeypatch):
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), QuietFiles)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{web.server_address[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        result = triage("--store", s3_store, "ls", expect=1)
    finally:
        web.shutdown()
        web.server_close()
        thread.join()
    line = one_line(result)
    assert f"{endpoint} is not an S3 endpoint" in line and "does not exist" not in line


def test_a_silent_server_is_given_up_on_within_the_timeout(triage, s3_store, monkeypatch):
    """2 tries of 0.5 s and the client's backoff (at most 1 s): the ceiling is wide, for a
    loaded machine; before, a silent server took 11-25 s whatever was asked."""
    silent = SilentServer()
    monkeypatch.setenv("AWS_ENDPOINT_URL", silent.endpoint)
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "2")
    try:
        started = time.monotonic()
        result = triage("--store", s3_store, "verify", "--timeout", "0.5", expect=6)
        took = time.monotonic() - started
    finally:
        silent.stop()
    assert "no answer within the timeout" in one_line(result)
    assert took < 15, took


@pytest.mark.parametrize("setting, message", [
    ("?attempts=0", "attempts='0'; give a number from 1 to 20"),
    ("?timeout=soon", "timeout='soon'"),
    ("?retry_time=-1", "retry_time='-1'"),
])
def test_remote_add_refuses_a_bad_network_setting(triage, store_dir, setting, message):
    result = triage("remote", "add", "team", "s3://bucket/p" + setting, expect=2)
    assert message in one_line(result)


def test_network_settings_are_kept_per_remote(triage, store_dir):
    triage("remote", "add", "team", "s3://bucket/p", "--attempts", "6", "--timeout", "2",
           "--retry-time", "10")
    listed = triage.json("remote", "list")
    assert listed[0]["settings"] == {"attempts": "6", "timeout": "2.0", "retry_time": "10.0"}
    assert_valid("remotes.schema.json", listed)


def test_the_command_wins_over_the_environment_which_wins_over_the_remote(monkeypatch):
    from triage.archive.network import Network, network_chosen, network_for

    remote = {"attempts": "6", "timeout": "2"}
    assert network_for("remote", {}) == Network(4, 3.0, 30.0)  # the defaults README states
    assert network_for("remote", remote) == Network(6, 2.0, 30.0)
    monkeypatch.setenv("TRIAGE_S3_TIMEOUT", "7")
    assert network_for("remote", remote) == Network(6, 7.0, 30.0)
    with network_chosen(timeout=0.5, attempts=None):
        assert network_for("remote", remote) == Network(6, 0.5, 30.0)
    monkeypatch.setenv("TRIAGE_S3_ATTEMPTS", "many")
    with pytest.raises(UsageError, match=r"\$TRIAGE_S3_ATTEMPTS: attempts='many'"):
        network_for("remote", remote)
