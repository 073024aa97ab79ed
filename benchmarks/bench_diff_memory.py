"""Peak memory of `triage diff` of a 3M- against a 10M-row nsys run, next to the peak of
archiving the larger one (issue 41, target 7: the diff within 1.2x of that archive).

The runs are made by code from a real corpus export (no nsys needed): its CUDA API calls
repeated later in time to 3M and 10M rows (tests/helpers.py `grown`), or with `--source nvtx`
the nsys captures of tests/programs/nvtx_steps.c that bench_nsys_memory.py makes (3M and 10M
NVTX ranges; the 10M one takes minutes to capture, so keep --workdir). A one-run-a-side diff
reads both runs' launch-level table (api_calls or nvtx_ranges) for the noise of every row:
that table, not the stored summaries, is what the diff's memory grows with.

Each figure is triage's own peak RSS (getrusage of one fresh process per step); the archive
is measured once per round, the diff in the same round after it, rounds interleaved.

usage: python benchmarks/bench_diff_memory.py [--workdir DIR] [--rounds 3] [--source api|nvtx]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

from benchlib import compile_sources

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import grown  # noqa: E402

SMALL, LARGE = 3_000_000, 10_000_000
TARGET = 1.2
# Runs one triage command in this process and prints its own peak RSS in kB.
PROBE = """
import resource, sys
from triage.cli import cli
try:
    cli(sys.argv[1:], prog_name="triage")
except SystemExit as end:
    if end.code:
        raise
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def peak_mb(args: list[str], store: Path) -> float:
    """triage's peak RSS in MB running `triage ARGS` on `store` in a fresh process."""
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, env=env)
    if done.returncode not in (0, 4):  # 4: a gate failed, which is a result
        raise RuntimeError(done.stderr[-800:])
    return int(done.stderr.strip().splitlines()[-1]) / 1024


def exports(work: Path, source: str) -> tuple[Path, Path]:
    """The 3M- and 10M-row exports, made once per work directory."""
    if source == "nvtx":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_nsys_archive import prepare
        from nvtx_capture import require_tool

        nsys = require_tool("nsys")
        made = []
        for count in (SMALL, LARGE):
            folder = work / f"ranges-{count}"
            folder.mkdir(exist_ok=True)
            made.append(prepare(folder, count, nsys)[1])
        return made[0], made[1]
    made = []
    for count in (SMALL, LARGE):
        path = work / f"api-{count}.sqlite"
        if not path.exists():
            grown(work / f"api-{count}.partial", count, "CUPTI_ACTIVITY_KIND_RUNTIME").rename(path)
        made.append(path)
    return made[0], made[1]


def run_id(store: Path, label: str) -> str:
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    shown = subprocess.run([sys.executable, "-m", "triage", "show", "--json", label],
                           check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(shown)["id"]


def run(work: Path, source: str, rounds: int) -> None:
    small, large = exports(work, source)
    archived, diffed = [], []
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        store = work / "store"
        shutil.rmtree(store, ignore_errors=True)
        archived.append(peak_mb(["archive", str(large), "--label", "large"], store))
        peak_mb(["archive", str(small), "--label", "small"], store)
        diffed.append(peak_mb(["diff", run_id(store, "small"), run_id(store, "large"),
                               "--json"], store))
        shutil.rmtree(store)
        load.append(os.getloadavg()[0])
    print(f"{source}: diff of a {SMALL:,}- against a {LARGE:,}-row run; peak RSS (MB), "
          f"{rounds} rounds, min / median, load average {min(load):.1f}-{max(load):.1f}")
    print(f"  archive of the {LARGE:,}-row run  {min(archived):6.0f} / {median(archived):6.0f}")
    print(f"  diff                          {min(diffed):6.0f} / {median(diffed):6.0f}   "
          f"{min(diffed) / min(archived):.2f} / {median(diffed) / median(archived):.2f} x the "
          f"archive  (target <= {TARGET:.2f} x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep the exports here between runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", choices=("api", "nvtx"), default="api")
    args = parser.parse_args()
    compile_sources()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, args.source, args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as work:
        run(Path(work), args.source, args.rounds)


if __name__ == "__main__":
    main()
