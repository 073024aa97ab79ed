"""The CI kit (`triage ci run`, the action's and the GitLab template's one script), proved
without the network: a real SeaweedFS remote (tests/s3server.py), real nsys captures of
tests/programs/nvtx_steps.c, a fake GITHUB_* environment, and the GitHub API played by a real
HTTP server on 127.0.0.1 that records each call. The JUnit file is checked against Jenkins'
JUnit XSD, the action and the example workflows against their published JSON schemas
(tests/data/README.md names the sources)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from triage.ci.forge import MARKER

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
REPO = "acme/app"


class ForgeStub(ThreadingHTTPServer):
    """A forge's comment endpoints, in memory: list and create at `thread`, update at
    `comments`/ID (GitHub: PATCH, GitLab: PUT); `calls` records each call."""

    def __init__(self, thread: str, comments: str, auth: tuple[str, str]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread, self.comment_path, self.auth = thread, comments, auth
        self.calls: list[tuple[str, str, dict | None]] = []
        self.comments: dict[int, dict] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def serve(self):
        """Serve from a thread; the context's end stops and closes it."""
        import contextlib

        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()

        @contextlib.contextmanager
        def running():
            try:
                yield self
            finally:
                self.shutdown()
                self.server_close()
                thread.join()

        return running()


class _Handler(BaseHTTPRequestHandler):
    server: ForgeStub

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, doc, status: int = 200) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict | None:
        name, value = self.server.auth
        assert self.headers[name] == value, self.headers
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size)) if size else None
        self.server.calls.append((self.command, self.path, body))
        return body

    def do_GET(self):
        self._record()
        assert self.path.startswith(f"/{self.server.thread}?")
        self._answer(list(self.server.comments.values()) if "page=1" in self.path else [])

    def do_POST(self):
        body = self._record()
        assert self.path == f"/{self.server.thread}"
        number = len(self.server.comments) + 100
        self.server.comments[number] = {"id": number, "body": body["body"]}
        self._answer(self.server.comments[number], 201)

    def do_PATCH(self):
        body = self._record()
        number = int(self.path.rsplit("/", 1)[-1])
        assert self.path == f"/{self.server.comment_path}/{number}"
        self.server.comments[number]["body"] = body["body"]
        self._answer(self.server.comments[number])

    do_PUT = do_PATCH


