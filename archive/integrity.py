"""Checking and cleaning a store: `triage verify` re-hashes, `triage gc` reclaims space.

What verify counts as wrong (exit 1): a manifest whose bytes do not hash to its id or that cannot
be read; an object or table a run references that is missing or whose bytes do not hash to its
name; a catalog segment whose name is not the hash of its bytes; a key or label that points at no
run; an annotation that is not JSON; a file whose name has no place in the layout.

What it only reports (exit 0): what an interrupted archive leaves behind by design (see
store.py): `.tmp-*` files, objects that no run references (yet), annotations of no run. `triage
gc` removes those once they are older than a grace period, which protects an archive still in
progress: its objects are written before its manifest, so until then nothing references them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from triage.archive import atomic, catalog
from triage.archive.store import SHA256_RE, Store, _os_error
from triage.errors import StoreError, UsageError

ERROR_KINDS = ("missing", "corrupt", "dangling", "unexpected")
LEFTOVER_KINDS = ("orphan", "temp")
GC_TRASH_PREFIX = atomic.TMP_PREFIX + "gc-"
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass
class Finding:
    """One thing verify found: its kind, the file (relative to the store root) and why."""

    kind: str
    path: str
    detail: str
    run: str | None = None

    @property
    def is_error(self) -> bool:
        return self.kind in ERROR_KINDS


@dataclass
class VerifyReport:
    """What verify checked and found; `ok` when nothing is wrong (leftovers are not wrong)."""

    scope: str
    runs: int = 0
    objects: int = 0
    bytes: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def leftovers(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"ok": self.ok, "scope": self.scope, "runs": self.runs, "objects": self.objects,
                "bytes": self.bytes, "errors": [asdict(f) for f in self.errors],
                "leftovers": [asdict(f) for f in self.leftovers]}


# -- references ----------------------------------------------------------------------------------


def manifest_refs(manifest: dict) -> dict[str, tuple[str, int | None]]:
    """{sha256: (what it is, expected bytes)} for every object a manifest references."""
    refs = {}
    for report in manifest.get("reports") or []:
        refs[report["sha256"]] = (f"report {report.get('name')}", report.get("bytes"))
    for name, table in sorted((manifest.get("tables") or {}).items()):
        refs[table["sha256"]] = (f"table {name}", table.get("bytes"))
    return refs


def _load_manifest(store: Store, run_id: str) -> tuple[bytes, dict]:
    """The bytes and parsed document of a manifest; ValueError/KeyError when unreadable."""
    data = store.run_path(run_id).read_bytes()
    manifest = json.loads(data)
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    manifest_refs(manifest)  # raises KeyError/TypeError on a malformed reference list
    return data, manifest


def referenced_objects(store: Store, run_ids: list[str]) -> set[str]:
    """Every object the runs reference; refuses when a manifest cannot be read (gc must not
    guess what an unreadable manifest references)."""
    out: set[str] = set()
    for run_id in run_ids:
        try:
            out.update(manifest_refs(_load_manifest(store, run_id)[1]))
        except FileNotFoundError:
            continue  # not there any more: nothing to protect
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"manifest runs/{run_id}.json is unreadable ({exc}); gc cannot tell "
                             "what it references; `triage verify` lists what is wrong") from None
    return out


# -- verify --------------------------------------------------------------------------------------


def verify(store: Store, refs: list[str] | None = None) -> VerifyReport:
    """Re-hash what the given runs (default: all) reference; for the whole store, also look for
    orphans, leftovers, bad catalog segments and keys/labels that point at no run."""
    from triage.archive.runs import resolve

    if refs:
        run_ids = list(dict.fromkeys(resolve(store, ref) for ref in refs))
        report = VerifyReport(scope="runs")
    else:
        run_ids = store.run_ids()
        report = VerifyReport(scope="store")
    hashed: dict[str, bool] = {}
    for run_id in run_ids:
        _check_run(store, run_id, report, hashed)
    if not refs:
        _scan_objects(store, set(hashed), report)
        _scan_temps(store, report)
        _check_segments(store, report)
        _check_pointers(store, report)
        _check_annotations(store, set(run_ids), report)
    return report


def _rel(store: Store, path: Path) -> str:
    return path.relative_to(store.root).as_posix()


def _check_run(store: Store, run_id: str, report: VerifyReport, hashed: dict) -> None:
    """The manifest's bytes against its id, then every object it references."""
    report.runs += 1
    where = f"runs/{run_id}.json"
    try:
        data, manifest = _load_manifest(store, run_id)
    except FileNotFoundError:
        report.findings.append(Finding("missing", where, "manifest vanished", run_id))
        return
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        report.findings.append(Finding("corrupt", where, f"unreadable manifest ({exc})", run_id))
        return
    digest = hashlib.sha256(data).hexdigest()
    if digest != run_id:
        report.findings.append(Finding("corrupt", where, f"bytes hash to {digest[:12]}, not to "
                                       "the run id", run_id))
    for sha, (what, size) in manifest_refs(manifest).items():
        if sha not in hashed:
            hashed[sha] = _check_object(store, sha, size, what, run_id, report)


