"""Benchmark (issue 43): the team store on a flaky network. A real S3 server (SeaweedFS on
127.0.0.1, tests/s3server.py) behind the tests' fault-injecting proxy (tests/faultproxy.py: a
seeded fraction of requests answered 500 or 503, or dropped before or after the server acted).

For each fault rate (0, 10 and 30% by default) and --trials seeds:

- `triage push` of --runs runs from a local store to an empty S3 store, then `triage pull` of
  them all into an empty local store, each command run again (up to --tries times) until it
  exits 0; the time and the proxy's request count of each, the commands it took, and what
  triage says it retried;
- after each command that exited 0, the stores read directly (no proxy): a "false success" is
  an exit 0 with a run missing there (must be 0);
- `triage verify` of the S3 store with the same rate of faults on its data reads alone: a
  "false corrupt" is a finding of damage in that undamaged store (must be 0).

Then the time `triage verify` takes to give up on a server that accepts connections and never
answers (tests/faultproxy.py SilentServer), with the default settings and with --timeout 1.

Targets: at 10% every push and pull completes in one command, at 30% in at most three; no false
success, no false corrupt. The runs are made by code from one real corpus report, archived N
times with a distinct redaction pattern each (as bench_team_store.py does).

    python benchmarks/bench_flaky_network.py [--runs 20] [--rates 0,0.1,0.3] [--trials 2]
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
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED = REPO.parent / "shared" / "corpus" / "ncu" / "LakshyaSingh354__CudaCode__report.ncu-rep"
sys.path.insert(0, str(REPO / "tests"))
import s3server  # noqa: E402 - the tests' server, not a copy of it
from benchlib import compile_sources  # noqa: E402 - bytecode, as an install has
from faultproxy import FaultProxy, SilentServer  # noqa: E402 - the tests' proxy


@dataclass
class Transfer:
    """One push or pull, run until it exits 0 or --tries ran out."""

    tries: int = 0
    completed: bool = False
    seconds: float = 0.0
    requests: int = 0
    failed_requests: int = 0
    retried: int = 0  # what triage reported running again (its own layer)
    false_successes: int = 0
    errors: list[str] = field(default_factory=list)


def triage(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], env=env,
                          capture_output=True, text=True)


def run_ids(store: str, env: dict) -> set[str]:
    """The runs a store lists, read directly (no proxy: a failure here is the benchmark's)."""
    done = triage("--store", store, "ls", "--json", env=env)
    if done.returncode != 0:
        raise SystemExit(f"ls --store {store} failed: {done.stderr.strip()}")
    return {r["id"] for r in json.loads(done.stdout)}


def transfer(args: list[str], proxy: FaultProxy, env: dict, direct: dict, check: str,
             expected: set[str], tries: int) -> Transfer:
    """Run `triage ARGS --json` through the proxy until it exits 0; after an exit 0, the store
    `check` is read directly (env `direct`) for the runs it must hold."""
    result = Transfer()
    for _ in range(tries):
        before = dict(proxy.counts)
        started = time.perf_counter()
        done = triage(*args, "--json", env=env)
        result.seconds += time.perf_counter() - started
        result.tries += 1
        result.requests += proxy.counts["requests"] - before.get("requests", 0)
        result.failed_requests += proxy.counts["failed"] - before.get("failed", 0)
        if done.returncode == 0:
            result.retried += json.loads(done.stdout)["retried"]
            result.completed = run_ids(check, direct) == expected
            result.false_successes += not result.completed
            return result
        result.errors.append(done.stderr.strip().splitlines()[-1][:160])
    return result


def false_corrupt(url: str, server, rate: float, seed: int, env: dict) -> tuple[int, str]:
    """verify of the whole S3 store with `rate` of its data reads failing: the damage findings
    (must be none) and its verdict."""
    with FaultProxy(server.endpoint, rate, seed=seed,
                    only=r"^GET .*/(objects|tables)/") as proxy:
        done = triage("--store", url, "verify", "--json",
                      env={**env, "AWS_ENDPOINT_URL": proxy.endpoint})
    report = json.loads(done.stdout)
    damage = [e for e in report["errors"] if e["kind"] != "unreachable"]
    return len(damage), report["verdict"]


def give_up_time(env: dict, *options: str) -> float:
    silent = SilentServer()
    try:
        started = time.perf_counter()
        done = triage("--store", "s3://team/silent", "verify", *options,
                      env={**env, "AWS_ENDPOINT_URL": silent.endpoint})
        took = time.perf_counter() - started
    finally:
        silent.stop()
    assert done.returncode == 6, done.stderr
    return took


def make_runs(store: Path, count: int) -> set[str]:
    from triage.archive.ingest import archive_files

    return {r.record.id for n in range(count)
            for r in archive_files(store, [str(SEED)], redact_patterns=(f"FLAKY_{n}_",))}


def trial(server, env: dict, tmp: Path, local: Path, ids: set[str], rate: float, seed: int,
          tries: int) -> dict:
    bucket = f"flaky{int(rate * 100)}s{seed}"
    server.create_bucket(bucket)
    url = f"s3://{bucket}/team"
    with FaultProxy(server.endpoint, rate, seed=seed) as proxy:
        via = {**env, "AWS_ENDPOINT_URL": proxy.endpoint}
        push = transfer(["--store", str(local), "push", url], proxy, via, env, url, ids, tries)
        theirs = tmp / f"theirs-{bucket}"
        pull = transfer(["--store", str(theirs), "pull", url], proxy, via, env, str(theirs),
                        ids, tries) if push.completed else Transfer()
    corrupt, verdict = false_corrupt(url, server, rate, seed, env) if push.completed \
        else (0, "-")
    return {"push": push, "pull": pull, "false_corrupt": corrupt, "verdict": verdict}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rates", default="0,0.1,0.3")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--tries", type=int, default=3, help="commands at most per transfer")
    args = parser.parse_args()
    compile_sources()
    with tempfile.TemporaryDirectory(prefix="triage-bench-flaky-") as folder:
        tmp = Path(folder)
        server = s3server.S3Server(tmp / "seaweedfs", s3server.weed_binary() or "weed")
        server.start()
        try:
            env = {**os.environ, **server.env(), "XDG_CACHE_HOME": str(tmp / "cache")}
            local = tmp / "local"
            ids = make_runs(local, args.runs)
            print(f"{len(ids)} runs of {SEED.name}; load average {os.getloadavg()[0]:.1f}")
            rows = []
            for rate in (float(r) for r in args.rates.split(",")):
                for seed in range(args.trials):
                    found = trial(server, env, tmp, local, ids, rate, seed, args.tries)
                    rows.append((rate, seed, found))
                    print_trial(rate, seed, found)
            print_table(rows, args.tries)
            default = give_up_time(env)
            short = give_up_time(env, "--timeout", "1")
            print(f"\ngive up on a silent server: {default:.1f} s with the defaults "
                  f"(4 tries x 3 s + backoff), {short:.1f} s with --timeout 1")
        finally:
            server.kill()


