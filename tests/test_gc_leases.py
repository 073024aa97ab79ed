"""`triage gc` beside archives and imports in progress (issue 15, item 5), on real corpus reports.

An archive's objects are unreferenced until its manifest lands, so gc must spare them however
long the archive is stopped and however small `--grace` is: each writer holds a lease
(archive/lease.py). No test here depends on timing: archives are stopped with SIGSTOP and waited
for by the state of their files, with generous bounds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import corpus_file
from triage.archive import bundle, integrity, lease
from triage.archive.canonical import canonical_json
from triage.archive.run_manifests import Runs
from triage.archive.store import Store

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"
STOPPED = ["spymaster2h__spyinfer__report.ncu-rep", "iamcoleman__monte-carlo-pi__profile.ncu-rep",
           "strrules105__PhysiCell__profile.nsight-cuprof-report", OTHER,
           "haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.sqlite",  # nsys tables
           "racksa__cuFCM__report1.qdrep"]  # exported with nsys into the store first
MAX_PASSES = 400
WAIT = 300.0  # seconds: a bound for a loaded 2-core machine, never a pace
SETTLE = 1.0  # seconds before a group that has not stopped is continued and stopped again


def store_of(path: Path | str | None = None) -> Store:
    return Store.open(path or os.environ["TRIAGE_STORE"])


def old(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_gc_grace_0_just_before_the_manifest_spares_every_object(triage, monkeypatch):
    """The issue's worst case, reached exactly: every object of an ncu run is published and
    none is referenced yet. gc --grace 0 removed all six; now it keeps them all."""
    triage("archive", corpus_file(OTHER))
    real = Runs.write_manifest
    passes = []

    def gc_first(self: Runs, manifest: dict, replace: bool = False) -> str:
        passes.append(integrity.gc(self.store, grace_seconds=0))
        return real(self, manifest, replace)

    monkeypatch.setattr(Runs, "write_manifest", gc_first)
    out = triage("archive", corpus_file(SMALL)).stdout
    monkeypatch.setattr(Runs, "write_manifest", real)
    run_id = triage.json("ls")[0]["id"]  # the newest
    manifest = store_of().runs.read_manifest(run_id)
    assert "(new)" in out and passes[0].removed == ()
    assert passes[0].kept_live == len(manifest["reports"]) + len(manifest["tables"]) == 6
    report = triage.json("verify")
    assert report["ok"] and report["leftovers"] == [] and report["runs"] == 2
    assert list((store_of().root / "leases").iterdir()) == []  # the archive removed its lease


def test_gc_grace_0_while_an_import_publishes_spares_its_objects(triage, tmp_path, monkeypatch):
    triage("archive", corpus_file(SMALL))
    triage("archive", corpus_file(OTHER))
    out = tmp_path / "two.tar"
    triage("export", "latest", triage.json("ls")[-1]["id"], "-o", out)
    other = tmp_path / "other-store"
    triage("archive", corpus_file(SMALL), "--store", other)
    real = bundle.add_run
    passes = []

    def gc_first(store: Store, run_id: str, unpacked) -> bool:
        passes.append(integrity.gc(store, grace_seconds=0))
        return real(store, run_id, unpacked)

    monkeypatch.setattr(bundle, "add_run", gc_first)
    triage("import", out, "--store", other)
    monkeypatch.setattr(bundle, "add_run", real)
    assert passes and all(p.removed == () for p in passes) and passes[0].kept_live >= 6
    report = triage.json("verify", "--store", other)
    assert report["ok"] and report["leftovers"] == [] and report["runs"] == 2


def start_archive(name: str, store_dir: Path) -> subprocess.Popen:
    """`triage archive` in a session of its own, so that SIGSTOP reaches any worker it forks."""
    return subprocess.Popen([sys.executable, "-m", "triage", "archive", str(corpus_file(name)),
                             "--store", str(store_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def files_of(store_dir: Path) -> frozenset[str]:
    return frozenset(p.relative_to(store_dir).as_posix() for p in store_dir.rglob("*")
                     if p.is_file())


def process_state(pid: int) -> str | None:
    """The state letter of a process (R, S, T, Z, ...), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def stop(proc: subprocess.Popen) -> bool:
    """SIGSTOP the archive and wait until it is stopped; False when it finished first.

    A process inside vfork (subprocess starting nsys) cannot stop until its child has exec'd,
    and that child may be stopped too: one that has not stopped within SETTLE is continued and
    stopped again (a retry, never a verdict)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        settle = min(deadline, time.monotonic() + SETTLE)
        while time.monotonic() < settle:
            state = process_state(proc.pid)
            if state in ("T", "t"):
                return True
            if state in (None, "Z", "X"):
                return False
            time.sleep(0.001)
        try:
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            return False
    raise AssertionError(f"archive {proc.pid} did not stop within {WAIT} s")


def next_change(proc: subprocess.Popen, store_dir: Path, seen: frozenset[str]) -> frozenset[str]:
    """Wait until the store's files differ from `seen` (the archive moved on) or it exits."""
    deadline = time.monotonic() + WAIT
    while proc.poll() is None and time.monotonic() < deadline:
        now = files_of(store_dir)
        if now != seen:
            return now
        time.sleep(0.002)
    return seen


