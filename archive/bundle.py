"""Bundles: runs in one tar file, to hand to a colleague (`triage export` / `triage import`).

A bundle is a tar (plain, .tar.gz, or .tar.zst when the `zstandard` module is installed) whose
members come in this order, each a regular file:

    bundle.json               {"format": "triage-bundle", "version": 1, "runs": [...],
                               "created": ..., "labels": {...} (only with --labels)}
    objects/ab/cdef...        every report and table the runs reference
    annotations/<id>.json     archive time and notes
    runs/<id>.json            the manifests (a run's id is the sha256 of these bytes)

Import reads the bundle as a stream and trusts nothing in it: a member must be a regular file at
one of the paths above (no '..', absolute path, link or device), every object and manifest must
hash to its name, and a bundle version newer than this triage is refused. Objects are staged as
temp files; only when the whole bundle has checked out are they renamed into place, then the
annotations, then the manifests (the runs become visible), then their dedup keys (derived from
the manifests, so that archiving the same report here finds the run), then the catalog rows.
Runs already in the store are skipped, so importing a bundle twice adds nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from triage.archive import atomic, catalog
from triage.archive.integrity import manifest_refs
from triage.archive.manifest import check_version
from triage.archive.store import (SHA256_RE, STORE_MARKER, Store, _os_error, canonical_json,
                                  check_label, store_path as store_path_of)
from triage.errors import CorruptObject, NewerFormat, TriageError, UsageError
from triage.timeutil import utc_now

BUNDLE_FORMAT = "triage-bundle"
BUNDLE_VERSION = 1
BUNDLE_DOC = "bundle.json"
MEMBER_RE = re.compile(r"^(?:bundle\.json|objects/[0-9a-f]{2}/[0-9a-f]{62}"
                       r"|runs/[0-9a-f]{64}\.json|annotations/[0-9a-f]{64}\.json)$")
MAX_DOCUMENT = 64 << 20  # a manifest or annotation larger than this is not one
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SUFFIXES = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.zst": "zst", ".tzst": "zst"}


@dataclass
class ExportResult:
    path: str
    runs: list[str]
    objects: int
    bytes: int


@dataclass
class ImportResult:
    runs_added: list[str] = field(default_factory=list)
    runs_present: list[str] = field(default_factory=list)
    objects_added: int = 0
    bytes_added: int = 0
    labels_set: dict[str, str] = field(default_factory=dict)
    labels_skipped: dict[str, str] = field(default_factory=dict)


def _tar_info(name: str, size: int, mode: int = 0o444) -> tarfile.TarInfo:
    """A member with no owner and a fixed time, so the same runs give the same tar bytes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, mode, 0, tarfile.REGTYPE
    return info


# -- export --------------------------------------------------------------------------------------


def compression_for(output: Path) -> str:
    """'' (plain tar), 'gz' or 'zst', from the output's name."""
    name = output.name.lower()
    for suffix, kind in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(suffix):
            if kind == "zst":
                _zstandard()
            return kind
    raise UsageError(f"{output}: name the bundle .tar, .tar.gz or .tar.zst")


def _zstandard():
    try:
        import zstandard
    except ImportError:
        raise TriageError(".tar.zst bundles need the zstandard module (pip install zstandard); "
                          "or use .tar or .tar.gz") from None
    return zstandard


def export_runs(store: Store, refs: list[str], output: str, labels: bool = False) -> ExportResult:
    """Write the runs, everything they reference, and their annotations to one bundle."""
    from triage.archive.runs import labels_by_run, resolve

    out = Path(output)
    kind = compression_for(out)
    run_ids = list(dict.fromkeys(resolve(store, ref) for ref in refs))
    manifests = {run_id: _stored_manifest(store, run_id) for run_id in run_ids}
    objects = sorted({sha for _data, doc in manifests.values() for sha in manifest_refs(doc)})
    doc = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "runs": run_ids,
           "created": utc_now()}
    if labels:
        by_run = labels_by_run(store)
        doc["labels"] = {name: run_id for run_id in run_ids for name in by_run.get(run_id, [])}
    try:
        with atomic.temp_file_in(out.parent.resolve(), ".bundle") as (stream, temp):
            total = _write_bundle(stream, kind, store, doc, objects, manifests)
            stream.close()
            atomic.publish(temp, out, readonly=False)
    except OSError as exc:
        raise TriageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return ExportResult(str(out), run_ids, len(objects), total)


