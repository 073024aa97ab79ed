"""`triage rerun` on real nsys captures of tests/programs/nvtx_steps.c, made here in a git repo.

The repo's committed run.sh runs 40 steps with forward 800 us; the capture ran a dirty tree whose
edit makes it 200 us (and writes what it sees of $MY_API_TOKEN, a name redaction hides). So a
rerun `--at-commit` that left the stored patch out would measure forward 4x slower, and one that
replayed the redaction marker would be seen doing it.

Why nothing here depends on timing luck: each side has 5 runs (`fewest_per_side()`), and the
outcome calls a time changed only when it is beyond noise (at 99 %, 5 against 5 runs: every run
of one side beyond every run of the other) and by more than --threshold 50 %; a repeat of one
program moves a median by a few percent, a 4x spin by 300 %.

The tests run in file order over one module-scoped repo: the last commits the slow-down.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from conftest import Triage
from helpers import derive_run
from triage.archive.manifest import manifest_schema
from triage.archive.store import Store
from triage.capture.redact import MARKER
from triage.compare.noise import fewest_per_side

RUNS = 5
OPTIONS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none"]
SECRET, USERS = "s3cret-when-captured", "the-users-own-value"


def _script(program: Path, seen: Path, forward: int) -> str:
    return (f'printf %s "${{MY_API_TOKEN-unset}}" > {seen}\n'
            f"exec {program} 40 {forward} 400\n")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout


def _triage(cwd: Path, *args: str, expect: int | None = 0, **env: str | None):
    """`triage ...` run from `cwd` (capture records the working directory it runs in)."""
    before = os.getcwd()
    os.chdir(cwd)
    try:
        return Triage()(*args, expect=expect, env=env)
    finally:
        os.chdir(before)


class Setup:
    def __init__(self, root: Path, program: Path):
        self.root, self.program = root, program
        self.repo, self.store, self.seen = root / "repo", root / "store", root / "seen"
        self.repo.mkdir()
        _git(self.repo, "init", "-q")
        (self.repo / "run.sh").write_text(_script(program, self.seen, 800))
        _git(self.repo, "add", "run.sh")
        _git(self.repo, "commit", "-qm", "forward 800 us")
        (self.repo / "run.sh").write_text(_script(program, self.seen, 200))  # the dirty edit
        for i in range(1, RUNS + 1):  # capture --repeat's labels and group, each run retried
            self.triage("capture", "--label", f"base/{i}", "--group", "base", "--", "nsys",
                        "profile", *OPTIONS, "-o", "out", "--force-overwrite", "true", "sh",
                        "run.sh", MY_API_TOKEN=SECRET)
        self.report = self.repo / "out.nsys-rep"
        self.files = _hashes(self.repo)  # the original's outputs (and the source)

    def triage(self, *args, expect: int = 0, store: Path | None = None, **env):
        """A command run from the repo; one that captures is retried (up to three times) when
        nsys made no report: another nsys session starting on this machine at the same moment
        can do that (seen on the shared VM; tests/test_gate.py retries for the same reason)."""
        for _attempt in range(3):
            result = _triage(self.repo, "--store", store or self.store, *args, expect=None,
                             **env)
            if not (result.exit_code == 1 and "no report was produced" in result.output):
                break
        assert result.exit_code == expect, (args, result.exit_code, result.output)
        return result

    def rerun(self, *args, store: Path | None = None, **env) -> dict:
        env.setdefault("MY_API_TOKEN", USERS)
        return json.loads(self.triage("rerun", *args, "--json", store=store, **env).stdout)

    def manifest(self, run_id: str) -> dict:
        return Store.open(self.store).runs.read_manifest(run_id)

    def assert_original_untouched(self):
        """No file of the original run was overwritten, and the rerun wrote none beside it
        (its outputs went to a fresh directory); run.sh is the test's to change."""
        now = _hashes(self.repo)
        assert {k: v for k, v in now.items() if k != "run.sh"} \
            == {k: v for k, v in self.files.items() if k != "run.sh"}