def race(name: str, store_dir: Path, rng: random.Random) -> tuple[int, int]:
    """One archive, stopped each time its files change and at random moments in between, a
    `gc --grace 0` run against it each time; returns (gc passes, passes that kept its files)."""
    proc = start_archive(name, store_dir)
    seen, passes, raced = files_of(store_dir), 0, 0
    try:
        while proc.poll() is None and passes < MAX_PASSES:
            if passes % 2 == 0:
                seen = next_change(proc, store_dir, seen)
            else:
                time.sleep(rng.uniform(0, 0.02))
            if not stop(proc):
                break
            report = integrity.gc(Store.open(store_dir), grace_seconds=0)
            passes += 1
            raced += report.kept_live > 0
            os.killpg(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0 and "(new)" in out and err == "", (name, out, err)
    return passes, raced


@pytest.mark.parametrize("name", STOPPED)
def test_gc_grace_0_never_takes_what_a_stopped_archive_needs(triage, store_dir, name, request):
    """A real archive, stopped whenever its files change (leases, temp tables, adopted tables,
    the published report, the manifest, key, annotations, catalog segment) and at seeded moments
    between, and `gc --grace 0` each time: it ends as a whole run, the store verifies clean."""
    if name.endswith(".qdrep"):
        request.getfixturevalue("nsys_exe")
    triage("archive", corpus_file(SMALL))
    passes, raced = race(name, store_dir, random.Random(name))
    report = integrity.verify(store_of())
    assert report.ok, [(f.kind, f.path) for f in report.errors]
    assert passes >= 1
    integrity.gc(store_of(), grace_seconds=0)
    report = integrity.verify(store_of())
    assert report.ok and report.leftovers == [] and report.runs == 2
    print(f"\ngc-vs-live-archive races survived {passes}/{passes} ({name}: gc --grace 0 while "
          f"it was stopped, {raced} times with its files in flight)")


def test_a_killed_archives_lease_is_stale_and_gc_clears_up_after_it(triage, store_dir):
    """Killed while it holds its lease (stopped first, so that it cannot finish meanwhile): the
    lease is stale at once, `verify` lists it as a leftover, and `gc --grace 0` removes it with
    everything else the archive left."""
    triage("archive", corpus_file(SMALL))
    proc = start_archive(STOPPED[0], store_dir)
    try:
        deadline = time.monotonic() + WAIT
        while proc.poll() is None and time.monotonic() < deadline and not any(
                (store_of().root / "leases").iterdir()):
            time.sleep(0.002)
        assert stop(proc) and any((store_of().root / "leases").iterdir())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    store = store_of()
    found = lease.leases(store)
    # Stopped before or after it wrote its lease's contents: judged by them, or by its name.
    assert found and not any(f.live for f in found) and f"pid {proc.pid}" in found[0].holder
    report = triage.json("verify")
    where = {f.key for f in found}
    assert report["ok"] and where <= {f["path"] for f in report["leftovers"]
                                      if "writer that is gone" in f["detail"]}
    triage("gc", "--grace", "0")
    report = triage.json("verify")
    assert report["ok"] and report["leftovers"] == [] and report["runs"] == 1


def copied_lease(store: Store, **changes) -> Path:
    """A real lease of this process, copied under another name with some fields changed (as a
    lease written elsewhere, or by a process whose pid was reused since, would read)."""
    with lease.held(store, "archive") as key:
        doc = json.loads((store.root / key).read_bytes())
    copy = store.root / "leases" / "copied.json"
    copy.write_bytes(canonical_json({**doc, **changes}))
    return copy


def test_a_lease_from_another_host_is_honoured_for_a_day(triage):
    triage("archive", corpus_file(SMALL))
    store = store_of()
    foreign = copied_lease(store, boot="another-host", pid=1)
    sha, _size = store.objects.put_bytes(b"a table an archive on another host is writing")
    result = triage.json("gc", "--grace", "0")
    assert result["removed"] == [] and result["kept_live"] == 1
    assert store.files.exists(store.objects.key(sha))
    assert "1 an archive in progress may need" in triage("gc", "--grace", "0").stdout
    old(foreign, lease.LEASE_TTL + 60)
    removed = sorted(item["path"] for item in triage.json("gc", "--grace", "0")["removed"])
    assert removed == ["leases/copied.json", f"objects/{sha[:2]}/{sha[2:]}"]


def test_a_lease_whose_pid_was_reused_is_stale(triage):
    triage("archive", corpus_file(SMALL))
    store = store_of()
    with lease.held(store, "archive") as key:
        start = json.loads((store.root / key).read_bytes())["start"]
    copied_lease(store, pid=os.getpid(), start=start + 1)
    sha, _size = store.objects.put_bytes(b"left by the process that had this pid before")
    result = triage.json("gc", "--grace", "0")
    assert sorted(item["path"] for item in result["removed"]) == [
        "leases/copied.json", f"objects/{sha[:2]}/{sha[2:]}"]


def empty_lease_of(store: Store, pid: int) -> Path:
    """The lease a writer killed between creating and writing it leaves: empty, named as
    `lease.held` names it."""
    with lease.held(store, "archive") as key:
        name = key.rsplit("/", 1)[-1].replace(f"{os.getpid()}-", f"{pid}-", 1)
    empty = store.root / "leases" / name
    empty.write_bytes(b"")
    return empty


def test_an_empty_lease_of_a_dead_writer_is_stale_and_of_a_live_one_is_live(triage):
    """No grace for a writer killed between creating its lease and writing it: its pid, in the
    name, says it is gone (judged by its age alone, it would stay live for a day)."""
    triage("archive", corpus_file(SMALL))
    store = store_of()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = empty_lease_of(store, int(gone.stdout))
    live = empty_lease_of(store, os.getpid())
    judged = {found.name: found.live for found in lease.leases(store)}
    assert judged == {dead.name: False, live.name: True}
    live.unlink()
    sha, _size = store.objects.put_bytes(b"left by the writer that died")
    result = triage.json("gc", "--grace", "0")
    assert sorted(item["path"] for item in result["removed"]) == [
        f"leases/{dead.name}", f"objects/{sha[:2]}/{sha[2:]}"]


class Unwind(Exception):
    """Raised in a forked child to unwind it through `lease.held`."""


def test_a_lease_is_removed_only_by_the_process_that_took_it(triage):
    """A reader's forked worker that unwinds through the archive's `with` keeps the lease."""
    triage("archive", corpus_file(SMALL))
    try:
        with lease.held(store_of(), "archive") as key:
            path = store_of().root / key
            child = os.fork()
            if child == 0:
                raise Unwind
            os.waitpid(child, 0)
            assert path.exists()
    except Unwind:
        os._exit(0)  # the child, once through held()
    assert not path.exists()
