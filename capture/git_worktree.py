"""A temporary checkout of a recorded source tree: a git worktree of the commit with the stored
patch applied (`triage rerun --at-commit`), removed afterwards.

A worktree rather than a clone: it shares the repository's objects (no copy of the history) and
leaves the user's own checkout, its branch and its edits alone. The patch is the redacted copy
the store keeps (`capture/git_patch.py`), applied as `triage show --patch` tells a user to.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from triage.base.errors import RerunRefused


@contextlib.contextmanager
def temporary_worktree(repository: str, commit: str, patch: bytes) -> Iterator[Path]:
    """Yield the root of a detached worktree of `commit` in `repository` with `patch` applied
    (b"": none); it is removed on the way out, whatever happened inside."""
    import git

    try:
        repo = git.Repo(repository)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise RerunRefused(f"the recorded repository {repository} is not here: clone it there, "
                           "or rerun --here in a checkout of your own") from None
    place = Path(tempfile.mkdtemp(prefix="triage-rerun-tree-"))
    tree = place / "tree"
    try:
        try:
            repo.git.worktree("add", "--detach", str(tree), commit)
        except git.GitCommandError:
            raise RerunRefused(f"commit {commit[:12]} is not in {repository}: fetch it, or "
                               "rerun --here") from None
        if patch:
            _apply(tree, patch, commit)
        yield tree
    finally:
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("remove", "--force", str(tree))
        with contextlib.suppress(git.GitCommandError):
            repo.git.worktree("prune")
        repo.close()  # ends the git processes GitPython keeps for the repository
        shutil.rmtree(place, ignore_errors=True)


def _apply(tree: Path, patch: bytes, commit: str) -> None:
    """`git apply` the patch in the worktree; a refusal is named by git's first line."""
    done = subprocess.run(["git", "apply", "--binary", "-"], cwd=tree, input=patch,
                          capture_output=True)
    if done.returncode != 0:
        said = (done.stderr.decode(errors="replace").splitlines() or ["no output"])[0]
        raise RerunRefused(f"the stored patch does not apply to commit {commit[:12]}: {said}")
