"""The on-disk store: immutable objects and manifests, plus the few mutable refs.

Layout (all under the store root):

    triage-store.json       format marker and version (3; `triage migrate` upgrades 1 and 2)
    objects/ab/cdef...      raw reports, listings and patches, by sha256; read-only once written
    tables/<table>/run_id=<id>/<sha256>.parquet
                            a run's tables, hive style so that engines read them in place,
                            named by the hash of their bytes; read-only once written
    runs/<id>.json          run manifests (canonical JSON); id = sha256 of the run's identity
                            (manifest_identity), the file sealed by the hash of its bytes
    keys/<key>              dedup key (report hashes + extractor version) -> run id
    annotations/<id>.json   when a run was first archived, and notes added later
    labels/<name>           label -> run id; the only thing a user moves on purpose
    label-history/<name>/   one write-once file per move of a label (<time>_<writer>.move);
                            the newest by (time, writer) is where the label points
    aliases/<old id>        a format 1 run id -> its format 2 id (migrate.py), write-once
    index/*.parquet         catalog segments for fast `ls` and cross-run queries (derived)
    leases/*.json           one per write in progress (archive, import, label...), so gc spares
                            its files (lease.py)
    remotes/<name>          a remote's store location (`triage remote add`); empty: removed
    remotes.json            remotes as an older triage kept them, all in one: read, never written

Objects and manifests are written to a temp file beside their target and renamed into place, so
no reader sees a partial file; a run is visible once `runs/<id>.json` exists, and that file is
written only after every object it references.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from triage.archive import atomic, lease, validate
from triage.archive.files import StoreFiles
from triage.base.errors import DiskFull, LabelNotFound, NewerFormat, StoreError, UsageError
from triage.base.hashing import copy_hashing, hash_file
from triage.base.timeutil import utc_now

STORE_MARKER = "triage-store.json"
STORE_FORMAT = "triage-store"
# 2: run ids hash the run's identity (manifest_file); 3: tables under tables/<table>/run_id=<id>/
# (hive style), not objects/. An older store is refused until `triage migrate` upgrades it.
STORE_VERSION = 3
TABLES_DIR = "tables"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
HEX_RE = re.compile(r"^[0-9a-fA-F]{4,64}$")
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
RESERVED_LABELS = {"latest"}
SEAL = "sha256"
MOVE_SUFFIX = ".move"
MOVE_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")  # utc_now's
WRITER_RE = re.compile(r"^[A-Za-z0-9.-]{1,128}$")
# A remote's name is one file name: no '/', no leading '.' (not '.', '..' or a temp file)
REMOTE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REMOTES_DIR = "remotes"
REMOTES_FILE = "remotes.json"  # where remotes were kept, all in one, before remotes/<name>
# What a run's id leaves out: how its tables came out as bytes (Parquet writer, pyarrow) and
# which library versions wrote them. Two people archiving one report get one run id.
NOT_IDENTITY = ("tables", "extractor", SEAL)


def canonical_json(obj) -> bytes:
    """The one byte form of a JSON document that its hash is taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def marker_bytes() -> bytes:
    """The whole content of a store's marker file (`verify` compares it byte for byte)."""
    return canonical_json({"format": STORE_FORMAT, "version": STORE_VERSION})


def migrating_marker_bytes(found: int) -> bytes:
    """The marker while `triage migrate` runs from format `found`: a newer format to an older
    triage, and to this one a store that only `migrate` may open (to finish the job)."""
    return canonical_json({"format": STORE_FORMAT, "migrating_from": found,
                           "version": STORE_VERSION})


def seal_of(doc: dict) -> str:
    """The checksum a document carries that its name does not hash whole: sha256 of the rest
    of it. Annotations change (notes are added), and a manifest's name hashes only its
    identity; each write seals them, and readers and `verify` check the seal."""
    body = {k: v for k, v in doc.items() if k != SEAL}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def manifest_identity(manifest: dict) -> dict:
    """What makes a run the run it is: its reports' hashes, provenance, redaction patterns
    and table schema version; not its tables' bytes nor the versions of the libraries that
    wrote them (NOT_IDENTITY). Its tables are attached by their own hashes."""
    return {k: v for k, v in manifest.items() if k not in NOT_IDENTITY}


