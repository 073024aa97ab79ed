"""What every part of a store (its objects, tables, runs, annotations, labels, remotes) shares:
the store it belongs to, and the file of a key in a local store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from triage.archive.store import Store


class StorePart:
    """One thing a store keeps, as a view on the store's files; `Store` composes one of each."""

    # The store key of a name (an object's hash, a run id): each part that names its files by
    # key says where, as a staticmethod; `path` needs it.
    key: Callable[[str], str]

    def __init__(self, store: Store) -> None:
        self.store = store

    def path(self, name: str) -> Path:
        """The file of `name` in a local store (tests and tools that damage one on purpose)."""
        return self.store.root / self.key(name)
