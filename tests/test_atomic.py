"""The one temp-file primitive: named for `gc`, removed on failure, kept only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.archive import atomic


def test_a_temp_file_is_removed_on_leaving_unless_kept(tmp_path: Path) -> None:
    with atomic.temp_file_in(tmp_path / "new", ".parquet") as (stream, dropped):
        stream.write(b"x")
        assert dropped.name.startswith(atomic.TMP_PREFIX) and dropped.suffix == ".parquet"
    with atomic.temp_file_in(tmp_path, keep=True) as (stream, kept):
        stream.write(b"staged")
    assert not dropped.exists() and kept.read_bytes() == b"staged"


def test_a_temp_file_is_removed_on_an_exception_even_when_kept(tmp_path: Path) -> None:
    with pytest.raises(ValueError), atomic.temp_file_in(tmp_path, keep=True) as (_stream, temp):
        raise ValueError("damaged")
    assert not temp.exists() and list(tmp_path.iterdir()) == []
