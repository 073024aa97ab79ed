"""A store's annotations of its runs, the only part of a run that grows:

    annotations/<id>.json        when the run was first archived (and the notes an older triage
                                 kept in it), sealed by a checksum (canonical.seal_of)
    notes/<id>/<time>_<hash>.note one write-once file per note (like a label's moves), named by
                                 its time and the hash of its time and text: ten writers noting
                                 one run at once each add a file, and none rewrites another's
    arrivals/<id>.json           where a run came from when it arrived by import, pull or push:
                                 its command is another store's choice (`rerun` asks first)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from triage.archive import validate
from triage.archive.canonical import SEAL, canonical_json, seal_of
from triage.archive.part import StorePart
from triage.base.timeutil import sortable

NOTE_SUFFIX = ".note"


@dataclass(frozen=True)
class Arrival:
    """How a run came into this store from another: `how` (import, pull, push), `source` (the
    bundle or store it came from) and when."""

    how: str
    source: str
    time: str


class Annotations(StorePart):
    """The annotations of a store's runs: read, added to, merged from another store."""

    @staticmethod
    def key(run_id: str) -> str:
        return f"annotations/{run_id}.json"

    @staticmethod
    def notes_folder(run_id: str) -> str:
        return f"notes/{run_id}"

    @staticmethod
    def arrival_key(run_id: str) -> str:
        return f"arrivals/{run_id}.json"

    def read(self, run_id: str) -> dict:
        """A run's archive time and notes, oldest first; {} when there are none. A file that
        is not what its schema says (`verify` names it) gives nothing: bad notes must not hide
        the run, nor the notes written beside it."""
        doc = self._document(run_id)
        notes = [*doc.get("notes", []), *self._entries(run_id)]
        if notes:
            doc["notes"] = _ordered(notes)
        return doc

    def checked(self, run_id: str) -> dict:
        """The annotations as `read` gives them, sealed, for a bundle; ValueError naming what is
        wrong where the run's annotations file is damaged (a bundle must hold what `import`
        takes)."""
        data = self.store.read_file(self.key(run_id))
        if data is not None:
            validate.check(validate.load_json(data), validate.ANNOTATIONS)
        doc = self.read(run_id)
        return {**doc, SEAL: seal_of(doc)} if doc else {}

    def _document(self, run_id: str) -> dict:
        try:
            data = self.store.read_file(self.key(run_id))
            if data is None:
                return {}
            doc = validate.load_json(data)
            validate.check(doc, validate.ANNOTATIONS)
        except (OSError, ValueError):
            return {}
        doc.pop(SEAL, None)
        return doc

    def _entries(self, run_id: str) -> list[dict]:
        """The run's write-once notes; one that cannot be read is skipped (as a bad move is)."""
        folder = self.notes_folder(run_id)
        out = []
        for name in sorted(self.store.files.names(folder)):
            if not name.endswith(NOTE_SUFFIX):
                continue
            try:
                doc = validate.load_json(self.store.read_file(f"{folder}/{name}") or b"")
                out.append({"time": str(doc["time"]), "text": str(doc["text"])})
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    def annotate(self, run_id: str, archived: str, note: str | None,
                 new_run: bool = False) -> dict:
        """Keep the first archive time; add a note if it is new, as a file of its own (no
        writer rewrites another's note). A run whose manifest this writer has just written
        where there was none (`new_run`) has no annotations yet: none are read."""
        doc = {} if new_run else self.read(run_id)
        if "archived" not in doc:
            doc["archived"] = archived
            self._write(run_id, {"archived": archived})
        notes = doc.setdefault("notes", [])
        if note and note not in [n["text"] for n in notes]:
            self._add_note(run_id, archived, note)
            doc["notes"] = _ordered([*notes, {"time": archived, "text": note}])
        return doc

    def merge(self, run_id: str, other: dict) -> bool:
        """Add another store's annotations of a run to ours (push, pull, import): the earlier
        archive time, and each of its notes we lack, with the time it was written. True when
        that changed anything (nothing is written otherwise)."""
        doc = self.read(run_id)
        texts = {n["text"] for n in doc.get("notes", [])}
        new = [n for n in other.get("notes", []) if n["text"] not in texts]
        for note in new:
            self._add_note(run_id, note["time"], note["text"])
        times = [t for t in (doc.get("archived"), other.get("archived")) if t]
        earliest = {"archived": min(times)} if times else {}
        if earliest and earliest["archived"] != doc.get("archived"):
            self._write(run_id, {**self._document(run_id), **earliest})
            return True
        return bool(new)

    def arrived(self, run_id: str, how: str, source: str, time: str) -> None:
        """Record that a run came from another store (write-once: the first arrival stands)."""
        if self.arrival(run_id) is None:
            self.store.write_small(self.arrival_key(run_id), canonical_json(
                {"how": how, "run": run_id, "source": source, "time": time}), readonly=True)

    def arrival(self, run_id: str) -> Arrival | None:
        """How a run came from another store; None for one archived or captured here. A record
        that cannot be read still says the run is foreign: nothing else could have written it."""
        try:
            data = self.store.read_file(self.arrival_key(run_id))
            if data is None:
                return None
            doc = validate.load_json(data)
            return Arrival(str(doc["how"]), str(doc["source"]), str(doc["time"]))
        except (OSError, ValueError, KeyError, TypeError):
            return Arrival("?", "unreadable record", "?")

    def _add_note(self, run_id: str, time: str, text: str) -> None:
        """One note, one write-once file: the same note at the same time is the same file."""
        stamp = re.sub(r"[^0-9TZ.]", "", sortable(time))[:32]
        digest = hashlib.sha256(f"{time}\0{text}".encode()).hexdigest()[:16]
        name = f"{stamp}_{digest}{NOTE_SUFFIX}"
        self.store.write_small(f"{self.notes_folder(run_id)}/{name}",
                               canonical_json({"run": run_id, "text": text, "time": time}),
                               readonly=True)

    def _write(self, run_id: str, doc: dict) -> None:
        sealed = {**doc, SEAL: seal_of(doc)}
        self.store.write_small(self.key(run_id), canonical_json(sealed))


def _ordered(notes: list[dict]) -> list[dict]:
    """Notes in time order, each text once (its first time): a note merged twice is one."""
    first: dict[str, dict] = {}
    for note in sorted(notes, key=lambda n: sortable(str(n["time"]))):
        first.setdefault(note["text"], note)
    return list(first.values())
