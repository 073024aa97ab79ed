"""Push and pull: runs from one store into another (`triage push`, `triage pull`).

Both are one transfer, from a source store to a destination store, built on the Store's own
methods alone (open_file, stage_stream/publish, write_manifest, the label history), so it
works between any two stores the Store can open. Per run, in this order:

1. a run already whole at the destination (its manifest there and every object it names) is
   skipped: nothing is read or sent but the manifest and the objects' names;
2. each object the destination lacks is streamed across in chunks, hashed on the way, and
   published under its name only when the hash matches (a damaged source object is not sent);
   a read of the source that fails midway is started again (the source store's retries);
3. each object the destination already has (a killed push's, or another run's) is resumed:
   neither read nor sent again. Its name is its hash and a write there is whole or absent, so
   its existence and its size (one request) are the check; the bytes are `verify`'s to hash. One
   of another size stops the push before this run becomes visible (CorruptObject naming it): it
   is never replaced silently, since it may be the evidence of a fault on the destination's
   disk; `triage verify` there names it, and removing it lets the next push send it again;
4. its annotations are merged in (earliest archive time, every note), then its manifest is
   written: the run is visible at the destination only once complete.

Then the dedup keys and catalog rows of the runs that arrived, then the labels: each label that
points at a run sent carries its whole move history, merged into the destination's by
Labels.add_moves (newest move wins, so two pushers lose neither move; a move dated beyond
labels.MAX_SKEW ahead of the destination's clock is refused, and said). Each label moved is said
with where it pointed before. Then the acceptances of the runs sent (`triage accept`),
write-once files added where the destination lacks them.

A kill at any point leaves the destination as readers want it: whole runs, plus objects and temp
files no manifest names yet (gc spares them while the push's lease is live). Running the push
again finishes it; what had landed is resumed (counted in `objects_resumed`), not re-sent.
Every failure names the store it happened in: the source (`cannot read`) or the destination.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from triage.archive import catalog, lease
from triage.archive.labels import LabelMerge
from triage.archive.remotes import Remote, open_remote
from triage.archive.files import SourceFailed, SourceStream
from triage.archive.objects import Staged
from triage.archive.run_manifests import Part, run_parts
from triage.archive.store import Store
from triage.base.errors import CorruptObject, RunNotFound, StoreError, UsageError
from triage.base.progress import Progress, Step, no_progress
from triage.base.timeutil import utc_now


@dataclass(frozen=True)
class RunSent:
    """How one run went across: sent (objects first, manifest last), or whole there already
    (`sent` False: nothing read but its manifest and the objects' names)."""

    run_id: str
    sent: bool
    objects_sent: int = 0
    objects_skipped: int = 0
    bytes_sent: int = 0
    objects_resumed: int = 0  # there already, of a run not whole there (an earlier try's)
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
    merges: tuple[LabelMerge, ...] = ()  # each label carried: where it was, moves refused
    objects_resumed: int = 0
    retried: int = 0  # operations triage ran again after the S3 client gave up (files.py)

    @classmethod
    def from_runs(cls, direction: str, remote: Remote, runs: list[RunSent],
                  merges: list[LabelMerge], retried: int = 0) -> SyncResult:
        return cls(direction, remote.name, remote.shown,
                   tuple(r.run_id for r in runs if r.sent),
                   tuple(r.run_id for r in runs if not r.sent),
                   sum(r.objects_sent for r in runs), sum(r.objects_skipped for r in runs),
                   sum(r.bytes_sent for r in runs), {m.name: m.now for m in merges},
                   tuple(merges), sum(r.objects_resumed for r in runs), retried)

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "remote": self.remote, "url": self.url,
                "runs_sent": list(self.runs_sent), "runs_present": list(self.runs_present),
                "objects_sent": self.objects_sent, "objects_skipped": self.objects_skipped,
                "objects_resumed": self.objects_resumed, "bytes_sent": self.bytes_sent,
                "retried": self.retried, "labels": dict(self.labels),
                "labels_was": {m.name: m.was for m in self.merges},
                "moves_refused": [{"label": m.name, "run": move.run_id, "time": move.time,
                                   "writer": move.writer}
                                  for m in self.merges for move in m.refused]}


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
        runs: list[RunSent] = []
        sent: set[str] = set()  # keys this transfer sent: found again, they are not resumed
        for number, (run_id, manifest) in enumerate(manifests.items()):
            meter.run(number)
            runs.append(_send_run(source, dest, run_id, manifest, meter, direction, sent))
        record_keys(dest, {r.run_id: manifests[r.run_id] for r in runs if r.sent})
        catalog.add_rows(dest, [catalog.catalog_row(dest, r.run_id, manifests[r.run_id],
                                                    dest.annotations.read(r.run_id))
                                for r in runs if r.reindex])
        merges = [_carry_label(source, dest, name) for name in chosen.labels]
        dest.acceptances.merge(a for a in source.acceptances.all() if a.run_id in manifests)
    return SyncResult.from_runs(direction, remote, runs, merges,
                                source.files.retried + dest.files.retried)