def print_trial(rate: float, seed: int, found: dict) -> None:
    for name in ("push", "pull"):
        t: Transfer = found[name]
        print(f"  {rate:.0%} seed {seed} {name}: {t.tries} command(s), completed {t.completed}, "
              f"{t.seconds:.1f} s, {t.requests} requests ({t.failed_requests} failed by the "
              f"proxy), triage retried {t.retried}" + (f"; errors: {t.errors}" if t.errors
                                                       else ""))
    print(f"  {rate:.0%} seed {seed} verify: {found['verdict']}, "
          f"{found['false_corrupt']} false corrupt")


def print_table(rows: list, tries: int) -> None:
    print("\n| fault rate | transfer | trials | completed | commands (max) | false successes "
          "| false corrupt (verify) | seconds (median) | requests (median) | failed by the proxy "
          "(median) | retried by triage (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rate in sorted({r for r, _, _ in rows}):
        found = [f for r, _, f in rows if r == rate]
        for name in ("push", "pull"):
            done = [f[name] for f in found]
            med = statistics.median
            print(f"| {rate:.0%} | {name} | {len(done)} | "
                  f"{sum(t.completed for t in done)}/{len(done)} | "
                  f"{max(t.tries for t in done)} (of {tries}) | "
                  f"{sum(t.false_successes for t in done)} | "
                  f"{sum(f['false_corrupt'] for f in found)} | "
                  f"{med(t.seconds for t in done):.1f} | {med(t.requests for t in done):.0f} | "
                  f"{med(t.failed_requests for t in done):.0f} | "
                  f"{med(t.retried for t in done):.0f} |")


if __name__ == "__main__":
    main()
