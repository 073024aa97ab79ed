"""Accepted steps (`triage accept`): which accepted run, if any, is the baseline a run is judged
against.

An acceptance of run R says: R's change is intended. From R on, runs of R's workload (tool,
program and arguments, as `history --workload` compares them) are judged against R, not
against runs before it. So between a baseline A and a run B, the newest accepted run of B's
workload captured after A and not after B (capture order, as `history` orders runs) takes A's
place for the gate. Only the acceptances are listed and only the accepted runs' manifests read:
they are few, whatever the store holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from triage.archive.acceptances import Acceptance
from triage.archive.model import RunRecord
from triage.archive.runs import load_record
from triage.archive.store import Store
from triage.base.timeutil import capture_order
from triage.compare.drift import workload


@dataclass(frozen=True)
class AcceptedRun:
    """An accepted run with its record and its acceptances (the newest last)."""

    record: RunRecord
    acceptances: tuple[Acceptance, ...]

    @property
    def latest(self) -> Acceptance:
        return self.acceptances[-1]


def capture_key(record: RunRecord) -> tuple:
    """A run's place in capture order (base.timeutil.capture_order)."""
    return capture_order(record.created, record.archived)


def _same_workload(a: RunRecord, b: RunRecord) -> bool:
    mine, theirs = workload(a), workload(b)
    return a.tool == b.tool and mine.program is not None \
        and (mine.program, mine.arguments) == (theirs.program, theirs.arguments)


def accepted_runs(store: Store, like: RunRecord) -> list[AcceptedRun]:
    """The accepted runs of `like`'s workload that this store holds, in capture order."""
    by_run: dict[str, list[Acceptance]] = {}
    for entry in store.acceptances.all():
        by_run.setdefault(entry.run_id, []).append(entry)
    found = []
    for run_id, entries in by_run.items():
        if not store.runs.has(run_id):
            continue  # accepted elsewhere, never pulled here
        record = load_record(store, run_id)
        if not record.failed_capture and _same_workload(record, like):
            found.append(AcceptedRun(record, tuple(entries)))
    return sorted(found, key=lambda a: capture_key(a.record))


def newest_between(accepted: Sequence[AcceptedRun], after: RunRecord,
                   upto: RunRecord) -> AcceptedRun | None:
    """The newest accepted run captured after `after` and not after `upto`."""
    low, high = capture_key(after), capture_key(upto)
    inside = [a for a in accepted if a.record.id == upto.id
              or (a.record.id != after.id and low < capture_key(a.record) <= high)]
    return inside[-1] if inside else None
