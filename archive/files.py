"""The store's files, over a pyarrow filesystem: a local directory or an S3 bucket and prefix.

The store (store.py and the modules that read and clean it) names its files by keys relative to
the store root (`objects/ab/cdef...`, `runs/<id>.json`) and reads, lists, moves and deletes them
here, through one `pyarrow.fs.FileSystem`: `LocalFileSystem` for a directory, `S3FileSystem` for
`s3://bucket/prefix`. One implementation; the two differ only in how a write becomes visible:

- on a local filesystem, a temp file beside the target, fsynced and renamed into place (atomic.py:
  pyarrow can neither fsync nor chmod);
- on S3 there is no rename, but a PUT is atomic (a reader sees the whole object or none, a
  multipart upload only once completed): an object is written straight to its final key. Every
  key triage writes once is content-addressed or unique to its writer, so a repeated write
  holds the same bytes, and a run is visible only once its manifest (written last) exists.

Temp files a writer needs before it knows an object's hash (a report's copy, a table being
encoded) are local files: beside their target in a local store, in a spool folder of the cache
for a remote one (`spool`, one folder per process: a dead writer's is removed, `clean_spool`),
uploaded by `publish`.

Credentials and endpoint come the standard AWS way: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
(or a profile, AWS_PROFILE), AWS_REGION, and AWS_ENDPOINT_URL for an S3-compatible server;
an s3:// URL's own settings (`?endpoint=...&region=...&profile=...`, a remote's: `S3Place`) win
over them.

Every S3 operation goes through `call`: retried by the S3 client, then run again by triage
while the store's `retry_time` lasts, counted in `retried` (network.py).

A local store's `LocalFileSystem` is made on first use, and what opening a store and looking a
report up read (a file's size, a folder, a small file) goes to the OS directly: an archive
imports no pyarrow (0.15-0.3 s) before its `nsys export` starts, nor a capture before its
profiler does.
"""

from __future__ import annotations

import functools
import os
import random
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlparse

from triage.archive import atomic, lease
from triage.archive.network import (RETRY_PAUSE, RETRY_PAUSE_MAX, Network, first_line,
                                    network_for, remote_error)
from triage.archive.s3place import (URL_RE, S3Place, credentials_options, endpoint_address,
                                    refuse_userinfo, shown_url)
from triage.base.errors import StoreError, Unreachable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import fs as pafs

T = TypeVar("T")
SPOOL_GRACE = 3600.0  # seconds a dead writer's spool folder is kept (`clean_spool`)


@dataclass(frozen=True)
class Entry:
    """One file or folder found by a listing: its key under the store root, size and mtime."""

    key: str
    is_file: bool
    size: int
    mtime: float
    is_dir: bool = False

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


