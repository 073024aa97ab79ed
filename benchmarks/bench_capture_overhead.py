"""Benchmark (issue 41 target 6, nsys half): `triage capture -- nsys profile ...` against bare
`nsys profile` + `nsys export --type arrow` of the same program, the export being what the
archive runs itself.

Two legs a round, interleaved (the order turned each round), every one fresh processes in a
fresh folder of a git repository (so the git probe has a commit to read): the bare pair, and
`triage --store STORE capture -- nsys profile ...` into an empty store. The program is the test
suite's NVTX program (tests/programs/nvtx_steps.c) making `--ranges` ranges. Target: <= 1.1x.
Each leg's median CPU seconds (user + system of the processes waited for: nsys's agents, which
profile the program, are not among them, so the bare leg's is mostly its export's and the
difference is triage's own) is printed beside: the load stretches it less than the wall time.
`--baseline PYTHON` adds a third leg, the capture with another interpreter whose triage is
another commit (a venv with that checkout installed), for a before/after under the same load.

Run it under the tools lock (concurrent nsys sessions fail on a shared machine):

    flock /tmp/triage-tools.lock python benchmarks/bench_capture_overhead.py [--ranges 100000]
        [--rounds 5] [--baseline PYTHON]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from benchlib import compile_legs  # noqa: E402 - bytecode, as an install has
from nvtx_capture import CAPTURE_OPTIONS, build_program, require_tool  # noqa: E402


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds of a command, and the CPU seconds it and its children used (user + system:
    what the machine's load does not change much, where it stretches the wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)[:80]} failed: {done.stderr.strip()[-400:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def git_repository(work: Path) -> None:
    """`work` as a repository with one commit, as a project being profiled is."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "b"]):
        subprocess.run(argv, cwd=work, env=env, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranges", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="also time the capture with this interpreter's triage")
    args = parser.parse_args()
    compile_legs(args.baseline)
    nsys = require_tool("nsys")
    pythons = {"capture": sys.executable, **({"baseline": args.baseline} if args.baseline else {})}
    times: dict[str, list[float]] = {"bare": [], **{leg: [] for leg in pythons}}
    cpu: dict[str, list[float]] = {leg: [] for leg in times}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = build_program(work)
        git_repository(work)
        profile = [nsys, "profile", *CAPTURE_OPTIONS, "--force-overwrite", "true"]
        run = [str(program), str(-(-args.ranges // 3)), "0", "0"]
        for number in range(args.rounds):
            for leg in list(times)[::1 if number % 2 == 0 else -1]:
                name = f"{leg}{number}"
                if leg == "bare":
                    profiled = timed([*profile, "-o", name, *run], work)
                    exported = timed([nsys, "export", "--type", "arrow", "--output",
                                      f"{name}.arrows", f"{name}.nsys-rep"], work)
                    seconds = (profiled[0] + exported[0], profiled[1] + exported[1])
                else:
                    seconds = timed([pythons[leg], "-m", "triage", "--store",
                                     str(work / "stores" / name), "capture", "--",
                                     *profile, "-o", name, *run], work)
                times[leg].append(seconds[0])
                cpu[leg].append(seconds[1])
            loads.append(os.getloadavg()[0])
    for leg, found in times.items():
        print(f"  {leg:8s} min {min(found):.2f} s, median {statistics.median(found):.2f} s; "
              f"CPU {statistics.median(cpu[leg]):.2f} s median")
    for leg in pythons:
        low = min(times[leg]) / min(times["bare"])
        mid = statistics.median(times[leg]) / statistics.median(times["bare"])
        print(f"{leg} / (profile + export) of {args.ranges:,} ranges: {low:.2f}x min, {mid:.2f}x "
              f"median (target <= 1.1x); {args.rounds} rounds, load average "
              f"{min(loads):.1f}-{max(loads):.1f}")



if __name__ == "__main__":
    main()
