"""Benchmark: `ls`, `show latest`, a cross-run query and `diff` by id prefix on large stores.

Two stores are built by code from one real archived corpus report: 10,000 runs and `--runs`
(100,000 for issue 20's target). The report's manifest is cloned with a distinct field per run
(so each clone has its own id); the newest clone's kernels table is blown up to `--kernels` rows
by repeating the real rows. The catalog is left as a busy store has it: one merged segment (as
`catalog.merge` writes it: one row per run, oldest first, marked, with its id index), then
MERGE_ABOVE one-run segments (the most there are before the next merge), a few of them rows of
runs indexed again (a note added), which readers must de-duplicate. A store an older version of
this script built lacks the mark: remove DIR/store-N to build it again.

Every command is timed end to end in a fresh process (Python start-up included), the checks and
stores interleaved round by round, so a burst of load on this shared machine hits every figure
alike; min and median of `--rounds`, with the load average. `--baseline COMMIT` times the same
commands, interleaved too, with the triage of another commit (a temporary `git worktree`, removed
after) on the same stores. Growth is (median at --runs - median at 10,000) / the runs added.

    python benchmarks/bench_catalog.py [--runs 100000] [--kernels 100000] [--rounds 5]
                                       [--baseline 0a1d730] [--stores DIR]

`--stores DIR` keeps the built stores there and reuses them on the next call.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchlib import compile_sources  # triage's bytecode caches, as an install writes

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "ncu"
SEED = CORPUS / "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"
SMALL = 10_000
TARGET_S, TARGET_GROWTH_US = 0.5, 2.0
# the source folders that map into the `triage` package (pyproject's package-dir)
SUBPACKAGES = ("archive", "capture", "compare", "schemas", "templates")
FLOOR = "import triage.cli, triage.archive.listing"  # what every check pays (pyarrow with it)


def build_store(root: Path, runs: int, kernels: int) -> None:
    """`runs` clones of one archived report, written straight to the store's files (the store's
    own writes fsync each file, hours for 100,000 runs), and a catalog as a busy store has it."""
    from triage.archive import catalog
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store

    seed = archive_files(root, [str(SEED)])[0]
    store = Store.open(root)
    big, big_file = _big_kernels(store, seed.id, seed.manifest, kernels)
    template = catalog.catalog_row(store, seed.id, seed.manifest, {})
    seeded = datetime.strptime(store.annotations.read(seed.id)["archived"],
                               "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    start = seeded + timedelta(seconds=1)  # the clones are newer: `latest` is the big one
    rows, sources = [], {}
    for index in range(runs):
        manifest = json.loads(json.dumps(seed.manifest))
        manifest["redact_patterns"] = [f"BENCH_CLONE_{index}"]  # part of its identity: its own id
        if index == runs - 1:
            manifest["tables"]["kernels"] = big
        archived = (start + timedelta(seconds=index)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        run_id = _write_run(store, manifest, {"archived": archived, "notes": []})
        _link_tables(store, seed.id, run_id, manifest, big_file, sources)
        rows.append(dict(template, id=run_id, archived=archived, indexed=archived,
                         tables=json.dumps({k: v["sha256"]
                                            for k, v in sorted(manifest["tables"].items())})))
    seed_row = catalog.catalog_row(store, seed.id, seed.manifest,
                                   store.annotations.read(seed.id))
    _write_catalog(store, [seed_row, *rows])


def _link_tables(store, seed: str, run_id: str, manifest: dict, big_file: Path,
                 sources: dict[str, Path]) -> None:
    """The clone's tables at its own keys: hard links to the seed's files (or the big one).
    A file system caps a file's links (ext4: 65,000), so at the cap the clone gets a copy,
    which the next clones link to (`sources`: the file each table's hash links to now)."""
    for name, ref in manifest["tables"].items():
        target = store.root / store.tables.key(run_id, name, ref["sha256"])
        target.parent.mkdir(parents=True, exist_ok=True)
        seeded = store.root / store.tables.key(seed, name, ref["sha256"])
        source = sources.setdefault(ref["sha256"], seeded if seeded.exists() else big_file)
        try:
            os.link(source, target)
        except OSError as exc:
            if exc.errno != errno.EMLINK:
                raise
            shutil.copyfile(source, target)
            sources[ref["sha256"]] = target


def _write_run(store, manifest: dict, annotations: dict) -> str:
    from triage.archive.canonical import SEAL, canonical_json, seal_of
    from triage.archive.run_manifests import manifest_file

    run_id, data = manifest_file(manifest)
    store.runs.path(run_id).write_bytes(data)
    sealed = {**annotations, SEAL: seal_of(annotations)}
    store.annotations.path(run_id).write_bytes(canonical_json(sealed))
    return run_id


def _write_catalog(store, rows: list[dict]) -> None:
    """One merged segment, MERGE_ABOVE one-run segments after it, three of them runs indexed
    again with a note."""
    import pyarrow as pa

    from triage.archive import catalog
    from triage.schemas.tables import arrow_schema

    shutil.rmtree(store.root / "index", ignore_errors=True)
    tail = catalog.MERGE_ABOVE - 3
    catalog._write_segment(store, pa.Table.from_pylist(rows[:-tail],
                                                       schema=arrow_schema("catalog")),
                           merged=True)
    reindexed = [dict(row, notes="a note added later", indexed=row["indexed"] + "1")
                 for row in rows[1:4]]
    for row in rows[-tail:] + reindexed:
        catalog._write_segment(store, pa.Table.from_pylist([row], schema=arrow_schema("catalog")))


def _big_kernels(store, seed: str, manifest: dict, count: int) -> tuple[dict, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from triage.archive.tables import table_options

    table = pq.read_table(store.root / store.tables.key(seed, "kernels",
                                                        manifest["tables"]["kernels"]["sha256"]))
    repeats = -(-count // table.num_rows)
    big = pa.concat_tables([table] * repeats).slice(0, count)
    big = big.set_column(1, "kernel_index", pa.array(range(count), type=pa.int64()))
    # a temp file to verify, linked from the biggest run's key
    path = store.root / "objects" / ".tmp-bench-kernels.parquet"
    pq.write_table(big, path, **table_options(big.schema))
    sha, size = store.objects.stage_temp(path).sha256, path.stat().st_size
    return {"sha256": sha, "rows": count, "bytes": size}, path


def stores(folder: Path, sizes: list[int], kernels: int) -> dict[int, Path]:
    """A built store per size under `folder`, reusing one a previous call left there."""
    out = {}
    for size in sizes:
        root = folder / f"store-{size}"
        if not root.is_dir():  # built under another name first: a half-built one is not reused
            partial = folder / f"building-{size}"
            shutil.rmtree(partial, ignore_errors=True)
            start = time.perf_counter()
            build_store(partial, size, kernels)
            partial.rename(root)
            print(f"built {size:,} runs in {time.perf_counter() - start:.0f} s", flush=True)
        out[size] = root
    return out


@contextlib.contextmanager
def baseline_package(commit: str | None) -> Iterator[str | None]:
    """A PYTHONPATH under which `import triage` is the triage of `commit` (a temporary git
    worktree, laid out as the package), or None for this checkout."""
    if commit is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="triage-baseline-"))
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree),
                    commit], check=True)
    compile_sources(tree)
    try:
        package = folder / "path" / "triage"
        package.mkdir(parents=True)
        for path in (tree / "triage").iterdir():
            (package / path.name).symlink_to(path)
        for name in SUBPACKAGES:
            (package / name).symlink_to(tree / name)
        yield str(folder / "path")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                       check=False)
        shutil.rmtree(folder, ignore_errors=True)