class StoreFiles:
    """The files of one store, by key, on its filesystem (see the module docstring)."""

    def __init__(self, filesystem: pafs.FileSystem | None, base: str, where: str,
                 local_root: Path | None, spool: Path, url: str) -> None:
        self._fs = filesystem  # None: a local store's, made on first use (`fs`)
        self.url = url  # what --store named, to open the store again (a worker, an export)
        self.base = base.rstrip("/")
        self.where = where  # for messages: the directory, or the URL and its endpoint
        self.local_root = local_root
        self.spool = spool
        self.network = Network()  # a remote store's (`s3`)
        self.endpoint: str | None = None
        self.retried = 0  # operations the S3 client gave up on that triage ran again

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def at(cls, chosen: str) -> StoreFiles:
        """The files of the store a --store / $TRIAGE_STORE value names."""
        scheme = URL_RE.match(chosen)
        if scheme is None:
            return cls.local(Path(chosen).expanduser())
        refuse_userinfo(chosen)
        if scheme.group(1).lower() != "s3":
            raise StoreError(f"store {shown_url(chosen)}: {scheme.group(1)}:// stores are not "
                             "supported; "
                             "give a directory or s3://bucket/prefix with --store or "
                             "$TRIAGE_STORE")
        return cls.s3(chosen)

    @classmethod
    def local(cls, root: Path) -> StoreFiles:
        base = Path(os.path.abspath(root)).as_posix()  # pyarrow takes absolute paths only
        return cls(None, base, str(root), root, root / "objects", str(root))

    @classmethod
    def s3(cls, url: str) -> StoreFiles:
        from pyarrow import fs

        place = S3Place.parse(url)
        bucket, prefix = place.bucket, place.prefix
        network = network_for(f"store {shown_url(url)}", dict(place.network))
        # The URL's own settings (a remote's: `triage remote add`) win over the environment.
        endpoint = place.endpoint or _environment_endpoint()
        # allow_delayed_open: an object smaller than a part is one PutObject at close (pyarrow
        # otherwise starts a multipart upload per write: three requests instead of one, about
        # 3x the time of each small write); failures still surface inside `call`, at close.
        options: dict = {**network.client_options(), "allow_delayed_open": True}
        region = place.region or os.environ.get("AWS_REGION") \
            or os.environ.get("AWS_DEFAULT_REGION")
        if endpoint:
            address = urlparse(endpoint)
            options.update(endpoint_override=address.netloc, scheme=address.scheme or "https")
            region = region or "us-east-1"  # an S3-compatible server takes any region
        if region:
            options["region"] = region
        where = f"s3://{bucket}/{prefix}".rstrip("/") + f" at {endpoint or 'AWS S3'}"
        options.update(credentials_options(place, where))
        try:
            filesystem = fs.S3FileSystem(**options)
        except (OSError, ValueError) as exc:
            raise StoreError(f"store {where}: {first_line(exc)}; check the AWS_* "
                             "variables") from None
        from triage.archive.cache import cache_dir

        files = cls(filesystem, f"{bucket}/{prefix}".rstrip("/"), where, None,
                    own_spool(cache_dir() / "spool"), url)
        files.network, files.endpoint = network, endpoint
        return files

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow filesystem the files are on (a local store's made now if not before)."""
        if self._fs is None:
            from pyarrow import fs

            self._fs = fs.LocalFileSystem()
        return self._fs

    @property
    def remote(self) -> bool:
        return self.local_root is None

    @property
    def bucket(self) -> str:
        return self.base.split("/", 1)[0]

    def path(self, key: str = "") -> str:
        """The filesystem path of a key (the root itself for "")."""
        return f"{self.base}/{key}" if key else self.base

    # -- reading ---------------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        """A file's bytes; FileNotFoundError when there is none."""
        if self.local_root is not None:
            return (self.local_root / key).read_bytes()

        def whole() -> bytes:
            with self.fs.open_input_stream(self.path(key)) as stream:
                return stream.read()

        return self.call("read", whole)

    def open(self, key: str) -> pa.NativeFile:
        """A file opened for random access (Parquet reads its footer first); its reads are not
        retried (`digest` reads a file whole, retried)."""
        return self.call("read", lambda: self.fs.open_input_file(self.path(key)))

    def digest(self, key: str) -> tuple[str, int]:
        """The sha256 and size of a file's bytes, read whole (run again from its start after a
        failure in the middle, on S3); FileNotFoundError when there is none."""
        from triage.base.hashing import hash_stream

        def whole() -> tuple[str, int]:
            with self.fs.open_input_stream(self.path(key)) as stream:
                return hash_stream(stream)

        return self.call("read", whole)

    def info(self, key: str) -> Entry | None:
        """A file's size and mtime; None when there is none (or a folder is there)."""
        if self.local_root is not None:
            return _local_info(self.local_root, key)
        from pyarrow import fs

        try:
            found = self.call("read", lambda: self.fs.get_file_info(self.path(key)))
        except ValueError:  # a name no file can have (a NUL, from a damaged label)
            return None
        if found.type != fs.FileType.File:
            return None
        return Entry(key, True, found.size or 0, _seconds(found.mtime))

    def exists(self, key: str) -> bool:
        """Whether a file is at `key` (see `size`)."""
        return self.size(key) is not None

    def size(self, key: str) -> int | None:
        """The size of the file at `key`, None when there is none: on S3 one HEAD (asking for
        its info, a missing key costs a HEAD and a LIST, to tell an empty folder from
        nothing)."""
        if self.local_root is not None or not key or key.endswith("/"):
            found = self.info(key)  # a folder's name: the bucket's, or with a "/"
            return found.size if found is not None else None

        def head() -> int:
            with self.fs.open_input_file(self.path(key)) as stream:
                return stream.size()

        try:
            return self.call("read", head)
        except (FileNotFoundError, ValueError):  # ValueError: a name no file can have (a NUL)
            return None

    def is_dir(self, key: str) -> bool:
        if self.local_root is not None:
            try:
                return stat.S_ISDIR(os.stat(self.local_root / key).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False
        from pyarrow import fs

        found = self.call("read", lambda: self.fs.get_file_info(self.path(key)))
        return found.type == fs.FileType.Directory

    def changed(self, key: str) -> float:
        """When a file was last renamed or written (ctime on a local filesystem, where a rename
        keeps the mtime; on S3 a move is a new object, so its mtime); 0 when it is gone."""
        if self.local_root is not None:
            try:
                stat = os.stat(self.local_root / key)
            except FileNotFoundError:
                return 0.0
            return max(stat.st_mtime, stat.st_ctime)
        found = self.info(key)
        return found.mtime if found is not None else 0.0

    def tree(self, folder: str, recursive: bool = True) -> list[Entry]:
        """Every file and folder below `folder`, by key, sorted; [] when it does not exist. A
        link is neither file nor folder (it is nothing triage writes)."""
        from pyarrow import fs

        if self.local_root is not None:  # names that are not UTF-8 too (pyarrow refuses them)
            return sorted(_walk(self.local_root, folder, recursive), key=lambda e: e.key)
        selector = fs.FileSelector(self.path(folder), recursive=recursive, allow_not_found=True)
        try:
            found = self.call("read", lambda: self.fs.get_file_info(selector))
        except NotADirectoryError:
            return []
        cut = len(self.base) + 1
        return sorted((Entry(f.path[cut:], f.type == fs.FileType.File, f.size or 0,
                             _seconds(f.mtime), f.type == fs.FileType.Directory) for f in found
                       if f.type in (fs.FileType.File, fs.FileType.Directory)),
                      key=lambda e: e.key)

    def names(self, folder: str) -> list[str]:
        """The names in one folder (files and folders, one level); [] when there is none."""
        if self.local_root is not None:  # one readdir, no stat per name (100,000 runs)
            try:
                return os.listdir(self.local_root / folder)
            except (FileNotFoundError, NotADirectoryError):
                return []
            except OSError as exc:
                raise self.error(exc, "read") from None
        return [e.name for e in self.tree(folder, recursive=False)]

    def files(self, folder: str) -> list[str]:
        """The keys of every file below `folder` (labels hold '/'), sorted."""
        return [e.key for e in self.tree(folder) if e.is_file]

    # -- writing ---------------------------------------------------------------------------------

    def new_temp(self, folder: str, suffix: str = "") -> Path:
        """An empty local temp file for what will become a file under `folder`: beside it in a
        local store (a leftover `triage gc` removes), in the spool for a remote one."""
        return atomic.new_temp(self._local(folder), suffix)

    def temp_folder(self, folder: str) -> Path:
        """The local folder where temp files for `folder` are made (see `new_temp`)."""
        return self._local(folder)

    @functools.cached_property
    def reach(self) -> int:
        """The permission bits a local store's folder grants its files (owner always): a
        private store (0700) keeps them 0600 and 0400; 0o777 where the folder cannot be read."""
        if self.local_root is None:
            return 0o777
        try:
            return 0o700 | (os.stat(self.local_root).st_mode & 0o077)
        except OSError:
            return 0o777

    def _local(self, folder: str) -> Path:
        return self.local_root / folder if self.local_root is not None else self.spool

    def write(self, key: str, data: bytes, readonly: bool = False) -> None:
        """Make `data` visible at `key` whole: renamed into place here, one PUT on S3."""
        if self.local_root is not None:
            atomic.write_bytes(self.local_root / key, data, readonly, self.reach)
            return
        def put() -> None:
            with self.fs.open_output_stream(self.path(key)) as sink:
                sink.write(data)

        self.call("write", put)

    def write_new(self, key: str, data: bytes) -> None:
        """Write a file under a name no one else uses, in place (a lease: a temp file renamed
        would be a leftover gc may take before the lease exists)."""
        if self.local_root is not None:
            target = self.local_root / key
            atomic.ensure_dir(target.parent)
            with open(target, "xb") as stream:
                stream.write(data)
            return
        self.write(key, data)

    def publish(self, temp: Path, key: str, readonly: bool, cache_as: str | None = None) -> None:
        """Make a finished local temp file visible at `key`: renamed (a local store), or
        uploaded then removed (S3); with `cache_as` (its sha256), kept as the cached copy
        instead of removed (cache.keep)."""
        if self.local_root is not None:
            atomic.publish(temp, self.local_root / key, readonly, self.reach)
            return
        def upload() -> None:
            with open(temp, "rb") as source, self.fs.open_output_stream(self.path(key)) as sink:
                while chunk := source.read(1 << 22):
                    sink.write(chunk)

        self.call("write", upload)
        if cache_as is None:
            temp.unlink(missing_ok=True)
            return
        from triage.archive.cache import keep

        keep(temp, cache_as)

    def move(self, key: str, to: str) -> None:
        """Rename a file (gc's trash). FileNotFoundError when it is gone. On S3 a rename is a
        copy and a delete, each retried on its own: retrying the pair would take a delete whose
        reply was lost (the file went) for a file that was gone before the copy."""
        if self.local_root is not None:
            self.call("clean", lambda: self.fs.move(self.path(key), self.path(to)))
            return
        self.call("clean", lambda: self.fs.copy_file(self.path(key), self.path(to)))
        self.delete(key)

    def delete(self, key: str) -> None:
        """Remove a file; nothing when it is gone already."""
        try:
            self.call("clean", lambda: self.fs.delete_file(self.path(key)))
        except FileNotFoundError:
            pass

    def delete_folder(self, folder: str) -> None:
        """Remove an empty folder (a local store's; S3 has none); nothing when it is not."""
        if self.local_root is not None:
            try:
                (self.local_root / folder).rmdir()
            except OSError:
                pass

    # -- errors ----------------------------------------------------------------------------------

    def call(self, doing: str, action: Callable[[], T]) -> T:
        """`action()`, its failures translated (`_translated`). On S3, one the client gave up on
        for the network or a 5xx is run again, after a pause that doubles (with jitter), while
        the store's `retry_time` lasts; a timeout is not (the client spent its attempts
        waiting, or found no server: a silent server is given up on within attempts x
        timeout)."""
        deadline = time.monotonic() + self.network.retry_time
        pause = RETRY_PAUSE
        while True:
            try:
                with _translated(self, doing):
                    return action()
            except Unreachable as exc:
                if exc.silent or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(2 * pause, RETRY_PAUSE_MAX)
            self.retried += 1

    def error(self, exc: OSError, doing: str) -> StoreError:
        from triage.archive.store import os_error

        return os_error(exc, self.where, doing) if self.local_root is not None \
            else remote_error(exc, self.where, self.bucket, doing, self.endpoint)


@contextmanager
def _translated(files: StoreFiles, doing: str) -> Iterator[None]:
    """On a remote store, any failure but a missing file is a StoreError naming the endpoint
    and the fix (the callers that handle OSError for a local disk would take a refusing server
    for damage); a local store's OSErrors pass on as they are (callers word them)."""
    try:
        yield
    except OSError as exc:
        missing = isinstance(exc, FileNotFoundError) and "AWS Error" not in str(exc)
        if files.local_root is not None or missing:
            raise
        raise files.error(exc, doing) from None


class SourceFailed(Exception):
    """A read of a store that failed while something else was being written (a copy into
    another store, a bundle): not an OSError, so that the writer does not take it for its own
    failure and name the wrong party. `error` is the read's own."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class SourceStream:
    """A stream read from a store, whose failures are `SourceFailed`."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except OSError as exc:
            raise SourceFailed(exc) from None


def _environment_endpoint() -> str | None:
    """AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, checked: userinfo in it is refused, unprinted."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return endpoint_address(f"${name}", os.environ[name])
    return None


def own_spool(root: Path) -> Path:
    """This process's spool folder (`<machine tag>-<pid>` under `root`, lease.machine_tag),
    after removing what writers gone from this machine left there: a killed process's temp
    files are removed by nothing else (gc cleans the store, not this machine's cache)."""
    clean_spool(root)
    return root / f"{lease.machine_tag()}-{os.getpid()}"


def clean_spool(root: Path, grace: float = SPOOL_GRACE) -> None:
    """Remove the spool folders of this machine's processes that are no longer alive, and temp
    files of the older flat spool, once untouched for `grace` seconds (a folder of a pid reused
    since waits for that process to end; another machine's folders, on a shared home or cache,
    for their own machine's writers to clean)."""
    import shutil
    import time

    try:
        names = os.listdir(root)
    except OSError:  # no spool yet
        return
    now = time.time()
    for name in names:
        owner, _, pid = name.rpartition("-")
        flat = name.startswith(atomic.TMP_PREFIX)
        if not flat and (not lease.this_machine(owner) or not pid.isdigit()
                         or lease.alive(int(pid))):
            continue
        path = root / name
        try:
            if now - path.lstat().st_mtime < grace:
                continue
            if flat:
                path.unlink()
            else:
                shutil.rmtree(path)
        except OSError:  # removed meanwhile (another process cleaning), or not ours to remove
            continue


def _local_info(root: Path, key: str) -> Entry | None:
    """`info` of a local store's file, as pyarrow's LocalFileSystem gives it (links followed)."""
    try:
        found = os.stat(root / key)
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        return None
    return Entry(key, True, found.st_size, found.st_mtime) if stat.S_ISREG(found.st_mode) \
        else None


def _walk(root: Path, folder: str, recursive: bool) -> Iterator[Entry]:
    """A local folder's entries as `tree` gives them, links not followed."""
    try:
        with os.scandir(root / folder) as found:
            entries = list(found)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        key = f"{folder}/{entry.name}" if folder else entry.name
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        is_dir = entry.is_dir(follow_symlinks=False)
        yield Entry(key, entry.is_file(follow_symlinks=False), stat.st_size, stat.st_mtime,
                    is_dir)
        if is_dir and recursive:
            yield from _walk(root, key, recursive)


def _seconds(mtime) -> float:
    """A FileInfo's mtime (a datetime, or None on some servers) as epoch seconds."""
    return mtime.timestamp() if mtime is not None else 0.0
