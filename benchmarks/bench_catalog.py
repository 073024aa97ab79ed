"""Benchmark: `ls`, `latest` and cross-run queries on a team-sized store (10,000 runs).

The store is built by code from one real archived corpus report: its manifest is cloned with a
distinct note-like field per run (so each clone has its own id), and one clone's kernels table
is blown up to 100,000 rows by repeating the real rows. Every command is then timed end to end as
a subprocess (Python start-up included), side by side with the cost of opening every manifest,
which is what `ls` would cost without the catalog.

    python benchmarks/bench_catalog.py [--runs 10000] [--kernels 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ncu"
SEED = CORPUS / "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"


def build_store(root: Path, runs: int, kernels: int) -> None:
    from triage.archive import catalog
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store
    from triage.archive.tables import PARQUET_OPTIONS

    seed = archive_files(root, [str(SEED)])[0]
    store = Store.open(root)
    big = _big_kernels(store, seed.manifest, kernels, PARQUET_OPTIONS)
    rows = []
    for index in range(runs):
        manifest = json.loads(json.dumps(seed.manifest))
        manifest["extractor"]["clone"] = index
        if index == runs - 1:
            manifest["tables"]["kernels"] = big
        run_id = store.write_manifest(manifest)
        annotations = store.annotate(run_id, f"2026-01-01T00:00:{index % 60:02d}.{index:06d}Z",
                                     None)
        rows.append(catalog.catalog_row(store, run_id, manifest, annotations))
        if len(rows) == 500:
            catalog.add_rows(store, rows)
            rows = []
    catalog.add_rows(store, rows)


def _big_kernels(store, manifest: dict, count: int, options: dict) -> dict:
    table = pq.read_table(store.object_path(manifest["tables"]["kernels"]["sha256"]))
    repeats = -(-count // table.num_rows)
    big = pa.concat_tables([table] * repeats).slice(0, count)
    big = big.set_column(1, "kernel_index", pa.array(range(count), type=pa.int64()))
    path = store.objects / "bench-kernels.parquet"
    pq.write_table(big, path, **options)
    sha, size = store.adopt_temp(path)
    return {"sha256": sha, "rows": count, "bytes": size}


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def open_every_manifest(root: Path) -> float:
    start = time.perf_counter()
    for path in (root / "runs").iterdir():
        json.loads(path.read_bytes())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--kernels", type=int, default=100000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="triage-bench-")) / "store"
    start = time.perf_counter()
    build_store(root, args.runs, args.kernels)
    print(f"built {args.runs:,} runs in {time.perf_counter() - start:.1f} s")
    env = dict(os.environ, TRIAGE_STORE=str(root))
    triage = [sys.executable, "-m", "triage"]
    baseline = timed([sys.executable, "-c", "import triage.cli"], env)
    checks = {
        "triage ls --json": triage + ["ls", "--json"],
        "triage show latest": triage + ["show", "latest"],
        "query: kernel time per GPU over all runs": triage + [
            "query", "select gpu, count(*) runs, sum(k.total_ns) total from runs r "
            "join kernel_summary k on k.run_id = r.id group by gpu"],
        f"query: {args.kernels:,}-kernel run": triage + [
            "query", "select name, count(*), avg(duration_ns) from kernels group by name",
            "--run", "latest"],
    }
    print(f"python start + import triage.cli        {baseline:6.2f} s")
    for label, argv in checks.items():
        print(f"{label:<40} {timed(argv, env):6.2f} s  (target < 1 s)")
    print(f"opening every manifest (no catalog)     {open_every_manifest(root):6.2f} s")


if __name__ == "__main__":
    main()