def _check_object(store: Store, sha: str, size: int | None, what: str, run_id: str,
                  report: VerifyReport) -> bool:
    path = store.object_path(sha)
    where = _rel(store, path)
    try:
        digest, actual = atomic.hash_file(path)
    except FileNotFoundError:
        report.findings.append(Finding("missing", where, f"{what} of run {run_id[:12]}", run_id))
        return False
    except OSError as exc:
        report.findings.append(Finding("corrupt", where, f"unreadable {what} ({exc.strerror})",
                                       run_id))
        return False
    report.objects += 1
    report.bytes += actual
    if digest != sha or (size is not None and size != actual):
        report.findings.append(Finding("corrupt", where, f"{what} of run {run_id[:12]}: bytes "
                                       f"hash to {digest[:12]} ({actual} bytes)", run_id))
        return False
    return True


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _scan_objects(store: Store, referenced: set[str], report: VerifyReport) -> None:
    """Files under objects/ that no run references, temp files, and strangers."""
    for entry in _entries(store.objects):
        if entry.name.startswith(atomic.TMP_PREFIX):
            report.findings.append(Finding("temp", f"objects/{entry.name}", "unfinished write"))
        elif entry.is_dir(follow_symlinks=False) and re.fullmatch(r"[0-9a-f]{2}", entry.name):
            for inner in _entries(Path(entry.path)):
                _classify_object(entry.name, inner, referenced, report)
        else:
            report.findings.append(Finding("unexpected", f"objects/{entry.name}",
                                           "not part of the store layout"))


def _classify_object(prefix: str, entry: os.DirEntry, referenced: set[str],
                     report: VerifyReport) -> None:
    where = f"objects/{prefix}/{entry.name}"
    sha = prefix + entry.name
    if entry.name.startswith(atomic.TMP_PREFIX):
        report.findings.append(Finding("temp", where, "unfinished write or gc"))
    elif not SHA256_RE.match(sha) or not entry.is_file(follow_symlinks=False):
        report.findings.append(Finding("unexpected", where, "not part of the store layout"))
    elif sha not in referenced:
        size = entry.stat(follow_symlinks=False).st_size
        report.findings.append(Finding("orphan", where, f"no run references it ({size} bytes); "
                                       "`triage gc` removes it"))


def _walk_files(directory: Path):
    """Every file below a directory (labels may contain '/')."""
    for root, _dirs, files in os.walk(directory):
        for name in sorted(files):
            yield Path(root) / name


def _scan_temps(store: Store, report: VerifyReport) -> None:
    for directory in (store.runs, store.keys, store.label_dir, store.annotations, store.index):
        for path in _walk_files(directory):
            if path.name.startswith(atomic.TMP_PREFIX):
                report.findings.append(Finding("temp", _rel(store, path), "unfinished write"))
    for path in _walk_files(store.runs):
        name = path.name
        if not name.startswith(atomic.TMP_PREFIX) and (
                not name.endswith(".json") or not SHA256_RE.match(name[:-5])):
            report.findings.append(Finding("unexpected", _rel(store, path),
                                           "not a run manifest name"))


def _check_segments(store: Store, report: VerifyReport) -> None:
    """A segment's name carries the hash of its bytes."""
    for path in catalog._segments(store):  # noqa: SLF001 - the catalog's own listing rule
        expected = path.name[len(catalog.SEGMENT_PREFIX):-len(".parquet")]
        try:
            digest = catalog.segment_digest(path)
        except FileNotFoundError:
            continue  # merged away while we looked
        if digest != expected:
            report.findings.append(Finding("corrupt", _rel(store, path), "catalog segment bytes "
                                           f"hash to {digest[:12]}; delete it, the catalog is "
                                           "rebuilt from runs/"))


def _check_pointers(store: Store, report: VerifyReport) -> None:
    """keys/ and labels/ must point at runs that exist."""
    for kind, directory in (("key", store.keys), ("label", store.label_dir)):
        for path in _walk_files(directory):
            if path.name.startswith(atomic.TMP_PREFIX):
                continue
            try:
                target = path.read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                report.findings.append(Finding("corrupt", _rel(store, path), f"unreadable {kind} "
                                               f"({exc})"))
                continue
            if not SHA256_RE.match(target) or not store.has_run(target):
                report.findings.append(Finding("dangling", _rel(store, path), f"{kind} points at "
                                               f"{target[:12]!r}, which is not a run"))


