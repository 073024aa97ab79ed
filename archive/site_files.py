"""Writing a published site: a new generation beside the current one, then one switch.

DIR is a symbolic link to `.DIR.generations/gN`. A publish builds gN+1 there: a page whose
key (a digest of its inputs, recorded in KEYS) is the one recorded last time is hard-linked from
gN, any other is rendered and written. Only then is DIR pointed at gN+1, by renaming a new link
over it (one rename: a reader, or a static host's sync, sees the old site or the new one, whole).
A publish killed before that leaves gN in place, and a half-built folder the next one removes.

A store of 100,000 runs has as many run pages: linking each again would cost seconds. They live
in shards by the first two hex digits of the run id (`run/ab/<id>.html`, 256 folders), each an
immutable folder `.DIR.generations/shards/run-ab-<digest of its pages' keys>` that a generation
links to: a publish after one new run makes one shard anew (linking its unchanged pages) and
links the other 255 as they were. Beside them, `.DIR.generations/rows` keeps the merged catalog
segment's rows the last publish read (archive/console.py `kept_base`), `regressions` each
series' regressions by the series' key (views/site_history.py) and `templates` the templates'
compiled code (views/compiled.py): outside every generation, they are never uploaded with the
site.

Nothing is fsynced (100,000 pages; a sync of the whole file system waits for every other
writer's data): a killed publish needs none, since the switch comes after every page is written
whole. After a power loss a file system may keep the switch and lose pages written just before;
publish again then.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from triage.base.errors import UsageError

KEYS = ".triage-site.json"
ROWS = "rows"  # .DIR.generations/rows: what the last publish read, kept for the next
REGRESSIONS = "regressions"  # .DIR.generations/regressions: each series' regressions, kept
TEMPLATES = "templates"  # .DIR.generations/templates: the templates' compiled code, kept
FORMAT = 2
Render = Callable[[], bytes]


@dataclass(frozen=True)
class Published:
    """What a publish did: pages written, pages kept from the last publish, where."""

    written: int
    kept: int
    removed: int
    path: Path


class SiteWriter:
    """One generation of a site under construction; `page` each path, then `switch`. `layout`
    names what every page's look depends on (triage's version, the templates): when it differs
    from the last publish's, every page is rendered again."""

    def __init__(self, dest: Path, layout: str):
        self.dest = Path(dest).absolute()
        self.home = self.dest.parent / f".{self.dest.name}.generations"
        self.previous = _current(self.dest)
        old = _keys(self.previous / KEYS) if self.previous is not None else {}
        fresh = old.get("format") == FORMAT and old.get("layout") == layout
        self.layout = layout
        self.old_pages: dict[str, str] = old.get("pages", {}) if fresh else {}
        self.old_shards: dict[str, str] = old.get("shards", {}) if fresh else {}
        number = int(self.previous.name[1:]) + 1 if self.previous is not None else 1
        _clear_unfinished(self.home, self.previous, set(old.get("shards", {}).values()))
        self.folder = self.home / f"g{number}"
        self.folder.mkdir(parents=True)
        self.pages: dict[str, str] = {}
        self.shards: dict[str, list[tuple[str, str, str]]] = {}  # name, key, what renders it
        self.render_sharded: Callable[[str], bytes] | None = None
        self.written = 0
        self.kept = 0

    def page(self, path: str, key: str, render: Render) -> None:
        """Put `path` in the new generation: linked from the last one when its key is
        unchanged, else rendered now."""
        self.pages[path] = key
        old = self.previous / path if self.previous is not None else None
        self._place(self.folder / path, old if self.old_pages.get(path) == key else None, render)

    def shard_pages(self, pages: Iterable[tuple[str, str, str]],
                    render: Callable[[str], bytes]) -> None:
        """Put the pages of the shards in the new generation, each `(path, key, argument)`
        with a path `FOLDER/SHARD/NAME` (`run/ab/ID.html`): a shard whose pages' keys are all
        unchanged is linked as it was, any other made anew at the `switch`, its changed pages
        by `render(argument)`. Plain tuples and one `render`: 100,000 run pages are put at
        each publish."""
        shards = self.shards
        for path, key, argument in pages:
            shard, _, name = path.rpartition("/")
            if shard not in shards:
                shards[shard] = []
            shards[shard].append((name, key, argument))
        self.render_sharded = render

    def _place(self, target: Path, old: Path | None, render: Render) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        if old is not None:
            try:
                os.link(old, target)
                self.kept += 1
                return
            except FileNotFoundError:
                pass
        target.write_bytes(render())
        self.written += 1

    def _shard(self, shard: str, pages: list[tuple[str, str, str]]) -> str:
        """The shard's folder name: the last one's where no page changed, else a new one
        (unchanged pages linked from the last). Its digest is of the pages' names and keys in
        the order they came (the catalog's, which a new run leaves as it was): 100,000 keys
        are hashed at each publish, joined, not as JSON."""
        text = "\0".join([self.layout, *(f"{name}\0{key}" for name, key, _arg in pages)])
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        name = f"{shard.replace('/', '-')}-{digest}"
        folder = self.home / "shards" / name
        if folder.is_dir():
            self.kept += len(pages)
            return name
        previous = self.home / "shards" / self.old_shards[shard] \
            if shard in self.old_shards else None
        old_keys = _keys(previous / KEYS) if previous is not None else {}
        building = folder.with_name(f".tmp-{name}")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        render = self.render_sharded
        assert render is not None  # a shard has pages only once shard_pages gave them
        for page, key, argument in pages:
            old = previous / page if previous is not None and old_keys.get(page) == key \
                else None
            self._place(building / page, old, functools.partial(render, argument))
        (building / KEYS).write_text(json.dumps({page: key for page, key, _arg in pages}))
        building.rename(folder)
        return name

    def switch(self) -> Published:
        """Finish the shards, record the keys, point DIR at the new generation, remove
        the last one and the shards only it used. Until the switch, a failure (a run page that
        cannot be rendered) abandons the new generation: DIR stays the last one, whole."""
        try:
            shards = {shard: self._shard(shard, pages) for shard, pages in self.shards.items()}
            for shard, name in shards.items():
                link = self.folder / shard
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(Path("..", "..", "shards", name))
            (self.folder / KEYS).write_text(json.dumps({"format": FORMAT, "layout": self.layout,
                                                        "pages": self.pages, "shards": shards}))
        except BaseException:
            self.abandon()
            raise
        link = self.dest.parent / f".tmp-{self.dest.name}-link"
        link.unlink(missing_ok=True)
        link.symlink_to(self.folder.relative_to(self.dest.parent))
        os.replace(link, self.dest)
        if self.previous is not None:
            shutil.rmtree(self.previous, ignore_errors=True)
        _clear_unfinished(self.home, self.folder, set(shards.values()))
        removed = len(set(self.old_pages) - set(self.pages))
        return Published(self.written, self.kept, removed, self.dest)

    def abandon(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _current(dest: Path) -> Path | None:
    """The generation DIR points at; None for a new DIR (or an empty folder, replaced)."""
    if dest.is_symlink():
        target = dest.resolve()
        if target.parent.name == f".{dest.name}.generations" and target.is_dir():
            return target
        raise UsageError(f"{dest} links to {target}, not a site `triage publish` wrote; "
                          "give a new path")
    if dest.is_dir() and not any(dest.iterdir()):
        dest.rmdir()
        return None
    if dest.exists():
        raise UsageError(f"{dest} exists and is not a site `triage publish` wrote; give a new "
                          "path (publish makes it a link to the newest generation)")
    return None


def _keys(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _clear_unfinished(home: Path, current: Path | None, shards: set[str]) -> None:
    """Generations and shards no longer used: a killed publish's, the last one's."""
    if not home.is_dir():
        return
    for folder in home.iterdir():
        if folder.name not in ("shards", ROWS, REGRESSIONS, TEMPLATES) and folder != current:
            shutil.rmtree(folder, ignore_errors=True)
    if (home / "shards").is_dir():
        for folder in (home / "shards").iterdir():
            if folder.name not in shards:
                shutil.rmtree(folder, ignore_errors=True)
