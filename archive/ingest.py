"""Archiving reports: validate, extract tables, store blobs, write the manifest, index.

Order matters for "visible only when complete": every input is validated before the store is
touched; tables and report copies are written as objects (side by side: on S3 each write waits
milliseconds on the server); then the manifest (the run becomes visible); then, side by side,
the dedup key, annotations and catalog segment (all re-derivable) and the read of the manifest
that tells whether another writer of the same run won; then labels. A failure before the
manifest leaves only unreferenced objects, which `triage gc` removes. Of several reports, each
run's part after its build (the store's: uploads, manifest, key) runs on a thread while the next
run is built (`_archive_all`).

What imports pyarrow (the tables, summaries and catalog modules, 0.3 s) is imported where it is
first needed, not with this module: a .nsys-rep's `nsys export` starts before it, and it is
imported on a thread while nsys runs (`capture/nsys.py`), as a capture's is while its profiler
runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.base.version import __version__
from triage.archive import lease, space
from triage.base.duck import interrupted
from triage.base.progress import Progress, Step, no_progress
from triage.base.hashing import hash_file
from triage.archive.manifest import MANIFEST_KIND, MANIFEST_VERSION
from triage.archive.canonical import canonical_json
from triage.archive.labels import check_label
from triage.archive.model import ArchiveBatch, ArchiveResult, Refusal, RunRecord
from triage.archive.objects import Staged
from triage.archive.run_manifests import manifest_file, run_parts
from triage.archive.store import STORE_MARKER, Store, store_files
from triage.capture import redact
from triage.capture.formats import (PreparedReport, TableBatch, detect_format,
                                    prepare_report, read_together)
from triage.base.errors import CorruptObject, Interrupted, TriageError, UsageError
from triage.base.timeutil import utc_now

if TYPE_CHECKING:
    import pyarrow as pa

    from triage.archive.tables import TableSet


@dataclass
class ReportInput:
    """One report file to put in a run, with what is known about who wrote it."""

    path: Path
    rank: int | None = None
    process: dict | None = None


@dataclass
class RunRequest:
    """Everything needed to archive one run."""

    inputs: list[ReportInput]
    source: str = "archive"
    label: str | None = None
    note: str | None = None
    nsys: str | None = None
    redact_patterns: tuple[str, ...] = ()
    capture: dict | None = None
    overrides: dict = field(default_factory=dict)
    # Rebuild the run's objects from its reports even when they look whole (`archive --repair`).
    repair: bool = False
    # Tables that come with the request rather than from a report (a capture's ncu listings).
    extra_tables: dict[str, pa.Table] = field(default_factory=dict)


def archive_files(store_path, paths: list[str], label: str | None = None,
                  note: str | None = None, nsys: str | None = None,
                  redact_patterns: tuple[str, ...] = (),
                  repair: bool = False, progress: Progress = no_progress) -> list[ArchiveResult]:
    """`triage archive --fail-fast REPORT...`: one run per report, all or none: every file is
    validated first, and the first refused stops the archive before the store is touched.

    A store this call creates is removed again when the archive fails and leaves it empty."""
    return archive_batch(store_path, paths, label=label, note=note, nsys=nsys,
                         redact_patterns=redact_patterns, repair=repair, progress=progress,
                         keep_going=False).results


def archive_batch(store_path, paths: list[str], label: str | None = None,
                  note: str | None = None, nsys: str | None = None,
                  redact_patterns: tuple[str, ...] = (), repair: bool = False,
                  progress: Progress = no_progress, keep_going: bool = True,
                  filed: Callable[[ArchiveResult], None] = lambda _result: None) -> ArchiveBatch:
    """`triage archive REPORT...`: one run per readable report. Every file is validated before
    the store is touched; with `keep_going` a refused one (unreadable, not a report, an nsys
    too old to export it) is set aside with its error and the others are archived, else the
    first refusal is raised and nothing is archived. A failure of the store itself (full,
    read-only) stops every report: the store guarantees hold for the runs written. `filed` is
    told of each run as soon as it is whole in the store (an interrupted batch has said what
    landed)."""
    if label and len(paths) > 1:
        raise UsageError("--label names one run; archive one report at a time to label it")
    if label:
        check_label(label)
    patterns = redact.user_patterns(redact_patterns)
    requests = [RunRequest([ReportInput(Path(p))], label=label, note=note, nsys=nsys,
                           redact_patterns=patterns, repair=repair) for p in paths]
    refused: list[Refusal] = []
    requests = _readable(requests, refused, keep_going)
    before = _existing(store_path)  # opened once: on S3 each open is a few requests
    found = [_archived_before(before, request) for request in requests]
    prepared: list[list[PreparedReport]] = []
    written: set[str] = set()  # the runs whose manifests this call may have written
    exports = ExitStack()  # the leases of nsys exports staged before the store is opened
    files = store_files(store_path)
    # What to undo in a local store made for nothing (a remote one is never removed).
    root_existed, new_store = (files.is_dir(""), not files.exists(STORE_MARKER)) \
        if files.local_root is not None else (True, False)

    def undo() -> None:
        _close(prepared)  # first: an nsys export staged in the new store is a file in it
        exports.close()  # and its lease
        if new_store and files.local_root is not None:
            _remove_new_store(files.local_root, keep_root=root_existed)

    try:
        # Every report is validated before the store is opened (or created; only an nsys
        # export, staged in it, makes it sooner): a bad input, even the last of several,
        # leaves the store untouched (or, kept going, out of it), and a store made for
        # nothing is removed again.
        requests, found = _prepared(store_path, requests, found, prepared, exports, refused,
                                    keep_going, progress)
        read_together(prepared)
        order = {path: number for number, path in reversed(list(enumerate(paths)))}
        refused.sort(key=lambda refusal: order.get(refusal.path, len(paths)))
        if not requests:
            undo()
            return ArchiveBatch([], refused)
        return ArchiveBatch(_stored(store_path, before, requests, prepared, found, written,
                                   progress, filed), refused)
    except BaseException as exc:
        undo()
        if (isinstance(exc, KeyboardInterrupt) or interrupted(exc)) \
                and not isinstance(exc, Interrupted):  # a DuckDB query's Ctrl-C is one too
            raise Interrupted(_visible(Store(files), written)) from None
        if space.is_disk_full(exc):  # a small write after the objects (manifest, catalog)
            raise space.sized(exc, Store(files).disk, space.COMMIT_BYTES) from None
        raise
    finally:
        _close(prepared)
        exports.close()


def _visible(store: Store, maybe_written: set[str]) -> tuple[str, ...]:
    """Of the runs an interrupted archive may have written, those now in the store: each is
    whole (a manifest is written after everything it references), filed for good."""
    try:
        return tuple(sorted(run_id for run_id in maybe_written if store.runs.has(run_id)))
    except (OSError, TriageError):  # the store says nothing more: name what may be there
        return tuple(sorted(maybe_written))


def _readable(requests: list[RunRequest], refused: list[Refusal],
              keep_going: bool) -> list[RunRequest]:
    """The requests whose file is a readable file; the others refused (or the first raised)."""
    kept = []
    for request in requests:
        try:
            check_readable(request.inputs[0].path)
        except TriageError as exc:
            if not keep_going:
                raise
            refused.append(Refusal(str(request.inputs[0].path), str(exc)))
        else:
            kept.append(request)
    return kept


def _prepared(store_path, requests: list[RunRequest], found: list[Seen],
              prepared: list[list[PreparedReport]], exports: ExitStack,
              refused: list[Refusal], keep_going: bool,
              progress: Progress) -> tuple[list[RunRequest], list[Seen]]:
    """Each report read (into `prepared`) unless archived whole before; a report refused is
    set aside in `refused` with its error (or, not `keep_going`, raised)."""
    kept: list[tuple[RunRequest, Seen]] = []
    for number, (request, seen) in enumerate(zip(requests, found, strict=True)):
        progress(Step(f"reading {request.inputs[0].path.name}", number, len(requests)))
        reports: list[PreparedReport] = []
        try:
            if not seen.whole:
                for item in request.inputs:
                    reports.append(prepare_report(item.path, nsys=request.nsys,
                                                  sha256=seen.sha256,
                                                  staging=_staging(store_path, exports)))
        except TriageError as exc:
            _close([reports])
            if not keep_going:
                raise
            refused.append(Refusal(str(request.inputs[0].path), str(exc)))
            continue
        except BaseException:
            _close([reports])
            raise
        prepared.append(reports)
        kept.append((request, seen))
    return [r for r, _ in kept], [f for _, f in kept]


def _stored(store_path, before: Store | None, requests: list[RunRequest],
            prepared: list[list[PreparedReport]], found: list[Seen], maybe_written: set[str],
            progress: Progress, filed: Callable[[ArchiveResult], None]) -> list[ArchiveResult]:
    """The validated reports written as runs, under one lease, and indexed; `maybe_written`
    gets the id of each run before its manifest may be written, `filed` each run once it is
    whole."""
    store = before or Store.open(store_path, create=True)
    store.check_writable()
    progress(Step("storing", len(requests), len(requests)))
    rows: list[dict] = []  # catalog rows: one segment for every run, written in the lease
    with lease.held(store, "archive") as held:  # one for every run (on S3, 4 requests)
        try:
            results = _archive_all(
                (_Steps(_found_steps(store, f.run_id, r, rows) if f.whole and f.run_id
                        else _run_steps(store, r, p, f, rows, maybe_written))
                 for r, p, f in zip(requests, prepared, found, strict=True)), filed)
        except BaseException:
            # A run whose manifest may be written and whose row is not: the lease stays,
            # so readers reconcile the catalog with runs/ until gc finds this writer gone
            # and indexes it first.
            if maybe_written - {row["id"] for row in rows} or not _index_quietly(store, rows):
                lease.keep(held)
            raise
        try:
            if rows:
                from triage.archive import catalog  # pyarrow: imported once a reader has started

                catalog.add_rows(store, rows)
        except BaseException:
            lease.keep(held)
            raise
        return results


def _found_steps(store: Store, run_id: str, request: RunRequest, rows: list[dict]
                 ) -> Generator[None, None, ArchiveResult]:
    """The steps of a report archived before (`_archived_before` found its run whole): nothing
    to read or build, only its indexing."""
    yield
    return _index_and_label(store, run_id, store.runs.read_manifest(run_id), request, new=False,
                            rows=rows)


def _index_quietly(store: Store, rows: list[dict]) -> bool:
    """Write the catalog rows of the runs an archive made before it failed, if the store still
    takes them (whether it did): the failure is the error to report."""
    from triage.archive import catalog

    try:
        if rows:
            catalog.add_rows(store, rows)
    except (OSError, TriageError):
        return False
    return True


def _close(prepared: list[list[PreparedReport]]) -> None:
    for items in prepared:
        for item in items:
            item.close()


def _remove_new_store(root: Path, keep_root: bool) -> None:
    """Undo a store this archive created and left empty (a report refused while its results
    were read): only empty folders are removed (rmdir), so a store another process has begun
    to fill meanwhile stays, and so does a folder the user made for it."""
    if not (root / STORE_MARKER).is_file():
        return
    for folder, dirs, _files in os.walk(root, topdown=False):
        for name in dirs:
            try:
                (Path(folder) / name).rmdir()
            except OSError:
                pass
    if os.listdir(root) != [STORE_MARKER]:
        return
    (root / STORE_MARKER).unlink(missing_ok=True)
    if not keep_root:
        try:
            root.rmdir()
        except OSError:
            pass


def archived_run(store_path, path: str) -> str | None:
    """The whole run `triage archive PATH` made before, found by the file's hash: nothing read
    but the bytes, nothing written (a RUN that names a report, in a store that may be
    read-only); None where there is none, or no store."""
    seen = _archived_before(_existing(store_path), RunRequest([ReportInput(Path(path))]))
    return seen.run_id if seen.whole else None


@dataclass(frozen=True)
class Seen:
    """What the store said of a report before it was read: its sha256 (None: not hashed), and
    the run its dedup key names (`looked_up`: the key was read), whole or to be rebuilt. An
    archive that looked does not look again (on S3 a request each)."""

    sha256: str | None = None
    looked_up: bool = False
    run_id: str | None = None
    whole: bool = False


def _existing(store_path) -> Store | None:
    """The store, if there is one to open (else the real attempt creates it, or says why not)."""
    try:
        return Store.open(store_path)
    except (OSError, TriageError):
        return None


def _archived_before(store: Store | None, request: RunRequest) -> Seen:
    """The run of a report archived before, found by the file's hash alone, and the hash.

    Reading a report means running `nsys export` (minutes for a large capture, and an nsys that
    may be missing here) or parsing every ncu result (seconds, each time a RUN names the file:
    `triage diff a.ncu-rep b.ncu-rep`); a report already in the store is the same bytes,
    validated then. The hash is passed on, so a new nsys report is not hashed twice.
    """
    path = request.inputs[0].path
    try:
        if len(request.inputs) != 1 or store is None:
            return Seen()
        tool = "ncu" if detect_format(path) in ("ncu-rep", "nsight-cuprof-report") else "nsys"
        digest = hash_file(path)[0]
        run_id = store.runs.lookup_key(dedup_key(tool, [digest], request))
        # not whole: to be exported again and rebuilt (archive_run)
        whole = run_id is not None and not request.repair \
            and _intact(store, run_id, store.runs.read_manifest(run_id))
        return Seen(digest, True, run_id, whole)
    except (OSError, TriageError):  # no store yet, or a problem the real attempt will report
        return Seen()


def _staging(store_path, leases: ExitStack | None = None) -> Callable[[str], Path]:
    """Where a reader writes what it converts (nsys's export: up to GBs): temp files under the
    store's objects/, the store made on first use, so that what a killed archive leaves is a
    temp file `triage gc` removes (the reader in capture/ knows nothing of the store).

    An export staged before its archive's lease is taken (`archive_files` reads every report
    first) takes a lease of its own into `leases`, held until the caller closes it, so that gc
    does not take the export of a live archive."""
    def new_file(suffix: str) -> Path:
        store = Store.open(store_path, create=True)
        if leases is not None:
            leases.enter_context(lease.held(store, "export"))
        return store.objects.new_temp(suffix)

    return new_file


def check_readable(path: Path) -> None:
    """One-line errors for inputs that are not readable files."""
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. a folder on the way without search (x) permission
        reason = (exc.strerror or str(exc)).lower()
        raise TriageError(f"{path}: {reason}; check the permissions of the file "
                          "and of the folders above it") from None
    if not exists:
        raise TriageError(f"{path}: no such file")
    if path.is_dir():
        raise TriageError(f"{path}: is a directory; pass the report files inside it")
    if not path.is_file():  # reading a FIFO or a device would block or never end
        raise TriageError(f"{path}: not a regular file (a pipe or device); pass a report file")
    if not os.access(path, os.R_OK):
        raise TriageError(f"{path}: permission denied; check the file's permissions")


def dedup_key(tool: str, digests: list[str], request: RunRequest) -> str:
    """Same reports + same redaction = same run, whatever triage read them with (its version,
    its tables' schema version, the nsys export format): what the run id hashes too."""
    doc = {"tool": tool, "reports": digests, "redact": sorted(request.redact_patterns),
           "source": request.source}
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def dedup_key_of(manifest: dict) -> str | None:
    """The dedup key of an archived run, rebuilt from its manifest (an imported run gets the key
    `archive` would look for, whatever schema version its tables have); None for what archive
    never keys (captures, failed attempts). User redaction patterns are in the manifest when
    there were any (a run archived with them before the manifest recorded them keys as if
    without)."""
    reports = manifest.get("reports") or []
    if manifest.get("capture") is not None or not reports:
        return None
    request = RunRequest([], source=manifest.get("source") or "archive",
                         redact_patterns=tuple(manifest.get("redact_patterns") or ()))
    return dedup_key(manifest["tool"], [r["sha256"] for r in reports], request)


@lease.holding("archive")
def archive_run(store: Store, request: RunRequest) -> ArchiveResult:
    """Archive the reports of one request as one run (or find the run that has them): a
    capture's, whose reports are read here (`archive_files` drives `_run_steps` itself)."""
    return _Steps(_run_steps(store, request, None, Seen(), None, None)).finish()


def _run_steps(store: Store, request: RunRequest, prepared: list[PreparedReport] | None,
               seen: Seen, rows: list[dict] | None, maybe_written: set[str] | None
               ) -> Generator[None, None, ArchiveResult]:
    """`archive_run`'s work, paused twice for `_archive_all`: once its readers have started
    (an ncu reader forks its workers' relay then: threads may run from there on), and once
    its tables and copies are built (what is left waits on the store, and may run on a
    thread while the next run is built)."""
    if prepared is None:
        prepared = [prepare_report(i.path, nsys=request.nsys, staging=_staging(store.files.url))
                    for i in request.inputs]
    try:
        tools = {p.tool for p in prepared}
        if len(tools) > 1:
            raise UsageError("one run holds reports of one tool; archive ncu and nsys separately")
        digests = [p.sha256 for p in prepared]
        key = dedup_key(prepared[0].tool, digests, request) if request.capture is None else None
        existing = seen.run_id if seen.looked_up else store.runs.lookup_key(key) if key else None
        if existing and not seen.looked_up:
            found = store.runs.read_manifest(existing)
            if not request.repair and _intact(store, existing, found):
                return _index_and_label(store, existing, found, request, new=False, rows=rows)
        space.check_room(store.disk, sum(_size(p.path) for p in prepared) + space.COMMIT_BYTES)
        # The readers start before the tables' imports (pyarrow: 0.1 s), which a reader's
        # first query (SQLite sorting a large table) runs beside.
        streams = [p.batches(index) for index, p in enumerate(prepared)]
        from triage.archive.tables import TableSet

        with space.reserved(store.files.temp_folder("objects"), space.COMMIT_BYTES) as room, \
                TableSet(store) as tables, _staged_reports(store) as blobs:
            yield  # the readers have started
            manifest = _stage_run(store, request, prepared, streams, digests, tables, blobs)
            room.release()  # for the manifest, key, annotations and catalog segment
            run_id, _data = manifest_file(manifest)
            yield  # built
            if maybe_written is not None:
                maybe_written.add(run_id)
            first, present = _publish_run(store, run_id, manifest, tables, blobs, request.repair)
        if first is not None:  # another writer archived the same run first: it wins
            if key:
                store.runs.record_key(key, run_id)
            return _index_and_label(store, run_id, first, request, new=False,
                                    repaired=run_id == existing, rows=rows)
        new = run_id != existing and not present
        return _index_and_label_winner(store, run_id, manifest, request, key, new=new,
                                       repaired=run_id == existing or present, rows=rows)
    finally:
        for item in prepared:
            item.close()


class _Steps:
    """One run's `_run_steps`, driven a pause at a time, with its result once they end."""

    def __init__(self, steps: Generator[None, None, ArchiveResult]) -> None:
        self.steps = steps
        self.result: ArchiveResult | None = None
        self.done = False  # ended: with `result`, or raised

    def advance(self) -> None:
        """Run to the next pause, or to the end (then `result` is set)."""
        if self.done:
            return
        try:
            next(self.steps)
        except StopIteration as end:
            self.done, self.result = True, end.value
        except BaseException:
            self.done = True
            raise

    def finish(self) -> ArchiveResult:
        while not self.done:
            self.advance()
        assert self.result is not None  # a step that raised is never finished
        return self.result

    def close(self) -> None:
        """Give up a run not finished: what it built is discarded (its `with` blocks end)."""
        self.steps.close()


def _archive_all(runs: Iterable[_Steps], filed: Callable[[ArchiveResult], None]
                 ) -> list[ArchiveResult]:
    """Finish each run, in order, the store's part of one (its uploads, manifest, key and
    annotations) on a thread while the next one is built: on S3 that part waits about 50 ms
    on the server per run, the build is CPU that one core does meanwhile.

    Run N+1's readers start (an ncu reader forks) before run N's thread does, and that thread
    ends before run N+2's readers start: no fork while a thread of this archive runs. A failure
    (Ctrl-C too, even one that cuts the wait for the thread short) stops the archive once the
    thread has ended, so the caller's leases and bookkeeping see all it wrote, and `filed` is
    told of the run it stored; a run built and not stored is discarded."""
    results: list[ArchiveResult] = []
    awaiting_store: _Steps | None = None  # built, its store part still to do
    run: _Steps | None = None
    stored: Future[ArchiveResult] | None = None
    try:
        for run in runs:
            run.advance()  # its readers started (or it is done: the run was there)
            with ThreadPoolExecutor(max_workers=1) as thread:  # ends before the next fork
                stored = thread.submit(lease.carried(awaiting_store.finish)) \
                    if awaiting_store else None
                awaiting_store = run
                run.advance()  # built
            done, stored = stored, None
            if done is not None:
                results.append(done.result())
                filed(results[-1])
        if awaiting_store is not None:
            results.append(awaiting_store.finish())
            filed(results[-1])
    finally:
        try:
            if stored is not None:  # the build beside it failed: once stored, it is filed
                wait([stored])
                if stored.exception() is None:
                    filed(stored.result())
        finally:
            for given_up in (awaiting_store, run):
                if given_up is not None:
                    given_up.close()  # nothing, once it is finished
    return results


@contextmanager
def _staged_reports(store: Store) -> Iterator[list[Staged]]:
    """The reports' copies staged for a run, published beside its tables (`_publish_run`);
    those not published when the run ends (it failed, or another writer had it) are removed."""
    staged: list[Staged] = []
    try:
        yield staged
    finally:
        for copy in staged:
            store.objects.discard(copy)


def _publish_run(store: Store, run_id: str, manifest: dict, tables: TableSet,
                 reports: list[Staged] | None = None, repair: bool = False
                 ) -> tuple[dict | None, bool]:
    """Publish the run's tables and report copies side by side, then its manifest: the run is
    visible from then on. Returns (the manifest of a whole run another writer made first, or
    None; whether a run was there whose manifest this one replaces, its tables lost, or any
    with `repair`).

    Write-once, first writer wins, looked for once, after the upload (a writer who lands
    meanwhile is found; one request on S3): where another writer's whole run is there, this
    one's tables (the same rows in other bytes, another pyarrow) are removed again and its
    manifest is not written. (The key said no run had these reports; that it is there is
    rare: a racing writer, a key lost.) Two writers who both find none both write; reading the
    manifest back then tells each who won (`_index_and_label_winner`)."""
    uploads: list[Callable[[], object]] = [partial(tables.publish, run_id)]
    lease.side_by_side(uploads + [partial(store.objects.publish, copy) for copy in reports or []])
    present = store.runs.has(run_id)  # damaged too: its annotations are the user's, kept
    first = _whole_run(store, run_id) if present and not repair else None
    if first is not None:
        if first.get("tables") != manifest.get("tables"):
            _drop_tables(store, run_id, manifest, first)
        return first, present
    store.runs.write_manifest(manifest, replace=True)  # looked for just now
    return None, present


def _index_and_label_winner(store: Store, run_id: str, manifest: dict, request: RunRequest,
                            key: str | None, new: bool, repaired: bool,
                            rows: list[dict] | None = None) -> ArchiveResult:
    """After a run's manifest is written: its key, annotations and catalog row, side by side
    with reading the manifest back, which tells whether another writer of the same run won;
    then the request's label.

    Engines read tables/<name>/ in place, so a loser's tables (the same rows in other bytes:
    another pyarrow) must not stay beside the winner's: the loser removes its own, never
    another writer's (whose manifest may be on its way), and indexes the run again from the
    winner's manifest (its row named the tables removed; the newest row of a run counts).
    A killed writer's, or a repaired run's old ones, no manifest names: `triage gc` removes
    them."""
    from triage.archive import catalog

    done: list[Any] = lease.side_by_side(
        [partial(store.runs.read_manifest, run_id),
         partial(_index, store, run_id, manifest, request, new, rows)]
        + ([partial(store.runs.record_key, key, run_id)] if key else []))
    won, annotations = done[0], done[1]
    if won.get("tables") != manifest.get("tables"):
        _drop_tables(store, run_id, manifest, won)
        if new or request.note:
            _add_row(store, catalog.catalog_row(store, run_id, won, annotations), rows)
        manifest, new = won, False
    if request.label:
        store.labels.point(request.label, run_id)
    return ArchiveResult(RunRecord.from_manifest(run_id, manifest), new, repaired)


def _drop_tables(store: Store, run_id: str, mine: dict, kept: dict) -> None:
    kept_keys = {p.key for p in run_parts(run_id, kept)}
    for part in run_parts(run_id, {"tables": mine.get("tables")}):
        if part.key not in kept_keys:
            try:
                store.files.delete(part.key)
            except OSError as exc:
                raise store.error(exc, "clean") from None


def _whole_run(store: Store, run_id: str) -> dict | None:
    """The manifest of a run already in the store with all its objects, else None (damaged, or
    its tables lost: then the new manifest replaces it)."""
    try:
        found = store.runs.read_manifest(run_id)
    except CorruptObject:
        return None
    return found if _intact(store, run_id, found) else None


def _intact(store: Store, run_id: str, manifest: dict) -> bool:
    """Whether every file a run references is there with its recorded size: one stat each,
    so that archiving a report again repairs a run whose tables were lost, without hashing.
    (A same-size flipped bit is `verify`'s to find, and `archive --repair`'s to mend.)"""
    return all(_has(store.size_of(part.key), part.size) for part in run_parts(run_id, manifest))


def _has(found: int | None, recorded: int | None) -> bool:
    return found is not None and recorded in (None, found)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _index_and_label(store: Store, run_id: str, manifest: dict, request: RunRequest,
                     new: bool, repaired: bool = False,
                     rows: list[dict] | None = None) -> ArchiveResult:
    """How every archive of a run ends, whoever wrote its manifest: its annotations and catalog
    row (`_index`), then the request's label."""
    _index(store, run_id, manifest, request, new, rows)
    if request.label:
        store.labels.point(request.label, run_id)
    return ArchiveResult(RunRecord.from_manifest(run_id, manifest), new, repaired)


def _index(store: Store, run_id: str, manifest: dict, request: RunRequest, new: bool,
           rows: list[dict] | None = None) -> dict:
    """Annotate a run (first archive time, the request's note) and give a new or newly noted
    run its catalog row (into `rows`, else written at once); its annotations."""
    from triage.archive import catalog

    annotations = store.annotations.annotate(run_id, utc_now(precise=True), request.note,
                                             new_run=new)
    if new or request.note:
        _add_row(store, catalog.catalog_row(store, run_id, manifest, annotations), rows)
    return annotations


def _add_row(store: Store, row: dict, rows: list[dict] | None) -> None:
    """A run's catalog row, kept for the caller's one segment (`rows`) or written now. A run
    without its row yet is indexed by any reader from its manifest (catalog.py): the row only
    makes reading quick."""
    from triage.archive import catalog

    if rows is None:
        catalog.add_rows(store, [row])
    else:
        rows.append(row)


def _stage_run(store: Store, request: RunRequest, prepared: list[PreparedReport],
               streams: list[Iterator[TableBatch]], digests: list[str], tables: TableSet,
               blobs: list[Staged]) -> dict:
    """Write every report's batches (`streams`) into `tables`, stage the reports' copies into
    `blobs`, assemble the manifest (tables and copies are sealed, to be published by
    `_publish_run`).

    The readers were started before any thread (an ncu reader forks its workers' relay then,
    and a fork beside a running thread can deadlock: `_run_steps`). The raw reports are copied into
    the store on a worker thread while they are read (copying and hashing release the GIL).
    Nothing becomes visible until every table and copy is whole on disk (the room for the
    manifest is held by the caller: `space`), so a full disk leaves nothing of the run behind.
    """
    from triage.archive.summaries import SUMMARIES, compute_summaries, follow_summaries
    from triage.schemas.tables import tables_for_tool

    failed = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as copier:
        copies = [copier.submit(store.objects.stage_file, p.path, failed) for p in prepared]
        try:
            tool = prepared[0].tool
            for name in tables_for_tool(tool):
                tables.writer(name)
            summaries = [n for n in tables_for_tool(tool) if n in SUMMARIES]
            follow_summaries(tables, summaries)
            for stream in streams:
                write_batches(tables, stream)
            provenances = [p.provenance() for p in prepared]
            compute_summaries(tables, summaries)
            write_batches(tables, request.extra_tables.items())
            tables.close()
            blobs.extend(copy.result() for copy in copies)
            table_refs = tables.seal()
            reports = [_report_entry(p, s, d, i, prov) for p, s, d, i, prov
                       in zip(prepared, blobs, digests, request.inputs, provenances,
                              strict=True)]
        except BaseException as exc:
            failed.set()
            needed = (tables.bytes_written() + sum(_size(p.path) for p in prepared)
                      + space.COMMIT_BYTES)
            _discard_copies(store, copies)
            tables.discard()
            if space.is_disk_full(exc):
                raise space.sized(exc, store.disk, needed) from None
            raise
    return _manifest(request, provenances, reports, table_refs)


def write_batches(tables: TableSet, batches: Iterable[TableBatch]) -> None:
    """The one place a reader's rows become table files."""
    for name, batch in batches:
        tables.writer(name).write_arrow(batch)


def _discard_copies(store: Store, copies: list[Future]) -> None:
    """Remove the temp copies of a run that failed (those still being made stop at their
    next chunk and remove themselves)."""
    for copy in copies:
        if not copy.cancel() and copy.exception() is None:
            store.objects.discard(copy.result())


@lease.holding("archive")
def record_attempt(store: Store, request: RunRequest, provenance: dict) -> ArchiveResult:
    """A run without a report: a capture that produced none (the attempt is not lost), or a
    bench, whose tables come with the request."""
    from triage.archive.tables import TableSet

    with TableSet(store) as tables:
        write_batches(tables, request.extra_tables.items())
        manifest = _manifest(request, [provenance], [], tables.seal())
        run_id, _data = manifest_file(manifest)
        first, present = _publish_run(store, run_id, manifest, tables)
    return _index_and_label(store, run_id, first or manifest, request,
                            new=first is None and not present)


def _report_entry(prepared: PreparedReport, staged: Staged, digest: str, given: ReportInput,
                  provenance: dict) -> dict:
    """A report's entry in the manifest, from its staged copy (published by `_publish_run`)."""
    if staged.sha256 != digest:
        raise TriageError(f"{prepared.path}: the file changed while it was being archived; "
                          "archive it again once it is complete")
    return {
        "name": _file_name(prepared.path), "sha256": staged.sha256, "bytes": staged.bytes,
        "format": prepared.format,
        "tool_version": provenance.get("tool_version"), "created": provenance.get("created"),
        "host": _host_name(provenance),
        "rank": given.rank, "process": given.process, "export": provenance.get("export"),
    }


def _file_name(path: Path) -> str:
    """A report's file name as text: bytes that are not UTF-8 (a name from another system)
    become U+FFFD, as report text does, so the manifest can be written."""
    return path.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _host_name(provenance: dict) -> str | None:
    """The name of the host a report was captured on, where its reader found one."""
    host = provenance["environment"]["host"] if "environment" in provenance else None
    return host.get("name") if host else None


def _manifest(request: RunRequest, provenances: list[dict], reports: list[dict],
              table_refs: dict) -> dict:
    from triage.schemas.tables import tables_version

    first = provenances[0]
    extra = redact.extra_patterns(request.redact_patterns)
    manifest = {
        "kind": MANIFEST_KIND,
        "schema_version": MANIFEST_VERSION,
        "tables_schema_version": tables_version(),
        "source": request.source,
        "tool": first["tool"],
        "tool_version": first.get("tool_version"),
        "created": first.get("created"),
        "command": redact.redact_command_line(first.get("command"), extra),
        "environment": _redacted_environment(first.get("environment") or {}, extra),
        "application": _redacted_application(first.get("application"), extra),
        "settings": first.get("settings") or {},
        "settings_source": first.get("settings_source") or {},
        "evidence": first.get("evidence") or {},
        "versions": first.get("versions") or {},
        "reports": reports,
        "tables": table_refs,
        "kernels": table_refs.get("kernels", {}).get("rows", 0),
        "notices": sorted({n for p in provenances for n in p.get("notices", [])}),
        "extractor": {"triage": __version__, **_library_versions(first["tool"])},
        "capture": request.capture,
    }
    if request.redact_patterns:  # only then: runs without user patterns keep their ids
        manifest["redact_patterns"] = sorted(request.redact_patterns)
    manifest.update(request.overrides)
    return json.loads(canonical_json(manifest))


def _redacted_environment(environment: dict, extra) -> dict:
    out = dict(environment)
    if out.get("variables"):
        out["variables"] = redact.redact_mapping(out["variables"], extra)
    return out


def _redacted_application(application: dict | None, extra) -> dict | None:
    if not application or not application.get("argv"):
        return application
    return {**application, "argv": redact.redact_argv(application["argv"], extra)}


@lru_cache(maxsize=None)
def _library_versions(tool: str) -> dict[str, str | None]:
    names = {"ncu": ["ncu-report", "pyarrow"], "nsys": ["pyarrow", "duckdb"]}.get(tool, ["pyarrow"])
    return {name: _installed_version(name) for name in names}


def _installed_version(name: str) -> str | None:
    """A library's version as its installer recorded it: the Version of the one dist-info
    folder beside the module in use, else what importlib.metadata finds (it imports email and
    zipfile and scans every path entry: 20-50 ms, most of an ncu archive's own work)."""
    import importlib.util

    module = name.replace("-", "_")
    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin).parent.parent if spec is not None and spec.origin else None
    found = list(origin.glob(f"{module}-*.dist-info")) if origin is not None else []
    if len(found) == 1:
        try:
            with open(found[0] / "METADATA", encoding="utf-8") as metadata:
                for line in metadata:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # the headers end: no version there
        except OSError:
            pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
