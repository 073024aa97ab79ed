"""Where long library work stands, as typed steps for the CLI to show (the library never
prints): `triage archive`, `export`, `import`, `verify`, `push` and `pull` report each phase or
item."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """What is being done now; `done` of `total` items where there are items to count, and
    `bytes_done` of `bytes_total` where bytes move (push, pull: the view shows the rate)."""

    what: str
    done: int | None = None
    total: int | None = None
    bytes_done: int | None = None
    bytes_total: int | None = None


Progress = Callable[[Step], None]


def no_progress(_step: Step) -> None:
    """The default: nobody is watching."""
