"""Writer leases: how `triage gc` tells a writer still at work from one that died.

An archive (or import) writes its objects before the manifest that references them, so until the
manifest lands they look like leftovers; so does the temp file of any write until its rename. A
grace period alone cannot tell a slow or stopped writer from a dead one: an archive stopped
(SIGSTOP, a suspended laptop) for longer than `--grace` lost its objects to gc and then wrote a
manifest naming them. So whatever writes holds a lease while it writes: a small file under
`leases/`, created before its first temp file and removed after its last rename (an archive
from the export it stages to its catalog row; an import; each label, key, annotations or catalog
write on its own). gc keeps every leftover whose mtime is not older than a live lease (less
MARGIN, for coarse timestamps). The lease's mtime and the leftovers' come from the same
filesystem clock, so the writer's and gc's clocks need not agree. Every object an archive
publishes is a temp file it wrote after taking its lease, renamed into place (even over a copy
that exists), so it is that new.

A lease is live until its writer is known to be gone:

- written on this machine (same boot and PID namespace): while its process exists with the same
  start time (a stopped process is live; a zombie, or a pid reused since, is not);
- written anywhere else (another host or container sharing the store): for LEASE_TTL after it was
  written, since another machine's processes cannot be seen from here.

Nothing is locked and nothing needs a conditional write (NFS, object storage): a lease is a whole
file under a name no one else uses, deleted by its owner, or by gc once stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from triage.archive import atomic, validate
from triage.base.errors import StoreError
from triage.base.timeutil import utc_now

if TYPE_CHECKING:  # store.py takes leases for its own small writes, so it imports this module
    from triage.archive.store import Store

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
LEASE_TTL = 24 * 3600  # no archive takes a day; a writer on another host is trusted that long
MARGIN = 60.0  # seconds: coarse or stepped file timestamps never make a writer's file "older"
# (pid, thread, store) -> the lease that thread holds there: a write inside a held lease (an
# archive's manifest, key, label) needs none of its own (on S3, four requests a lease)
_HELD: dict[tuple[int, int, str], str] = {}


@dataclass(frozen=True)
class Lease:
    """One lease file as gc and verify judge it."""

    key: str  # leases/<name>, under the store root
    mtime: float
    live: bool
    holder: str  # "archive, pid 123 on host-a since 2026-...", for verify's listing

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def keep(key: str) -> None:
    """Leave the lease `key` in place when its block ends: a writer that made runs but could not
    index them (readers list runs/ while a lease is there, and gc indexes what a dead writer's
    lease covered before removing it: catalog.open_view), so that no run stays unlisted."""
    _KEPT.add(key)


def _unkept(key: str) -> bool:
    """Whether `keep` was asked for `key` (and forget it)."""
    kept = key in _KEPT
    _KEPT.discard(key)
    return kept


_KEPT: set[str] = set()


@contextmanager
def held(store: Store, what: str) -> Iterator[str]:
    """Hold a lease while writing `what`: an archive or import from before its first object to
    after its manifest, and each small write of a mutable file (label, key, annotations,
    catalog segment), whose temp file gc must not take either. Only the process that took it
    removes it (a forked reader worker that unwinds must not). Yields the lease's key.

    A write inside a lease this thread holds on the same store is covered by it (it was taken
    before that write's first file, and gc keeps whatever is newer than a live lease), so it
    takes none of its own."""
    owner = os.getpid()
    holder = (owner, threading.get_ident(), store.where)
    if holder in _HELD:
        yield _HELD[holder]
        return
    key = f"leases/{owner}-{machine_tag()}-{secrets.token_hex(8)}.json"
    doc = {"what": what, "pid": owner, "start": _start_ticks(owner), "host": socket.gethostname(),
           "created": utc_now(precise=True), **_machine()}
    try:
        # Written in place, not as a temp file renamed: a temp file would be a leftover that
        # `gc --grace 0` may remove before the lease exists. Half-written (its writer killed
        # between create and write), it is judged by its name: pid and machine (_judge).
        store.files.write_new(key, json.dumps(doc, sort_keys=True).encode())
    except OSError as exc:
        raise store.error(exc, "write") from None
    failed = True
    _HELD[holder] = key
    try:
        yield key
        failed = False
    finally:
        _HELD.pop(holder, None)
        if os.getpid() == owner and not _unkept(key):
            try:
                store.files.delete(key)
            except StoreError:
                # The server that failed the write (killed, unreachable) fails this too: the
                # write's error is the one to report; the lease left is stale by its pid.
                if not failed:
                    raise


def holding(what: str) -> Callable[[F], F]:
    """Run a writer whose first argument is the store under a lease for all it writes (an
    archive: the export it stages, its tables and report, the manifest, key and catalog row)."""
    def decorate(function: F) -> F:
        @wraps(function)
        def leased(store: Store, *args: Any, **kwargs: Any) -> Any:
            with held(store, what):
                return function(store, *args, **kwargs)
        return cast(F, leased)
    return decorate


def side_by_side(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Run `calls` at once, each on a thread of its own, and return their results in order: on
    S3 each request waits milliseconds on the server, so writes that need not follow one
    another (a run's tables, its key and annotations) overlap. Every call ends before this
    returns, so before the caller can release its leases (`carried`)."""
    if len(calls) < 2:
        return [call() for call in calls]
    covered = [carried(call) for call in calls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), covered))


