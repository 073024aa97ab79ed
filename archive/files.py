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
over them. Time-
outs are short and retries few, so an unreachable or refusing server is one line within seconds
(`remote_error`), not a retry storm.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from triage.archive import atomic, lease
from triage.base.errors import StoreError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import fs as pafs

URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
CONNECT_TIMEOUT = 3.0  # seconds
REQUEST_TIMEOUT = 5.0
ATTEMPTS = 2  # one retry: enough for a dropped connection, no storm against a dead server
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

    def __init__(self, filesystem: pafs.FileSystem, base: str, where: str,
                 local_root: Path | None, spool: Path, url: str) -> None:
        self.fs = filesystem
        self.url = url  # what --store named, to open the store again (a worker, an export)
        self.base = base.rstrip("/")
        self.where = where  # for messages: the directory, or the URL and its endpoint
        self.local_root = local_root
        self.spool = spool

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def at(cls, chosen: str) -> StoreFiles:
        """The files of the store a --store / $TRIAGE_STORE value names."""
        scheme = URL_RE.match(chosen)
        if scheme is None:
            return cls.local(Path(chosen).expanduser())
        if scheme.group(1).lower() != "s3":
            raise StoreError(f"store {chosen}: {scheme.group(1)}:// stores are not supported; "
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
        # The URL's own settings (a remote's: `triage remote add`) win over the environment.
        endpoint = place.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") \
            or os.environ.get("AWS_ENDPOINT_URL")
        # allow_delayed_open: an object smaller than a part is one PutObject at close (pyarrow
        # otherwise starts a multipart upload per write: three requests instead of one, about
        # 3x the time of each small write); failures still surface inside `_errors`, at close.
        options: dict = {"connect_timeout": CONNECT_TIMEOUT, "request_timeout": REQUEST_TIMEOUT,
                         "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
                         "allow_delayed_open": True}
        region = place.region or os.environ.get("AWS_REGION") \
            or os.environ.get("AWS_DEFAULT_REGION")
        if endpoint:
            address = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
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

        return cls(filesystem, f"{bucket}/{prefix}".rstrip("/"), where, None,
                   own_spool(cache_dir() / "spool"), url)

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
        with self._errors("read"):
            with self.fs.open_input_stream(self.path(key)) as stream:
                return stream.read()

    def open(self, key: str) -> pa.NativeFile:
        """A file opened for random access (Parquet reads its footer first)."""
        with self._errors("read"):
            return self.fs.open_input_file(self.path(key))

    def info(self, key: str) -> Entry | None:
        """A file's size and mtime; None when there is none (or a folder is there)."""
        from pyarrow import fs

        try:
            with self._errors("read"):
                found = self.fs.get_file_info(self.path(key))
        except ValueError:  # a name no file can have (a NUL, from a damaged label)
            return None
        if found.type != fs.FileType.File:
            return None
        return Entry(key, True, found.size or 0, _seconds(found.mtime))

    def exists(self, key: str) -> bool:
        """Whether a file is at `key`: on S3 one HEAD (asking for its info, a missing key costs
        a HEAD and a LIST, to tell an empty folder from nothing)."""
        if self.local_root is not None or not key or key.endswith("/"):
            return self.info(key) is not None  # a folder's name: the bucket's, or with a "/"
        try:
            with self._errors("read"):
                self.fs.open_input_file(self.path(key)).close()
        except (FileNotFoundError, ValueError):  # ValueError: a name no file can have (a NUL)
            return False
        return True

    def is_dir(self, key: str) -> bool:
        from pyarrow import fs

        with self._errors("read"):
            return self.fs.get_file_info(self.path(key)).type == fs.FileType.Directory

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
            with self._errors("read"):
                found = self.fs.get_file_info(selector)
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
        with self._errors("write"):
            with self.fs.open_output_stream(self.path(key)) as sink:
                sink.write(data)

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
        with self._errors("write"):
            with open(temp, "rb") as source, self.fs.open_output_stream(self.path(key)) as sink:
                while chunk := source.read(1 << 22):
                    sink.write(chunk)
        if cache_as is None:
            temp.unlink(missing_ok=True)
            return
        from triage.archive.cache import keep

        keep(temp, cache_as)

    def move(self, key: str, to: str) -> None:
        """Rename a file (gc's trash; on S3 a copy and a delete). FileNotFoundError when it
        is gone."""
        with self._errors("clean"):
            self.fs.move(self.path(key), self.path(to))

    def delete(self, key: str) -> None:
        """Remove a file; nothing when it is gone already."""
        try:
            with self._errors("clean"):
                self.fs.delete_file(self.path(key))
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

    def _errors(self, doing: str):
        return _translated(self, doing)

    def error(self, exc: OSError, doing: str) -> StoreError:
        from triage.archive.store import os_error

        return os_error(exc, self.where, doing) if self.local_root is not None \
            else remote_error(exc, self.where, self.bucket, doing)


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


def remote_error(exc: BaseException, where: str, bucket: str, doing: str) -> StoreError:
    """One line for a failed S3 request: what failed, at which endpoint, and the fix."""
    text = str(exc)
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        why = (f"bucket {bucket} does not exist; create it (e.g. `aws s3 mb s3://{bucket}`) or "
               "fix the URL")
    elif any(k in text for k in ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId",
                                 "SignatureDoesNotMatch", "INVALID_ACCESS_KEY", "SIGNATURE",
                                 "HTTP status 403")):
        why = ("access denied; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
               "AWS_PROFILE)")
    elif any(k in text for k in ("NETWORK_CONNECTION", "curlCode", "Could not connect",
                                 "Timeout", "timed out", "Couldn't resolve")):
        why = ("cannot reach the server; check AWS_ENDPOINT_URL and that the server is up, "
               "then run the command again")
    else:
        why = f"{first_line(exc)}; run the command again, `triage verify` checks the store"
    return StoreError(f"cannot {doing} store {where}: {why}")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