def _check_annotations(store: Store, run_ids: set[str], report: VerifyReport) -> None:
    for path in _walk_files(store.annotations):
        if path.name.startswith(atomic.TMP_PREFIX):
            continue
        run_id = path.name[:-5] if path.name.endswith(".json") else ""
        try:
            doc = json.loads(path.read_bytes())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            report.findings.append(Finding("corrupt", _rel(store, path),
                                           f"unreadable annotations ({exc})", run_id or None))
            continue
        if run_id not in run_ids:
            report.findings.append(Finding("orphan", _rel(store, path), "annotations of no run; "
                                           "`triage gc` removes them"))


# -- gc ------------------------------------------------------------------------------------------


@dataclass
class GcReport:
    """What gc removed (or, with dry_run, would remove) and what it kept for being too new."""

    dry_run: bool
    grace_seconds: float
    removed: list[dict] = field(default_factory=list)
    kept_recent: int = 0
    restored: int = 0

    @property
    def bytes(self) -> int:
        return sum(item["bytes"] for item in self.removed)

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "grace_seconds": self.grace_seconds,
                "removed": self.removed, "files": len(self.removed), "bytes": self.bytes,
                "kept_recent": self.kept_recent, "restored": self.restored}


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '1h', '2d' -> seconds."""
    match = DURATION_RE.match(str(text))
    if not match:
        raise UsageError(f"invalid duration {text!r}: use seconds or a number with s, m, h or d "
                         "(e.g. 1h, 0)")
    return float(match.group(1)) * DURATION_UNITS[match.group(2)]


def gc(store: Store, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """Remove objects no run references, stale temp files and annotations of no run, when
    older than the grace period. Runs are never removed, so labelled runs stay whole."""
    if not dry_run:
        store.check_writable()
    referenced = referenced_objects(store, store.run_ids())
    cutoff = time.time() - grace_seconds
    report = GcReport(dry_run=dry_run, grace_seconds=grace_seconds)
    for finding in _leftovers(store, referenced):
        try:
            stat = (store.root / finding.path).stat()
        except FileNotFoundError:
            continue
        if _age_mark(finding.path, stat) > cutoff:
            report.kept_recent += 1
        else:
            report.removed.append({"path": finding.path, "kind": finding.kind,
                                   "bytes": stat.st_size})
    if not dry_run:
        _remove(store, report, cutoff)
    return report


def _age_mark(path: str, stat: os.stat_result) -> float:
    """When a leftover was last wanted: its mtime; for another gc's trash (renamed, so with an
    old mtime), the rename time too, so that two gcs at once do not race over it."""
    name = path.rsplit("/", 1)[-1]
    return max(stat.st_mtime, stat.st_ctime) if name.startswith(GC_TRASH_PREFIX) \
        else stat.st_mtime


def _leftovers(store: Store, referenced: set[str]) -> list[Finding]:
    """The leftovers verify reports (orphans and temp files), found without hashing anything."""
    report = VerifyReport(scope="store")
    _scan_objects(store, referenced, report)
    _scan_temps(store, report)
    _check_annotations(store, set(store.run_ids()), report)
    return report.leftovers


def _remove(store: Store, report: GcReport, cutoff: float) -> None:
    """Delete what gc chose. Objects are first renamed to a trash name, then checked again:
    an archive may have re-published one (archive always renames a fresh copy into place) or
    written a manifest that references it since the scan; those are put back."""
    trashed = []
    try:
        for item in list(report.removed):
            path = store.root / item["path"]
            if item["kind"] != "orphan" or not item["path"].startswith("objects/"):
                path.unlink(missing_ok=True)
                continue
            trash = path.with_name(GC_TRASH_PREFIX + path.name)
            try:
                os.replace(path, trash)
            except FileNotFoundError:
                report.removed.remove(item)
                continue
            trashed.append((trash, path, item))
    except OSError as exc:
        raise _os_error(exc, store.root, "clean") from None
    finally:
        _settle(store, trashed, cutoff, report)


def _settle(store: Store, trashed: list, cutoff: float, report: GcReport) -> None:
    """Put back each trashed object that is wanted again; delete the others."""
    try:
        referenced = referenced_objects(store, store.run_ids())
    except StoreError:
        referenced = None  # a manifest became unreadable meanwhile: keep every object
    for trash, path, item in trashed:
        sha = path.parent.name + path.name
        if referenced is None or sha in referenced or _mtime(trash) > cutoff:
            try:
                os.replace(trash, path)
            except FileNotFoundError:
                pass  # already gone (another gc): an archive that needs it writes it again
            report.removed.remove(item)
            report.restored += 1
        else:
            trash.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
