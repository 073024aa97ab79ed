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

A flaky network is met in two layers (`Network`): each request is retried by the S3 client
itself (the AWS "standard" strategy: exponential backoff with jitter on throttling, 5xx and
dropped connections, `attempts` tries), and an operation the client gave up on (a read, a
listing, an upload) is run again by triage, after a pause, while its `retry_time` lasts; only
those second-layer retries can be counted (`StoreFiles.retried`: pyarrow does not report its
own). What is still failing after both is one line (`remote_error`), an `Unreachable` when the
network or the server's health is to blame.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlparse

from triage.archive import atomic, lease
from triage.base.errors import StoreError, Unreachable, UsageError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import fs as pafs

URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
T = TypeVar("T")
SPOOL_GRACE = 3600.0  # seconds a dead writer's spool folder is kept (`clean_spool`)


@dataclass(frozen=True)
class Network:
    """How hard a remote store's requests try (module docstring): `attempts` tries of one
    request by the S3 client, `timeout` seconds for each (to connect: at most CONNECT_TIMEOUT),
    and `retry_time` seconds in which triage runs an operation again once the client gave up.
    A silent server is given up on after about attempts x timeout seconds per request."""

    attempts: int = 4
    timeout: float = 3.0
    retry_time: float = 30.0

    def with_text(self, source: str, values: dict[str, str]) -> Network:
        """These settings with `values` (a URL's, the environment's) laid over them, each
        checked; `source` names where they came from for a refusal."""
        changed: dict[str, float | int] = {}
        for name, text in values.items():
            changed[name] = _network_value(source, name, text)
        return replace(self, **changed)  # type: ignore[arg-type]

    def client_options(self) -> dict:
        """The S3FileSystem options these settings are."""
        from pyarrow import fs

        return {"connect_timeout": min(CONNECT_TIMEOUT, self.timeout),
                "request_timeout": self.timeout,
                "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=self.attempts)}


CONNECT_TIMEOUT = 3.0  # seconds: a loopback or LAN server that is up accepts at once
# Each setting's name (in a URL's query, and $TRIAGE_S3_<NAME>) and the values it takes.
NETWORK_LIMITS = {"attempts": (1, 20), "timeout": (0.1, 600.0), "retry_time": (0.0, 3600.0)}
# A command's own --timeout and the like (the CLI sets them for the command's duration): they
# win over the environment, which wins over a URL's settings, which win over the defaults.
NETWORK_CHOSEN: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("network_chosen",
                                                                     default=())


def _network_value(source: str, name: str, text: str) -> float | int:
    """One network setting, as a number within its limits, or why it is refused."""
    low, high = NETWORK_LIMITS[name]
    try:
        value = int(text) if name == "attempts" else float(text.rstrip("s"))
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        unit = "" if name == "attempts" else " seconds"
        raise UsageError(f"{source}: {name}={text!r}; give a number from {low:g} to "
                         f"{high:g}{unit}")
    return value


@contextmanager
def network_chosen(**values: float | int | None) -> Iterator[None]:
    """Stores opened inside use these settings (a command's --timeout) over any other."""
    token = NETWORK_CHOSEN.set(tuple((k, str(v)) for k, v in values.items() if v is not None))
    try:
        yield
    finally:
        NETWORK_CHOSEN.reset(token)


def network_for(place: S3Place) -> Network:
    """The settings of one store: the URL's, then $TRIAGE_S3_ATTEMPTS / _TIMEOUT / _RETRY_TIME,
    then the command's own, each over the one before."""
    network = Network().with_text(f"store {shown_url(place.url)}", dict(place.network))
    variables = {name: os.environ[f"TRIAGE_S3_{name.upper()}"] for name in NETWORK_LIMITS
                 if os.environ.get(f"TRIAGE_S3_{name.upper()}")}
    network = network.with_text("$TRIAGE_S3_*", variables)
    return network.with_text("option", dict(NETWORK_CHOSEN.get()))


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

    def __init__(self, filesystem: pafs.FileSystem, base: str, where: str,
                 local_root: Path | None, spool: Path, url: str) -> None:
        self.fs = filesystem
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
        from pyarrow import fs

        base = Path(os.path.abspath(root)).as_posix()  # pyarrow takes absolute paths only
        return cls(fs.LocalFileSystem(), base, str(root), root, root / "objects", str(root))

    @classmethod
    def s3(cls, url: str) -> StoreFiles:
        from pyarrow import fs

        place = S3Place.parse(url)
        bucket, prefix = place.bucket, place.prefix
        network = network_for(place)
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
        options.update(_credentials(place, where))
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

    def _local(self, folder: str) -> Path:
        return self.local_root / folder if self.local_root is not None else self.spool

    def write(self, key: str, data: bytes, readonly: bool = False) -> None:
        """Make `data` visible at `key` whole: renamed into place here, one PUT on S3."""
        if self.local_root is not None:
            atomic.write_bytes(self.local_root / key, data, readonly)
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
            atomic.publish(temp, self.local_root / key, readonly)
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
        """Rename a file (gc's trash; on S3 a copy and a delete). FileNotFoundError when it
        is gone."""
        self.call("clean", lambda: self.fs.move(self.path(key), self.path(to)))

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


RETRY_PAUSE, RETRY_PAUSE_MAX = 0.5, 8.0  # seconds before triage runs an operation again


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


NETWORK_SIGNS = ("NETWORK_CONNECTION", "curlCode")
# No answer at all: no reply within the timeout, or no server to connect to
SILENT_SIGNS = ("curlCode: 28", "Timeout", "timed out", "REQUEST_TIMEOUT", "curlCode: 7,",
                "Could not connect", "Couldn't resolve", "curlCode: 6,")
SERVER_SIGNS = ("HTTP status 5", "INTERNAL_FAILURE", "SERVICE_UNAVAILABLE", "SLOW_DOWN",
                "THROTTLING", "SlowDown", "InternalError")
DENIED_SIGNS = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                "INVALID_ACCESS_KEY", "SIGNATURE", "HTTP status 403")


