"""Where long library work stands, as typed steps for the CLI to show (the library never
prints): `triage archive`, `export`, `import` and `verify` report each phase or item."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """What is being done now; `done` of `total` items where there are items to count."""

    what: str
    done: int | None = None
    total: int | None = None


Progress = Callable[[Step], None]


def no_progress(_step: Step) -> None:
    """The default: nobody is watching."""
