"""git_state() on real repositories made in tmp_path with the git command line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triage.capture import git_state as gs
from triage.capture.git_state import git_state, public_url

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository on branch main with one commit of two files."""
    root = tmp_path / "work"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Triage Test")
    git(root, "config", "user.email", "triage@example.invalid")
    git(root, "config", "commit.gpgsign", "false")
    (root / "train.py").write_text("print('step')\n")
    (root / "weights.bin").write_bytes(bytes(range(256)))
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_not_a_repository(tmp_path):
    assert git_state(tmp_path) == {"repository": None, "reason": "not a git repository"}


def test_missing_path(tmp_path):
    missing = tmp_path / "gone"
    assert git_state(missing) == {"repository": None, "reason": f"{missing} does not exist"}


def test_bare_repository(tmp_path):
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    assert git_state(tmp_path / "bare.git") == {"repository": None,
                                                "reason": "bare repository (no working tree)"}


def test_clean_repository(repo):
    state = git_state(repo)
    assert state == {
        "repository": str(repo), "reason": None,
        "commit": git(repo, "rev-parse", "HEAD"), "branch": "main", "detached": False,
        "remote": None, "dirty": False, "diff_sha256": EMPTY_SHA256,
        "untracked_count": 0, "untracked_sha256": EMPTY_SHA256, "untracked_skipped": 0,
        "notes": ["no remote configured"],
    }
    assert len(state["commit"]) == 40
    json.dumps(state)


def test_subdirectory_finds_the_root(repo):
    (repo / "src" / "deep").mkdir(parents=True)
    assert git_state(repo / "src" / "deep")["repository"] == str(repo)


def test_origin_url_loses_credentials(repo):
    git(repo, "remote", "add", "upstream", "git@github.com:someone/else.git")
    git(repo, "remote", "add", "origin", "https://alice:s3cret@github.com/org/repo.git")
    assert git_state(repo)["remote"] == {"name": "origin", "url": "https://github.com/org/repo.git"}


def test_first_remote_when_no_origin(repo):
    git(repo, "remote", "add", "upstream", "git@github.com:org/repo.git")
    assert git_state(repo)["remote"] == {"name": "upstream", "url": "git@github.com:org/repo.git"}


@pytest.mark.parametrize("url, public", [
    ("https://x-access-token:ghs_abc123@github.com/org/repo.git", "https://github.com/org/repo.git"),
    ("https://ghp_abc123@github.com/org/repo", "https://github.com/org/repo"),
    ("https://oauth2:glpat-xyz@gitlab.example.com:8443/g/p.git?private_token=t#frag",
     "https://gitlab.example.com:8443/g/p.git"),
    ("http://github.com/org/repo.git", "http://github.com/org/repo.git"),
    ("ssh://git@host.example:2222/org/repo.git", "ssh://git@host.example:2222/org/repo.git"),
    ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
    ("/srv/git/repo.git", "/srv/git/repo.git"),
])
def test_public_url(url, public):
    assert public_url(url) == public


def test_remote_without_url(repo):
    git(repo, "config", "remote.mirror.fetch", "+refs/heads/*:refs/remotes/mirror/*")
    state = git_state(repo)
    assert state["remote"] is None
    assert "remote mirror has no url" in state["notes"]


def test_dirty_edit_changes_the_diff_hash(repo):
    (repo / "train.py").write_text("print('step 2')\n")
    first = git_state(repo)
    assert first["dirty"] is True
    assert first["diff_sha256"] != EMPTY_SHA256
    assert git_state(repo)["diff_sha256"] == first["diff_sha256"]
    (repo / "train.py").write_text("print('step 3')\n")
    assert git_state(repo)["diff_sha256"] != first["diff_sha256"]


def test_diff_hash_is_the_plain_git_diff(repo):
    """With no user configuration the pinned options produce git's default diff bytes."""
    (repo / "train.py").write_text("print('changed')\n")
    plain = subprocess.run(["git", "-C", str(repo), "diff", "HEAD", "--binary"],
                           capture_output=True, check=True).stdout
    assert git_state(repo)["diff_sha256"] == hashlib.sha256(plain).hexdigest()


def test_staged_change_is_dirty(repo):
    (repo / "new.py").write_text("x = 1\n")
    git(repo, "add", "new.py")
    state = git_state(repo)
    assert state["dirty"] is True and state["untracked_count"] == 0
    assert state["diff_sha256"] != EMPTY_SHA256


def test_binary_edits_hash_differently(repo):
    (repo / "weights.bin").write_bytes(b"\x00\x01\xff" * 100)
    first = git_state(repo)["diff_sha256"]
    (repo / "weights.bin").write_bytes(b"\x00\x02\xff" * 100)
    assert git_state(repo)["diff_sha256"] not in (first, EMPTY_SHA256)


