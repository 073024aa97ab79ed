"""A store on S3 (issue 17 items 1, 8, 9): every command on s3://bucket/prefix against a real
SeaweedFS server (conftest's `s3_server`), and its faults: a server killed mid-archive, wrong
keys, a missing bucket, an unreachable endpoint."""

from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
import time

from helpers import corpus_file

SMALL = "LakshyaSingh354__CudaCode__report.ncu-rep"
OTHER = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def keys(s3_server, url: str) -> list[str]:
    from pyarrow import fs

    base = url.removeprefix("s3://")
    found = s3_server.client().get_file_info(fs.FileSelector(base, recursive=True,
                                                             allow_not_found=True))
    return sorted(f.path[len(base) + 1:] for f in found if f.type == fs.FileType.File)


def test_every_command_works_on_an_s3_store(triage, s3_store, s3_server, tmp_path,
                                             monkeypatch):
    first = triage.json("archive", corpus_file(SMALL), "--label", "base")[0]["id"]
    second = triage.json("archive", corpus_file(OTHER))[0]["id"]
    stored = keys(s3_server, s3_store)
    assert f"runs/{first}.json" in stored and "triage-store.json" in stored
    assert not any(k.startswith(".tmp-") or "/.tmp-" in k for k in stored)
    assert {r["id"] for r in triage.json("ls")} == {first, second}
    assert triage.json("show", "base")["id"] == first
    assert triage("diff", first, second, expect=None).exit_code in (0, 3)
    rows = triage.json("query", "select run_id, count(*) as n from kernels group by run_id")
    assert {r["run_id"] for r in rows} == {first, second}
    triage("label", "moved", second)
    assert triage.json("show", "moved")["id"] == second
    triage("label", "moved", first)
    assert first[:12] in triage("label", "--history", "moved").stdout
    assert triage("migrate", expect=None).exit_code == 0
    assert triage.json("history", "base", "--kernel", ".")["points"]
    page = tmp_path / "report.html"
    triage("report", first, second, "-o", page)
    assert first[:12] in page.read_text()
    assert triage.json("verify")["ok"]
    bundle = tmp_path / "runs.tar"
    triage("export", first, "-o", bundle)
    local = tmp_path / "local"
    triage("--store", local, "import", bundle)
    assert triage.json("--store", local, "show", first)["id"] == first
    # An orphan (a table a killed writer left) goes with gc, the runs stay whole.
    s3_server.client().open_output_stream(
        f"{s3_store.removeprefix('s3://')}/objects/00/{'0' * 62}").close()
    orphan, deadline = f"objects/00/{'0' * 62}", time.monotonic() + 60
    while True:
        cleaned = triage.json("gc", "--grace", "0")
        if orphan in [r["path"] for r in cleaned["removed"]]:
            break
        # Under load SeaweedFS's gateway may leave a just-written object out of a listing for a
        # moment (its filer's metadata cache): polled against a deadline, not slept
        assert time.monotonic() < deadline, cleaned
        time.sleep(0.2)
    assert triage.json("verify")["ok"]  # whatever else went (a stale lease), no run lost a part
    assert {r["id"] for r in triage.json("ls")} == {first, second}


def test_the_same_report_is_the_same_run_on_s3_and_locally(triage, s3_store, tmp_path):
    remote = triage.json("archive", corpus_file(SMALL))[0]["id"]
    local = triage.json("--store", tmp_path / "here", "archive", corpus_file(SMALL))[0]["id"]
    assert remote == local
    assert triage.json("archive", corpus_file(SMALL))[0]["new"] is False


def test_a_store_at_a_bucket_root_is_made_and_read(triage, s3_store, s3_server, monkeypatch):
    """s3://bucket with no prefix: the store's root is the bucket, a folder S3 does not list as a
    file, so asking whether its marker's folder exists must not take it for a damaged object."""
    bucket = s3_store.removeprefix("s3://").split("/")[0] + "-root"
    s3_server.create_bucket(bucket)
    monkeypatch.setenv("TRIAGE_STORE", f"s3://{bucket}")
    run_id = triage.json("archive", corpus_file(SMALL))[0]["id"]
    assert [run["id"] for run in triage.json("ls")] == [run_id]
    assert triage("verify").exit_code == 0


def test_reads_come_from_the_cache_once_fetched(triage, s3_store, tmp_path):
    run_id = triage.json("archive", corpus_file(SMALL))[0]["id"]
    cache = tmp_path / "cache" / "triage" / "objects"
    triage("show", run_id)
    cached = sorted(p.name for p in cache.glob("*/*"))
    assert cached  # the tables show read, by their hashes
    triage("show", run_id)
    assert sorted(p.name for p in cache.glob("*/*")) == cached


