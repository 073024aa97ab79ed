"""Push and pull: runs from one store into another (`triage push`, `triage pull`).

Both are one transfer, from a source store to a destination store, built on the Store's own
methods alone (open_file, stage_stream/publish, write_manifest, the label history), so it
works between any two stores the Store can open. Per run, in this order:

1. a run already whole at the destination (its manifest there and every object it names) is
   skipped: nothing is read or sent but the manifest and the objects' names;
2. each object the destination lacks is streamed across in chunks, hashed on the way, and
   published under its name only when the hash matches (a damaged source object is not sent);
3. each object the destination already has is re-hashed there (read, never sent again): it may
   be a leftover of a killed push, or damaged. A damaged one stops the push before this run
   becomes visible (CorruptObject naming it): it is never replaced silently, since it may be the
   evidence of a fault on the destination's disk; `triage verify` there names it, and removing
   it lets the next push send it again;
4. its annotations are merged in (earliest archive time, every note), then its manifest is
   written: the run is visible at the destination only once complete.

Then the dedup keys and catalog rows of the runs that arrived, then the labels: each label that
points at a run sent carries its whole move history, merged into the destination's by
Labels.add_moves (newest move wins, so two pushers lose neither move); and the acceptances of
the runs sent (`triage accept`), write-once files added where the destination lacks them.

A kill at any point leaves the destination as readers want it: whole runs, plus objects and temp
files no manifest names yet (gc spares them while the push's lease is live). Running the push
again finishes it; what had landed is re-hashed, not re-sent.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from triage.archive import catalog, lease
from triage.archive.remotes import Remote, open_remote
from triage.archive.run_manifests import Part, run_parts
from triage.archive.store import Store
from triage.base.errors import CorruptObject, RunNotFound, StoreError, UsageError
from triage.base.hashing import hash_stream
from triage.base.progress import Progress, Step, no_progress


@dataclass(frozen=True)
class RunSent:
    """How one run went across: sent (objects first, manifest last), or whole there already
    (`sent` False: nothing read but its manifest and the objects' names)."""

    run_id: str
    sent: bool
    objects_sent: int = 0
    objects_skipped: int = 0
    bytes_sent: int = 0
    reindex: bool = False  # the destination's catalog needs its row: it arrived, or notes changed


@dataclass(frozen=True)
class SyncResult:
    """What a push or pull did: `triage push --json` and `pull --json`
    (schemas/sync.schema.json)."""

    direction: str  # "push" or "pull"
    remote: str
    url: str
    runs_sent: tuple[str, ...]
    runs_present: tuple[str, ...]
    objects_sent: int
    objects_skipped: int
    bytes_sent: int
    labels: Mapping[str, str | None]  # as they point there now

    @classmethod
    def from_runs(cls, direction: str, remote: Remote, runs: list[RunSent],
                  labels: Mapping[str, str | None]) -> SyncResult:
        return cls(direction, remote.name, remote.shown,
                   tuple(r.run_id for r in runs if r.sent),
                   tuple(r.run_id for r in runs if not r.sent),
                   sum(r.objects_sent for r in runs), sum(r.objects_skipped for r in runs),
                   sum(r.bytes_sent for r in runs), labels)

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "remote": self.remote, "url": self.url,
                "runs_sent": list(self.runs_sent), "runs_present": list(self.runs_present),
                "objects_sent": self.objects_sent, "objects_skipped": self.objects_skipped,
                "bytes_sent": self.bytes_sent, "labels": dict(self.labels)}


@dataclass(frozen=True)
class Selection:
    """The runs to move and the labels that go with them."""

    runs: list[str]
    labels: list[str]


def select(store: Store, refs: list[str], label_glob: str | None,
           where: str = "`triage ls`") -> Selection:
    """RUN arguments, or the runs a label GLOB matches, or every run; with the labels that
    point at them. `where` names how to list the store's runs, for a RUN that is not there."""
    from triage.archive.runs import resolve

    if refs and label_glob:
        raise UsageError("give RUNs or --label GLOB, not both")
    pointers = store.labels.all()
    if label_glob:
        names = sorted(n for n in pointers if fnmatch.fnmatchcase(n, label_glob))
        if not names:
            raise RunNotFound(f"no label matches {label_glob!r}; {where} lists the runs and "
                              "`triage label` the labels")
        return Selection(list(dict.fromkeys(resolve(store, n) for n in names)), names)
    try:
        runs = (list(dict.fromkeys(resolve(store, ref) for ref in refs)) if refs
                else store.runs.ids())
    except RunNotFound as exc:
        raise RunNotFound(str(exc).replace("`triage ls`", where)) from None
    chosen = set(runs)
    return Selection(runs, sorted(n for n, run_id in pointers.items() if run_id in chosen))


def transfer(source: Store, dest: Store, chosen: Selection, direction: str, remote: Remote,
             progress: Progress = no_progress) -> SyncResult:
    """Copy the chosen runs, their annotations and labels from `source` into `dest`."""
    from triage.archive.bundle import record_keys

    manifests = {run_id: source.runs.read_manifest(run_id) for run_id in chosen.runs}
    for name in chosen.labels:  # before anything is sent: a clash would stop it half done
        other = dest.labels.clash(name)
        if other is not None:
            raise UsageError(f"label {name!r} clashes with label {other!r} in store {dest.where} "
                             "(one would be a folder of the other); rename one of them")
    verb = "pushing to" if direction == "push" else "pulling from"
    meter = _Meter(progress, f"{verb} {remote.name}", len(manifests))
    with lease.held(dest, direction):  # gc there spares what lands before its manifest
        runs = []
        for number, (run_id, manifest) in enumerate(manifests.items()):
            meter.run(number)
            runs.append(_send_run(source, dest, run_id, manifest, meter))
        record_keys(dest, {r.run_id: manifests[r.run_id] for r in runs if r.sent})
        catalog.add_rows(dest, [catalog.catalog_row(dest, r.run_id, manifests[r.run_id],
                                                    dest.annotations.read(r.run_id))
                                for r in runs if r.reindex])
        for name in chosen.labels:
            _carry_label(source, dest, name)
        dest.acceptances.merge(a for a in source.acceptances.all() if a.run_id in manifests)
        pointers = dest.labels.all()
    return SyncResult.from_runs(direction, remote, runs,
                                {name: pointers.get(name) for name in chosen.labels})


