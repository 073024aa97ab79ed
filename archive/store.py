"""The on-disk store: immutable objects and manifests, plus the few mutable refs.

Layout (all under the store root):

    triage-store.json       format marker and version (4; `triage migrate` upgrades 1 to 3)
    objects/ab/cdef...      raw reports, listings and patches, by sha256; read-only once written
    tables/<table>/run_id=<id>/<sha256>.parquet
                            a run's tables, hive style so that engines read them in place,
                            named by the hash of their bytes; read-only once written
    runs/<id>.json          run manifests (canonical JSON); id = sha256 of the run's identity
                            (manifest_identity), the file sealed by the hash of its bytes
    keys/<key>              dedup key (report hashes, source, redaction) -> run id
    annotations/<id>.json   when a run was first archived, and notes added later
    labels/<name>           label -> run id; the only thing a user moves on purpose
    label-history/<name>/   one write-once file per move of a label (<time>_<writer>.move);
                            the newest by (time, writer) is where the label points
    acceptances/<id>/       one write-once file per `triage accept` of the run
                            (<time>_<writer>.accept): who, when, why
    aliases/<old id>        a run's id before a migration -> its id now (migrate.py), write-once
    index/*.parquet         catalog segments for fast `ls` and cross-run queries (derived)
    leases/*.json           one per write in progress (archive, import, label...), so gc spares
                            its files (lease.py)
    remotes/<name>          a remote's store location (`triage remote add`); empty: removed
    remotes.json            remotes as an older triage kept them, all in one: read, never written

Objects and manifests are written to a temp file beside their target and renamed into place, so
no reader sees a partial file; a run is visible once `runs/<id>.json` exists, and that file is
written only after every object it references.

Each folder is kept by one part of `Store`, so that no class owns them all: objects/ by
`store.objects` (objects.py), tables/ by `store.tables` (table_files.py), runs/, keys/ and
aliases/ by `store.runs` (run_manifests.py), annotations/ by `store.annotations`
(annotations.py), labels/ and label-history/ by `store.labels` (labels.py), acceptances/ by
`store.acceptances` (acceptances.py), remotes/ by
`store.remotes` (remote_config.py); index/ is the catalog's (catalog.py), leases/ lease.py's.
This module opens a store and checks its marker and format.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from triage.archive import atomic, lease
from triage.archive.acceptances import Acceptances
from triage.archive.annotations import Annotations
from triage.archive.canonical import canonical_json
from triage.archive.files import StoreFiles
from triage.archive.labels import Labels
from triage.archive.objects import Objects
from triage.archive.remote_config import RemoteConfig
from triage.archive.run_manifests import Runs
from triage.archive.table_files import Tables
from triage.base.errors import DiskFull, NewerFormat, StoreError, UsageError

STORE_MARKER = "triage-store.json"
STORE_FORMAT = "triage-store"
# 2: run ids hash the run's identity (manifest_file); 3: tables under tables/<table>/run_id=<id>/
# (hive style), not objects/; 4: every run's id hashes its reports and capture facts alone
# (manifest version 4). An older store is refused until `triage migrate` upgrades it.
STORE_VERSION = 4


def marker_bytes() -> bytes:
    """The whole content of a store's marker file (`verify` compares it byte for byte)."""
    return canonical_json({"format": STORE_FORMAT, "version": STORE_VERSION})


def migrating_marker_bytes(found: int) -> bytes:
    """The marker while `triage migrate` runs from format `found`: a newer format to an older
    triage, and to this one a store that only `migrate` may open (to finish the job)."""
    return canonical_json({"format": STORE_FORMAT, "migrating_from": found,
                           "version": STORE_VERSION})


def default_store_path() -> Path:
    """Per-user data directory, e.g. ~/.local/share/triage/store on Linux."""
    import platformdirs

    return Path(platformdirs.user_data_path("triage")) / "store"


