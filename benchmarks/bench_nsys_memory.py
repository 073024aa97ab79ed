"""Peak memory of `triage archive` on nsys captures of growing size (issue 20, target 3).

Captures tests/programs/nvtx_steps.c with about 1M, 3M and 10M NVTX ranges (3 per step; the
10M capture is about 160 MB of .nsys-rep and takes minutes to make, so keep it with
--workdir), then archives each `.nsys-rep` and its `.sqlite` export into a fresh store, one
fresh process per archive, and prints triage's own peak RSS (getrusage of the archiving
process itself; the `nsys export` it runs for a .nsys-rep is nsys's memory, printed beside).

Targets: every peak <= 400 MB, and the 3M-range peak within 10% of the 1M-range one, for
`.nsys-rep` and `.sqlite` alike.

usage: python benchmarks/bench_nsys_memory.py [--ranges 1000000,3000000,10000000]
                                              [--formats nsys-rep,sqlite] [--workdir DIR]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nsys_archive import prepare  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nvtx_capture import nsys_version, require_tool  # noqa: E402

# Runs `triage archive` in this process and reports its own peak and its children's.
PROBE = """
import json, resource, sys
from triage.cli import cli
try:
    cli(["archive", sys.argv[1]], prog_name="triage")
except SystemExit as end:
    if end.code:
        raise
print(json.dumps({"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}),
      file=sys.stderr)
"""

LIMIT_MB = 400
SAME_WITHIN = 0.10


def peak_mb(path: Path, store: Path) -> tuple[float, float]:
    """(triage's peak RSS, its children's) in MB archiving `path` into a new store."""
    shutil.rmtree(store, ignore_errors=True)
    env = {**os.environ, "TRIAGE_STORE": str(store)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], check=True,
                          capture_output=True, text=True, env=env)
    shutil.rmtree(store)
    peaks = json.loads(done.stderr.strip().splitlines()[-1])
    return peaks["self"] / 1024, peaks["children"] / 1024


def run(work: Path, counts: list[int], formats: list[str]) -> None:
    nsys = require_tool("nsys")
    print(f"nsys {nsys_version(nsys)}; peak RSS of `triage archive` (MB), one fresh process "
          f"each; target <= {LIMIT_MB} MB and 3M within {SAME_WITHIN:.0%} of 1M")
    figures: dict[str, dict[int, float]] = {kind: {} for kind in formats}
    for count in counts:
        folder = work / f"ranges-{count}"
        folder.mkdir(exist_ok=True)
        report, exported = prepare(folder, count, nsys, rep_only=False)
        for kind, path in (("nsys-rep", report), ("sqlite", exported)):
            if kind not in formats:
                continue
            own, children = peak_mb(path, folder / "store")
            figures[kind][count] = own
            beside = f"   (nsys export {children:5.0f} MB)" if kind == "nsys-rep" else ""
            verdict = "ok" if own <= LIMIT_MB else "OVER"
            print(f"  {count:>10,} ranges  .{kind:8s} {path.stat().st_size / 1e6:7.1f} MB file  "
                  f"peak {own:5.0f} MB  {verdict}{beside}")
    for kind, peaks in figures.items():
        if 1_000_000 in peaks and 3_000_000 in peaks:
            growth = peaks[3_000_000] / peaks[1_000_000] - 1
            verdict = "ok" if growth <= SAME_WITHIN else "OVER"
            print(f"  .{kind}: 3M vs 1M {growth:+.1%}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", default="1000000,3000000,10000000",
                        help="comma-separated range counts")
    parser.add_argument("--formats", default="nsys-rep,sqlite",
                        help="which of each capture to archive: nsys-rep, sqlite or both")
    parser.add_argument("--workdir", type=Path, help="keep the captures here between runs")
    args = parser.parse_args()
    counts = [int(c) for c in args.ranges.split(",")]
    formats = args.formats.split(",")
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args.workdir, counts, formats)
        return
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as work:
        run(Path(work), counts, formats)


if __name__ == "__main__":
    main()
