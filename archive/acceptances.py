"""A store's acceptances: `triage accept RUN --reason TEXT`, an intended change recorded as the
new baseline. Each is a write-once file acceptances/<run id>/<time>_<writer>.accept (who,
when, why), never rewritten: two people accepting on two nodes keep both, and push and pull
merge them by adding the files the other side lacks. They sit apart from the labels and their
history, which they never change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from triage.archive.canonical import canonical_json
from triage.archive.labels import MOVE_TIME_RE, WRITER_RE, writer_id
from triage.archive.part import StorePart
from triage.base.errors import UsageError
from triage.base.hashing import SHA256_RE
from triage.base.timeutil import utc_now

FOLDER = "acceptances"
SUFFIX = ".accept"
MAX_REASON = 2000


@dataclass(frozen=True)
class Acceptance:
    """One accepted run: from it on, its workload's runs are judged against it. `label` is the
    label it was accepted by (None: by its id); `who` the person or CI job that accepted."""

    run_id: str
    reason: str
    who: str
    time: str
    writer: str
    label: str | None = None

    def to_json(self) -> dict:
        return {"run": self.run_id, "label": self.label, "reason": self.reason, "who": self.who,
                "time": self.time}


class Acceptances(StorePart):
    """The acceptances of a store's runs."""

    @staticmethod
    def key(run_id: str) -> str:
        return f"{FOLDER}/{run_id}"

    def add(self, run_id: str, reason: str, who: str, label: str | None = None) -> Acceptance:
        """Record that `run_id` is an intended step (a new file; nothing is rewritten)."""
        reason = reason.strip()
        if not reason or len(reason) > MAX_REASON:
            raise UsageError(f"--reason must say why the change is intended, in 1 to "
                             f"{MAX_REASON} characters")
        entry = Acceptance(run_id, reason, who, utc_now(precise=True), writer_id(), label)
        self._write(entry)
        return entry

    def of_run(self, run_id: str) -> list[Acceptance]:
        """A run's acceptances, oldest first."""
        folder = self.key(run_id)
        names = sorted(n for n in self.store.files.names(folder) if n.endswith(SUFFIX))
        found = (self._read(f"{folder}/{n}") for n in names)
        return sorted((a for a in found if a is not None and a.run_id == run_id),
                      key=lambda a: (a.time, a.writer))

    def all(self) -> list[Acceptance]:
        """Every acceptance in the store, oldest first: one listing (they are few: one per
        intended step, not per run)."""
        keys = [k for k in self.store.files.files(FOLDER) if k.endswith(SUFFIX)]
        found = (self._read(k) for k in keys)
        return sorted((a for a in found if a is not None), key=lambda a: (a.time, a.writer))

    def merge(self, entries: Iterable[Acceptance]) -> int:
        """Add another store's acceptances that this one lacks (push, pull), each under its own
        time and writer; one whose time or writer could not be a file name is skipped.
        Returns how many were added."""
        added = 0
        for entry in entries:
            if MOVE_TIME_RE.match(entry.time) and WRITER_RE.match(entry.writer) \
                    and SHA256_RE.match(entry.run_id) \
                    and not self.store.files.exists(self._file(entry)):
                self._write(entry)
                added += 1
        return added

    def _file(self, entry: Acceptance) -> str:
        stamp = entry.time.replace(":", "").replace("-", "")
        return f"{self.key(entry.run_id)}/{stamp}_{entry.writer}{SUFFIX}"

    def _write(self, entry: Acceptance) -> None:
        doc = {**entry.to_json(), "writer": entry.writer}
        self.store.write_small(self._file(entry), canonical_json(doc), readonly=True)

    def _read(self, key: str) -> Acceptance | None:
        """One entry; None for a damaged one (a bad file must not hide the others). A file
        that cannot be read at all stops the command: the gate would judge against another
        baseline without a word."""
        try:
            data = self.store.read_file(key)
        except OSError as exc:
            raise self.store.error(exc, "read") from None
        try:
            if data is None:
                return None
            doc = json.loads(data)
            if not SHA256_RE.match(doc["run"]):
                return None
            return Acceptance(doc["run"], str(doc["reason"]), str(doc["who"]), str(doc["time"]),
                              str(doc["writer"]), doc.get("label"))
        except (ValueError, KeyError, TypeError):
            return None
