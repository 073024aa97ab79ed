"""Benchmark (issue 17 target, local stores only so far): a second `triage push` of N runs
already pushed sends 0 objects, in <= 2 s.

N runs are made by code from one real corpus report, archived N times with a distinct
redaction pattern each (the pattern is part of a run's identity, so each is its own run, sharing
the report object). They are pushed once to an empty store; then `triage push --json` is timed
again in fresh processes (Python start-up included), min and median of --rounds, with the load
average. The S3 (SeaweedFS) targets of issue 17 (archive into S3, cold and warm reads over
1,000 runs, concurrent writers) are not measured here yet.

    python benchmarks/bench_team_store.py [--runs 100] [--rounds 5]
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
SEED = REPO.parent / "shared" / "corpus" / "ncu" / "LakshyaSingh354__CudaCode__report.ncu-rep"


def push(local: Path) -> tuple[float, dict]:
    """One `triage push --json` in a fresh process: seconds and its summary."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "triage", "--store", str(local), "push",
                           "--json"], capture_output=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from triage.archive.ingest import archive_files

    with tempfile.TemporaryDirectory(prefix="bench-team-") as tmp:
        local, team = Path(tmp) / "local", Path(tmp) / "team"
        for number in range(args.runs):
            archive_files(local, [str(SEED)], redact_patterns=(f"BENCH_{number}_",))
        subprocess.run([sys.executable, "-m", "triage", "--store", str(local), "remote", "add",
                        "origin", str(team)], check=True, capture_output=True)
        first, summary = push(local)
        print(f"first push: {len(summary['runs_sent'])} runs, {summary['objects_sent']} objects "
              f"sent, {first:.2f} s")
        times = []
        for _round in range(args.rounds):
            seconds, again = push(local)
            assert again["objects_sent"] == 0 and len(again["runs_present"]) == args.runs
            times.append(seconds)
        print(f"second push of {args.runs} runs: 0 objects sent; min {min(times):.2f} s, "
              f"median {statistics.median(times):.2f} s (target <= 2 s); "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