# What an s3:// URL may set after its `?` (a remote's settings): name -> the setting it is.
S3_SETTINGS = {"endpoint": "endpoint", "endpoint_override": "endpoint",
               "endpoint_url": "endpoint", "region": "region", "profile": "profile",
               "credentials": "credentials"}
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

    @classmethod
    def parse(cls, url: str) -> S3Place:
        """The place and its settings, each checked; every refusal names the URL with any
        secret in it masked (`shown_url`)."""
        from urllib.parse import parse_qsl

        shown = shown_url(url)
        parsed = urlparse(url)
        if "@" in parsed.netloc:
            raise StoreError(f"store {shown}: keys do not belong in a store URL; put them in a "
                             "profile (~/.aws/credentials) and add ?profile=NAME")
        if not parsed.netloc:
            raise StoreError(f"store {shown}: no bucket; give s3://bucket/prefix")
        settings: dict[str, str] = {}
        for key, value in parse_qsl(parsed.query, keep_blank_values=True):
            settings.update(_setting(shown, key, value, settings))
        place = cls(parsed.netloc, parsed.path.strip("/"), **settings)
        if place.profile and "credentials" in settings:
            raise StoreError(f"store {shown}: profile= and credentials= both say where "
                             "credentials come from; give one")
        return place

    def settings(self) -> dict[str, str]:
        """What the URL sets, as `triage remote list` shows it (never a secret: none is kept)."""
        found = {"endpoint": self.endpoint, "region": self.region, "profile": self.profile,
                 "credentials": None if self.credentials == "environment" else self.credentials}
        return {key: value for key, value in found.items() if value}


def _setting(shown: str, key: str, value: str, settings: dict[str, str]) -> dict[str, str]:
    """One `key=value` of an s3:// URL as the setting it names, or why it is refused."""
    if SECRET_RE.search(key):
        raise StoreError(f"store {shown}: a secret ({key}) does not belong in a store URL; put "
                         "the keys in a profile (~/.aws/credentials) and add ?profile=NAME")
    name = S3_SETTINGS.get(key.lower())
    if name is None:
        raise StoreError(f"store {shown}: unknown setting {key!r}; an s3:// URL takes "
                         "endpoint, region, profile and credentials (environment or anonymous)")
    if name in settings:
        raise StoreError(f"store {shown}: {name} given twice; give it once")
    if name == "endpoint":
        address = urlparse(value)
        if address.scheme not in ("http", "https") or not address.hostname \
                or address.path.strip("/") or address.query:
            raise StoreError(f"store {shown}: endpoint {value!r} is not a server's address; "
                             "give http(s)://HOST[:PORT]")
        return {name: f"{address.scheme}://{address.netloc}"}
    if name == "region" and not REGION_RE.match(value):
        raise StoreError(f"store {shown}: region {value!r} is not a region name (us-east-1)")
    if name == "profile" and not re.match(r"^[\w.+@-]{1,64}$", value):
        raise StoreError(f"store {shown}: profile {value!r} is not a profile name")
    if name == "credentials" and value not in CREDENTIAL_SOURCES:
        raise StoreError(f"store {shown}: credentials={value!r}; give one of "
                         f"{', '.join(CREDENTIAL_SOURCES)}, or profile=NAME")
    return {name: value}


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
    query = urlencode([(k, "***" if SECRET_RE.search(k) else v)
                       for k, v in parse_qsl(parsed.query, keep_blank_values=True)], safe=":/*")
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