def _send_run(source: Store, dest: Store, run_id: str, manifest: dict[str, Any],
              meter: _Meter) -> RunSent:
    """One run, objects first and manifest last."""
    parts = run_parts(run_id, manifest)
    if dest.runs.manifest_bytes(run_id) is not None \
            and all(dest.files.exists(p.key) for p in parts):
        changed = dest.annotations.merge(run_id, source.annotations.read(run_id))
        return RunSent(run_id, False, objects_skipped=len(parts), reindex=changed)
    sent = skipped = sent_bytes = 0
    for part in sorted(parts, key=lambda p: p.key):
        if dest.files.exists(part.key):
            _check_landed(dest, part, run_id)
            skipped += 1
        else:
            sent_bytes += _copy(source, dest, part, run_id, meter)
            sent += 1
    dest.annotations.merge(run_id, source.annotations.read(run_id))
    if dest.runs.write_manifest(manifest) != run_id:  # the same document: the same identity
        raise StoreError(f"run {run_id[:12]} changed id on the way; this is a bug")
    return RunSent(run_id, True, sent, skipped, sent_bytes, reindex=True)


def _copy(source: Store, dest: Store, part: Part, run_id: str, meter: _Meter) -> int:
    """Stream one file across, hashing it as it goes; published only if it is what its name
    says. Returns its size."""
    what, sha = part.what, part.sha256
    try:
        with source.open_file(part.key) as stream:
            staged = dest.objects.stage_stream(_Metered(stream, meter))
    except FileNotFoundError:
        raise CorruptObject(f"the {what} of run {run_id[:12]} (object {sha[:12]}) is missing "
                            f"from store {source.where}, so it was not sent; `triage verify "
                            f"--store {source.where}` lists what is damaged") from None
    except OSError as exc:
        raise source.error(exc, "read") from None
    if staged.sha256 != sha:
        dest.objects.discard(staged)
        raise CorruptObject(f"the {what} of run {run_id[:12]} (object {sha[:12]}) in store "
                            f"{source.where} does not match its hash, so it was not sent; "
                            f"`triage verify --store {source.where}` lists what is damaged")
    dest.objects.publish(staged, part.key)
    return staged.bytes


def _check_landed(dest: Store, part: Part, run_id: str) -> None:
    """A file the destination has, re-hashed there before a manifest names it."""
    what, sha = part.what, part.sha256
    with dest.open_file(part.key) as stream:
        digest, _size = hash_stream(stream)
    if digest != sha:
        raise CorruptObject(f"object {sha[:12]} ({what} of run {run_id[:12]}) in store "
                            f"{dest.where} does not match its hash; the run was not made "
                            f"visible there and the object was left as it is: `triage verify "
                            f"--store {dest.where}` names it, and once it is removed the push "
                            "sends it again")


def _carry_label(source: Store, dest: Store, name: str) -> None:
    """A label's moves merged into the destination's history; a label moved before histories
    were kept (none here) is one move now, where the destination's pointer differs."""
    history = source.labels.history(name)
    if history:
        dest.labels.add_moves(name, history)
        return
    target = source.labels.all().get(name)
    if target and dest.labels.all().get(name) != target:
        dest.labels.point(name, target)


class _Meter:
    """Counts runs and bytes for the progress line."""

    def __init__(self, progress: Progress, what: str, runs: int):
        self.progress, self.what, self.runs = progress, what, runs
        self.number, self.bytes = 0, 0

    def run(self, number: int) -> None:
        self.number = number
        self._report()

    def add(self, count: int) -> None:
        self.bytes += count
        self._report()

    def _report(self) -> None:
        self.progress(Step(self.what, self.number, self.runs, self.bytes))


class _Metered:
    """A stream whose reads are counted on a meter as they happen (a large report shows its
    bytes moving, not a stall)."""

    def __init__(self, stream: BinaryIO, meter: _Meter):
        self.stream, self.meter = stream, meter

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.meter.add(len(data))
        return data


def push(store: Store, remote: Remote, refs: list[str], label_glob: str | None,
         progress: Progress = no_progress) -> SyncResult:
    """Send runs of `store` (default: all) to a remote; the remote store is made where there is
    none yet."""
    chosen = select(store, refs, label_glob)
    dest = open_remote(remote, create=True)
    dest.check_writable()
    return transfer(store, dest, chosen, "push", remote, progress)


def pull(store_path: str | os.PathLike[str] | None, remote: Remote, refs: list[str],
         label_glob: str | None, progress: Progress = no_progress) -> SyncResult:
    """Fetch runs of a remote (default: all) into the store at `store_path` (made if need be)."""
    source = open_remote(remote)
    chosen = select(source, refs, label_glob, f"`triage ls --store {remote.shown}`")
    dest = Store.open(store_path, create=True)
    dest.check_writable()
    return transfer(source, dest, chosen, "pull", remote, progress)
