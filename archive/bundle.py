"""Bundles: runs in one tar file, to hand to a colleague (`triage export` / `triage import`).

A bundle is a tar (plain, .tar.gz, or .tar.zst when the `zstandard` module is installed) whose
members come in this order, each a regular file:

    bundle.json               {"format": "triage-bundle", "version": 1, "runs": [...],
                               "created": ..., "labels": {...} (only with --labels)}
    objects/ab/cdef...        every report and table the runs reference
    annotations/<id>.json     archive time and notes
    runs/<id>.json            the manifests (a run's id is the sha256 of these bytes)

Import reads the bundle as a stream and trusts nothing in it: a member must be a regular file at
one of the paths above (no '..', absolute path, link or device), at most once; every object and
manifest must hash to its name; manifests and annotations must match their schemas
(archive/validate.py), since every reader of the store trusts them; each table a run names must
be Parquet with that table's columns and rows; with --labels, no label may clash with one here;
and a bundle version newer than this triage is refused. What the members expand to is counted
(declared sizes before anything is written, bytes read as they are): a compressed bundle may
expand to EXPANSION_RATIO times its size. Objects are staged as temp files; only when the whole
bundle has checked out are they renamed into place, then each run's annotations and manifest (the
run becomes visible), then their dedup keys (derived from the manifests, so that archiving the
same report here finds the run), then the catalog rows. Runs already in the store are skipped,
so importing a bundle twice adds nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import re
import stat
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, BinaryIO, cast

from triage.archive import atomic, catalog, lease, validate
from triage.archive.canonical import canonical_json
from triage.archive.files import SourceFailed, SourceStream
from triage.archive.labels import check_label
from triage.archive.run_manifests import manifest_id, run_parts
from triage.archive.store import Store
from triage.base.errors import CorruptObject, NewerFormat, TriageError, UsageError
from triage.base.progress import Progress, Step, no_progress
from triage.base.hashing import SHA256_RE, HashingReader, copy_hashing
from triage.base.timeutil import utc_now

BUNDLE_FORMAT = "triage-bundle"
BUNDLE_VERSION = 1
BUNDLE_DOC = "bundle.json"
MEMBER_RE = re.compile(r"^(?:bundle\.json|objects/[0-9a-f]{2}/[0-9a-f]{62}"
                       r"|runs/[0-9a-f]{64}\.json|annotations/[0-9a-f]{64}\.json)$")
MAX_DOCUMENT = 64 << 20  # a manifest or annotation larger than this is not one
EXPANSION_RATIO = 100  # what a bundle may expand to, times its size; real .tar.gz ones do 3-4
EXPANSION_FLOOR = 64 << 20  # ...and at least this, for small bundles of compressible reports
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SUFFIXES = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.zst": "zst", ".tzst": "zst"}


@dataclass
class ExportResult:
    path: str
    runs: list[str]
    objects: int
    bytes: int


@dataclass(frozen=True)
class ImportResult:
    """What an import added and what it found there already: `triage import --json`
    (schemas/import.schema.json). Labels go by name to the run they point at."""

    runs_added: tuple[str, ...]
    runs_present: tuple[str, ...]
    objects_added: int
    bytes_added: int
    labels_set: Mapping[str, str]
    labels_skipped: Mapping[str, str]  # the bundle's labels, not set without --labels
    labels_was: Mapping[str, str | None]  # each label set: where it pointed before (None: new)

    def to_json(self) -> dict[str, Any]:
        return {"runs_added": list(self.runs_added), "runs_present": list(self.runs_present),
                "objects_added": self.objects_added, "bytes_added": self.bytes_added,
                "labels_set": dict(self.labels_set), "labels_skipped": dict(self.labels_skipped),
                "labels_was": dict(self.labels_was)}


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


def _zstandard() -> ModuleType:
    try:
        import zstandard
    except ImportError:
        raise TriageError(".tar.zst bundles need the zstandard module (pip install zstandard); "
                          "or use .tar or .tar.gz") from None
    return zstandard


def export_runs(store: Store, refs: list[str], output: str, labels: bool = False,
                progress: Progress = no_progress) -> ExportResult:
    """Write the runs, everything they reference, and their annotations to one bundle."""
    from triage.archive.runs import labels_by_run, resolve

    out = Path(output)
    kind = compression_for(out)
    run_ids = list(dict.fromkeys(resolve(store, ref) for ref in refs))
    manifests = {run_id: _stored_manifest(store, run_id) for run_id in run_ids}
    notes = {run_id: _stored_annotations(store, run_id) for run_id in run_ids}
    # A bundle holds each object once, by hash, whatever its key in the store (tables/...)
    objects = {part.sha256: part.key for run_id, (_data, doc) in sorted(manifests.items())
               for part in run_parts(run_id, doc)}
    doc = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "runs": run_ids,
           "created": utc_now()}
    if labels:
        by_run = labels_by_run(store)
        doc["labels"] = {name: run_id for run_id in run_ids for name in by_run.get(run_id, [])}
    try:
        with atomic.temp_file_in(out.parent.resolve(), ".bundle") as (stream, temp):
            progress(Step(f"writing {len(objects)} objects to {out.name}"))
            total = _write_bundle(stream, kind, store, doc, objects, manifests, notes)
            stream.close()
            atomic.publish(temp, out, readonly=False)
    except OSError as exc:
        raise TriageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return ExportResult(str(out), run_ids, len(objects), total)


def _stored_manifest(store: Store, run_id: str) -> tuple[bytes, dict[str, Any]]:
    data = store.runs.manifest_bytes(run_id)
    if data is None:
        raise CorruptObject(f"manifest of run {run_id[:12]} does not match its id; "
                            "`triage verify` lists what is damaged")
    return data, json.loads(data)


def _stored_annotations(store: Store, run_id: str) -> dict[str, Any]:
    """A run's annotations (archive time, every note) as the bundle carries them; a damaged
    annotations file is refused before anything is written: `import` would refuse the bundle."""
    try:
        return store.annotations.checked(run_id)
    except ValueError as exc:
        raise CorruptObject(f"the annotations of run {run_id[:12]} "
                            f"({store.annotations.key(run_id)}) are damaged ({exc}); `triage "
                            "verify` names them; delete that file (the run's archive time and "
                            "older notes go with it) and export again") from None


def _write_bundle(stream: BinaryIO, kind: str, store: Store, doc: dict[str, Any],
                  objects: dict[str, str], manifests: dict[str, tuple[bytes, dict[str, Any]]],
                  notes: dict[str, dict[str, Any]]) -> int:
    sink: Any = stream
    closer = None
    if kind == "zst":
        sink = closer = _zstandard().ZstdCompressor(level=10).stream_writer(stream, closefd=False)
    total = 0
    with (tarfile.open(fileobj=sink, mode="w|gz", format=tarfile.PAX_FORMAT) if kind == "gz"
          else tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT)) as tar:
        _add_bytes(tar, BUNDLE_DOC, canonical_json(doc))
        for sha, key in sorted(objects.items()):
            total += _add_object(tar, store, sha, key)
        for run_id in manifests:
            if notes[run_id]:
                _add_bytes(tar, f"annotations/{run_id}.json", canonical_json(notes[run_id]))
        for run_id, (data, _doc) in manifests.items():
            _add_bytes(tar, f"runs/{run_id}.json", data)
    if closer is not None:
        closer.close()
    return total


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_tar_info(name, len(data)), io.BytesIO(data))


def _add_object(tar: tarfile.TarFile, store: Store, sha: str, key: str) -> int:
    """Copy one file of the store (at `key`) into the tar as the object of its hash,
    re-hashing it on the way: a damaged object is not sent."""
    try:
        with store.open_file(key) as stream:
            size: int = stream.size()
            reader = HashingReader(cast(BinaryIO, SourceStream(stream)))  # fails as the store
            tar.addfile(_tar_info(f"objects/{sha[:2]}/{sha[2:]}", size), reader)
    except FileNotFoundError:
        raise CorruptObject(f"object {sha[:12]} is missing from the store; `triage verify` "
                            "lists what is damaged") from None
    except SourceFailed as failed:
        raise store.error(failed.error, "read") from None
    if reader.digest.hexdigest() != sha:
        raise CorruptObject(f"object {sha[:12]} does not match its hash; `triage verify` lists "
                            "what is damaged")
    return size


# -- import --------------------------------------------------------------------------------------


@dataclass
class _Unpacked:
    """What a bundle held, checked as it streamed past: temp files of its objects (not visible
    yet), its parsed manifests and annotations, and how many bytes it has expanded to."""

    limit: int
    source: str  # the bundle, as its runs' arrival records name it
    doc: dict[str, Any] | None = None
    objects: dict[str, Path] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, dict[str, Any]]] = field(default_factory=dict)
    annotations: dict[str, dict[str, Any]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    expanded: int = 0

    @property
    def runs(self) -> list[str]:
        return self.doc["runs"] if self.doc else []

    @property
    def labels(self) -> dict[str, str]:
        return (self.doc.get("labels") or {}) if self.doc else {}

    def discard(self) -> None:
        for temp in self.objects.values():
            temp.unlink(missing_ok=True)


def import_bundle(store_path: str | os.PathLike[str] | None, bundle: str,
                  labels: bool = False, progress: Progress = no_progress) -> ImportResult:
    """Check a whole bundle, then add its runs that the store does not have yet.

    A refused bundle leaves nothing a reader sees: its staged objects are removed and nothing
    else was written. The store itself is never removed, not even one this import created
    (empty, but a store): another process may have archived into it meanwhile."""
    path = Path(bundle)
    with _open_bundle(path) as stream:
        store = Store.open(store_path, create=True)
        store.check_writable()
        unpacked = _Unpacked(limit=max(EXPANSION_FLOOR,
                                       EXPANSION_RATIO * os.fstat(stream.fileno()).st_size),
                             source=str(path))
        try:
            with lease.held(store, "import"):  # so that gc spares what it stages (lease.py)
                progress(Step(f"reading {path.name}"))
                _stage(store, path, stream, unpacked)
                progress(Step("checking what it holds"))
                check_complete(store, path, unpacked)
                _check_tables(store, path, unpacked)
                if labels:
                    _check_label_clashes(store, path, sorted(unpacked.labels))
                progress(Step("adding its runs"))
                return _publish(store, unpacked, labels)
        except OSError as exc:
            raise store.error(exc, "write") from None
        finally:
            unpacked.discard()


def _open_bundle(path: Path) -> BinaryIO:
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


def _open_reader(stream: BinaryIO) -> tarfile.TarFile:
    """A tar reader over the (possibly compressed) bundle stream."""
    head = stream.read(4)
    stream.seek(0)
    if head == ZSTD_MAGIC:
        reader = _zstandard().ZstdDecompressor().stream_reader(stream)
        return tarfile.open(fileobj=reader, mode="r|")
    return tarfile.open(fileobj=stream, mode="r|*")


def _stage(store: Store, path: Path, stream: BinaryIO, unpacked: _Unpacked) -> None:
    """Read every member in order; refuse the bundle at the first thing that is not right."""
    try:
        with _open_reader(stream) as tar:
            for member in tar:
                _stage_member(store, path, tar, member, unpacked)
    except _bad_data_errors() as exc:
        raise TriageError(f"{path}: not a readable triage bundle ({exc}); "
                          "export it again with `triage export`") from None
    if unpacked.doc is None:
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
                  unpacked: _Unpacked) -> None:
    name = member.name
    if not member.isreg() or member.type == tarfile.GNUTYPE_SPARSE:
        raise TriageError(f"{path}: refusing member {name!r}: not a regular file; a bundle "
                          "holds only regular files")
    if not MEMBER_RE.match(name):
        raise TriageError(f"{path}: refusing member {name!r}: not a path a bundle may hold "
                          "(no absolute paths, '..' or other folders)")
    if (unpacked.doc is None) != (name == BUNDLE_DOC):
        raise TriageError(f"{path}: {BUNDLE_DOC} must be the first member, and only once")
    if name in unpacked.names:  # a second copy could carry other bytes: neither is trusted
        raise TriageError(f"{path}: member {name} appears twice; export the bundle again")
    unpacked.names.add(name)
    _charge(path, name, member.size, unpacked)
    source = _Capped(cast(IO[bytes], tar.extractfile(member)), path, name, member.size)
    if name.startswith("objects/"):
        sha = name[8:10] + name[11:]
        unpacked.objects[sha] = stage_object(store, path, source, sha)
        return
    if member.size > MAX_DOCUMENT:
        raise TriageError(f"{path}: member {name} is too large for a manifest or annotation")
    data = source.read()
    if name == BUNDLE_DOC:
        unpacked.doc = _check_doc(path, data)
    elif name.startswith("runs/"):
        run_id = name[5:-5]
        unpacked.manifests[run_id] = (data, _check_manifest(path, run_id, data))
    else:
        unpacked.annotations[name[12:-5]] = _check_annotations(path, name, data)


def _charge(path: Path, name: str, size: int, unpacked: _Unpacked) -> None:
    """Count bytes against what the bundle may expand to; refuse it once they are too many."""
    unpacked.expanded += size
    if unpacked.expanded > unpacked.limit:
        raise TriageError(f"{path}: expands past {unpacked.limit:,} bytes at member {name} (a "
                          f"bundle may expand to {EXPANSION_RATIO} times its size, as a "
                          "guard against decompression bombs); if you trust it, decompress it "
                          "and import the plain .tar")


class _Capped:
    """A member's stream that counts the bytes actually read: more than its header declared (and
    charged) is refused, so what is written stays within what was checked."""

    def __init__(self, stream: IO[bytes], path: Path, name: str, declared: int) -> None:
        self.stream, self.path, self.name, self.left = stream, path, name, declared

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.left -= len(data)
        if self.left < 0:
            raise TriageError(f"{self.path}: member {self.name} holds more bytes than its "
                              "header declares; export the bundle again")
        return data


def stage_object(store: Store, path: Path, source: _Capped, sha: str) -> Path:
    """Copy one object to a temp file under objects/, hashing it; refuse it if it is damaged."""
    with atomic.temp_file_in(store.files.temp_folder("objects"), "-import",
                             keep=True) as (sink, temp):
        if copy_hashing(cast(BinaryIO, source), sink)[0] != sha:  # it only reads it
            raise CorruptObject(f"{path}: object {sha[:12]} does not match its hash; the bundle "
                                "is damaged, export it again")
    return temp


def _json_object(path: Path, name: str, data: bytes) -> dict[str, Any]:
    try:
        doc = validate.load_json(data)
    except ValueError as exc:
        raise TriageError(f"{path}: {name} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise TriageError(f"{path}: {name} is not a JSON object")
    return doc


def _check_doc(path: Path, data: bytes) -> dict[str, Any]:
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


def _check_manifest(path: Path, run_id: str, data: bytes) -> dict[str, Any]:
    """A manifest that hashes to its id, is not from a newer triage and matches the manifest
    schema: every reader of the store trusts what is in runs/, so nothing else may get there."""
    if manifest_id(data) != run_id:
        raise CorruptObject(f"{path}: manifest of run {run_id[:12]} does not match its id; the "
                            "bundle is damaged, export it again")
    manifest = _json_object(path, f"runs/{run_id}.json", data)
    try:
        validate.check_manifest(manifest, f"{path}: run {run_id[:12]}")
    except validate.SchemaMismatch as exc:
        raise _altered(path, f"the manifest of run {run_id[:12]}", exc) from None
    try:  # a table or object the layout has no place for (a name like ../../x)
        run_parts(run_id, manifest)
    except (ValueError, KeyError, TypeError) as exc:
        raise TriageError(f"{path}: the manifest of run {run_id[:12]} names a file no run may "
                          f"have ({exc}); the bundle was altered, export it again") from None
    return manifest


def _check_annotations(path: Path, name: str, data: bytes) -> dict[str, Any]:
    doc = _json_object(path, name, data)
    try:
        validate.check(doc, validate.ANNOTATIONS)
    except validate.SchemaMismatch as exc:
        raise _altered(path, name, exc) from None
    return doc


def _altered(path: Path, what: str, exc: validate.SchemaMismatch) -> TriageError:
    return TriageError(f"{path}: {what} does not match its schema ({exc}); the bundle was "
                       "altered, export it again")


def check_complete(store: Store, path: Path, unpacked: _Unpacked) -> None:
    """Every listed run has its manifest, and every object a new run needs is at hand."""
    listed = set(unpacked.runs)
    if listed != set(unpacked.manifests):
        raise TriageError(f"{path}: {BUNDLE_DOC} lists {len(listed)} runs but the bundle holds "
                          f"{len(unpacked.manifests)} manifests")
    stray = set(unpacked.annotations) - listed
    if stray:
        raise TriageError(f"{path}: annotations of run {sorted(stray)[0][:12]}, which the bundle "
                          "does not hold")
    for run_id, (_data, manifest) in unpacked.manifests.items():
        for part in run_parts(run_id, manifest):
            if part.sha256 not in unpacked.objects and not store.files.exists(part.key):
                raise TriageError(f"{path}: the bundle lacks the {part.what} of run "
                                  f"{run_id[:12]}")


def _check_tables(store: Store, path: Path, unpacked: _Unpacked) -> None:
    """Each table a new run names must be Parquet with that table's rows and columns: `ls` reads
    every run's kernel_summary, so a report posing as one would fail it for the whole store."""
    from triage.schemas.tables import tables_version

    for run_id, (_data, manifest) in unpacked.manifests.items():
        if store.runs.has(run_id):
            continue
        current = manifest["tables_schema_version"] == tables_version()
        for name, ref in sorted(manifest["tables"].items()):
            if not _table_fits(_table_file(store, unpacked, run_id, name, ref["sha256"]), name,
                               ref["rows"], current):
                raise TriageError(f"{path}: table {name} of run {run_id[:12]} is not the table "
                                  "its manifest describes; the bundle was altered, export it "
                                  "again")