def timed(argv: list[str], env: dict) -> tuple[float, int]:
    """Seconds and peak RSS (MB) of one fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed with exit {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_maxrss // 1024


def prefix_of(run_id: str, ids: list[str]) -> str:
    """The shortest prefix of 8+ hex digits that names only this run."""
    for length in range(8, 65):
        if sum(other.startswith(run_id[:length]) for other in ids) == 1:
            return run_id[:length]
    return run_id


def checks(root: Path, env: dict, kernels: int) -> dict[str, tuple[list[str], float | None]]:
    """The commands timed, each with its target (None: shown, not judged)."""
    ids = sorted(n[:-5] for n in os.listdir(root / "runs"))
    triage = [sys.executable, "-m", "triage"]
    header = subprocess.run(triage + ["query", "select * from runs limit 0", "--csv"], env=env,
                            check=True, capture_output=True, text=True).stdout
    key = "run_id" if "run_id" in header.split("\n")[0].split(",") else "id"
    first, second = ids[len(ids) // 3], ids[2 * len(ids) // 3]
    return {
        "ls (default page)": (triage + ["ls"], TARGET_S),
        "show latest": (triage + ["show", "latest"], TARGET_S),
        "query: kernel time per GPU, all runs": (triage + [
            "query", "select gpu, count(*) runs, sum(k.total_ns) total from runs r "
            f"join kernel_summary k on k.run_id = r.{key} group by gpu"], TARGET_S),
        "diff PREFIX PREFIX": (triage + ["diff", prefix_of(first, ids), prefix_of(second, ids)],
                               TARGET_S),
        "ls --json (every run)": (triage + ["ls", "--json"] + _every(env), None),
        f"query: the {kernels:,}-kernel run": (triage + [
            "query", "select name, count(*), avg(duration_ns) from kernels group by name",
            "--run", "latest"], None),
    }


def _every(env: dict) -> list[str]:
    """`ls --json` lists every run by itself, with or without this change's `-n`."""
    help_text = subprocess.run([sys.executable, "-m", "triage", "ls", "--help"], env=env,
                               check=True, capture_output=True, text=True).stdout
    return ["-n", "all"] if "\n  -n " in help_text else []


