"""Room on the store's disk: a run that does not fit is refused in one line, with none of it left.

The big writes of an archive (the report's copy, its tables, an nsys export) all go to temp files
first, which are removed when one fails. The few small files that follow the objects (manifest,
key, annotations, catalog segment) get their room before the big writes start: a temp file of
zeros holds it (`reserved`) and is removed just before they are written. So a full disk strikes
while nothing is visible yet; only another writer taking the freed room in that instant could
make the manifest fail after the objects, which then are unreferenced and `triage gc` removes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from triage.archive import atomic
from triage.base.errors import DiskFull

# What a run writes after its objects: manifest, dedup key, annotations, catalog segment and
# lease, a few KB each and a block apiece on most filesystems; generously rounded up.
COMMIT_BYTES = 256 * 1024


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC, whoever raised it (the OS, pyarrow's writers, the store's own one-line error)."""
    return isinstance(exc, DiskFull) or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC)


PREFIX = "store disk full: "


def disk_full(root: Path, needed: int) -> DiskFull:
    """The one-line error, with what the run needs beside what is free now."""
    try:
        free = f" ({free_bytes(root)} free)"
    except OSError:
        free = ""
    return DiskFull(f"{PREFIX}{needed} bytes needed at {root}{free}; free space there or choose "
                    "another store with --store")


def sized(exc: BaseException, root: Path, needed: int) -> DiskFull:
    """A full disk, however it was raised (ENOSPC, or the store's own "disk full"), as the one
    error that says how much is needed; one that says so already (an nsys export's) is kept."""
    if isinstance(exc, DiskFull) and str(exc).startswith(PREFIX):
        return exc
    return disk_full(root, needed)


def check_room(root: Path, needed: int) -> None:
    """Refuse before writing when the disk holds less than `needed` bytes."""
    if free_bytes(root) < needed:
        raise disk_full(root, needed)


class Reservation:
    """Room held for the small files that make a run visible; `release` frees it for them."""

    def __init__(self, temp: Path) -> None:
        self.temp = temp

    def release(self) -> None:
        self.temp.unlink(missing_ok=True)


@contextmanager
def reserved(directory: Path, size: int) -> Iterator[Reservation]:
    """Hold `size` bytes of real disk (zeros, not a sparse file) in a temp file under
    `directory` until released, or until the block ends however it ends."""
    with atomic.temp_file_in(directory, "-room") as (stream, temp):
        stream.write(bytes(size))
        stream.flush()  # a full disk says so here, not when the file is closed
        reservation = Reservation(temp)
        try:
            yield reservation
        finally:
            reservation.release()
