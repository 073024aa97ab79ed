"""Writing a published site: a new generation beside the current one, then one switch.

DIR is a symbolic link to `.DIR.generations/gN`. A publish builds gN+1 there: a page whose
inputs did not change (its key, recorded in KEYS, is the one recorded last time) is hard-linked
from gN, any other is rendered and written. Only then is DIR pointed at gN+1, by renaming a new
link over it (one rename: a reader or a static host's sync sees the old site or the new one,
whole). A publish killed before that leaves gN in place and a half-built folder that the next
publish removes. Pages are not fsynced one by one (100,000 of them); the file system is synced
once before the switch.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triage.base.errors import TriageError

KEYS = ".triage-site.json"
FORMAT = 1


@dataclass(frozen=True)
class Published:
    """What a publish did: pages written, pages kept from the last publish, where."""

    written: int
    kept: int
    removed: int
    path: Path


class SiteWriter:
    """One generation of a site under construction; `page` each path, then `switch`."""

    def __init__(self, dest: Path):
        self.dest = Path(dest).absolute()
        self.home = self.dest.parent / f".{self.dest.name}.generations"
        current = _current(self.dest)
        self.previous = current
        self.old_keys = _keys(current) if current is not None else {}
        number = int(current.name[1:]) + 1 if current is not None else 1
        _clear_unfinished(self.home, current)
        self.folder = self.home / f"g{number}"
        self.folder.mkdir(parents=True)
        self.keys: dict[str, str] = {}
        self.written = 0

    def page(self, path: str, key: str, render: Callable[[], bytes]) -> None:
        """Put `path` in the new generation: linked from the last one when its key is
        unchanged, else rendered now."""
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        self.keys[path] = key
        if self.previous is not None and self.old_keys.get(path) == key:
            try:
                os.link(self.previous / path, target)
                return
            except FileNotFoundError:
                pass
        target.write_bytes(render())
        self.written += 1

    def switch(self) -> Published:
        """Record the keys, sync, point DIR at the new generation, remove the old one."""
        (self.folder / KEYS).write_text(json.dumps({"format": FORMAT, "pages": self.keys}))
        os.sync()
        link = self.dest.parent / f".tmp-{self.dest.name}-link"
        link.unlink(missing_ok=True)
        link.symlink_to(self.folder.relative_to(self.dest.parent))
        os.replace(link, self.dest)
        if self.previous is not None:
            shutil.rmtree(self.previous, ignore_errors=True)
        removed = len(set(self.old_keys) - set(self.keys))
        return Published(self.written, len(self.keys) - self.written, removed, self.dest)

    def abandon(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _current(dest: Path) -> Path | None:
    """The generation DIR points at; None for a new DIR (or an empty folder, replaced)."""
    if dest.is_symlink():
        target = dest.resolve()
        if target.parent.name == f".{dest.name}.generations" and target.is_dir():
            return target
        raise TriageError(f"{dest} links to {target}, not a site `triage publish` wrote; "
                          "give a new path")
    if dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()
        return None
    if dest.exists():
        raise TriageError(f"{dest} exists and is not a site `triage publish` wrote; give a new "
                          "path (publish makes it a link to the newest generation)")
    return None


def _keys(folder: Path) -> dict[str, str]:
    try:
        data = json.loads((folder / KEYS).read_text())
    except (OSError, ValueError):
        return {}
    return data.get("pages", {}) if data.get("format") == FORMAT else {}


def _clear_unfinished(home: Path, current: Path | None) -> None:
    """Generations a killed publish left (every one but the current)."""
    if not home.is_dir():
        return
    for folder in home.iterdir():
        if folder != current:
            shutil.rmtree(folder, ignore_errors=True)
