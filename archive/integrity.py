"""Checking and cleaning a store: `triage verify` re-hashes, `triage gc` reclaims space.

What verify counts as wrong (exit 1): a manifest whose bytes do not hash to its id or that cannot
be read; an object or table a run references that is missing or whose bytes do not hash to its
name; a catalog segment whose name is not the hash of its bytes; a key or label that points at no
run; a manifest or annotation that its schema refuses (readers skip those); a file whose name
has no place in the layout.

A file that could not be read at all (the network after every retry, a permission) is
`unreachable`, never `corrupt`: only bytes that were read and do not match are damage, and the
two call for different fixes (run verify again; repair). Exit 6 when something was unreachable
and nothing damaged.

It also checks what no run owns: the store marker must be the bytes triage writes, and
annotations must hash to the checksum they carry (older ones carry none: for them only their
schema, field names and canonical form can be checked).

What it only reports (exit 0): what an interrupted archive leaves behind by design (see
store.py): `.tmp-*` files, objects that no run references (yet), annotations of no run, leases of
writers that are gone. `triage gc` removes those once they are older than a grace period, and
never while a live writer may need them (lease.py): an archive writes its objects before its
manifest, so until then nothing references them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from triage.archive import atomic, catalog, lease, validate
from triage.archive.files import Entry
from triage.archive.canonical import SEAL, canonical_json, seal_of
from triage.archive.labels import LABEL_RE
from triage.archive.run_manifests import Part, manifest_id, run_parts
from triage.archive.store import STORE_MARKER, Store, marker_bytes
from triage.archive.table_files import TABLES_DIR, TABLE_KEY_RE
from triage.base.errors import StoreError
from triage.base.progress import Progress, Step, no_progress
from triage.base.hashing import SHA256_RE

DAMAGE_KINDS = ("missing", "corrupt", "dangling", "unexpected")
ERROR_KINDS = (*DAMAGE_KINDS, "unreachable")
GC_TRASH_PREFIX = atomic.TMP_PREFIX + "gc-"


@dataclass(frozen=True)
class Finding:
    """One thing verify found: its kind, the file (relative to the store root) and why."""

    kind: str
    path: str
    detail: str
    run: str | None = None

    @property
    def is_error(self) -> bool:
        return self.kind in ERROR_KINDS

    @property
    def shown_path(self) -> str:
        """The file name as printable text: one that is not UTF-8 (made by hand) keeps its
        readable part, the rest U+FFFD (`path` keeps the real name, for gc)."""
        return self.path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.shown_path, "detail": self.detail,
                "run": self.run}


@dataclass(frozen=True)
class VerifyReport:
    """What verify checked and found: `triage verify --json` (schemas/verify.schema.json);
    `ok` when nothing is wrong (leftovers are not wrong)."""

    scope: str  # "runs" (the runs named) or "store" (every run, and what no run owns)
    runs: int
    objects: int
    bytes: int
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def leftovers(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def damage(self) -> list[Finding]:
        return [f for f in self.findings if f.kind in DAMAGE_KINDS]

    @property
    def unreachable(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "unreachable"]

    @property
    def verdict(self) -> str:
        """ok; damaged (bytes read that are wrong, or files missing); or unreachable (some
        files could not be read, and none read was wrong: run verify again)."""
        return "damaged" if self.damage else "unreachable" if self.unreachable else "ok"

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict, "scope": self.scope, "runs": self.runs,
                "objects": self.objects, "bytes": self.bytes,
                "errors": [f.to_json() for f in self.errors],
                "leftovers": [f.to_json() for f in self.leftovers]}


def _unreadable(path: str, what: str, exc: Exception, run: str | None = None) -> Finding:
    """A file that could not be read (no byte of it judged): the network after every retry, a
    permission, an I/O error. `run verify again`, not repair, is the fix."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return Finding("unreachable", path, f"{what} could not be read: {reason}", run)


# -- references ----------------------------------------------------------------------------------