def measure(roots: dict[int, Path], sides: dict[str, str | None], rounds: int,
            kernels: int) -> dict[tuple[str, str, int], list[tuple[float, int]]]:
    """Every check on every store by every side, interleaved, `rounds` times."""
    plans = {}
    for side, path in sides.items():
        for size, root in roots.items():
            env = dict(os.environ, TRIAGE_STORE=str(root), COLUMNS="150")
            if path is not None:
                env["PYTHONPATH"] = path
            plans[side, size] = (env, checks(root, env, kernels))
    times: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
    for _round in range(rounds):
        for (side, size), (env, plan) in plans.items():
            for name, (argv, _target) in plan.items():
                times.setdefault((name, side, size), []).append(timed(argv, env))
    return times


def report(times, names: dict[str, float | None], sides: list[str], sizes: list[int]) -> None:
    """Min and median per check, side and store; the target and the growth per run."""
    big = sizes[-1]
    print(f"{'check':<38} {'side':<9} " + "  ".join(f"{s:>7,} runs min/median" for s in sizes)
          + "  growth   peak RSS")
    for name, target in names.items():
        for side in sides:
            runs = {size: [t for t, _rss in times[name, side, size]] for size in sizes}
            cells = "  ".join(f"{min(runs[s]):9.3f} /{statistics.median(runs[s]):6.3f} s"
                              for s in sizes)
            growth = (statistics.median(runs[big]) - statistics.median(runs[sizes[0]])) / \
                max(big - sizes[0], 1) * 1e6
            rss = max(r for _t, r in times[name, side, big])
            print(f"{name:<38} {side:<9} {cells}  {growth:5.2f} us  {rss:5d} MB")
        if target is not None:
            print(f"{'':<38} target: <= {target} s at {big:,} runs, <= {TARGET_GROWTH_US} us/run "
                  "growth")


def load() -> str:
    return "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--kernels", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="COMMIT",
                        help="also time the triage of this commit, side by side")
    parser.add_argument("--stores", type=Path, help="keep (and reuse) the built stores here")
    args = parser.parse_args()
    compile_sources()
    folder = (args.stores or Path(tempfile.mkdtemp(prefix="triage-bench-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)  # not a checkout: `python -m triage` there would import its triage/
    sizes = sorted({min(SMALL, args.runs), args.runs})
    roots = stores(folder, sizes, args.kernels)
    with baseline_package(args.baseline) as path:
        sides = {**({args.baseline: path} if args.baseline else {}), "now": None}
        env = dict(os.environ, **({"PYTHONPATH": path} if path else {}))
        for side, side_path in sides.items():
            side_env = dict(env, **({"PYTHONPATH": side_path} if side_path else {}))
            seconds = min(timed([sys.executable, "-c", FLOOR], side_env)[0] for _ in range(5))
            print(f"python start + the imports of `ls` ({side}), best of 5: {seconds:.3f} s")
        print(f"{args.rounds} rounds, {load()}", flush=True)
        times = measure(roots, sides, args.rounds, args.kernels)
        names = {name: target for name, (_argv, target) in
                 checks(roots[sizes[-1]], dict(os.environ, TRIAGE_STORE=str(roots[sizes[-1]])),
                        args.kernels).items()}
    print(f"after: {load()}")
    report(times, names, list(sides), sizes)
    if args.stores is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