@pytest.fixture
def github(tmp_path, monkeypatch):
    """The stub API and a pull_request event for PR 7, as the runner's variables say."""
    server = ForgeStub(f"repos/{REPO}/issues/7/comments", f"repos/{REPO}/issues/comments",
                       ("Authorization", "Bearer test-token"))
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    summary = tmp_path / "summary.md"
    for name, value in {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": server.url,
                        "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": "test-token",
                        "GITHUB_ACTOR": "octocat", "GITHUB_STEP_SUMMARY": str(summary)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TEST_EVENT", str(event))
    with server.serve():
        yield server


@pytest.fixture
def app(nvtx_program, tmp_path) -> Path:
    """One workload whose forward step takes $FORWARD us (200 by default): the same program
    and arguments whatever it is set to, as a slower commit of one application is."""
    script = tmp_path / "app"
    script.write_text(f"#!/bin/sh\nexec {nvtx_program} 40 ${{FORWARD:-200}} 400\n")
    script.chmod(0o755)
    return script


def kit(triage, tmp_path, app, remote, *args, expect, pr=True):
    """One CI job: `triage ci run` in a fresh runner (a new local store each time), for pull
    request 7 (`pr`) or for a push to main."""
    import os

    with pytest.MonkeyPatch.context() as patch:
        if pr:
            patch.setenv("GITHUB_EVENT_PATH", os.environ["TEST_EVENT"])
        else:
            patch.delenv("GITHUB_EVENT_PATH", raising=False)
        return _job(triage, tmp_path, app, remote, *args, expect=expect)


def _job(triage, tmp_path, app, remote, *args, expect):
    job = tmp_path / f"job{len(list(tmp_path.glob('job*')))}"
    return triage("--store", job / "store", "ci", "run", "--capture",
                  f"capture -- nsys profile --trace=nvtx --sample=none --cpuctxsw=none "
                  f"-o {job}/rep --force-overwrite true {app}",
                  "--remote", remote, "--max-slowdown", "50", "--out", job / "out", *args,
                  expect=expect), job


def test_the_kit_gates_comments_once_and_accepts(triage, s3_store, github, app, tmp_path,
                                                 monkeypatch, nsys_exe):
    import os

    remote = s3_store
    monkeypatch.delenv("TRIAGE_STORE")
    # main's first job: no baseline yet; its run becomes the baseline (label main)
    first, _ = kit(triage, tmp_path, app, remote, expect=0, pr=False)
    assert "no baseline on the remote yet" in first.output and github.calls == []

    # a pull request 4x slower in forward: exit 4, one comment created, JUnit failures. The gate
    # is 50%: preemption on a loaded machine moves a run's median launch far less (a 200 us
    # step gone to 800 us fails; 800 us against 800 us passes), whatever the load
    monkeypatch.setenv("FORWARD", "800")
    slow, job = kit(triage, tmp_path, app, remote, expect=4)
    assert "Gate failed: NVTX range forward" in slow.output
    assert [c[0] for c in github.calls] == ["GET", "POST"]
    (comment,) = github.comments.values()
    assert comment["body"].startswith(MARKER) and "Gate failed" in comment["body"]
    summary = Path(os.environ["GITHUB_STEP_SUMMARY"]).read_text()
    assert "Gate failed" in summary
    junit = (job / "out" / "triage-junit.xml").read_bytes()
    _check_junit(junit)
    assert (job / "out" / "triage-report.html").read_text().startswith("<!DOCTYPE html>")

    # pushed again, the comment is updated in place (never a second one)
    github.calls.clear()
    kit(triage, tmp_path, app, remote, "--comment", "always", expect=4)
    assert [c[0] for c in github.calls] == ["GET", "PATCH"] and len(github.comments) == 1

    # the step is accepted: the next job judges against the accepted run and passes
    mine = tmp_path / "mine"
    triage("--store", mine, "pull", remote, "--label", "pr/7")
    accepted = triage.json("--store", mine, "accept", "pr/7", "--reason", "exact GELU")
    assert accepted["who"] == "octocat" and accepted["label"] == "pr/7"
    triage("--store", mine, "push", remote, "--label", "pr/7")
    github.calls.clear()
    passed, job = kit(triage, tmp_path, app, remote, expect=0)
    assert "accepted by octocat" in passed.output and "exact GELU" in passed.output
    gate = json.loads((job / "out" / "triage-diff.json").read_text())["gate"]
    assert gate["passed"] and gate["accepted"]["reason"] == "exact GELU"
    assert [c[0] for c in github.calls] == ["GET", "PATCH"]
    assert "exact GELU" in next(iter(github.comments.values()))["body"]
    triage("verify", "--store", remote)


def _check_junit(data: bytes) -> None:
    """Valid against Jenkins' JUnit XSD, one testcase per judged time, failures named."""
    import xml.etree.ElementTree as ET

    import xmlschema

    xmlschema.XMLSchema(DATA / "junit-10.xsd").validate(data.decode())
    suite = ET.fromstring(data).find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) >= 3
    failures = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert {"forward", "step"} <= set(failures) and "backward" not in failures
    assert int(suite.get("failures")) == len(failures)
    text = failures["forward"].text
    assert "change: +" in text and "interval: [" in text and "threshold: 50%" in text


@pytest.mark.parametrize("path, schema", [("action.yml", "github-actions.json"),
                                          ("examples/github-workflow.yml",
                                           "github-workflows.json"),
                                          ("examples/gitlab-ci.yml", "gitlab-ci.json")])
