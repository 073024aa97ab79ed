"""A store's annotations: annotations/<id>.json, when a run was first archived and the notes
added to it later: the only part of a run that grows, so its file is sealed by a checksum
(canonical.seal_of) rather than named by its hash.
"""

from __future__ import annotations

from triage.archive import validate
from triage.archive.canonical import SEAL, canonical_json, seal_of
from triage.archive.part import StorePart


class Annotations(StorePart):
    """The annotations of a store's runs: read, added to, merged from another store."""

    @staticmethod
    def key(run_id: str) -> str:
        return f"annotations/{run_id}.json"


    def read(self, run_id: str) -> dict:
        """A run's archive time and notes; {} when there are none, or when they are not what the
        annotations schema says (`verify` names them): bad notes must not hide the run."""
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

    def annotate(self, run_id: str, archived: str, note: str | None,
                 new_run: bool = False) -> dict:
        """Keep the first archive time; append a note if it is new. Last writer wins. A run
        whose manifest this writer has just written where there was none (`new_run`) has no
        annotations yet (only a writer racing it could have written some): none are read."""
        doc = {} if new_run else self.read(run_id)
        doc.setdefault("archived", archived)
        notes = doc.setdefault("notes", [])
        if note and note not in [n["text"] for n in notes]:
            notes.append({"time": archived, "text": note})
        self._write(run_id, doc)
        return doc

    def merge(self, run_id: str, other: dict) -> bool:
        """Add another store's annotations of a run to ours (push, pull): the earlier archive
        time, and each of its notes we lack, with the time it was written. True when that
        changed anything (nothing is written otherwise)."""
        doc = self.read(run_id)
        notes = list(doc.get("notes", []))
        texts = {n["text"] for n in notes}
        notes += [n for n in other.get("notes", []) if n["text"] not in texts]
        times = [t for t in (doc.get("archived"), other.get("archived")) if t]
        merged = {**doc, **({"archived": min(times)} if times else {}), "notes": notes}
        if merged == {"notes": [], **doc}:
            return False
        self._write(run_id, merged)
        return True

    def _write(self, run_id: str, doc: dict) -> None:
        sealed = {**doc, SEAL: seal_of(doc)}
        self.store.write_small(self.key(run_id), canonical_json(sealed))
