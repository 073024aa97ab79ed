"""Probes of issue 44: what a store takes from concurrent writers and from other stores.

1. notes: `--rounds` rounds of `--writers` real `triage archive REPORT --note "note N"` processes
   at once on one run (a fresh local store each round); prints the notes kept per round
   (target: all of them, every round).
2. label clock: a colleague's store (a copy of this one) whose move of label `a` is dated by a
   clock OFFSET ahead, pulled back; prints whether the pull refused the move and whether a local
   `triage label a RUN` afterwards took effect (target: refused beyond 10 minutes; the local
   move always wins).

    python benchmarks/trust_probes.py [--rounds 10] [--writers 10]

It needs $TRIAGE_CORPUS (the corpus of real reports) and runs on a local disk only (the S3 case
is tests/test_trust.py's, on SeaweedFS).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPORTS = ("ncu/LakshyaSingh354__CudaCode__report.ncu-rep",
           "ncu/Lashi0812__CudaProgramming__simpleSOA.ncu-rep")
OFFSETS = {"9 minutes": timedelta(minutes=9), "11 minutes": timedelta(minutes=11),
           "30 days": timedelta(days=30), "year 2999": None}


def triage(store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", "--store", str(store), *args],
                          capture_output=True, text=True)


def notes_round(root: Path, report: Path, writers: int) -> int:
    """Notes kept of `writers` written at once on one run."""
    store = root / "notes"
    shutil.rmtree(store, ignore_errors=True)
    triage(store, "archive", str(report))
    procs = [subprocess.Popen([sys.executable, "-m", "triage", "--store", str(store), "archive",
                               str(report), "--note", f"note {i}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(writers)]
    failed = sum(p.wait() != 0 for p in procs)
    shown = triage(store, "show", "latest").stdout
    kept = sum(f": note {i}\n" in shown + "\n" for i in range(writers))
    return kept if not failed else -failed


def skew_probe(root: Path, corpus: Path, offset: timedelta | None) -> tuple[bool, bool]:
    """(pull refused the colleague's move, a local move afterwards took effect). The colleague's
    clock is this process's, set ahead (labels.utc_now, what every move is dated by)."""
    from triage.archive import labels, runs
    from triage.archive.store import Store

    store, colleague = root / "mine", root / "colleague"
    for path in (store, colleague):
        shutil.rmtree(path, ignore_errors=True)
    ids = [triage(store, "archive", str(corpus / r), "--json").stdout for r in REPORTS]
    mine, theirs = [line.split('"id": "')[1][:64] for line in ids]
    triage(store, "label", "a", mine)
    shutil.copytree(store, colleague)
    honest = labels.utc_now

    def ahead(precise: bool = False) -> str:
        when = datetime(2999, 1, 1, tzinfo=timezone.utc) if offset is None \
            else datetime.now(timezone.utc) + offset
        return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    labels.utc_now = ahead
    try:
        runs.point_label(Store.open(colleague), "a", theirs)
    finally:
        labels.utc_now = honest
    refused = "refused a move of label a" in triage(store, "pull", str(colleague)).stdout
    triage(store, "label", "a", mine)
    return refused, Store.open(store).labels.all().get("a") == mine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--writers", type=int, default=10)
    args = parser.parse_args()
    corpus = Path(os.environ["TRIAGE_CORPUS"])
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        kept = [notes_round(root, corpus / REPORTS[0], args.writers) for _ in range(args.rounds)]
        print(f"notes: {args.rounds} rounds of {args.writers} writers at once; kept per round "
              f"{kept} (target {args.writers} each)")
        for name, offset in OFFSETS.items():
            refused, won = skew_probe(root, corpus, offset)
            print(f"label clock {name} ahead: pull refused the move: {refused}; a local move "
                  f"afterwards took effect: {won}")


if __name__ == "__main__":
    main()
