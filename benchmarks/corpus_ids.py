"""Run ids and table hashes of every corpus report, archived into a fresh store: the check that a
change kept the runs' identity (the run id) and their tables byte-identical (the run id no longer
hashes the tables, so their hashes are listed beside it), side by side with another commit.

    python benchmarks/corpus_ids.py > after.json     # on this commit
    git stash; python benchmarks/corpus_ids.py > before.json; git stash pop
    python benchmarks/corpus_ids.py --compare before.json after.json

Reports nsys cannot export here (Debian's 2022.4 and newer captures) are listed as errors on
both sides alike.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(os.environ.get("TRIAGE_CORPUS")
              or Path(__file__).resolve().parents[2] / "shared" / "corpus")
SUFFIXES = (".ncu-rep", ".nsight-cuprof-report", ".sqlite", ".nsys-rep", ".qdrep")


def corpus_ids() -> dict[str, str]:
    """file name -> "run id tables-digest" (or 'error: ...') for every corpus report."""
    out = {}
    with tempfile.TemporaryDirectory() as store:
        for path in sorted(p for p in CORPUS.rglob("*") if p.suffix in SUFFIXES):
            done = subprocess.run([sys.executable, "-m", "triage", "--store", store, "archive",
                                   "--json", str(path)], capture_output=True, text=True)
            out[path.name] = _identity(Path(store), json.loads(done.stdout)[0]["id"]) \
                if done.returncode == 0 else "error: " + done.stderr.strip()[:120]
    return out


def _identity(store: Path, run_id: str) -> str:
    """A run's id and the sha256 of its table references (name, hash) in name order."""
    tables = json.loads((store / "runs" / f"{run_id}.json").read_bytes())["tables"]
    listed = json.dumps({name: ref["sha256"] for name, ref in sorted(tables.items())})
    return f"{run_id} {hashlib.sha256(listed.encode()).hexdigest()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if not args.compare:
        json.dump(corpus_ids(), sys.stdout, indent=1, sort_keys=True)
        return 0
    before, after = (json.loads(Path(p).read_text()) for p in args.compare)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for name in changed:
        print(f"{name}: {before.get(name)} -> {after.get(name)}")
    ok = sum(1 for k in before if not before[k].startswith("error") and before[k] == after.get(k))
    print(f"{ok} run ids identical, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