def _read_manifest(store: Store, run_id: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes and parsed document of a manifest; ValueError when it is not one."""
    data = store.files.read(store.runs.key(run_id))
    manifest = validate.load_json(data)
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    return data, manifest


def _load_manifest(store: Store, run_id: str) -> tuple[bytes, dict[str, Any]]:
    """`_read_manifest`, also refusing a malformed reference list (ValueError/KeyError...)."""
    data, manifest = _read_manifest(store, run_id)
    run_parts(run_id, manifest)
    return data, manifest


def referenced_keys(store: Store, run_ids: list[str]) -> set[str]:
    """The key of every file the runs reference; refuses when a manifest cannot be read (gc
    must not guess what an unreadable manifest references)."""
    out: set[str] = set()
    for run_id in run_ids:
        try:
            out.update(part.key for part in run_parts(run_id, _load_manifest(store, run_id)[1]))
        except FileNotFoundError:
            continue  # not there any more: nothing to protect
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"manifest runs/{run_id}.json is unreadable ({exc}); gc cannot tell "
                             "what it references; `triage verify` lists what is wrong") from None
    return out


# -- verify --------------------------------------------------------------------------------------


def verify(store: Store, refs: list[str] | None = None,
           progress: Progress = no_progress) -> VerifyReport:
    """Re-hash what the given runs (default: all) reference; for the whole store, also look for
    orphans, leftovers, bad catalog segments and keys/labels that point at no run."""
    from triage.archive.runs import resolve

    run_ids = list(dict.fromkeys(resolve(store, ref) for ref in refs)) if refs \
        else store.runs.ids()
    findings: list[Finding] = []
    hashed: dict[str, int | None] = {}  # key -> the bytes read, None when it could not be
    for number, run_id in enumerate(run_ids):
        progress(Step("re-hashing runs", number, len(run_ids)))
        _check_run(store, run_id, findings, hashed)
    if not refs:
        progress(Step("scanning the store for leftovers"))
        _check_marker(store, findings)
        _scan_objects(store, set(hashed), findings)
        _scan_tables(store, set(hashed), findings)
        _scan_temps(store, findings)
        _scan_leases(store, findings)
        _check_segments(store, findings)
        _check_pointers(store, findings)
        _check_label_clocks(store, findings)
        _check_annotations(store, set(run_ids), findings)
    read = [size for size in hashed.values() if size is not None]
    return VerifyReport("runs" if refs else "store", len(run_ids), len(read), sum(read),
                        tuple(findings))


def _check_marker(store: Store, findings: list[Finding]) -> None:
    """The marker is one fixed document: a flip that `Store.open` still accepts (a key name, so
    that the version reads as 0) is damage all the same."""
    expected = marker_bytes()
    try:
        intact = store.files.read(STORE_MARKER) == expected
    except FileNotFoundError:
        intact = False
    except (OSError, StoreError) as exc:
        findings.append(_unreadable(STORE_MARKER, "store marker", exc))
        return
    if not intact:
        findings.append(Finding("corrupt", STORE_MARKER, "store marker is not what triage "
                                f"writes; write {expected.decode()} into it"))


def _check_run(store: Store, run_id: str, findings: list[Finding],
               hashed: dict[str, int | None]) -> None:
    """The manifest's bytes against its id, then every object it references."""
    where = f"runs/{run_id}.json"
    try:
        data, manifest = _read_manifest(store, run_id)
    except FileNotFoundError:
        findings.append(Finding("missing", where, "manifest vanished", run_id))
        return
    except (OSError, StoreError) as exc:
        findings.append(_unreadable(where, "manifest", exc, run_id))
        return
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        findings.append(Finding("corrupt", where, f"unreadable manifest ({exc})", run_id))
        return
    digest = manifest_id(data)
    if digest is None:
        findings.append(Finding("corrupt", where, "bytes do not match their seal",
                                run_id))
    elif digest != run_id:
        findings.append(Finding("corrupt", where, f"content hashes to {digest[:12]}, "
                                "not to the run id", run_id))
    else:
        _check_schema(manifest, where, run_id, findings)
    try:
        parts = run_parts(run_id, manifest)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if not any(f.path == where for f in findings):  # else said already
            findings.append(Finding("corrupt", where, f"unreadable manifest ({exc})",
                                    run_id))
        return
    for part in parts:
        if part.key not in hashed:
            hashed[part.key] = _check_part(store, part, run_id, findings)


def _check_schema(manifest: dict[str, Any], where: str, run_id: str,
                  findings: list[Finding]) -> None:
    """A manifest can hash to its id and still not be one (an older import let such in)."""
    try:
        validate.check(manifest, validate.MANIFEST)
    except validate.SchemaMismatch as exc:
        findings.append(Finding("corrupt", where, f"not what the manifest schema says "
                                f"({exc}); readers skip this run", run_id))


def _check_part(store: Store, part: Part, run_id: str, findings: list[Finding]) -> int | None:
    """The bytes of one object or table hashed against its name: how many were read (damaged
    or not), None when it could not be read."""
    where, what, sha, size = part.key, part.what, part.sha256, part.size
    try:
        digest, actual = store.files.digest(where)
    except FileNotFoundError:
        findings.append(Finding("missing", where, f"{what} of run {run_id[:12]}", run_id))
        return None
    except (OSError, StoreError) as exc:
        findings.append(_unreadable(where, f"{what} of run {run_id[:12]}", exc, run_id))
        return None
    if digest != sha or (size is not None and size != actual):
        findings.append(Finding("corrupt", where, f"{what} of run {run_id[:12]}: bytes "
                                f"hash to {digest[:12]} ({actual} bytes)", run_id))
    return actual


def _scan_objects(store: Store, referenced: set[str], findings: list[Finding]) -> None:
    """Files under objects/ that no run references, temp files, and strangers (one listing
    of the whole tree: on S3, a request per thousand objects)."""
    inner: dict[str, list[Entry]] = {}
    top = []
    for entry in store.files.tree("objects"):
        parts = entry.key.split("/")
        if len(parts) == 2:
            top.append(entry)
        elif len(parts) == 3:
            inner.setdefault(parts[1], []).append(entry)
    for entry in top:
        if entry.name.startswith(atomic.TMP_PREFIX):
            findings.append(Finding("temp", entry.key, "unfinished write"))
        elif entry.is_dir and re.fullmatch(r"[0-9a-f]{2}", entry.name):
            for found in inner.get(entry.name, []):
                _classify(found, SHA256_RE.match(entry.name + found.name) is not None,
                          referenced, findings)
        else:
            findings.append(Finding("unexpected", entry.key,
                                    "not part of the store layout"))


def _scan_tables(store: Store, referenced: set[str], findings: list[Finding]) -> None:
    """Files under tables/ (tables/<name>/run_id=<id>/<sha256>.parquet) that no run
    references, temp files, and strangers; folders are only what holds them (one listing)."""
    for entry in store.files.tree(TABLES_DIR):
        if entry.is_dir:
            continue
        _classify(entry, TABLE_KEY_RE.match(entry.key) is not None, referenced, findings)


def _classify(entry: Entry, fits: bool, referenced: set[str], findings: list[Finding]) -> None:
    """An object's or table's file: a temp file, a stranger (`fits`: its key has a place in
    the layout), an orphan, or one a run references (no finding)."""
    if entry.name.startswith(atomic.TMP_PREFIX):
        findings.append(Finding("temp", entry.key, "unfinished write or gc"))
    elif not fits or not entry.is_file:
        findings.append(Finding("unexpected", entry.key, "not part of the store layout"))
    elif entry.key not in referenced:
        findings.append(Finding("orphan", entry.key, f"no run references it "
                                f"({entry.size} bytes); `triage gc` removes it"))


FOLDERS = ("runs", "keys", "labels", "annotations", "index", "leases", "aliases",
           "label-history", "acceptances", "remotes", "notes", "arrivals")


def _base_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _scan_temps(store: Store, findings: list[Finding]) -> None:
    for folder in FOLDERS:
        for key in store.files.files(folder):
            if _base_name(key).startswith(atomic.TMP_PREFIX):
                findings.append(Finding("temp", key, "unfinished write"))
    for key in store.files.files("runs"):
        name = _base_name(key)
        if not name.startswith(atomic.TMP_PREFIX) and (
                not name.endswith(".json") or not SHA256_RE.match(name[:-5])):
            findings.append(Finding("unexpected", key, "not a run manifest name"))


def _scan_leases(store: Store, findings: list[Finding]) -> None:
    """Leases of writers that are gone (killed, or on another host for over a day); a live
    writer's lease is no finding."""
    for found in lease.leases(store):
        if not found.live:
            findings.append(Finding("temp", found.key, "lease of a writer "
                                    f"that is gone ({found.holder}); `triage gc` "
                                    "removes it"))


def _check_segments(store: Store, findings: list[Finding]) -> None:
    """A segment's name carries the hash of its bytes."""
    for key in catalog.segments(store):
        expected = catalog.segment_sha(key)
        try:
            digest = catalog.segment_digest(store, key)
        except FileNotFoundError:
            continue  # merged away while we looked
        except (OSError, StoreError) as exc:
            findings.append(_unreadable(key, "catalog segment", exc))
            continue
        if digest != expected:
            findings.append(Finding("corrupt", key, "catalog segment bytes "
                                    f"hash to {digest[:12]}; delete it, the catalog is "
                                    "rebuilt from runs/"))


def _check_label_clocks(store: Store, findings: list[Finding]) -> None:
    """A label move dated beyond MAX_SKEW ahead of this clock: it came from a clock that ran
    ahead (before pull refused such moves) and orders every move until then."""
    from triage.archive.labels import MAX_SKEW

    for name, move, later in store.labels.ahead():
        stamp = move.time.replace(":", "").replace("-", "")
        findings.append(Finding("unexpected", f"label-history/{name}/{stamp}_{move.writer}.move",
                                f"a move of label {name} dated {move.time}, more than "
                                f"{MAX_SKEW.seconds // 60} minutes ahead of this clock (writer "
                                f"{move.writer}'s clock ran ahead; {later} later move(s) dated "
                                "after it); moves here still win, but another store refuses "
                                "them until then: fix that writer's clock"))


def _check_pointers(store: Store, findings: list[Finding]) -> None:
    """keys/, labels/ and aliases/ must point at runs that exist."""
    for kind, folder in (("key", "keys"), ("label", "labels"), ("alias", "aliases")):
        for key in store.files.files(folder):
            if _base_name(key).startswith(atomic.TMP_PREFIX):
                continue
            if kind == "label" and not LABEL_RE.match(key[len("labels/"):]):
                findings.append(Finding("unexpected", key, "not a label "
                                        "name (`triage label` never writes it)"))
                continue
            try:
                target = store.files.read(key).decode().strip()
            except FileNotFoundError:
                continue  # moved or removed since the listing
            except (OSError, StoreError) as exc:
                findings.append(_unreadable(key, kind, exc))
                continue
            except UnicodeDecodeError as exc:
                findings.append(Finding("corrupt", key, f"unreadable {kind} "
                                        f"({exc})"))
                continue
            if not SHA256_RE.match(target) or not store.runs.has(target):
                findings.append(Finding("dangling", key, f"{kind} points at "
                                        f"{target[:12]!r}, which is not a run"))


def _check_annotations(store: Store, run_ids: set[str], findings: list[Finding]) -> None:
    for key in store.files.files("annotations"):
        name = _base_name(key)
        if name.startswith(atomic.TMP_PREFIX):
            continue
        run_id = name[:-5] if name.endswith(".json") else ""
        try:
            _check_annotation_bytes(store.files.read(key))
        except FileNotFoundError:
            continue
        except (OSError, StoreError) as exc:
            findings.append(_unreadable(key, "annotations", exc, run_id or None))
            continue
        except ValueError as exc:
            findings.append(Finding("corrupt", key,
                                    f"unreadable annotations ({exc})", run_id or None))
            continue
        if run_id not in run_ids:
            findings.append(Finding("orphan", key, "annotations of no run; "
                                    "`triage gc` removes them"))
    for folder, what in (("notes", "a note"), ("arrivals", "the arrival record")):
        for key in store.files.files(folder):
            run_id = key.split("/")[1].removesuffix(".json")
            if not _base_name(key).startswith(atomic.TMP_PREFIX) and run_id not in run_ids:
                findings.append(Finding("orphan", key, f"{what} of no run; `triage gc` removes "
                                        "it"))


def _check_annotation_bytes(data: bytes) -> None:
    """ValueError unless the bytes are annotations as triage writes them: the schema's, in
    canonical form, and hashing to the checksum they carry. Annotations change (notes are
    added), so no id can hash them; each write seals them instead. Unsealed ones (an older
    triage's) may hold only the fields it wrote: a flip in the seal's name leaves a stranger."""
    doc = validate.load_json(data)
    validate.check(doc, validate.ANNOTATIONS)
    if canonical_json(doc) != data:
        raise ValueError("not in the canonical form triage writes")
    if SEAL in doc:
        if doc[SEAL] != seal_of(doc):
            raise ValueError("they do not hash to their checksum: damaged or edited by hand "
                             "(readers still use them; delete the file to drop them)")
    elif set(doc) - {"archived", "notes"}:
        stranger = sorted(set(doc) - {"archived", "notes"})[0]
        raise ValueError(f"a field triage does not write: {stranger!r}")


# -- gc ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Removed:
    """A file gc removed (or, with dry_run, would remove): its key, why (orphan, temp) and its
    size."""

    path: str
    kind: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "bytes": self.bytes}