def test_the_cache_is_walked_once_per_share_of_its_cap_and_stays_under_it(triage, s3_store,
                                                                          tmp_path, monkeypatch):
    """A process trims the cache after its first copy, then once per 1/16 of the cap it adds
    (not once per copy: a cold read of 1,000 runs walked the cache 1,000 times), and never
    removes a copy a query is about to read: under a cap of 1 byte a query of two tables
    answers as under the default one, and the next fetch's trim removes what it left."""
    from triage.archive import cache

    triage("archive", corpus_file(SMALL))
    objects = tmp_path / "cache" / "triage" / "objects"
    walks: list[int] = []
    real = cache.trim

    def counted(cap, spare=None):
        walks.append(cap)
        real(cap, spare)

    monkeypatch.setattr(cache, "trim", counted)
    two_tables = "select (select count(*) from kernels) + (select count(*) from metrics) n"
    answers, kept = [], []
    for cap in (cache.DEFAULT_CAP, 1):
        shutil.rmtree(objects)
        monkeypatch.setenv("TRIAGE_CACHE_BYTES", str(cap))
        monkeypatch.setattr(cache, "TRIMS", cache.TrimSchedule())
        walks.clear()
        answers.append(triage.json("query", two_tables))  # the tables fetched, by their hashes
        kept.append(sorted(objects.glob("*/*")))
        assert len(walks) == (1 if cap == cache.DEFAULT_CAP else len(kept[-1])), walks
    assert answers[0] == answers[1] and answers[0][0]["n"] > 0
    assert kept[0] == kept[1] and len(kept[1]) == 3  # the catalog segment and both tables
    triage.json("query", "select count(*) n from rules")  # its fetch trims what it does not read
    left = sorted(objects.glob("*/*"))
    assert len(left) == 2 and len(set(left) & set(kept[1])) == 1  # the segment, and rules


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_wrong_keys_a_missing_bucket_and_a_dead_endpoint_are_one_line(s3_store, s3_server,
                                                                        free_port_env):
    env = {**os.environ}
    bad = [({**env, "AWS_SECRET_ACCESS_KEY": "wrong"}, "AWS_SECRET_ACCESS_KEY", 1),
           ({**env, "TRIAGE_STORE": "s3://no-such-bucket-here/x"}, "does not exist", 1),
           (free_port_env, "AWS_ENDPOINT_URL", 6)]  # 6: unreachable, run it again
    for variables, fix, code in bad:
        done = run_cli("ls", env=variables)  # a retry loop would hang it: run_cli's timeout
        lines = done.stderr.strip().splitlines()
        assert done.returncode == code and len(lines) == 1 and fix in lines[0], done.stderr
        assert variables["AWS_ENDPOINT_URL"] in lines[0] and "Traceback" not in done.stderr


KILLED = [OTHER, SMALL, "iamcoleman__monte-carlo-pi__profile.ncu-rep",
          "bwd29__self-join-MiSTIC__nodeCalc_profile.out.ncu-rep",
          "cornflexxx__HomCmprsr__report.ncu-rep"]


def test_a_server_killed_during_an_archive_leaves_no_partial_run_and_the_rerun_completes(
        s3_store, s3_server):
    """SIGKILL the server once the archive's first object has landed (seen by listing, not by
    timing; the archiver held still meanwhile, and it has more reports to go): one line, exit
    6 (unreachable), every visible run whole; after a restart the same command completes."""
    env = {**os.environ}
    command = [sys.executable, "-m", "triage", "archive", *map(str, map(corpus_file, KILLED))]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not any(
                k.startswith("objects/") for k in keys(s3_server, s3_store)):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)  # held still while its server dies: no race
        assert proc.poll() is None, "the archive finished before the kill: archive more"
        s3_server.kill()
        os.kill(proc.pid, signal.SIGCONT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if s3_server.process is None:
            s3_server.start()
    lines = err.strip().splitlines()
    assert proc.returncode == 6 and len(lines) == 1 and s3_server.endpoint in lines[0], err
    visible = [k for k in keys(s3_server, s3_store) if k.startswith("runs/")]
    assert len(visible) < len(KILLED)
    assert run_cli("verify", env=env).returncode == 0  # every visible run is whole
    done = run_cli(*command[3:], "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert len([k for k in keys(s3_server, s3_store) if k.startswith("runs/")]) == len(KILLED)
    assert run_cli("verify", env=env).returncode == 0


def test_the_spool_removes_what_dead_writers_left_once_past_the_grace(tmp_path):
    """Spool folders are per process (<machine tag>-<pid>); a killed writer's is removed by the
    next process that opens an S3 store, once untouched for the grace, never a live writer's
    nor another machine's (a container sharing the host name has another tag)."""
    from triage.archive import lease
    from triage.archive.files import SPOOL_GRACE, own_spool

    root, host = tmp_path / "spool", lease.machine_tag()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    old = time.time() - SPOOL_GRACE - 60
    folders = {name: root / name for name in (f"{host}-{gone}", f"{host}-{os.getppid()}",
                                              f"0123456789ab-{gone}")}
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / ".tmp-leftover.parquet").write_bytes(b"x")
        os.utime(folder, (old, old))
    flat = root / ".tmp-from-an-older-version"
    flat.write_bytes(b"x")
    os.utime(flat, (old, old))
    young = root / f"{host}-{gone}0"  # a dead pid, but touched within the grace
    young.mkdir()
    mine = own_spool(root)
    assert mine.name == f"{host}-{os.getpid()}"
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [f"{host}-{os.getppid()}", f"0123456789ab-{gone}", young.name])