def _table_file(store: Store, unpacked: _Unpacked, run_id: str, name: str,
                sha: str) -> Path | None:
    """A table's file: staged from the bundle, else the store's (None: in neither)."""
    try:
        return unpacked.objects.get(sha) or store.tables.local(run_id, name, sha)
    except FileNotFoundError:
        return None


def _table_fits(file: Path | None, name: str, rows: int, current: bool) -> bool:
    """Only the Parquet footer is read; a table of an older tables version (`current` False)
    is checked for its rows only, its columns being those of its day."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from triage.schemas.tables import arrow_schema, table_specs

    if file is None:
        return False
    try:
        footer = pq.read_metadata(file)
    except (pa.ArrowException, OSError):
        return False
    if footer.num_rows != rows:
        return False
    return not current or (name in table_specs()["tables"] and
                           footer.schema.to_arrow_schema().remove_metadata() == arrow_schema(name))


def _check_label_clashes(store: Store, path: Path, names: list[str]) -> None:
    """Refuse --labels before anything is written when a label would be a folder of another,
    here or in the bundle: set one by one, the first clash would leave the import half done."""
    for name in names:
        other = store.labels.clash(name) or next(
            (o for o in names if o.startswith(name + "/") or name.startswith(o + "/")), None)
        if other is not None:
            raise UsageError(f"{path}: label {name!r} clashes with label {other!r} (one would be "
                             "a folder of the other); import without --labels")


def _publish(store: Store, unpacked: _Unpacked, labels: bool) -> ImportResult:
    """Objects first, then each run's annotations and manifest, then keys, catalog rows, labels."""
    pending = [r for r in unpacked.runs if not store.runs.has(r)]
    keys: dict[str, list[str]] = {}  # an object's hash -> the keys it goes to in the store
    for run_id in pending:
        for part in run_parts(run_id, unpacked.manifests[run_id][1]):
            keys.setdefault(part.sha256, []).append(part.key)
    sizes = []  # of the objects this import added (each key that was not there)
    for sha in sorted(keys.keys() & unpacked.objects.keys()):
        targets = sorted(set(keys[sha]))
        for key in targets:
            size = _put(store, unpacked, sha, key, key == targets[-1])
            sizes += [] if size is None else [size]
    added: list[str] = []
    present: list[str] = []
    for run_id in unpacked.runs:
        new = run_id in pending and add_run(store, run_id, unpacked)
        (added if new else present).append(run_id)
    record_keys(store, {run_id: unpacked.manifests[run_id][1] for run_id in added})
    rows = [catalog.catalog_row(store, r, unpacked.manifests[r][1], store.annotations.read(r))
            for r in added]
    catalog.add_rows(store, rows)
    labels_set, labels_skipped, labels_was = _apply_labels(store, unpacked.labels, labels)
    return ImportResult(tuple(added), tuple(present), len(sizes), sum(sizes), labels_set,
                        labels_skipped, labels_was)


