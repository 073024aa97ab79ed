"""Remotes carry their settings (issue 36, item 5): an s3:// remote's endpoint, region and
credentials source (a profile, or none) are checked at `triage remote add`, shown by `remote
list` (a key never), and used by push and pull, ahead of the AWS_* variables. Against the
suite's real S3 server (SeaweedFS on 127.0.0.1, `s3_server`), with AWS_ENDPOINT_URL pointed at
a loopback port no one serves, so that only the remote's own endpoint can reach the server.
"""

from __future__ import annotations

import json

import pytest

import s3server
from helpers import assert_valid, corpus_file

REPORT = "LakshyaSingh354__CudaCode__report.ncu-rep"


@pytest.fixture
def team(s3_server, s3_store, monkeypatch, tmp_path) -> str:
    """The s3_store's URL, with the environment's endpoint dead and a local store to push."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{s3server.free_port()}")
    monkeypatch.setenv("TRIAGE_STORE", str(tmp_path / "local"))
    return s3_store


@pytest.fixture
def profile_only(monkeypatch, tmp_path) -> str:
    """The server's keys in a profile of a credentials file, and none in the environment."""
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[seaweed]\naws_access_key_id = {s3server.ACCESS_KEY}\n"
                           f"aws_secret_access_key = {s3server.SECRET_KEY}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    return "seaweed"


def push_and_pull(triage, tmp_path, url: str, *options: str) -> None:
    """Push a real run to the remote `team` (added with URL and options), and pull it into
    another store that has the same remote; with no options the URL is given as is."""
    run = triage.json("archive", corpus_file(REPORT))[0]["id"]
    other = tmp_path / "other"
    if options or "?" in url:
        triage("remote", "add", "team", url, *options)
        triage("--store", other, "remote", "add", "team", url, *options)
        url = "team"
    pushed = triage("push", url)
    assert run[:12] in pushed.stdout, pushed.output
    pulled = triage("--store", other, "pull", url)
    assert run[:12] in pulled.stdout, pulled.output


def test_the_endpoint_in_the_url_is_used(triage, team, s3_server, tmp_path):
    push_and_pull(triage, tmp_path, f"{team}?endpoint_override={s3_server.endpoint}")


def test_endpoint_region_and_profile_as_options(triage, team, s3_server, profile_only,
                                                tmp_path):
    push_and_pull(triage, tmp_path, team, "--endpoint", s3_server.endpoint, "--region",
                  "us-east-1", "--profile", profile_only)
    listed = triage.json("remote", "list")
    assert listed[0]["settings"] == {"endpoint": s3_server.endpoint, "region": "us-east-1",
                                     "profile": "seaweed"}
    text = triage("remote", "list").stdout
    assert f"endpoint={s3_server.endpoint}" in text and "profile=seaweed" in text


def test_a_store_url_on_the_command_line_carries_its_settings(triage, team, s3_server,
                                                              profile_only, tmp_path):
    url = f"{team}?endpoint={s3_server.endpoint}&profile={profile_only}"
    run = triage.json("archive", corpus_file(REPORT))[0]["id"]
    assert run[:12] in triage("push", url).stdout
    assert run[:12] in triage("--store", tmp_path / "other", "pull", url).stdout


def test_anonymous_sends_no_keys(triage, team, s3_server, tmp_path):
    """The server of the suite takes signed requests only: anonymous ones are refused, which
    shows the remote's credentials source is the one used (not the environment's keys)."""
    triage("remote", "add", "team", f"{team}?endpoint={s3_server.endpoint}", "--anonymous")
    assert triage.json("remote", "list")[0]["settings"]["credentials"] == "anonymous"
    triage("archive", corpus_file(REPORT))
    result = triage("push", "team", expect=1)
    assert result.stderr.startswith("triage: error: ") and "Traceback" not in result.stderr


@pytest.mark.parametrize("url, message", [
    ("?endpont=http://127.0.0.1:1", "unknown setting 'endpont'"),
    ("?endpoint=ftp://127.0.0.1", "is not a server's address"),
    ("?endpoint=http://127.0.0.1:1/bucket", "is not a server's address"),
    ("?region=not%20a%20region", "is not a region name"),
    ("?credentials=instance", "give one of environment, anonymous"),
    ("?profile=nobody-has-this", "no profile 'nobody-has-this'"),
    ("?region=us-east-1&region=eu-west-1", "region given twice"),
    ("?profile=a&credentials=anonymous", "give one"),
])
def test_remote_add_refuses_a_setting_it_cannot_use(triage, team, url, message):
    result = triage("remote", "add", "team", team + url, expect=2)
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert triage.json("remote", "list") == []


def test_remote_add_refuses_settings_for_a_directory(triage, store_dir, tmp_path):
    result = triage("remote", "add", "team", tmp_path / "other", "--region", "us-east-1",
                    expect=2)
    assert "a directory takes none" in result.stderr


SECRET = "wJalrXUtnFEMI-do-not-print"


@pytest.mark.parametrize("url", [f"s3://bucket/p?secret_key={SECRET}",
                                 f"s3://AKIAEXAMPLE:{SECRET}@bucket/p",
                                 f"s3://bucket/p?aws_session_token={SECRET}"])
def test_a_key_in_the_url_is_refused_and_never_printed(triage, store_dir, url):
    result = triage("remote", "add", "team", url, expect=2)
    assert SECRET not in result.output and "profile" in result.stderr
    assert triage.json("remote", "list") == []


def test_a_key_an_older_store_kept_is_masked_in_every_listing(triage, store_dir):
    triage("remote", "add", "team", "s3://bucket/p")
    (store_dir / "remotes" / "team").write_text(f"s3://bucket/p?secret_key={SECRET}")
    for args in (["remote", "list"], ["remote", "list", "--json"],
                 ["remote", "remove", "team"]):
        result = triage(*args)
        assert SECRET not in result.output, args
    assert "***" in result.stdout


def test_list_json_matches_its_schema(triage, store_dir, s3_server):
    triage("remote", "add", "team", f"s3://b/p?endpoint={s3_server.endpoint}&region=us-east-1")
    listed = json.loads(triage("remote", "list", "--json").stdout)
    assert listed == [{"name": "team",
                       "url": f"s3://b/p?endpoint={s3_server.endpoint}&region=us-east-1",
                       "settings": {"endpoint": s3_server.endpoint, "region": "us-east-1"}}]
    assert_valid("remotes.schema.json", listed)
