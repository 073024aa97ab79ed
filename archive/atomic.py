"""Atomic file writes: a temp file beside the target, fsync, then rename.

A reader never sees a half-written file, and a crash leaves at most a `.tmp-*` file that nothing
references (`triage gc` removes those).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

TMP_PREFIX = ".tmp-"
_KNOWN_DIRS: set[Path] = set()


def ensure_dir(directory: Path) -> None:
    """mkdir -p, once per directory and process (a run writes a dozen files into a few)."""
    if directory not in _KNOWN_DIRS or not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        _KNOWN_DIRS.add(directory)


def new_temp(directory: Path, suffix: str = "") -> Path:
    """Create an empty temp file in `directory`, beside what it will become: the one place a temp
    file is named (`.tmp-*`, which `triage gc` removes when a crash leaves one behind)."""
    ensure_dir(directory)
    fd, name = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=directory)
    os.close(fd)
    return Path(name)


@contextmanager
def temp_file_in(directory: Path, suffix: str = "",
                 keep: bool = False) -> Iterator[tuple[BinaryIO, Path]]:
    """Open a new temp file in `directory`; it is removed on any exception, and on leaving unless
    the caller renamed it away or asked to `keep` it (an object staged to be published later)."""
    path = new_temp(directory, suffix)
    try:
        with open(path, "wb") as stream:
            yield stream, path
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if not keep:
        path.unlink(missing_ok=True)


def umask() -> int:
    """The process umask, read without changing it where the OS allows (os.umask sets it, and a
    thread creating a folder meanwhile would get the wrong permissions)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def shared_mode(readonly: bool, reach: int = 0o777) -> int:
    """The mode of a published file: immutable ones read-only for all, mutable ones (labels,
    keys, annotations, catalog segments) as the umask allows, so a team can share the store;
    both within `reach`, the bits the store's folder grants (a private store's 0700 keeps its
    files 0400 and 0600). mkstemp's private 0600 is right for a temp file, wrong for what it
    becomes."""
    return (0o444 if readonly else 0o666 & ~umask()) & reach


def publish(temp: Path, target: Path, readonly: bool, reach: int = 0o777) -> None:
    """Make `temp` visible as `target` in one rename (after making it durable)."""
    with open(temp, "rb") as stream:
        os.fsync(stream.fileno())
    os.chmod(temp, shared_mode(readonly, reach))
    ensure_dir(target.parent)
    os.replace(temp, target)


def write_bytes(target: Path, data: bytes, readonly: bool = False, reach: int = 0o777) -> None:
    """Write `data` to `target` atomically (its mode within `reach`: see shared_mode)."""
    with temp_file_in(target.parent) as (stream, temp):
        stream.write(data)
        stream.close()
        publish(temp, target, readonly, reach)


def write_user_file(target: Path, data: bytes) -> Path:
    """Write an output the user asked for (-o FILE): atomically, with the umask's permissions
    (see `shared_mode`), and a one-line error if it cannot be."""
    from triage.base.errors import TriageError

    target = Path(target)
    if target.is_dir():
        raise TriageError(f"cannot write {target}: it is a directory; give a file name with -o")
    try:
        write_bytes(target, data)
    except OSError as exc:
        raise TriageError(f"cannot write {target}: {exc.strerror or exc}; "
                          "choose another -o path") from None
    return target