def _put(store: Store, unpacked: _Unpacked, sha: str, key: str, last: bool) -> int | None:
    """Publish a staged object at one of its keys: the staged file itself at the last (it
    is renamed away), a copy of it at the others (equal tables of two runs). Its size when
    the key was not there before, else None."""
    existed = store.files.exists(key)
    staged = store.objects.stage_temp(unpacked.objects.pop(sha)) if last else \
        store.objects.stage_file(unpacked.objects[sha])
    _sha, size = store.objects.publish(staged, key)
    return None if existed else size


def add_run(store: Store, run_id: str, unpacked: _Unpacked) -> bool:
    """Make a run visible (its arrival, annotations, then manifest) unless another import or
    archive did so while the objects were published; True when this import added it. The check
    and the rename are two steps, so two imports finishing in the same instant may still both
    count it. The arrival is recorded first: no reader sees the run as one made here."""
    if store.runs.has(run_id):
        return False
    store.annotations.arrived(run_id, "import", unpacked.source, utc_now())
    if run_id in unpacked.annotations and not store.annotations.read(run_id):
        store.files.write(store.annotations.key(run_id),
                          canonical_json(unpacked.annotations[run_id]))
    store.files.write(store.runs.key(run_id), unpacked.manifests[run_id][0], readonly=True)
    return True


def record_keys(store: Store, manifests: dict[str, dict[str, Any]]) -> None:
    """File imported runs under the dedup key `triage archive` would look for, so the same report
    archived here finds them. Keys are derived from the manifests, never taken from the bundle:
    a bundle must not be able to redirect a report to a run of other reports. A key that already
    names a run here is left alone."""
    from triage.archive.ingest import dedup_key_of  # the archive machinery, only when needed

    for run_id, manifest in manifests.items():
        key = dedup_key_of(manifest)
        if key and store.runs.lookup_key(key) is None:
            store.runs.record_key(key, run_id)


def _apply_labels(store: Store, bundle_labels: dict[str, str], apply: bool
                  ) -> tuple[dict[str, str], dict[str, str], dict[str, str | None]]:
    """The bundle's labels by name, (set here, skipped, where each set one pointed before):
    all set with `apply`, else all skipped, so that no label moves unasked or unsaid."""
    chosen = dict(sorted(bundle_labels.items()))
    if not apply:
        return {}, chosen, {}
    was = {name: store.labels.point(name, run_id) for name, run_id in chosen.items()}
    return chosen, {}, was
