"""The source state a profiled workload ran from: git facts about its working directory.

Two runs are only comparable as "same code" when their commit, local edits and untracked files
match, so the state records hashes of all three rather than trusting a branch name. Like the
machine facts, nothing here raises for a missing tool or an odd repository:

    {"repository": None, "reason": "not a git repository"}

and otherwise

    {"repository": "/abs/root", "reason": None,
     "commit": "<full sha>" | None,        # None before the first commit
     "branch": "main" | None,              # None when HEAD is detached
     "detached": bool,
     "remote": {"name": "origin", "url": "https://host/org/repo.git"} | None,
     "dirty": bool,                        # tracked files differ from HEAD (index or worktree)
     "diff_sha256": "<hex>" | None,        # of `git diff HEAD --binary`, pinned options
     "untracked_count": int,               # not ignored by .gitignore, nor left out
                                           # (a capture's reports: `git_snapshot`)
     "untracked_sha256": "<hex>",          # over sorted paths and their contents
     "untracked_skipped": int,             # hashed by path and size only (too big)
     "notes": ["why a field is None, or what was bounded"]}

`git_snapshot` returns that state with the patch itself (the bytes `diff_sha256` hashes), for the
archive to keep redacted (`capture/git_patch.py`); the patch never enters the state. Untracked
files are in neither the hash nor the patch (`git diff HEAD` compares tracked files), and the
notes say so whenever there are some.

The remote is `origin`, else the first remote; credentials and query strings are removed from
http(s) URLs, while ssh and scp-style URLs (git@host:org/repo) name an account, not a secret.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

UNTRACKED_FILE_LIMIT = 1 << 20          # bytes read per untracked file
UNTRACKED_TOTAL_LIMIT = 64 << 20        # bytes read over all untracked files
# Options that user configuration could otherwise change (prefixes, colour, external or textconv
# drivers, rename detection, algorithm, context), so one tree hashes the same on every machine.
DIFF_ARGS = ("-c", "core.quotePath=true", "diff", "HEAD", "--binary", "--no-color",
             "--no-ext-diff", "--no-textconv", "--no-renames", "--src-prefix=a/",
             "--dst-prefix=b/", "--unified=3", "--inter-hunk-context=0",
             "--diff-algorithm=myers", "--indent-heuristic", f"-O{os.devnull}")


@dataclass(frozen=True)
class GitSnapshot:
    """The recorded state and the patch it hashes: `git diff HEAD` with DIFF_ARGS, unredacted
    (b"" for a clean tree; None outside a repository or before the first commit). Kept apart
    so that the state can be recorded as it is while the patch is redacted before it is kept."""

    state: dict
    patch: bytes | None = None


def git_state(path: str | Path) -> dict:
    """Git facts for the repository containing `path` (a workload's working directory)."""
    return git_snapshot(path).state


def git_snapshot(path: str | Path,
                 leave_out: Callable[[Path], bool] = lambda _path: False) -> GitSnapshot:
    """The git state of `path` and its patch, from one `git diff` (the hash is of these bytes).
    Untracked files `leave_out` names (by absolute path) are not counted or hashed: a capture
    reads the state as its profiler starts and leaves out the reports it is writing."""
    try:
        import git
    except ImportError as error:
        return _none(f"git unavailable: {_first_line(str(error))}")
    if not Path(path).exists():
        return _none(f"{path} does not exist")
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return _none("not a git repository")
    with repo:  # closing it ends the `git cat-file` processes GitPython keeps for it
        if repo.bare or repo.working_tree_dir is None:
            return _none("bare repository (no working tree)")
        try:
            return _describe(repo, leave_out)
        except git.GitError as error:
            return _none(f"git failed: {_first_line(getattr(error, 'stderr', '') or str(error))}")


def _none(reason: str) -> GitSnapshot:
    return GitSnapshot({"repository": None, "reason": reason})


def _first_line(text: str) -> str:
    return next((line.strip(" '\"") for line in str(text).splitlines() if line.strip()), "")


def _describe(repo, leave_out: Callable[[Path], bool]) -> GitSnapshot:
    notes: list[str] = []
    has_commit = repo.head.is_valid()
    if not has_commit:
        notes.append("no commits yet: commit and diff are None")
    detached = repo.head.is_detached
    if detached:
        notes.append("HEAD is detached: branch is None")
    root = Path(repo.working_tree_dir)
    untracked = _untracked_digest(root, [p for p in repo.untracked_files
                                         if not leave_out(root / p)], notes)
    if untracked["untracked_count"]:
        notes.append(f"{untracked['untracked_count']} untracked file(s) are not in the diff or "
                     "its patch (`git diff HEAD` covers tracked files); untracked_sha256 covers "
                     "them")
    patch = _diff(repo) if has_commit else None
    return GitSnapshot({"repository": str(repo.working_tree_dir), "reason": None,
                        "commit": repo.head.commit.hexsha if has_commit else None,
                        "branch": None if detached else repo.active_branch.name,
                        "detached": detached,
                        "remote": _remote(repo, notes),
                        "dirty": repo.is_dirty(index=True, working_tree=True,
                                               untracked_files=False),
                        "diff_sha256": None if patch is None else hashlib.sha256(patch).hexdigest(),
                        **untracked, "notes": notes}, patch)


def _remote(repo, notes: list[str]) -> dict | None:
    remotes = {remote.name: remote for remote in repo.remotes}
    name = "origin" if "origin" in remotes else next(iter(remotes), None)
    if name is None:
        notes.append("no remote configured")
        return None
    try:
        url = remotes[name].url
    except AttributeError:                 # GitPython's answer for a remote without a url
        notes.append(f"remote {name} has no url")
        return None
    return {"name": name, "url": public_url(url)}


def public_url(url: str) -> str:
    """`url` without credentials: user, password, token and query dropped from http(s) URLs."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https", "ftp", "ftps"):
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _diff(repo) -> bytes:
    """The binary-safe diff of index and worktree against HEAD, exactly as git wrote it."""
    return repo.git.execute(["git", *DIFF_ARGS], stdout_as_string=False,
                            strip_newline_in_stdout=False)


def _untracked_digest(root: Path, paths: list[str], notes: list[str]) -> dict:
    """One sha256 over sorted untracked paths and their contents, within a read budget."""
    digest, budget, skipped = hashlib.sha256(), UNTRACKED_TOTAL_LIMIT, 0
    for relative in sorted(paths):
        entry, read = _untracked_entry(root / relative, min(budget, UNTRACKED_FILE_LIMIT))
        budget -= read
        skipped += entry.startswith("skipped:")
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0" + entry.encode() + b"\n")
    if skipped:
        notes.append(f"{skipped} untracked file(s) over {UNTRACKED_FILE_LIMIT} bytes (or past "
                     f"{UNTRACKED_TOTAL_LIMIT} bytes in all) hashed by path and size only")
    return {"untracked_count": len(paths), "untracked_sha256": digest.hexdigest(),
            "untracked_skipped": skipped}


def _untracked_entry(path: Path, limit: int) -> tuple[str, int]:
    """What stands for one untracked file in the digest, and how many bytes reading it took."""
    try:
        if path.is_symlink():
            return f"symlink:{os.readlink(path)}", 0
        size = path.stat().st_size
        if size > limit:
            return f"skipped:{size}", 0
        return f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}", size
    except OSError as error:
        return f"unreadable:{error.strerror}", 0