def test_the_action_and_examples_obey_their_schemas(path, schema):
    import jsonschema

    document = load_yaml(ROOT / path)
    validator = jsonschema.Draft7Validator(json.loads((DATA / schema).read_text()))
    assert [e.message for e in validator.iter_errors(document)] == []


def test_gitlab_keeps_one_merge_request_note():
    """The GitLab template's side: the MR notes API, created once, then updated with PUT."""
    from triage.ci.forge import forge_of

    thread = "projects/42/merge_requests/9/notes"
    with ForgeStub(thread, thread, ("PRIVATE-TOKEN", "glpat-test")).serve() as server:
        env = {"GITLAB_CI": "true", "CI_API_V4_URL": server.url, "CI_PROJECT_ID": "42",
               "CI_MERGE_REQUEST_IID": "9", "TRIAGE_GITLAB_TOKEN": "glpat-test"}
        forge = forge_of("auto", env)
        assert forge is not None and forge.post("first").action == "created"
        assert forge.post("second").action == "updated"
        assert forge.post("third", update_only=True).action == "updated"
    assert [c[0] for c in server.calls] == ["GET", "POST", "GET", "PUT", "GET", "PUT"]
    (note,) = server.comments.values()
    assert note["body"] == f"{MARKER}\nthird"


def test_no_pull_request_no_comment():
    """A push build (no pull_request in the event) posts nothing, and says so."""
    from triage.ci.forge import forge_of

    forge = forge_of("auto", {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": REPO})
    assert forge is not None and forge.post("body").action == "skipped"


def load_yaml(path: Path) -> dict:
    """A YAML file as GitHub reads it: YAML 1.1 reads the key `on` as True, GitHub as `on`."""
    import yaml

    document = yaml.safe_load(path.read_text())
    if True in document:
        document["on"] = document.pop(True)
    return document


def test_the_schema_check_can_fail():
    """A step with no `shell` in a composite action is refused: the check is not a no-op."""
    import jsonschema

    action = load_yaml(ROOT / "action.yml")
    action["runs"]["steps"][0].pop("shell")
    action["runs"]["using"] = "kompozit"
    validator = jsonschema.Draft7Validator(json.loads((DATA / "github-actions.json").read_text()))
    assert list(validator.iter_errors(action))


def test_a_kill_in_the_middle_leaves_the_remote_whole(triage, s3_store, app, tmp_path,
                                                      monkeypatch, nsys_exe):
    """The kit killed (SIGKILL, its whole process group) as soon as the first file of its push
    lands on the remote: the remote verifies clean, shows no half run, and the next job pushes
    and passes. (Should the push outrun the watcher, the kill lands after it: the same checks
    hold, they just see a finished push.)"""
    import os
    import signal
    import subprocess
    import sys
    import time

    from triage.archive.store import Store

    monkeypatch.delenv("TRIAGE_STORE")
    monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
    remote = Store.open(s3_store, create=True)
    job = tmp_path / "killed"
    command = [sys.executable, "-m", "triage", "--store", str(job / "store"), "ci", "run",
               "--capture", f"capture -- nsys profile --trace=nvtx --sample=none "
               f"--cpuctxsw=none -o {job}/rep --force-overwrite true {app}",
               "--remote", s3_store, "--forge", "none", "--out", str(job / "out")]
    kit_process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    try:
        while kit_process.poll() is None and not remote.files.files("objects"):
            time.sleep(0.02)
    finally:
        if kit_process.poll() is None:
            os.killpg(kit_process.pid, signal.SIGKILL)
        kit_process.wait()
    assert triage.json("verify", "--store", s3_store)["ok"]
    listed = triage.json("ls", "--store", s3_store)
    assert len(listed) <= 1  # the run is there whole, or not at all
    again, _ = kit(triage, tmp_path, app, s3_store, expect=0, pr=False)
    assert triage.json("verify", "--store", s3_store)["ok"]
    assert len(triage.json("ls", "--store", s3_store)) == len(listed) + 1