def carried(call: Callable[[], T]) -> Callable[[], T]:
    """`call`, to be run on another thread under the leases the calling thread holds now (a
    small write there takes none of its own: four requests on S3). The caller must see it end
    before it releases them."""
    caller = threading.get_ident()
    keys = {(pid, where): key for (pid, thread, where), key in list(_HELD.items())
            if thread == caller}

    def covered() -> T:
        here = threading.get_ident()
        mine = [(pid, here, where) for pid, where in keys]
        _HELD.update(zip(mine, keys.values(), strict=True))
        try:
            return call()
        finally:
            for holder in mine:
                _HELD.pop(holder, None)

    return covered


def leases(store: Store) -> list[Lease]:
    """Every lease in the store, live or stale (`.tmp-*` files are none: leases have no temp)."""
    try:  # an OSError here is raised: gc must not guess that no writer is live
        names = sorted(store.files.names("leases"))
        judged = [_judge(store, f"leases/{n}") for n in names
                  if not n.startswith(atomic.TMP_PREFIX)]
    except OSError as exc:
        raise store.error(exc, "read") from None
    return [found for found in judged if found is not None]


def protected_since(store: Store) -> float | None:
    """The mtime from which gc must keep leftovers (a live writer may need them); None when no
    writer is live."""
    live = [lease.mtime for lease in leases(store) if lease.live]
    return min(live) - MARGIN if live else None


def _judge(store: Store, key: str) -> Lease | None:
    """A lease file, live or not; None when it vanished (its writer finished). One that cannot
    be read is judged by its age alone, like a lease from another machine."""
    found = store.files.info(key)
    if found is None:
        return None
    mtime = found.mtime
    try:
        doc = validate.load_json(store.files.read(key))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict):
        return _judge_by_name(key, mtime)
    holder = (f"{doc.get('what')}, pid {doc.get('pid')} on {doc.get('host')} since "
              f"{doc.get('created')}")
    here = _machine()
    if None not in here.values() and all(doc.get(k) == v for k, v in here.items()):
        pid = doc.get("pid")
        live = isinstance(pid, int) and pid > 0 and _start_ticks(pid) == doc.get("start")
        return Lease(key, mtime, live, holder)
    return Lease(key, mtime, _young(mtime), holder)


def _judge_by_name(key: str, mtime: float) -> Lease:
    """A lease whose contents cannot be read (empty: its writer was killed between creating and
    writing it). Its name holds the writer's pid and machine: on this machine it is live while
    that pid exists (its start time is unknown, so a reused pid keeps it live: the safe side);
    from anywhere else, judged by age like any foreign lease."""
    pid, _, rest = key.rsplit("/", 1)[-1].partition("-")
    tag = rest.partition("-")[0]
    if pid.isdigit() and this_machine(tag):
        return Lease(key, mtime, alive(int(pid)),
                     f"unreadable lease of pid {pid} on this machine")
    return Lease(key, mtime, _young(mtime), "unreadable lease")


def _young(mtime: float) -> bool:
    return time.time() - mtime < LEASE_TTL


@cache
def _machine() -> dict[str, str | None]:
    """What makes a pid mean the same process: the boot, and the PID namespace (containers on one
    host share the boot but not their pids)."""
    try:
        boot: str | None = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    try:
        pidns: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {"boot": boot, "pidns": pidns}


@cache
def machine_tag() -> str:
    """A short name for this boot and PID namespace, in each lease's and spool folder's name:
    two containers may share a host name, never a PID namespace."""
    here = _machine()
    return hashlib.sha256(f"{here['boot']}\0{here['pidns']}".encode()).hexdigest()[:12]


def this_machine(tag: str) -> bool:
    """Whether a file named with `tag` (`machine_tag`) was made on this boot, in this PID
    namespace, so that its pid names a process here (never when those are unknown)."""
    return tag == machine_tag() and None not in _machine().values()


def alive(pid: int) -> bool:
    """Whether the process `pid` of this machine runs (a zombie does not)."""
    return _start_ticks(pid) is not None


def _start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot), None when it is gone or a zombie; with
    the pid, it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
    if len(fields) < 20 or fields[0] in ("Z", "X") or not fields[19].isdigit():
        return None
    return int(fields[19])