def manifest_file(manifest: dict) -> tuple[str, bytes]:
    """A manifest's run id and the sealed bytes stored at runs/<id>.json."""
    body = {k: v for k, v in manifest.items() if k != SEAL}
    if body.get("schema_version") == 1:  # an old run: the id hashes the bytes (read only)
        data = canonical_json(body)
        return hashlib.sha256(data).hexdigest(), data
    run_id = hashlib.sha256(canonical_json(manifest_identity(body))).hexdigest()
    return run_id, canonical_json({**body, SEAL: seal_of(body)})


def manifest_id(data: bytes) -> str | None:
    """The run id a manifest file's bytes stand for; None when they are damaged: not the
    canonical JSON of a sealed manifest (a version 1 manifest: its id is its bytes' hash)."""
    try:
        doc = validate.load_json(data)
    except ValueError:  # not a manifest at all: what its bytes hash to (readers say why)
        return hashlib.sha256(data).hexdigest()
    if not isinstance(doc, dict) or doc.get("schema_version") == 1 or SEAL not in doc:
        return hashlib.sha256(data).hexdigest()
    run_id, sealed = manifest_file(doc)
    return run_id if sealed == data and doc[SEAL] == seal_of(doc) else None


def default_store_path() -> Path:
    """Per-user data directory, e.g. ~/.local/share/triage/store on Linux."""
    import platformdirs

    return Path(platformdirs.user_data_path("triage")) / "store"


def store_files(option: str | os.PathLike | None) -> StoreFiles:
    """--store PATH|s3://bucket/prefix, else $TRIAGE_STORE, else the per-user default."""
    chosen = option or os.environ.get("TRIAGE_STORE")
    return StoreFiles.at(os.fspath(chosen) if chosen else str(default_store_path()))