def _stored_manifest(store: Store, run_id: str) -> tuple[bytes, dict]:
    data = store.manifest_bytes(run_id)
    if data is None:
        raise CorruptObject(f"manifest of run {run_id[:12]} does not match its id; "
                            "`triage verify` lists what is damaged")
    return data, json.loads(data)


def _write_bundle(stream, kind: str, store: Store, doc: dict, objects: list[str],
                  manifests: dict) -> int:
    sink, closer = stream, None
    if kind == "zst":
        sink = closer = _zstandard().ZstdCompressor(level=10).stream_writer(stream, closefd=False)
    total = 0
    mode = "w|gz" if kind == "gz" else "w|"
    with tarfile.open(fileobj=sink, mode=mode, format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, BUNDLE_DOC, canonical_json(doc))
        for sha in objects:
            total += _add_object(tar, store, sha)
        for run_id in manifests:
            path = store.annotations / f"{run_id}.json"
            if path.is_file():
                _add_bytes(tar, f"annotations/{run_id}.json", path.read_bytes())
        for run_id, (data, _doc) in manifests.items():
            _add_bytes(tar, f"runs/{run_id}.json", data)
    if closer is not None:
        closer.close()
    return total


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_tar_info(name, len(data)), io.BytesIO(data))


class _HashingReader:
    """A read-only stream that hashes what passes through it."""

    def __init__(self, stream):
        self.stream, self.digest = stream, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data


def _add_object(tar: tarfile.TarFile, store: Store, sha: str) -> int:
    """Copy one object into the tar, re-hashing it on the way: a damaged object is not sent."""
    path = store.object_path(sha)
    try:
        with open(path, "rb") as stream:
            size = path.stat().st_size
            reader = _HashingReader(stream)
            tar.addfile(_tar_info(f"objects/{sha[:2]}/{sha[2:]}", size), reader)
    except FileNotFoundError:
        raise CorruptObject(f"object {sha[:12]} is missing from the store; `triage verify` "
                            "lists what is damaged") from None
    if reader.digest.hexdigest() != sha:
        raise CorruptObject(f"object {sha[:12]} does not match its hash; `triage verify` lists "
                            "what is damaged")
    return size


# -- import --------------------------------------------------------------------------------------


@dataclass
class _Staged:
    """What a bundle held, checked: temp files of objects, parsed manifests and annotations."""

    doc: dict | None = None
    objects: dict[str, Path] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, dict]] = field(default_factory=dict)
    annotations: dict[str, dict] = field(default_factory=dict)

    def discard(self) -> None:
        for temp in self.objects.values():
            temp.unlink(missing_ok=True)


def import_bundle(store_path, bundle: str, labels: bool = False) -> ImportResult:
    """Check a whole bundle, then add its runs that the store does not have yet."""
    path = Path(bundle)
    with _open_bundle(path) as stream:
        new_store = not (store_path_of(store_path) / STORE_MARKER).exists()
        store = Store.open(store_path, create=True)
        store.check_writable()
        staged = _Staged()
        try:
            _stage(store, path, stream, staged)
            _check_complete(store, path, staged)
            return _publish(store, staged, labels)
        except OSError as exc:
            raise _os_error(exc, store.root, "write") from None
        except TriageError:
            if new_store:  # a refused bundle leaves no store behind where there was none
                shutil.rmtree(store.root, ignore_errors=True)
            raise
        finally:
            staged.discard()


