"""Hashing while reading or copying gives what hashing the bytes afterwards gives."""

from __future__ import annotations

import hashlib
import io
import threading
from pathlib import Path

import pytest

from triage.base.hashing import CHUNK, HashingReader, copy_hashing, hash_file

DATA = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # more than two chunks, not a whole number


def test_hash_file_copy_and_reader_agree_with_hashlib(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(DATA)
    expected = (hashlib.sha256(DATA).hexdigest(), len(DATA))
    sink = io.BytesIO()
    assert hash_file(path) == expected
    assert copy_hashing(io.BytesIO(DATA), sink) == expected and sink.getvalue() == DATA
    reader = HashingReader(io.BytesIO(DATA))
    assert reader.read(10) + reader.read() == DATA
    assert (reader.digest.hexdigest(), reader.size) == expected


def test_a_cancelled_copy_stops() -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InterruptedError):
        copy_hashing(io.BytesIO(DATA), io.BytesIO(), cancel)
