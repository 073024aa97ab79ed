"""sha256 over files and streams, in chunks: the store's keys, re-hashed by `verify` and bundles.

Outside `archive/` so that `capture/` can hash a report while reading it without importing the
store.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import threading

CHUNK = 1 << 20
# A sha256 as `hash_file` writes it: the name of every file a store keeps by its hash, and of
# every run.
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def hash_file(path: Path) -> tuple[str, int]:
    """sha256 hex digest and size of a file, read in chunks."""
    with open(path, "rb") as stream:
        return hash_stream(stream)


def hash_stream(stream: BinaryIO) -> tuple[str, int]:
    """sha256 hex digest and size of what is left in a stream (a store's object, local or
    remote), read in chunks."""
    reader = HashingReader(stream)
    while reader.read(CHUNK):
        pass
    return reader.digest.hexdigest(), reader.size


class HashingReader:
    """A read-only stream that hashes what is read through it: a reader that reads every byte
    anyway (validation, a tar export) gets the store key with that read instead of a second one."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.digest, self.size = stream, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data


def copy_hashing(source: BinaryIO, sink: BinaryIO,
                 cancel: threading.Event | None = None) -> tuple[str, int]:
    """Copy a stream in chunks; return the sha256 and size of what was copied.

    `cancel` stops a copy made for a run that has already failed.
    """
    reader = HashingReader(source)
    while chunk := reader.read(CHUNK):
        if cancel is not None and cancel.is_set():
            raise InterruptedError("copy cancelled")
        sink.write(chunk)
    return reader.digest.hexdigest(), reader.size