def _open_bundle(path: Path):
    """The bundle file, opened for reading; never blocks on a FIFO or reads a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise TriageError(f"{path}: no such bundle file") from None
    except IsADirectoryError:
        fd = None
    except OSError as exc:
        raise TriageError(f"{path}: cannot read the bundle ({exc.strerror})") from None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise TriageError(f"{path}: not a regular file; pass a bundle from `triage export`")
    return os.fdopen(fd, "rb")


def _open_reader(stream):
    """A tar reader over the (possibly compressed) bundle stream."""
    head = stream.read(4)
    stream.seek(0)
    if head == ZSTD_MAGIC:
        reader = _zstandard().ZstdDecompressor().stream_reader(stream)
        return tarfile.open(fileobj=reader, mode="r|")
    return tarfile.open(fileobj=stream, mode="r|*")


def _stage(store: Store, path: Path, stream, staged: _Staged) -> None:
    """Read every member in order; refuse the bundle at the first thing that is not right."""
    try:
        with _open_reader(stream) as tar:
            for member in tar:
                _stage_member(store, path, tar, member, staged)
    except _bad_data_errors() as exc:
        raise TriageError(f"{path}: not a readable triage bundle ({exc}); "
                          "export it again with `triage export`") from None
    if staged.doc is None:
        raise TriageError(f"{path}: empty bundle (no {BUNDLE_DOC})")


def _bad_data_errors() -> tuple[type[Exception], ...]:
    """What reading a damaged tar or compressed stream raises."""
    errors = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)
    try:
        import zstandard
    except ImportError:
        return errors
    return (*errors, zstandard.ZstdError)


def _stage_member(store: Store, path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo,
                  staged: _Staged) -> None:
    name = member.name
    if not member.isreg() or member.type == tarfile.GNUTYPE_SPARSE:
        raise TriageError(f"{path}: refusing member {name!r}: not a regular file; a bundle "
                          "holds only regular files")
    if not MEMBER_RE.match(name):
        raise TriageError(f"{path}: refusing member {name!r}: not a path a bundle may hold "
                          "(no absolute paths, '..' or other folders)")
    if (staged.doc is None) != (name == BUNDLE_DOC):
        raise TriageError(f"{path}: {BUNDLE_DOC} must be the first member, and only once")
    source = tar.extractfile(member)
    if name.startswith("objects/"):
        sha = name[8:10] + name[11:]
        if sha not in staged.objects:
            staged.objects[sha] = _stage_object(store, path, source, sha)
        return
    if member.size > MAX_DOCUMENT:
        raise TriageError(f"{path}: member {name} is too large for a manifest or annotation")
    data = source.read()
    if name == BUNDLE_DOC:
        staged.doc = _check_doc(path, data)
    elif name.startswith("runs/"):
        run_id = name[5:-5]
        staged.manifests[run_id] = (data, _check_manifest(path, run_id, data))
    else:
        staged.annotations[name[12:-5]] = _json_object(path, name, data)


def _stage_object(store: Store, path: Path, source, sha: str) -> Path:
    """Copy one object to a temp file under objects/, hashing it; refuse it if it is damaged."""
    store.objects.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=atomic.TMP_PREFIX, suffix="-import", dir=store.objects)
    temp = Path(name)
    try:
        with open(fd, "wb") as sink:
            digest, _size = atomic.copy_hashing(source, sink)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if digest != sha:
        temp.unlink(missing_ok=True)
        raise CorruptObject(f"{path}: object {sha[:12]} does not match its hash; the bundle is "
                            "damaged, export it again")
    return temp


def _json_object(path: Path, name: str, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise TriageError(f"{path}: {name} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise TriageError(f"{path}: {name} is not a JSON object")
    return doc


def _check_doc(path: Path, data: bytes) -> dict:
    doc = _json_object(path, BUNDLE_DOC, data)
    if doc.get("format") != BUNDLE_FORMAT:
        raise TriageError(f"{path}: not a triage bundle ({BUNDLE_DOC} has no triage format)")
    version = doc.get("version")
    if not isinstance(version, int):
        raise TriageError(f"{path}: {BUNDLE_DOC} has no version")
    if version > BUNDLE_VERSION:
        raise NewerFormat(f"{path}: bundle format version {version} is newer than this triage "
                          f"reads ({BUNDLE_VERSION}); upgrade triage")
    runs, labels = doc.get("runs"), doc.get("labels") or {}
    if not isinstance(runs, list) or not all(isinstance(r, str) and SHA256_RE.match(r)
                                             for r in runs):
        raise TriageError(f"{path}: {BUNDLE_DOC} has no valid list of run ids")
    if not isinstance(labels, dict) or not all(isinstance(v, str) and v in runs
                                               for v in labels.values()):
        raise TriageError(f"{path}: {BUNDLE_DOC} has labels for runs it does not hold")
    for name in labels:
        try:
            check_label(name)
        except UsageError:
            raise TriageError(f"{path}: {BUNDLE_DOC} has an invalid label {name!r}") from None
    return doc


def _check_manifest(path: Path, run_id: str, data: bytes) -> dict:
    if hashlib.sha256(data).hexdigest() != run_id:
        raise CorruptObject(f"{path}: manifest of run {run_id[:12]} does not match its id; the "
                            "bundle is damaged, export it again")
    manifest = _json_object(path, f"runs/{run_id}.json", data)
    check_version(manifest, f"{path}: run {run_id[:12]}")
    try:
        refs = manifest_refs(manifest)
    except (KeyError, TypeError, AttributeError):
        raise TriageError(f"{path}: manifest of run {run_id[:12]} has malformed references") \
            from None
    if not all(SHA256_RE.match(sha) for sha in refs):
        raise TriageError(f"{path}: manifest of run {run_id[:12]} references a non-sha256 name")
    return manifest


def _check_complete(store: Store, path: Path, staged: _Staged) -> None:
    """Every listed run has its manifest, and every object a new run needs is at hand."""
    listed = set(staged.doc["runs"])
    if listed != set(staged.manifests):
        raise TriageError(f"{path}: {BUNDLE_DOC} lists {len(listed)} runs but the bundle holds "
                          f"{len(staged.manifests)} manifests")
    stray = set(staged.annotations) - listed
    if stray:
        raise TriageError(f"{path}: annotations of run {sorted(stray)[0][:12]}, which the bundle "
                          "does not hold")
    for run_id, (_data, manifest) in staged.manifests.items():
        for sha, (what, _size) in manifest_refs(manifest).items():
            if sha not in staged.objects and not store.has_object(sha):
                raise TriageError(f"{path}: the bundle lacks the {what} of run {run_id[:12]}")


def _publish(store: Store, staged: _Staged, labels: bool) -> ImportResult:
    """Objects first, then annotations, then manifests, then catalog rows, then labels."""
    result = ImportResult()
    new = [r for r in staged.doc["runs"] if not store.has_run(r)]
    result.runs_present = [r for r in staged.doc["runs"] if r not in new]
    needed = {sha for run_id in new for sha in manifest_refs(staged.manifests[run_id][1])}
    for sha in sorted(needed & set(staged.objects)):
        existed = store.has_object(sha)
        _sha, size = store.adopt_temp(staged.objects.pop(sha))
        if not existed:
            result.objects_added += 1
            result.bytes_added += size
    for run_id in new:
        if run_id in staged.annotations and not store.read_annotations(run_id):
            atomic.write_bytes(store.annotations / f"{run_id}.json",
                               canonical_json(staged.annotations[run_id]))
    for run_id in new:
        atomic.write_bytes(store.run_path(run_id), staged.manifests[run_id][0], readonly=True)
    _record_keys(store, {run_id: staged.manifests[run_id][1] for run_id in new})
    rows = [catalog.catalog_row(store, r, staged.manifests[r][1], store.read_annotations(r))
            for r in new]
    catalog.add_rows(store, rows)
    result.runs_added = new
    _apply_labels(store, staged.doc.get("labels") or {}, labels, result)
    return result


def _record_keys(store: Store, manifests: dict[str, dict]) -> None:
    """File imported runs under the dedup key `triage archive` would look for, so the same report
    archived here finds them. Keys are derived from the manifests, never taken from the bundle:
    a bundle must not be able to redirect a report to a run of other reports. A key that already
    names a run here is left alone."""
    from triage.archive.ingest import dedup_key_of  # the archive machinery, only when needed

    for run_id, manifest in manifests.items():
        key = dedup_key_of(manifest)
        if key and store.lookup_key(key) is None:
            store.record_key(key, run_id)


def _apply_labels(store: Store, bundle_labels: dict, apply: bool, result: ImportResult) -> None:
    for name, run_id in sorted(bundle_labels.items()):
        if apply:
            store.set_label(name, run_id)
            result.labels_set[name] = run_id
        else:
            result.labels_skipped[name] = run_id
