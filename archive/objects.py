"""A store's objects: raw reports, ncu listings and patches at objects/ab/cdef..., named by the
sha256 of their bytes and read-only once written; and how any file named by its hash (an
object, a table, a catalog segment) is staged, published and read back.

A file is copied into a durable temp file first (`stage_*`), then renamed into place
(`publish`), so no reader sees a partial file and nothing is visible until it is whole.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

from triage.archive import atomic
from triage.archive.part import StorePart
from triage.base.errors import CorruptObject
from triage.base.hashing import copy_hashing, hash_file


@dataclass(frozen=True)
class Staged:
    """An object copied into a temp file under objects/, durable but not yet visible."""

    temp: Path
    sha256: str
    bytes: int


class Objects(StorePart):
    """The files of a store named by the hash of their bytes, objects/ first of them."""

    @staticmethod
    def key(sha256: str) -> str:
        return f"objects/{sha256[:2]}/{sha256[2:]}"


    def local_copy(self, key: str, sha256: str) -> Path:
        """A local file holding a file named by the hash of its bytes (an object, a table, a
        catalog segment): the file itself in a local store; for a remote one, its copy in the
        cache (cache.py), fetched once and checked against its hash. FileNotFoundError when
        it is missing."""
        files = self.store.files
        if files.local_root is not None:
            return files.local_root / key
        from triage.archive.cache import cached_object

        return cached_object(files, key, sha256)

    def put_stream(self, stream) -> tuple[str, int]:
        """Store the bytes of a readable stream; return (sha256, size). Idempotent."""
        return self.publish(self.stage_stream(stream))

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        return self.put_stream(io.BytesIO(data))

    def read(self, sha256: str) -> bytes:
        """A small object's bytes (a capture's patch), checked against its hash: damaged bytes
        must not be handed on as the run's."""
        try:
            data = self.store.files.read(self.key(sha256))
        except FileNotFoundError:
            raise CorruptObject(f"object {sha256[:12]} is missing from the store; `triage "
                                "verify` lists what is damaged") from None
        except OSError as exc:
            raise self.store.error(exc, "read") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptObject(f"object {sha256[:12]} does not match its hash; `triage verify` "
                                "lists what is damaged")
        return data

    def new_temp(self, suffix: str = "") -> Path:
        """A temp file for an object being made (an nsys export, a table, an imported object):
        under objects/ in a local store, in the spool for a remote one (files.py)."""
        try:
            return self.store.files.new_temp("objects", suffix)
        except OSError as exc:
            raise self.store.error(exc, "write") from None

    def stage_stream(self, stream, cancel=None) -> Staged:
        """Copy a stream into a durable temp file under objects/, hashing it on the way.

        Split from `publish` so that a large report can be copied on a worker thread while it
        is being read, and dropped (`discard`) if reading it fails: nothing becomes visible.
        """
        try:
            with atomic.temp_file_in(self.store.files.temp_folder("objects"), keep=True) \
                    as (sink, temp):
                sha, size = copy_hashing(stream, sink, cancel)
                sink.flush()
                os.fsync(sink.fileno())
        except OSError as exc:
            raise self.store.error(exc, "write") from None
        return Staged(temp, sha, size)

    def stage_file(self, path: Path, cancel=None) -> Staged:
        with open(path, "rb") as stream:
            return self.stage_stream(stream, cancel)

    @staticmethod
    def stage_temp(temp: Path) -> Staged:
        """A finished temp file (made by `new_temp`), hashed, to be published."""
        sha, size = hash_file(temp)
        return Staged(temp, sha, size)

    def publish(self, staged: Staged, key: str | None = None,
                cache: bool = False) -> tuple[str, int]:
        """Make a staged file visible: at `key` (a table's), else as the object of its hash;
        with `cache`, a remote store's upload stays in the local cache (a table its writer
        reads back at once).

        Renamed into place even when a copy exists: the fresh file tells a concurrent
        `triage gc` that it is wanted again (see integrity._remove). On S3 the same: a PUT of
        the same bytes under the same name, a new mtime."""
        try:
            self.store.files.publish(staged.temp, key or self.key(staged.sha256), readonly=True,
                                     cache_as=staged.sha256 if cache else None)
        except OSError as exc:
            raise self.store.error(exc, "write") from None
        return staged.sha256, staged.bytes

    @staticmethod
    def discard(staged: Staged) -> None:
        staged.temp.unlink(missing_ok=True)