def store_files(option: str | os.PathLike | None) -> StoreFiles:
    """--store PATH|s3://bucket/prefix, else $TRIAGE_STORE, else the per-user default. An
    empty $TRIAGE_STORE is refused, not read as "the default": it is a script's unset path."""
    chosen = option or os.environ.get("TRIAGE_STORE")
    if chosen is not None and not os.fspath(chosen).strip():
        if option:
            raise UsageError("--store is blank; give a store path or s3://bucket/prefix")
        raise UsageError("$TRIAGE_STORE is set but empty; set it to a store path or unset it "
                         "(the default store is used only where it is not set)")
    return StoreFiles.at(os.fspath(chosen) if chosen else str(default_store_path()))


SHARED_VARIABLE = "TRIAGE_STORE_SHARED"
STORE_MODES = {"private": 0o700, "group": 0o2770}  # group: setgid, so files keep its group


def new_store_mode() -> int:
    """The mode of a new local store's folder: private (0700) unless $TRIAGE_STORE_SHARED is
    `group` when the store is made (as `git init --shared=group`): the raw reports inside keep
    the capturing environment, tokens included, which no other user should read unasked."""
    chosen = os.environ.get(SHARED_VARIABLE) or "private"
    if chosen not in STORE_MODES:
        raise UsageError(f"${SHARED_VARIABLE}={chosen!r}: give 'group' (a team store the "
                         "folder's group may read and write) or 'private' (the default)")
    return STORE_MODES[chosen]


def os_error(exc: OSError, path: Path | str, doing: str) -> StoreError:
    """Turn an OSError into a one-line StoreError that names the path and the fix."""
    if exc.errno == errno.EROFS:
        return StoreError(f"cannot {doing} store {path}: it is on a read-only file system; "
                          "choose a writable location with --store or $TRIAGE_STORE")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StoreError(f"cannot {doing} store {path}: {exc.strerror}; "
                          "choose a writable location with --store or $TRIAGE_STORE")
    if exc.errno == errno.ENOSPC:
        return DiskFull(f"cannot {doing} store {path}: disk full; free space or move the store")
    return StoreError(f"cannot {doing} store {path}: {exc.strerror or exc}")


def _read_only_mount(path: Path) -> bool:
    """Whether `path` is on a file system mounted read-only (no permission would help)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class Store:
    """A triage store: its files (a local directory or an S3 prefix, files.py) by key, and one
    part per thing it keeps: `objects`, `tables`, `runs` (manifests, dedup keys, aliases),
    `annotations`, `labels`, `acceptances` and `remotes`. The store itself is opened here, its
    marker and format checked, and the small-file reads and writes every part shares made.

    Every read, listing, write and removal goes through `files`, one implementation whatever
    the filesystem. `root` is the local directory of a local store (tests and tools that
    damage a store on purpose); a remote store has none."""

    def __init__(self, files: StoreFiles | Path):
        self.files = files if isinstance(files, StoreFiles) else StoreFiles.local(Path(files))
        self.objects = Objects(self)
        self.tables = Tables(self)
        self.runs = Runs(self)
        self.annotations = Annotations(self)
        self.labels = Labels(self)
        self.acceptances = Acceptances(self)
        self.remotes = RemoteConfig(self)

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
                mode = new_store_mode()
                files.local_root.mkdir(parents=True, exist_ok=True)
                os.chmod(files.local_root, mode)
                # leases/ is there from the start: a refused write that took a lease adds no
                # folder
                atomic.write_bytes(files.local_root / STORE_MARKER, marker_bytes(),
                                   reach=mode & 0o777)
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
            from triage.archive.network import remote_error

            raise remote_error(OSError("NO_SUCH_BUCKET"), self.where, self.files.bucket, "open",
                               self.files.endpoint)

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
            why = "it is on a read-only file system" if _read_only_mount(self.root) \
                else "permission denied"
            raise StoreError(f"cannot write store {self.root}: {why}; "
                             "choose a writable location with --store or $TRIAGE_STORE")

    # -- small files, shared by every part ------------------------------------------------------

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

    def size_of(self, key: str) -> int | None:
        """A file's size; None when it is missing."""
        found = self.files.info(key)
        return found.size if found is not None else None

    def open_file(self, key: str):
        """A run's file (an object, a table) opened for reading (random access), streamed as it
        is: not checked against its hash (`verify`, `export` hash what they read)."""
        return self.files.open(key)

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
