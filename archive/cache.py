"""The local cache of a remote store's objects: `ls`, `show`, `diff` and queries on S3 fetch each
table they need once, by its content hash, and read it from local disk after.

An object is named by the sha256 of its bytes, so a cached copy is never stale and never needs
revalidation: it is checked against its hash when it arrives, and kept until the cache grows past
its cap ($TRIAGE_CACHE_BYTES, default 2 GiB), when the least recently used copies go. The cache
lives in $XDG_CACHE_HOME/triage (default ~/.cache/triage), beside the spool where writes to a
remote store stage their temp files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from triage.archive import atomic
from triage.base.errors import CorruptObject

if TYPE_CHECKING:
    from triage.archive.files import StoreFiles

DEFAULT_CAP = 2 << 30


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/triage, else ~/.cache/triage."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "triage"


def cap_bytes() -> int:
    try:
        return int(os.environ.get("TRIAGE_CACHE_BYTES", DEFAULT_CAP))
    except ValueError:
        return DEFAULT_CAP


def cached_object(files: StoreFiles, key: str, sha: str) -> Path:
    """A local copy of the object at `key` (named `sha`): the cached one, else fetched, checked
    against its hash and kept. FileNotFoundError when the store has no such object."""
    folder = cache_dir() / "objects" / sha[:2]
    path = folder / sha[2:]
    if path.is_file():
        os.utime(path)  # recently used: the last to go when the cache is trimmed
        _hand_out(path)
        return path
    with atomic.temp_file_in(folder, "-fetch") as (sink, temp):
        digest = hashlib.sha256()
        with files.open(key) as source:
            while chunk := source.read(1 << 22):
                digest.update(chunk)
                sink.write(chunk)
        sink.close()
        if digest.hexdigest() != sha:
            raise CorruptObject(f"object {sha[:12]} in store {files.where} does not match its "
                                "hash; `triage verify` lists what is damaged")
        atomic.publish(temp, path, readonly=True)
    _hand_out(path)
    _added(path)
    return path


def keep(path: Path, sha: str) -> None:
    """Adopt a local file that holds the object named `sha` (a table this process has just
    uploaded from its spool) as the cached copy: moved, not copied, so that reading it back at
    once (the catalog row reads the run's kernel_summary) fetches nothing. Where the spool is
    on another filesystem than the cache, or a copy is there already, the file is only
    removed."""
    target = cache_dir() / "objects" / sha[:2] / sha[2:]
    try:
        if not target.is_file():
            atomic.publish(path, target, readonly=True)  # durable first: never re-hashed
            _added(target)
            return
    except OSError:
        pass
    path.unlink(missing_ok=True)


# One set per open `reading` block: the copies handed out within it, which trims spare.
_READING: list[set[Path]] = []


@contextmanager
def reading() -> Iterator[None]:
    """Within this block no trim of this process removes a copy handed out in it: a query
    fetches every table it reads before DuckDB opens them, and a cap smaller than those must
    not remove the first before it is read. The cache may hold more than its cap until the
    next trim after it. (Another process's trim goes by age: these copies are the newest.)"""
    copies: set[Path] = set()
    _READING.append(copies)
    try:
        yield
    finally:
        del _READING[next(i for i, held in enumerate(_READING) if held is copies)]


def _hand_out(path: Path) -> None:
    for copies in tuple(_READING):  # a block may end on another thread meanwhile
        copies.add(path)


TRIM_EVERY = 16  # a process trims after its first addition, then per 1/TRIM_EVERY of the cap


class TrimSchedule:
    """When this process trims the cache: after its first addition, then once per
    1/TRIM_EVERY of the cap added. A walk of the whole cache per object made a cold read of
    1,000 runs' tables quadratic. One per process (`TRIMS`); a test starts a fresh one as a new
    process would."""

    def __init__(self) -> None:
        self.added: int | None = None  # bytes added since the last trim; None: never trimmed

    def due(self, size: int, cap: int) -> bool:
        if self.added is not None and self.added + size < cap // TRIM_EVERY:
            self.added += size
            return False
        self.added = 0
        return True


TRIMS = TrimSchedule()


def _added(fresh: Path) -> None:
    """Count a copy this process added, and trim the cache when the schedule says so. `fresh`
    stays: its caller is about to read it."""
    cap = cap_bytes()
    if TRIMS.due(fresh.stat().st_size, cap):
        trim(cap, spare=fresh)


def trim(cap: int, spare: Path | None = None) -> None:
    """Remove the least recently used copies but `spare` and those of open `reading` blocks
    until the cache holds at most `cap` bytes (or only those)."""
    root = cache_dir() / "objects"
    kept = set().union(*_READING, {spare} if spare else set())
    found, total = [], 0
    for path in root.glob("*/*"):
        try:
            if not path.name.startswith(atomic.TMP_PREFIX):
                stat = path.stat()
                total += stat.st_size
                if path not in kept:
                    found.append((stat.st_mtime, stat.st_size, path))
        except OSError:  # removed meanwhile (another process trimming)
            continue
    for _mtime, size, path in sorted(found):
        if total <= cap:
            break
        path.unlink(missing_ok=True)
        total -= size