def os_error(exc: OSError, path: Path | str, doing: str) -> StoreError:
    """Turn an OSError into a one-line StoreError that names the path and the fix."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreError(f"cannot {doing} store {path}: {exc.strerror}; "
                          "choose a writable location with --store or $TRIAGE_STORE")
    if exc.errno == errno.ENOSPC:
        return DiskFull(f"cannot {doing} store {path}: disk full; free space or move the store")
    return StoreError(f"cannot {doing} store {path}: {exc.strerror or exc}")


@dataclass(frozen=True)
class LabelMove:
    """One move of a label, as its history keeps it: when, by which writer, to which run
    (None: the label was deleted)."""

    time: str
    writer: str
    run_id: str | None


def writer_id() -> str:
    """A name for this writer no other writer has (host, process, random), so that two moves
    made in the same microsecond on two nodes are two files, ordered the same by everyone."""
    import secrets
    import socket

    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Part:
    """One file a run references: its key in the store, the sha256 its bytes must hash to,
    what it is (for messages) and the size its manifest records (None: not recorded)."""

    key: str
    sha256: str
    what: str
    size: int | None


TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Store.table_key's keys, and nothing else under tables/
TABLE_KEY_RE = re.compile(r"^tables/[a-z][a-z0-9_]{0,63}/run_id=[0-9a-f]{64}/"
                          r"[0-9a-f]{64}\.parquet$")


def run_parts(run_id: str, manifest: dict) -> list[Part]:
    """Every file a run references, each once: its reports, the `--list-sections`/`--list-sets`
    output and working-tree patch a capture stored (objects/), and its tables (tables/).

    Reads the stored document, not a RunRecord: verify, gc and import must fail on a malformed
    reference list (KeyError, TypeError, ValueError), where RunRecord degrades it to nothing;
    and a table name or hash that is not one could name a key outside the layout."""
    capture = manifest.get("capture") or {}
    objects = [(r["sha256"], f"report {r.get('name')}", r.get("bytes"))
               for r in manifest.get("reports") or []]
    objects += [(listing["blob"], f"ncu --list-{key} output", None)
                for key, listing in sorted((capture.get("ncu_lists") or {}).items())
                if listing.get("blob") is not None]
    patch = (capture.get("git") or {}).get("patch")
    if patch is not None:
        objects.append((patch["sha256"], "patch of the working tree", patch.get("bytes")))
    parts = [Part(Store.object_key(_sha(sha)), sha, what, size) for sha, what, size in objects]
    for name, table in sorted((manifest.get("tables") or {}).items()):
        if not TABLE_NAME_RE.match(name):
            raise ValueError(f"table name {name[:40]!r} is not one")
        sha = _sha(table["sha256"])
        parts.append(Part(Store.table_key(run_id, name, sha), sha, f"table {name}",
                          table.get("bytes")))
    return list({part.key: part for part in parts}.values())


def _sha(value: object) -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ValueError(f"{str(value)[:40]!r} is not a sha256")
    return value


@dataclass(frozen=True)
class Staged:
    """An object copied into a temp file under objects/, durable but not yet visible."""

    temp: Path
    sha256: str
    bytes: int


class Store:
    """A triage store: its files (a local directory or an S3 prefix, files.py) by key.

    Every read, listing, write and removal goes through `files`, one implementation whatever
    the filesystem. `root` and the folder paths below it are the local directory of a local
    store (tests and tools that damage a store on purpose); a remote store has none."""

    def __init__(self, files: StoreFiles | Path):
        self.files = files if isinstance(files, StoreFiles) else StoreFiles.local(Path(files))

    @property
    def where(self) -> str:
        """The store for messages: its directory, or its URL and endpoint."""
        return self.files.where

    @property
    def disk(self) -> Path:
        """The local folder whose disk a write fills first: the store's own, or for a remote
        store the spool its temp files are staged in (space.py checks its room)."""
        if self.files.local_root is not None:
            return self.files.local_root
        atomic.ensure_dir(self.files.spool)
        return self.files.spool

    @property
    def root(self) -> Path:
        if self.files.local_root is None:
            raise StoreError(f"store {self.where} is not a local directory")
        return self.files.local_root

    objects = property(lambda self: self.root / "objects")
    runs = property(lambda self: self.root / "runs")
    keys = property(lambda self: self.root / "keys")
    annotations = property(lambda self: self.root / "annotations")
    label_dir = property(lambda self: self.root / "labels")
    index = property(lambda self: self.root / "index")
    leases = property(lambda self: self.root / "leases")
    alias_dir = property(lambda self: self.root / "aliases")
    history_dir = property(lambda self: self.root / "label-history")

    def error(self, exc: OSError, doing: str) -> StoreError:
        """An OSError of this store's filesystem as one line naming the store and the fix."""
        return self.files.error(exc, doing)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, create: bool = False,
             upgrade: bool = False) -> "Store":
        """Open the store at `path` (see store_files); create it only when asked to write. A
        store of an older format opens only to be upgraded (`triage migrate`)."""
        files = store_files(path)
        store = cls(files)
        if files.remote:
            # The marker read at once (on S3 each probe is a request, on every command): the
            # bucket is looked for only where it is missing, to say which is.
            marker = store.read_file(STORE_MARKER)
            if marker is not None:
                return store._opened(store._check_marker(marker), upgrade)
            store._check_bucket()
        # Listed after the marker was looked for, a store being created by another writer
        # (its marker, then its leases) may show up whole: it is a store, not a stranger's.
        if files.exists(STORE_MARKER) or STORE_MARKER in (names := files.names("")):
            return store._opened(store._check_marker(), upgrade)
        if files.exists(""):
            # One message whether --store or $TRIAGE_STORE named it: the same mistake.
            raise StoreError(f"store path {store.where} is a file, not a directory; give a store "
                             "directory with --store or $TRIAGE_STORE")
        # A crash while creating the store leaves at most a temp marker: still "empty".
        if any(not n.startswith(atomic.TMP_PREFIX) for n in names):
            raise StoreError(f"{store.where} is not a triage store (no {STORE_MARKER}); "
                             "pass an empty or new directory with --store")
        if not create:
            raise StoreError(f"no triage store at {store.where}; `triage archive REPORT` "
                             "creates one")
        try:
            if files.local_root is not None:
                files.local_root.mkdir(parents=True, exist_ok=True)
                # leases/ is there from the start: a refused write that took a lease adds no
                # folder
                atomic.write_bytes(files.local_root / STORE_MARKER, marker_bytes())
                (files.local_root / "leases").mkdir(exist_ok=True)
            else:
                files.write(STORE_MARKER, marker_bytes())
        except OSError as exc:
            raise store.error(exc, "create") from None
        return store

    def _check_bucket(self) -> None:
        """A remote store's bucket must be there (one request): triage never creates buckets,
        whose owner, region and policies are the team's to choose."""
        from pyarrow import fs

        try:
            found = self.files.fs.get_file_info(self.files.bucket)
        except OSError as exc:
            raise self.error(exc, "open") from None
        if found.type == fs.FileType.NotFound:
            from triage.archive.files import remote_error

            raise remote_error(OSError("NO_SUCH_BUCKET"), self.where, self.files.bucket, "open")

    def _opened(self, doc: dict, upgrade: bool) -> "Store":
        """This store, whose marker is `doc`: refused when it is of an older format (or being
        migrated), unless opened to be upgraded."""
        if not upgrade and (doc.get("version", 0) < STORE_VERSION or "migrating_from" in doc):
            how = (f"is being migrated to format {STORE_VERSION}; run `triage migrate` to "
                   "finish"
                   if "migrating_from" in doc else
                   f"has format version {doc.get('version', 0)}; run `triage migrate` once "
                   f"to upgrade it to {STORE_VERSION} (old run ids keep working)")
            raise StoreError(f"store {self.where} {how}")
        return self

    def _check_marker(self, data: bytes | None = None) -> dict:
        """The marker's document (its bytes `data`, when read already), checked."""
        where = f"{self.where}/{STORE_MARKER}" if self.files.remote else \
            str(self.root / STORE_MARKER)
        try:
            doc = json.loads(data if data is not None else self.files.read(STORE_MARKER))
        except (OSError, ValueError) as exc:
            raise StoreError(f"unreadable store marker {where}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != STORE_FORMAT:
            raise StoreError(f"{self.where} is not a triage store; pass another --store")
        if not isinstance(doc.get("version", 0), int):
            raise StoreError(f"corrupt store marker {where}: version is not a number")
        if doc.get("version", 0) > STORE_VERSION:
            raise NewerFormat(f"store {self.where} has format version {doc['version']}, newer "
                              f"than this triage ({STORE_VERSION}); upgrade triage")
        return doc

    def marker(self) -> dict:
        """The store's marker document (checked when the store was opened)."""
        return self._check_marker()

    def format_version(self) -> int:
        return self.marker().get("version", 0)

    def migrating(self) -> bool:
        """Whether a `triage migrate` began and has not finished."""
        return "migrating_from" in self.marker()

    def writable(self) -> bool:
        """Whether this process may add files (a remote store: the server decides per write)."""
        return self.files.remote or os.access(self.root, os.W_OK)

    def check_writable(self) -> None:
        """Fail early, before any work, when the store cannot take new files."""
        if self.files.local_root is not None and not os.access(self.root, os.W_OK | os.X_OK):
            raise StoreError(f"cannot write store {self.root}: permission denied; "
                             "choose a writable location with --store or $TRIAGE_STORE")

    # -- objects -----------------------------------------------------------------------------

    @staticmethod
    def object_key(sha256: str) -> str:
        return f"objects/{sha256[:2]}/{sha256[2:]}"

    @staticmethod
    def table_key(run_id: str, name: str, sha256: str) -> str:
        """Where a run's table lies: hive style, so that Spark, DuckDB, Polars or pyarrow read
        `tables/<name>/` as one dataset with `run_id` as its partition column, no triage code
        needed; named by the hash of its bytes, so a file never changes once written."""
        return f"{TABLES_DIR}/{name}/run_id={run_id}/{sha256}.parquet"

    def object_path(self, sha256: str) -> Path:
        """An object's file in a local store (tests and tools that damage one on purpose)."""
        return self.root / self.object_key(sha256)

    def size_of(self, key: str) -> int | None:
        """A file's size; None when it is missing."""
        found = self.files.info(key)
        return found.size if found is not None else None

    def open_file(self, key: str):
        """A run's file (an object, a table) opened for reading (random access), streamed as it
        is: not checked against its hash (`verify`, `export` hash what they read)."""
        return self.files.open(key)

    def local_table(self, run_id: str, name: str, sha256: str) -> Path:
        """A local file holding a run's table, for readers that want a path (Parquet, DuckDB)."""
        return self.local_copy(self.table_key(run_id, name, sha256), sha256)

    def local_copy(self, key: str, sha256: str) -> Path:
        """A local file holding a file named by the hash of its bytes (an object, a table, a
        catalog segment): the file itself in a local store; for a remote one, its copy in the
        cache (cache.py), fetched once and checked against its hash. FileNotFoundError when
        it is missing."""
        if self.files.local_root is not None:
            return self.files.local_root / key
        from triage.archive.cache import cached_object

        return cached_object(self.files, key, sha256)

    def put_stream(self, stream) -> tuple[str, int]:
        """Store the bytes of a readable stream; return (sha256, size). Idempotent."""
        return self.publish(self.stage_stream(stream))

    def put_file(self, path: Path) -> tuple[str, int]:
        """Store a file's bytes (streamed, never read whole)."""
        with open(path, "rb") as stream:
            return self.put_stream(stream)

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        import io

        return self.put_stream(io.BytesIO(data))

    def object_bytes(self, sha256: str) -> bytes:
        """A small object's bytes (a capture's patch), checked against its hash: damaged bytes
        must not be handed on as the run's."""
        from triage.base.errors import CorruptObject

        try:
            data = self.files.read(self.object_key(sha256))
        except FileNotFoundError:
            raise CorruptObject(f"object {sha256[:12]} is missing from the store; `triage "
                                "verify` lists what is damaged") from None
        except OSError as exc:
            raise self.error(exc, "read") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CorruptObject(f"object {sha256[:12]} does not match its hash; `triage verify` "
                                "lists what is damaged")
        return data

    def new_temp(self, suffix: str = "") -> Path:
        """A temp file for an object being made (an nsys export, a table, an imported object):
        under objects/ in a local store, in the spool for a remote one (files.py)."""
        try:
            return self.files.new_temp("objects", suffix)
        except OSError as exc:
            raise self.error(exc, "write") from None

    def stage_stream(self, stream, cancel=None) -> Staged:
        """Copy a stream into a durable temp file under objects/, hashing it on the way.

        Split from `publish` so that a large report can be copied on a worker thread while it
        is being read, and dropped (`discard`) if reading it fails: nothing becomes visible.
        """
        try:
            with atomic.temp_file_in(self.files.temp_folder("objects"), keep=True) \
                    as (sink, temp):
                sha, size = copy_hashing(stream, sink, cancel)
                sink.flush()
                os.fsync(sink.fileno())
        except OSError as exc:
            raise self.error(exc, "write") from None
        return Staged(temp, sha, size)

    def stage_file(self, path: Path, cancel=None) -> Staged:
        with open(path, "rb") as stream:
            return self.stage_stream(stream, cancel)

    def publish(self, staged: Staged, key: str | None = None,
                cache: bool = False) -> tuple[str, int]:
        """Make a staged file visible: at `key` (a table's), else as the object of its hash;
        with `cache`, a remote store's upload stays in the local cache (a table its writer
        reads back at once).

        Renamed into place even when a copy exists: the fresh file tells a concurrent
        `triage gc` that it is wanted again (see integrity._remove). On S3 the same: a PUT of
        the same bytes under the same name, a new mtime."""
        try:
            self.files.publish(staged.temp, key or self.object_key(staged.sha256), readonly=True,
                               cache_as=staged.sha256 if cache else None)
        except OSError as exc:
            raise self.error(exc, "write") from None
        return staged.sha256, staged.bytes

    @staticmethod
    def discard(staged: Staged) -> None:
        staged.temp.unlink(missing_ok=True)

    @staticmethod
    def stage_temp(temp: Path) -> Staged:
        """A finished temp file (made by `new_temp`), hashed, to be published."""
        sha, size = hash_file(temp)
        return Staged(temp, sha, size)

    # -- runs --------------------------------------------------------------------------------

    def run_path(self, run_id: str) -> Path:
        return self.root / self.run_key(run_id)

    @staticmethod
    def run_key(run_id: str) -> str:
        return f"runs/{run_id}.json"

    def has_run(self, run_id: str) -> bool:
        return self.files.exists(self.run_key(run_id))

    def write_manifest(self, manifest: dict, replace: bool = False) -> str:
        """Write a manifest (after everything it references); return its id.

        Write-once: the first writer of a run wins, and the same run written again leaves its
        file as it is. A damaged manifest file (one that no longer stands for its id) is
        replaced, and so is one whose tables are lost when `replace` (archiving the report
        again repairs a run)."""
        run_id, data = manifest_file(manifest)
        if replace or self.manifest_bytes(run_id) is None:
            self.write_small(self.run_key(run_id), data, readonly=True)
        return run_id

    def write_small(self, key: str, data: bytes, readonly: bool = False) -> None:
        """Write a manifest, key, label or annotations file under a lease of its own: its temp
        file is a leftover to `triage gc` until it is renamed (lease.py)."""
        try:
            with lease.held(self, "write"):
                self.files.write(key, data, readonly)
        except OSError as exc:
            raise self.error(exc, "write") from None

    def read_file(self, key: str) -> bytes | None:
        """A small file's bytes (manifest, key, label, annotations); None when there is none."""
        try:
            return self.files.read(key)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise self.error(exc, "read") from None

    def manifest_bytes(self, run_id: str) -> bytes | None:
        """A manifest's bytes if they stand for its id; None if it is missing or damaged."""
        data = self.read_file(self.run_key(run_id))
        return data if data is not None and manifest_id(data) == run_id else None

    def read_manifest(self, run_id: str) -> dict:
        """A run's manifest, checked against its id first (a few KB to hash): an edited or
        damaged manifest must not be shown or compared as if it were the run."""
        from triage.base.errors import CorruptObject, RunNotFound

        data = self.manifest_bytes(run_id)
        if data is None:
            if not self.has_run(run_id):
                raise RunNotFound(f"run {run_id[:12]} not found; `triage ls` lists runs")
            raise CorruptObject(f"manifest of run {run_id[:12]} does not match its id (edited or "
                                "damaged); `triage verify` lists what is damaged, archiving "
                                "its report again repairs it")
        try:  # hash-valid is not enough: `"kernels": "many"` would fail every reader
            manifest = validate.load_json(data)
            validate.check_manifest(manifest, self.run_key(run_id))
            manifest.pop(SEAL, None)
        except ValueError as exc:
            raise CorruptObject(f"manifest of run {run_id[:12]} is not a valid manifest ({exc}); "
                                "`triage verify` lists what is damaged") from None
        return manifest

    def run_ids(self, prefix: str = "") -> list[str]:
        """Ids of all visible runs, sorted (one directory listing, no file reads); with `prefix`,
        those it begins: resolving an id prefix checks the few names that match, not 100,000."""
        ids = (run_id_of(n) for n in self.run_files() if n.startswith(prefix))
        return sorted(i for i in ids if i is not None)

    def run_files(self) -> list[str]:
        """Every name in runs/, unchecked (one listing): the catalog checks only the few names
        its rows do not account for (`run_id_of`), where `run_ids` checks each."""
        return self.files.names("runs")

    # -- dedup keys ----------------------------------------------------------------------------

    def lookup_key(self, key: str) -> str | None:
        """The run a dedup key points at, if that run is whole: a damaged manifest is not
        "already archived", so archiving the report again writes it afresh."""
        data = self.read_file(f"keys/{key}")
        if data is None:
            return None
        run_id = data.decode("utf-8", "replace").strip()
        if not SHA256_RE.match(run_id) or self.manifest_bytes(run_id) is None:
            return None
        return run_id

    def record_key(self, key: str, run_id: str) -> None:
        self.write_small(f"keys/{key}", (run_id + "\n").encode())

    # -- aliases -------------------------------------------------------------------------------

    def write_alias(self, old: str, new: str) -> None:
        """Let a run's format 1 id resolve to its id now (written by `triage migrate`)."""
        self.write_small(f"aliases/{old}", (new + "\n").encode(), readonly=True)

    def aliases(self, prefix: str = "") -> dict[str, str]:
        """Old run id -> run id, for the old ids that begin with `prefix`."""
        out = {}
        for name in self.files.names("aliases"):
            if not name.startswith(prefix):
                continue
            held = self.pointer(f"aliases/{name}") or ""
            if SHA256_RE.match(name) and SHA256_RE.match(held):
                out[name] = held
        return out

    # -- config: remotes ---------------------------------------------------------------------

    def remotes(self) -> dict[str, str]:
        """The remotes this store pushes to and pulls from: name -> store location
        (`triage remote add`). Each is a file of its own, remotes/<name>, so that two writers
        adding two names at once both keep theirs (no file holds them all, no conditional
        write). Over them, the remotes.json of a store written before (read, never written):
        a name's own file wins, an empty one hides it (removed)."""
        found = self._legacy_remotes()
        for name in self.files.names(REMOTES_DIR):
            if not REMOTE_RE.match(name):  # a temp file (.tmp-*) or a stranger: no remote's
                continue
            url = self._remote_url(name)
            if url:
                found[name] = url
            elif url is not None:
                found.pop(name, None)
        return found

    def _remote_url(self, name: str) -> str | None:
        """What remotes/<name> holds: a URL, "" for a removed remote, None when it is gone."""
        key = f"{REMOTES_DIR}/{name}"
        data = self.read_file(key)
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            raise StoreError(f"{self.where}/{key} is not a remote's URL; delete it and add the "
                             f"remote again with `triage remote add {name} URL`") from None

    def _legacy_remotes(self) -> dict[str, str]:
        """The remotes a store kept in one remotes.json before they had a file each."""
        where = f"{self.where}/{REMOTES_FILE}"
        try:
            data = self.read_file(REMOTES_FILE)
            doc = validate.load_json(data) if data is not None else {"remotes": {}}
        except ValueError as exc:
            raise StoreError(f"cannot read {where} ({exc}); fix or delete it and add the "
                             "remotes again with `triage remote add`") from None
        found = doc.get("remotes") if isinstance(doc, dict) else None
        if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
            raise StoreError(f"{where} is not a remotes file; delete it and add the remotes "
                             "again with `triage remote add`")
        return found

    def write_remote(self, name: str, url: str | None) -> None:
        """Point remote `name` at `url`, or mark it removed (None): its own file, replaced
        atomically, so that no other remote is rewritten."""
        self.write_small(f"{REMOTES_DIR}/{name}", (url or "").encode("utf-8"))

    # -- annotations ---------------------------------------------------------------------------

    @staticmethod
    def annotations_key(run_id: str) -> str:
        return f"annotations/{run_id}.json"

    def read_annotations(self, run_id: str) -> dict:
        """A run's archive time and notes; {} when there are none, or when they are not what the
        annotations schema says (`verify` names them): bad notes must not hide the run."""
        try:
            data = self.read_file(self.annotations_key(run_id))
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
        doc = {} if new_run else self.read_annotations(run_id)
        doc.setdefault("archived", archived)
        notes = doc.setdefault("notes", [])
        if note and note not in [n["text"] for n in notes]:
            notes.append({"time": archived, "text": note})
        self._write_annotations(run_id, doc)
        return doc

    def merge_annotations(self, run_id: str, other: dict) -> bool:
        """Add another store's annotations of a run to ours (push, pull): the earlier archive
        time, and each of its notes we lack, with the time it was written. True when that
        changed anything (nothing is written otherwise)."""
        doc = self.read_annotations(run_id)
        notes = list(doc.get("notes", []))
        texts = {n["text"] for n in notes}
        notes += [n for n in other.get("notes", []) if n["text"] not in texts]
        times = [t for t in (doc.get("archived"), other.get("archived")) if t]
        merged = {**doc, **({"archived": min(times)} if times else {}), "notes": notes}
        if merged == {"notes": [], **doc}:
            return False
        self._write_annotations(run_id, merged)
        return True

    def _write_annotations(self, run_id: str, doc: dict) -> None:
        sealed = {**doc, SEAL: seal_of(doc)}
        self.write_small(self.annotations_key(run_id), canonical_json(sealed))

    # -- labels --------------------------------------------------------------------------------

    def pointer(self, key: str) -> str | None:
        """What a label, key or alias file says, as text; None when there is none, "" when it
        cannot be read (a damaged label points at no run)."""
        try:
            data = self.files.read(key)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except StoreError:
            raise
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def labels(self) -> dict[str, str]:
        """All labels and the run each points at. A damaged label (bytes that are not text, a
        file that cannot be read) points at no run, which `resolve` and `verify` name; a file
        whose name no label can have is not one (`verify` names it): one bad file must not
        hide the other labels."""
        out: dict[str, str] = {}
        for key in self.files.files("labels"):
            name = key[len("labels/"):]
            if LABEL_RE.match(name) and not key.rsplit("/", 1)[-1].startswith(atomic.TMP_PREFIX):
                out[name] = self.pointer(key) or ""
        return out

    def label_history(self, name: str) -> list[LabelMove]:
        """Every move of a label, oldest first; [] for a label moved before histories were
        kept, or never. Newest wins: the last is where the label points."""
        folder = f"label-history/{name}"
        names = sorted(n for n in self.files.names(folder) if n.endswith(MOVE_SUFFIX))
        moves = [self._move(f"{folder}/{n}") for n in names]
        return sorted((m for m in moves if m is not None), key=lambda m: (m.time, m.writer))

    def _move(self, key: str) -> LabelMove | None:
        """One history entry; None for one that cannot be read (`verify` names the store's
        damage; a bad entry must not hide the label's other moves)."""
        try:
            data = self.read_file(key)
            if data is None:
                return None
            doc = json.loads(data)
            run_id = doc["run"]
            if run_id is not None and not SHA256_RE.match(run_id):
                return None
            return LabelMove(str(doc["time"]), str(doc["writer"]), run_id)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _record_move(self, name: str, run_id: str | None) -> str | None:
        """Append a move to the label's history (a new file, never a rewrite: no conditional
        write, so two nodes moving one label both keep their move) and bring labels/<name> to
        the newest move; return where the label pointed before this move."""
        before = self.pointer(f"labels/{name}")
        self._write_move(name, LabelMove(utc_now(precise=True), writer_id(), run_id))
        self._point_at_newest(name)
        return before

    def _write_move(self, name: str, move: LabelMove) -> None:
        entry = {"label": name, "run": move.run_id, "time": move.time, "writer": move.writer}
        stamp = move.time.replace(":", "").replace("-", "")
        self.write_small(f"label-history/{name}/{stamp}_{move.writer}{MOVE_SUFFIX}",
                         canonical_json(entry), readonly=True)

    def add_label_moves(self, name: str, moves: list[LabelMove]) -> str | None:
        """Add another store's moves of a label to its history here, each under its own time
        and writer (push, pull), and point the label at the newest move of the two histories:
        two pushers moving one label lose neither move. Moves already here are skipped, and
        so is one whose time or writer could not be a file name. Returns what it held before."""
        self._make_room(name)
        known = set(self.label_history(name))
        for move in moves:
            if move not in known and MOVE_TIME_RE.match(move.time) \
                    and WRITER_RE.match(move.writer):
                self._write_move(name, move)
        before = self.pointer(f"labels/{name}")
        self._point_at_newest(name)
        return before

    def _point_at_newest(self, name: str) -> None:
        """Bring labels/<name> to the newest move, and look again after writing it: a writer
        whose move came in meanwhile writes after us, so the last pointer written is the newest
        move's (newest wins on every node; readers read the pointer, one file)."""
        key, written = f"labels/{name}", None
        while True:
            history = self.label_history(name)
            newest = history[-1] if history else None
            if newest is None or newest == written:
                return
            if newest.run_id is None:
                self.files.delete(key)
            else:
                self.write_small(key, (newest.run_id + "\n").encode())
            written = newest

    def set_label(self, name: str, run_id: str) -> str | None:
        """Point a label at a run (a move in its history, labels/<name> replaced atomically);
        return what it held before (None: a new label), so that a move is never silent."""
        self._make_room(name)
        return self._record_move(name, run_id)

    def _make_room(self, name: str) -> None:
        """Refuse a name no label may have, or one that clashes with a label here."""
        check_label(name)
        # An empty folder where the label goes (made by hand, or left when its labels were
        # removed) is in the way of nothing; one holding a label stays, and is named below.
        self.files.delete_folder(f"labels/{name}")
        other = self.label_clash(name)
        if other == name:
            raise UsageError(f"label {name!r} clashes with label {name!r} being written, or with "
                             f"a folder labels/{name} that holds no label; remove the folder or "
                             "choose another name")
        if other is not None:
            raise UsageError(f"label {name!r} clashes with label {other!r} (one would be a "
                             "folder of the other); choose another name")

    def remove_label(self, name: str) -> str:
        """Delete a label; return what it held. A deletion is a move in the label's history
        (to no run), then one unlink: a reader sees the whole label or none. Only a name
        `labels()` lists is removed, so no name can reach outside labels/. Its folder, if
        emptied, stays: `set_label` removes empty folders where a label goes."""
        held = self.labels().get(name)
        if held is None:
            raise LabelNotFound(f"label {name!r} not found; `triage label` lists labels")
        try:
            self._record_move(name, None)
        except OSError as exc:
            raise self.error(exc, "write") from None
        return held

    def label_clash(self, name: str) -> str | None:
        """The label that `name` cannot sit beside, one being a folder of the other (a label
        being written there counts: its temp file is in that folder, but is not named)."""
        parts = name.split("/")
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if self.files.exists(f"labels/{above}"):
                return above
        if not self.files.is_dir(f"labels/{name}"):
            return None
        inner = (e.key for e in self.files.tree(f"labels/{name}")
                 if e.is_file and not e.name.startswith(atomic.TMP_PREFIX))
        return next(inner, f"labels/{name}")[len("labels/"):]


def run_id_of(name: str) -> str | None:
    """The run whose manifest a file in runs/ is, from its name; None for a temp file or any
    other name."""
    return name[:-5] if name.endswith(".json") and SHA256_RE.match(name[:-5]) else None


def looks_like_run(word: str) -> bool:
    """A RUN that no label can be: a run id, an id prefix (4+ hex digits) or `latest`."""
    return word in RESERVED_LABELS or HEX_RE.match(word) is not None


def is_label_name(name: str) -> bool:
    """Labels name runs without looking like run ids or prefixes, and map to one file path."""
    return LABEL_RE.match(name) is not None and not looks_like_run(name) \
        and not any(p in ("", ".", "..") for p in name.split("/"))


def check_label(name: str) -> None:
    """Refuse a name no label may have, saying what a label may be."""
    if not is_label_name(name):
        raise UsageError(f"invalid label {name!r}: use at most 128 letters, digits, '.', '_', "
                         "'-' and '/' between names, starting with a letter or digit; not "
                         "'latest', and not 4+ hex digits (a run id prefix)")