def _hashes(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder` but git's own: its sha256 and mtime (ns)."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                         p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.parts}


@pytest.fixture(scope="module")
def setup(nvtx_program, nsys_exe, tmp_path_factory) -> Setup:
    assert fewest_per_side() <= RUNS
    return Setup(tmp_path_factory.mktemp("rerun"), nvtx_program)


def _schema_checked(document: dict) -> dict:
    schema = json.loads(resources.files("triage.schemas").joinpath("rerun.schema.json")
                        .read_text("utf-8"))
    jsonschema.validate(document, schema)
    return document


def test_rerun_here_reproduces_and_links_to_the_original(setup):
    out = _schema_checked(setup.rerun("base/1", "--here", "--repeat", RUNS, "--label", "again",
                                      "--threshold", "50"))
    original = Store.open(setup.store).labels.all()["base/1"]
    assert out["rerun_of"] == original and len(out["new_runs"]) == RUNS
    assert len(out["original_runs"]) == RUNS  # base/1 with its --repeat siblings
    for run_id in out["new_runs"]:
        manifest = setup.manifest(run_id)
        jsonschema.validate(manifest, manifest_schema())
        assert manifest["capture"]["rerun_of"] == original
    assert out["tree"]["same_edits"] is True and out["tree"]["mode"] == "here"
    assert out["reproduced"]["outcome"] == "yes", out["reproduced"]
    assert out["line"] == "reproduced: yes — every kernel within noise"
    assert setup.seen.read_text() == USERS  # the user's value, never the marker
    setup.assert_original_untouched()
    shown = setup.triage("show", out["new_runs"][0]).stdout
    assert "rerun of" in shown and original in shown


def test_rerun_at_commit_applies_the_stored_patch(setup):
    built = setup.root / "built"
    out = setup.rerun("base/1", "--at-commit", "--repeat", RUNS, "--threshold", "50",
                      "--build", f"pwd > {built}; git diff --stat >> {built}")
    assert out["tree"]["mode"] == "at_commit"
    where, changed = built.read_text().splitlines()[:2]
    assert "triage-rerun-tree-" in where and "run.sh" in changed  # --build: in the worktree
    assert out["reproduced"]["outcome"] == "yes", out["reproduced"]  # 800 us without the patch
    worktrees = _git(setup.repo, "worktree", "list")
    assert len(worktrees.splitlines()) == 1, worktrees  # the temporary worktree is gone
    setup.assert_original_untouched()


def test_a_redacted_variable_not_set_here_refuses(setup):
    recorded = setup.manifest(Store.open(setup.store).labels.all()["base/1"])
    assert SECRET not in json.dumps(recorded)  # recorded redacted: no value to replay
    assert MARKER in recorded["capture"]["environment"]["MY_API_TOKEN"]
    setup.seen.write_text("before")
    result = setup.triage("rerun", "base/1", expect=1, MY_API_TOKEN=None)
    assert "MY_API_TOKEN" in result.output and len(result.output.strip().splitlines()) == 1
    assert setup.seen.read_text() == "before"  # nothing ran


def _faked(setup: Setup, change, copy: Path) -> str:
    """A copy of the store with base/1's manifest edited by `change` and sealed again by the
    store (a run of its own there, out of base's group: not one of the original side's
    repeats); the store and every report stay as they are."""
    shutil.copytree(setup.store, copy)
    store = Store.open(copy)
    seed = store.labels.all()["base/1"]
    manifest = store.runs.read_manifest(seed)
    manifest["capture"]["group"] = None
    change(manifest)
    return derive_run(store, seed, manifest)


def test_another_profiler_version_predicts_caution(setup, tmp_path):
    copy = tmp_path / "store"
    faked = _faked(setup, lambda m: m.update(tool_version="2021.1.1.1"), copy)
    out = setup.rerun(faked, store=copy)
    assert out["predicted"]["verdict"] == "caution"
    drift = {i["field"]: i for i in out["predicted"]["drift"]}
    assert drift["tool_version"]["state"] == "different"
    assert [i for i in drift.values() if i["severity"] == "caution"] == [drift["tool_version"]]
    text = setup.triage("rerun", faked, store=copy, MY_API_TOKEN=USERS).output
    assert text.index("VERDICT: CAUTION") < text.index("Generated:")  # said before running
    setup.assert_original_untouched()


def _other_gpu(manifest: dict) -> None:
    """Recorded on an H100: by the report and by nvidia-smi at capture time."""
    manifest["environment"]["gpus"] = [{"name": "NVIDIA H100 80GB HBM3"}]
    manifest["capture"]["machine"]["gpu"]["gpus"] = {
        "value": [{"name": "NVIDIA H100 80GB HBM3", "persistence_mode": True}], "reason": None}


def test_strict_refuses_an_invalid_rerun_without_running(setup, tmp_path):
    copy = tmp_path / "store"
    faked = _faked(setup, _other_gpu, copy)
    before = len(Store.open(copy).runs.ids())
    setup.seen.write_text("before")
    result = setup.triage("rerun", faked, "--strict", expect=1, store=copy,
                          MY_API_TOKEN=USERS)
    assert "--strict" in result.output and "gpu.name" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert len(Store.open(copy).runs.ids()) == before
    assert setup.seen.read_text() == "before"


def test_an_invalid_rerun_without_strict_says_not_comparable(setup, tmp_path):
    copy = tmp_path / "store"
    out = setup.rerun(_faked(setup, _other_gpu, copy), store=copy)
    assert out["predicted"]["verdict"] == "invalid" and out["verdict"] == "invalid"
    assert out["reproduced"]["outcome"] == "not_comparable"
    assert out["line"].startswith("not comparable: ") and "gpu.name" in out["line"]


def test_an_archived_report_cannot_be_rerun(setup, tmp_path):
    store = tmp_path / "other"
    _triage(tmp_path, "--store", store, "archive", setup.report)
    result = _triage(tmp_path, "--store", store, "rerun", "latest", expect=2)
    assert "triage archive" in result.output and "no command" in result.output


def test_a_failing_build_stops_the_rerun(setup):
    result = setup.triage("rerun", "base/1", "--build", "exit 3", expect=1,
                          MY_API_TOKEN=USERS)
    assert "--build" in result.output.splitlines()[-1] and "exited 3" in result.output


def test_a_run_from_another_store_is_not_run_unasked(setup, tmp_path):
    """A bundle's command is its sender's choice (issue 44): shown, and run only with --yes."""
    bundle, other = tmp_path / "b.tar", tmp_path / "other"
    setup.triage("export", "base/1", "-o", bundle)
    setup.triage("import", bundle, store=other)
    run_id = Store.open(setup.store).labels.all()["base/1"]
    setup.seen.write_text("before")
    refused = setup.triage("rerun", run_id, expect=1, store=other, MY_API_TOKEN=USERS)
    assert len(refused.output.strip().splitlines()) == 1
    for said in ("arrived by import", "sh run.sh", "MY_API_TOKEN", "--yes"):
        assert said in refused.output, refused.output
    assert setup.seen.read_text() == "before"  # nothing ran
    assert "arrived          by import from" in setup.triage("show", run_id, store=other).stdout
    asked = setup.triage("rerun", run_id, "--yes", "--build", "exit 3", expect=1, store=other,
                         MY_API_TOKEN=USERS)  # past the question: the build runs (and stops it)
    assert "exited 3" in asked.output and setup.seen.read_text() == "before"
    no, said = _answered(setup, other, run_id, "n")  # on a terminal: asked, and no is no
    assert no == 1 and "sh run.sh" in said and "run it?" in said and "exited 3" not in said
    yes, said = _answered(setup, other, run_id, "y")
    assert yes == 1 and "exited 3" in said and setup.seen.read_text() == "before"


def _answered(setup: Setup, store: Path, run_id: str, answer: str) -> tuple[int, str]:
    """`triage rerun RUN --build 'exit 3'` with a terminal on stdin that answers `answer`: the
    exit code and stderr (the question, then the error)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "triage", "--store", str(store), "rerun",
                             run_id, "--build", "exit 3"], stdin=follower,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=setup.repo,
                            env={**os.environ, "MY_API_TOKEN": USERS})
    os.close(follower)
    os.write(leader, answer.encode() + b"\n")
    _out, err = proc.communicate(timeout=300)
    os.close(leader)
    return proc.returncode, err.decode()


def test_a_commit_that_slows_forward_is_named(setup):
    _git(setup.repo, "commit", "-qam", "forward 200 us")  # the edit the capture ran
    (setup.repo / "run.sh").write_text(_script(setup.program, setup.seen, 800))
    _git(setup.repo, "commit", "-qam", "forward 800 us again")
    out = setup.rerun("base/1", "--repeat", RUNS, "--threshold", "50")
    assert out["tree"]["commit"] != out["tree"]["recorded_commit"]
    assert out["reproduced"]["outcome"] == "no"
    assert out["reproduced"]["change"]["name"] == "forward", out["reproduced"]
    assert out["line"].startswith("reproduced: no — forward +")
    setup.assert_original_untouched()


@pytest.mark.parametrize(("argv", "expected"), [
    (["ncu", "--export", "reps/a", "-f", "./app", "-o", "x"],
     ["ncu", "--export", "FRESH/a", "-f", "./app", "-o", "x"]),  # the app's own -o is its own
    (["ncu", "-o", "a%p", "./app"], ["ncu", "-o", "FRESH/a%p", "./app"]),
    (["nsys", "profile", "--output=out/r", "./app"], ["nsys", "profile", "--output=FRESH/r",
                                                       "./app"]),
    (["nsys", "profile", "./app"], ["nsys", "profile", "-o", "FRESH/report%n", "./app"]),
])
def test_every_output_spelling_moves_into_the_fresh_directory(argv, expected):
    from triage.capture.replay import rewrite_outputs

    assert rewrite_outputs(argv, Path("FRESH")) == expected