@dataclass(frozen=True)
class GcReport:
    """What gc removed (or, with dry_run, would remove), what it kept for being younger than
    the grace period, what it kept because a live writer may need it (`kept_live`), and the
    objects it put back because a run came to need them meanwhile (`restored`): `triage gc
    --json` (schemas/gc.schema.json)."""

    dry_run: bool
    grace_seconds: float
    removed: tuple[Removed, ...]
    kept_recent: int
    kept_live: int
    restored: int = 0

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "grace_seconds": self.grace_seconds,
                "removed": [item.to_json() for item in self.removed],
                "files": len(self.removed), "bytes": self.bytes,
                "kept_recent": self.kept_recent, "kept_live": self.kept_live,
                "restored": self.restored}


def gc(store: Store, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """Remove objects no run references, stale temp files, annotations of no run and leases of
    writers that are gone, when older than the grace period. Runs are never removed, so
    labelled runs stay whole; nothing a live writer may need is removed, whatever the grace.

    The leases are read before the manifests (a writer removes its lease only after writing its
    manifest, so one or the other protects each of its objects), and again before anything is
    removed: a writer that started after the first read has a lease by then."""
    if not dry_run:
        store.check_writable()
    since = lease.protected_since(store)
    referenced = referenced_keys(store, store.runs.ids())
    cutoff = time.time() - grace_seconds
    chosen: list[Removed] = []
    kept_recent = kept_live = 0
    for finding in _leftovers(store, referenced):
        found = store.files.info(finding.path)
        if found is None:
            continue
        mark = _age_mark(store, found)
        if mark > cutoff:
            kept_recent += 1
        elif since is not None and mark >= since:
            kept_live += 1
        else:
            chosen.append(Removed(finding.path, finding.kind, found.size))
    if dry_run:
        return GcReport(dry_run, grace_seconds, tuple(chosen), kept_recent, kept_live)
    # a dead writer's run that got no catalog row is indexed before its lease goes: readers
    # trust a catalog while leases/ is empty (catalog.open_view)
    catalog.open_view(store, ["id"])
    removed, late, restored = _remove(store, chosen, cutoff)
    return GcReport(dry_run, grace_seconds, tuple(removed), kept_recent, kept_live + late,
                    restored)


def _age_mark(store: Store, found: Entry) -> float:
    """When a leftover was last wanted: its mtime; for another gc's trash (renamed, so with an
    old mtime), the rename time too, so that two gcs at once do not race over it."""
    return store.files.changed(found.key) if found.name.startswith(GC_TRASH_PREFIX) \
        else found.mtime


def _leftovers(store: Store, referenced: set[str]) -> list[Finding]:
    """The leftovers verify reports (orphans and temp files), found without hashing anything."""
    findings: list[Finding] = []
    _scan_objects(store, referenced, findings)
    _scan_tables(store, referenced, findings)
    _scan_temps(store, findings)
    _scan_leases(store, findings)
    _check_annotations(store, set(store.runs.ids()), findings)
    return [f for f in findings if not f.is_error]


def _remove(store: Store, chosen: list[Removed], cutoff: float) -> tuple[list[Removed], int, int]:
    """Delete what gc chose: (what it removed, how many it kept for a writer that started
    since the scan, how many it put back). Objects are first renamed to a trash name, then
    checked again: an archive may have re-published one (archive always renames a fresh copy
    into place) or written a manifest that references it since the scan; those are put back."""
    trashed: list[tuple[str, Removed, float]] = []  # (trash key, the object, its mtime)
    kept: list[Removed] = []  # as new as a live lease, or gone before it could be trashed
    late = 0
    since = lease.protected_since(store)
    try:
        for item in chosen:
            key = item.path
            mtime = _mtime(store, key)
            if since is not None and mtime >= since:
                kept.append(item)
                late += 1
                continue
            if item.kind != "orphan" or not key.startswith(("objects/", f"{TABLES_DIR}/")):
                store.files.delete(key)
                continue
            folder, _, name = key.rpartition("/")
            trash = f"{folder}/{GC_TRASH_PREFIX}{name}"
            try:
                store.files.move(key, trash)
            except FileNotFoundError:
                kept.append(item)
                continue
            trashed.append((trash, item, mtime))
    except OSError as exc:
        raise store.error(exc, "clean") from None
    finally:
        back = _restore_or_delete_trash(store, trashed, cutoff)
    dropped = set(kept) | set(back)
    return [item for item in chosen if item not in dropped], late, len(back)


def _restore_or_delete_trash(store: Store, trashed: list[tuple[str, Removed, float]],
                             cutoff: float) -> list[Removed]:
    """Put back each trashed object that is wanted again (referenced, re-published, or new
    enough for a writer that started since the scan); delete the others. Those put back.

    A local trash is the object renamed, so its mtime says when the moved bytes were written.
    On S3 it is a copy, dated now: its age is the object's, read just before the move (bytes
    re-published after that read are the same bytes, named by their hash, and a writer still
    at work has a lease older than the copy)."""
    since = lease.protected_since(store)
    try:
        referenced = referenced_keys(store, store.runs.ids())
    except StoreError:
        referenced = None  # a manifest became unreadable meanwhile: keep every object
    back = []
    for trash, item, before in trashed:
        mtime = _mtime(store, trash)
        aged = mtime if store.files.local_root is not None else before
        if referenced is None or item.path in referenced or aged > cutoff or (
                since is not None and mtime >= since):
            try:
                store.files.move(trash, item.path)
            except FileNotFoundError:
                pass  # already gone (another gc): an archive that needs it writes it again
            back.append(item)
        else:
            store.files.delete(trash)
    return back


def _mtime(store: Store, key: str) -> float:
    found = store.files.info(key)
    return found.mtime if found is not None else 0.0