def remote_error(exc: BaseException, where: str, bucket: str, doing: str,
                 endpoint: str | None = None) -> StoreError:
    """One line for a failed S3 request: what failed, at which endpoint, and the fix, with the
    client's whole reason. The network's or the server's health (after every retry) is an
    `Unreachable`: run the command again; a reply that is not S3's says so."""
    text = " ".join(str(exc).split())
    known = any(k in text for k in DENIED_SIGNS + NETWORK_SIGNS + SILENT_SIGNS + SERVER_SIGNS)
    if endpoint is not None and not known and not speaks_s3(endpoint):
        return StoreError(f"cannot {doing} store {where}: {endpoint} is not an S3 endpoint "
                          "(its reply is not S3's); check AWS_ENDPOINT_URL or the remote's "
                          "--endpoint")
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return StoreError(f"cannot {doing} store {where}: bucket {bucket} does not exist; "
                          f"create it (e.g. `aws s3 mb s3://{bucket}`) or fix the URL")
    if any(k in text for k in DENIED_SIGNS):
        return StoreError(f"cannot {doing} store {where}: access denied; check "
                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
    silent = any(k in text for k in SILENT_SIGNS)
    if silent or any(k in text for k in NETWORK_SIGNS + SERVER_SIGNS):
        fault = Unreachable(f"cannot {doing} store {where}: {_unreachable_why(text)} ({text}); "
                            "run the command again, it resumes where it stopped")
        fault.silent = silent
        return fault
    return StoreError(f"cannot {doing} store {where}: {text or type(exc).__name__}; run the "
                      "command again, `triage verify` checks the store")


def _unreachable_why(text: str) -> str:
    if any(k in text for k in ("curlCode: 28", "Timeout", "timed out", "REQUEST_TIMEOUT")):
        return ("no answer within the timeout, after every try (--timeout, $TRIAGE_S3_TIMEOUT); "
                "check the server is up")
    if any(k in text for k in SERVER_SIGNS):
        return "the server kept failing (5xx or throttling) after every try"
    return ("cannot reach the server after every try; check AWS_ENDPOINT_URL, that the server "
            "is up, and the network")


def speaks_s3(endpoint: str) -> bool:
    """Whether the server at `endpoint` answers as S3 does (an unsigned GET of its root gets an
    S3 error or listing document, or x-amz-* headers); asked only once a request has failed
    for a reason S3 would not give. True when it cannot be asked (the failure says more)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(endpoint + "/", timeout=CONNECT_TIMEOUT) as answer:
            headers, body = answer.headers, answer.read(4096)
    except urllib.error.HTTPError as refused:
        headers, body = refused.headers, refused.read(4096)
    except (OSError, ValueError):
        return True
    amz = any(name.lower().startswith("x-amz-") for name in headers.keys())
    return amz or b"<Error>" in body or b"ListAllMyBucketsResult" in body


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# What an s3:// URL may set after its `?` (a remote's settings): name -> the setting it is.
S3_SETTINGS = {"endpoint": "endpoint", "endpoint_override": "endpoint",
               "endpoint_url": "endpoint", "region": "region", "profile": "profile",
               "credentials": "credentials", "attempts": "attempts", "timeout": "timeout",
               "retry_time": "retry_time"}
CREDENTIAL_SOURCES = ("environment", "anonymous")  # besides profile=NAME
# Query names that would carry a secret: refused (a remote's URL is kept in the store, pushed
# and printed), and masked where an older store kept one.
SECRET_RE = re.compile(r"secret|password|passwd|token|access.?key|credential_", re.I)
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+-\d+$|^[a-z0-9-]{1,40}$")


@dataclass(frozen=True)
class S3Place:
    """An s3://bucket/prefix URL and the settings it carries after `?`: the server's endpoint
    (an S3-compatible one), its region, and where credentials come from: a named profile of
    ~/.aws/credentials, none (`credentials=anonymous`), or the environment (the default: the
    AWS_* variables, AWS_PROFILE). Secrets never: they stay in the profile or environment."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    profile: str | None = None
    credentials: str = "environment"
    network: tuple[tuple[str, str], ...] = ()  # attempts, timeout, retry_time (`Network`)
    url: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Place:
        """The place and its settings, each checked; every refusal names the URL with any
        secret in it masked (`shown_url`)."""
        from urllib.parse import parse_qsl

        shown = shown_url(url)
        parsed = urlparse(url)
        refuse_userinfo(url)
        if not parsed.netloc:
            raise StoreError(f"store {shown}: no bucket; give s3://bucket/prefix")
        settings: dict[str, str] = {}
        for key, value in parse_qsl(parsed.query, keep_blank_values=True):
            settings.update(_setting(shown, key, value, settings))
        network = tuple((k, settings.pop(k)) for k in NETWORK_LIMITS if k in settings)
        place = cls(parsed.netloc, parsed.path.strip("/"), **settings, network=network,
                    url=url)
        if place.profile and "credentials" in settings:
            raise StoreError(f"store {shown}: profile= and credentials= both say where "
                             "credentials come from; give one")
        return place

    def settings(self) -> dict[str, str]:
        """What the URL sets, as `triage remote list` shows it (never a secret: none is kept)."""
        found = {"endpoint": self.endpoint, "region": self.region, "profile": self.profile,
                 "credentials": None if self.credentials == "environment" else self.credentials}
        return {key: value for key, value in found.items() if value} | dict(self.network)


def _setting(shown: str, key: str, value: str, settings: dict[str, str]) -> dict[str, str]:
    """One `key=value` of an s3:// URL as the setting it names, or why it is refused."""
    if SECRET_RE.search(key):
        raise StoreError(f"store {shown}: a secret ({key}) does not belong in a store URL; put "
                         "the keys in a profile (~/.aws/credentials) and add ?profile=NAME")
    name = S3_SETTINGS.get(key.lower())
    if name is None:
        raise StoreError(f"store {shown}: unknown setting {key!r}; an s3:// URL takes "
                         "endpoint, region, profile, credentials (environment or anonymous), "
                         "attempts, timeout and retry_time")
    if name in settings:
        raise StoreError(f"store {shown}: {name} given twice; give it once")
    if name == "endpoint":
        return {name: endpoint_address(f"store {shown}: endpoint", value)}
    if name in NETWORK_LIMITS:
        try:
            _network_value(f"store {shown}", name, value)
        except UsageError as exc:
            raise StoreError(str(exc)) from None
    if name == "region" and not REGION_RE.match(value):
        raise StoreError(f"store {shown}: region {value!r} is not a region name (us-east-1)")
    if name == "profile" and not re.match(r"^[\w.+@-]{1,64}$", value):
        raise StoreError(f"store {shown}: profile {value!r} is not a profile name")
    if name == "credentials" and value not in CREDENTIAL_SOURCES:
        raise StoreError(f"store {shown}: credentials={value!r}; give one of "
                         f"{', '.join(CREDENTIAL_SOURCES)}, or profile=NAME")
    return {name: value}


def endpoint_address(what: str, value: str) -> str:
    """An S3 server's address as http(s)://HOST[:PORT], or why it is not one; a user name or
    password in it is refused and never repeated (S3 takes keys, not a URL's userinfo)."""
    address = urlparse(value if "://" in value else f"https://{value}")
    if "@" in address.netloc:
        raise StoreError(f"{what} {shown_url(value)!r} carries a user name or password; S3 "
                         f"takes keys from {CREDENTIALS_HOW}: remove it from the address")
    if address.scheme not in ("http", "https") or not address.hostname \
            or address.path.strip("/") or address.query:
        raise StoreError(f"{what} {value!r} is not a server's address; give "
                         "http(s)://HOST[:PORT]")
    return f"{address.scheme}://{address.netloc}"


CREDENTIALS_HOW = ("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile of ~/.aws/credentials "
                   "(AWS_PROFILE, or ?profile=NAME on the URL: `triage remote add NAME URL "
                   "--profile NAME`)")


def refuse_userinfo(url: str) -> None:
    """Any store URL with `user:password@` before its host is refused, the secret masked."""
    if URL_RE.match(url) and "@" in urlparse(url).netloc:
        raise StoreError(f"store {shown_url(url)}: keys do not belong in a store URL; pass "
                         f"them as {CREDENTIALS_HOW}")


def shown_url(url: str) -> str:
    """A store URL as it may be printed: keys before the host and secret-named settings (an
    older store may have kept one) masked."""
    from urllib.parse import parse_qsl, urlencode

    parsed = urlparse(url)
    if not URL_RE.match(url) or (not parsed.query and "@" not in parsed.netloc):
        return url
    netloc = parsed.netloc.rpartition("@")[2]
    if "@" in parsed.netloc:
        netloc = "***@" + netloc
    query = urlencode([(k, "***" if SECRET_RE.search(k) else shown_url(v))
                       for k, v in parse_qsl(parsed.query, keep_blank_values=True)],
                      safe=":/*@")
    return parsed._replace(netloc=netloc, query=query).geturl()


def _credentials(place: S3Place, where: str) -> dict:
    """The S3 client's credentials options: the URL's source (profile, anonymous), else the
    environment's (AWS_PROFILE where no keys are set; pyarrow reads the keys itself)."""
    if place.credentials == "anonymous":
        return {"anonymous": True}
    if place.profile:
        keys = _profile_keys(place.profile)
        if not keys:
            raise StoreError(f"store {where}: no profile {place.profile!r} with keys in "
                             f"{credentials_file()}; add it there, or point "
                             "AWS_SHARED_CREDENTIALS_FILE at the file that has it")
        return keys
    if os.environ.get("AWS_PROFILE") and not os.environ.get("AWS_ACCESS_KEY_ID"):
        return _profile_keys(os.environ["AWS_PROFILE"])
    return {}


def check_profile(profile: str) -> None:
    """Refuse a profile ~/.aws/credentials (or $AWS_SHARED_CREDENTIALS_FILE) has no keys for."""
    if not _profile_keys(profile):
        raise StoreError(f"no profile {profile!r} with keys in {credentials_file()}; add it "
                         "there (aws configure --profile NAME), or point "
                         "AWS_SHARED_CREDENTIALS_FILE at the file that has it")


def credentials_file() -> Path:
    return Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")).expanduser()


def _profile_keys(profile: str) -> dict[str, str]:
    """Keys of a named profile in ~/.aws/credentials (pyarrow's client reads the default profile
    and AWS_PROFILE itself; passed explicitly so that AWS_SHARED_CREDENTIALS_FILE is honoured the
    same way everywhere)."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(credentials_file())
    if not parser.has_section(profile):
        return {}
    section = parser[profile]
    keys = {"access_key": section.get("aws_access_key_id"),
            "secret_key": section.get("aws_secret_access_key"),
            "session_token": section.get("aws_session_token")}
    return {k: v for k, v in keys.items() if v}


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