def test_user_diff_configuration_does_not_change_the_hash(repo):
    (repo / "train.py").write_text("print('configured')\n")
    before = git_state(repo)["diff_sha256"]
    for key, value in [("diff.noprefix", "true"), ("diff.mnemonicPrefix", "true"),
                       ("color.diff", "always"), ("diff.context", "7"),
                       ("diff.algorithm", "histogram")]:
        git(repo, "config", key, value)
    assert git_state(repo)["diff_sha256"] == before


def test_untracked_files_are_counted_and_hashed(repo):
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "run.log").write_text("ignored\n")
    (repo / "notes.txt").write_text("a\n")
    (repo / "data").mkdir()
    (repo / "data" / "cfg.yaml").write_text("lr: 1\n")
    first = git_state(repo)
    assert first["untracked_count"] == 3            # .gitignore, notes.txt, data/cfg.yaml
    assert first["dirty"] is False                  # untracked files are reported apart
    assert first["untracked_sha256"] != EMPTY_SHA256
    assert git_state(repo)["untracked_sha256"] == first["untracked_sha256"]
    (repo / "data" / "cfg.yaml").write_text("lr: 2\n")
    assert git_state(repo)["untracked_sha256"] != first["untracked_sha256"]


@pytest.mark.parametrize("argv,written", [
    (["nsys", "profile", "-o", "prof", "./app"], ["prof.nsys-rep", "prof.qdstrm"]),
    (["nsys", "profile", "-o", "out/rank%q{RANK}", "./app"], ["out/rank0.nsys-rep"]),
    (["ncu", "-o", "prof", "./app"], ["prof.ncu-rep"])])
def test_what_the_profiler_writes_is_left_out_of_the_untracked_files(repo, argv, written):
    """A capture reads the state as its profiler starts: the files its output name names (the
    report being written, nsys's .qdstrm) are not the source, and change every run."""
    from triage.capture.outputs import is_output
    from triage.capture.profiler_args import parse_command

    (repo / "notes.txt").write_text("a\n")
    alone = git_state(repo)
    (repo / "out").mkdir()
    for name in [*written, "prof2.nsys-rep"]:
        (repo / name).write_bytes(os.urandom(16))
    state = gs.git_snapshot(repo, is_output(parse_command(argv), repo)).state
    assert state["untracked_count"] == 2  # notes.txt, and prof2.nsys-rep: another name
    (repo / "prof2.nsys-rep").unlink()
    assert gs.git_snapshot(repo, is_output(parse_command(argv), repo)).state == alone


def test_untracked_symlink_is_hashed_by_target(repo):
    (repo / "latest").symlink_to("train.py")
    first = git_state(repo)
    assert first["untracked_count"] == 1
    (repo / "latest").unlink()
    (repo / "latest").symlink_to("weights.bin")
    assert git_state(repo)["untracked_sha256"] != first["untracked_sha256"]


def test_big_untracked_file_is_hashed_by_size_only(repo):
    big = repo / "checkpoint.pt"
    big.write_bytes(b"a" * (gs.UNTRACKED_FILE_LIMIT + 1))
    first = git_state(repo)
    assert first["untracked_skipped"] == 1
    assert any("hashed by path and size only" in note for note in first["notes"])
    big.write_bytes(b"b" * (gs.UNTRACKED_FILE_LIMIT + 1))
    assert git_state(repo)["untracked_sha256"] == first["untracked_sha256"]
    big.write_bytes(b"b" * (gs.UNTRACKED_FILE_LIMIT + 2))
    assert git_state(repo)["untracked_sha256"] != first["untracked_sha256"]


def test_detached_head(repo):
    (repo / "train.py").write_text("print('second')\n")
    git(repo, "commit", "-q", "-am", "second")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    state = git_state(repo)
    assert state["branch"] is None and state["detached"] is True
    assert state["commit"] == git(repo, "rev-parse", "HEAD~0")
    assert "HEAD is detached: branch is None" in state["notes"]


def test_repository_without_commits(tmp_path):
    git(tmp_path, "init", "-q", "-b", "trunk")
    (tmp_path / "a.py").write_text("pass\n")
    state = git_state(tmp_path)
    assert (state["commit"], state["branch"], state["diff_sha256"]) == (None, "trunk", None)
    assert state["untracked_count"] == 1
    assert "no commits yet: commit and diff are None" in state["notes"]


def test_git_not_installed(repo, tmp_path):
    """A real child process whose PATH has no git: GitPython refuses to import."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    code = ("import json; from triage.capture.git_state import git_state; "
            f"print(json.dumps(git_state({str(repo)!r})))")
    env = {"PATH": str(empty), "HOME": str(tmp_path)}
    env.update({k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "SYSTEMROOT")})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)
    state = json.loads(done.stdout)
    assert state["repository"] is None
    assert state["reason"].startswith("git unavailable: ")
