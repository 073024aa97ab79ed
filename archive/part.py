"""What every part of a store (its objects, tables, runs, annotations, labels, remotes) shares:
the store it belongs to, and the file of a key in a local store."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from triage.archive.store import Store


class StorePart:
    """One thing a store keeps, as a view on the store's files; `Store` composes one of each."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def key(name: str) -> str:
        """The store key of `name` (an object's hash, a run id): each part says where."""
        raise NotImplementedError

    def path(self, name: str) -> Path:
        """The file of `name` in a local store (tests and tools that damage one on purpose)."""
        return self.store.root / self.key(name)