def _send_run(source: Store, dest: Store, run_id: str, manifest: dict[str, Any],
              meter: _Meter, direction: str, sent_keys: set[str]) -> RunSent:
    """One run, objects first and manifest last; a run new there is recorded as arrived by
    `direction` (its command is this store's choice, not theirs: `rerun` asks first);
    `sent_keys` gains the keys it sent."""
    parts = run_parts(run_id, manifest)
    if dest.runs.manifest_bytes(run_id) is not None \
            and all(dest.files.exists(p.key) for p in parts):
        changed = dest.annotations.merge(run_id, source.annotations.read(run_id))
        return RunSent(run_id, False, objects_skipped=len(parts), reindex=changed)
    sent = skipped = resumed = sent_bytes = 0
    for part in sorted(parts, key=lambda p: p.key):
        found = dest.files.size(part.key)
        if found is not None:
            _check_landed(dest, part, run_id, found)
            skipped += 1
            resumed += part.key not in sent_keys
        else:
            sent_bytes += _copy(source, dest, part, run_id, meter)
            sent_keys.add(part.key)
            sent += 1
    dest.annotations.merge(run_id, source.annotations.read(run_id))
    if not dest.runs.has(run_id):  # a run made there stays theirs; one arriving is foreign
        dest.annotations.arrived(run_id, direction, source.where, utc_now())
    if dest.runs.write_manifest(manifest) != run_id:  # the same document: the same identity
        raise StoreError(f"run {run_id[:12]} changed id on the way; this is a bug")
    return RunSent(run_id, True, sent, skipped, sent_bytes, objects_resumed=resumed,
                   reindex=True)


def _copy(source: Store, dest: Store, part: Part, run_id: str, meter: _Meter) -> int:
    """Stream one file across, hashing it as it goes; published only if it is what its name
    says. Returns its size."""
    what, sha = part.what, part.sha256

    def once() -> Staged:  # run again from the start by the source's retries when its read fails
        with source.files.fs.open_input_stream(source.files.path(part.key)) as stream:
            try:
                return dest.objects.stage_stream(_Metered(stream, meter))
            except SourceFailed as failed:
                raise failed.error from None

    try:
        staged = source.files.call("read", once)
    except FileNotFoundError:
        raise CorruptObject(f"the {what} of run {run_id[:12]} (object {sha[:12]}) is missing "
                            f"from store {source.where}, so it was not sent; `triage verify "
                            f"--store {source.where}` lists what is damaged") from None
    except OSError as exc:  # a local source's (a remote one's are StoreErrors)
        raise source.error(exc, "read") from None
    if staged.sha256 != sha:
        dest.objects.discard(staged)
        raise CorruptObject(f"the {what} of run {run_id[:12]} (object {sha[:12]}) in store "
                            f"{source.where} does not match its hash, so it was not sent; "
                            f"`triage verify --store {source.where}` lists what is damaged")
    dest.objects.publish(staged, part.key)
    return staged.bytes


def _check_landed(dest: Store, part: Part, run_id: str, size: int) -> None:
    """A file the destination has, by name, checked by size before a manifest names it (its
    bytes are hashed by `verify`, not by every push)."""
    what, sha = part.what, part.sha256
    if part.size is not None and size != part.size:
        raise CorruptObject(f"object {sha[:12]} ({what} of run {run_id[:12]}) in store "
                            f"{dest.where} is {size} bytes, not {part.size}; the run was not made "
                            f"visible there and the object was left as it is: `triage verify "
                            f"--store {dest.where}` names it, and once it is removed the push "
                            "sends it again")


def _carry_label(source: Store, dest: Store, name: str) -> LabelMerge:
    """A label's moves merged into the destination's history; a label moved before histories
    were kept (none here) is one move now, where the destination's pointer differs."""
    history = source.labels.history(name)
    if history:
        return dest.labels.add_moves(name, history)
    target = source.labels.all().get(name)
    was = dest.labels.all().get(name)
    if target and was != target:
        dest.labels.point(name, target)
    return LabelMerge(name, was, dest.labels.all().get(name))


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
    """A source stream whose reads are counted on a meter as they happen (a large report shows
    its bytes moving, not a stall), its failures marked as the source's (SourceStream)."""

    def __init__(self, stream: BinaryIO, meter: _Meter):
        self.stream, self.meter = SourceStream(stream), meter

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
