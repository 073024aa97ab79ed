"""`triage query` is read-only by construction (issue 15, items 1 and 2).

Each probe tries to write the store, read outside it, or switch DuckDB's guards back on. It runs
twice on a store of real corpus reports: through the CLI from a hostile working directory (its
`.tmp`, DuckDB's default spill directory, links to `/`), and straight on the sealed connection
with the views built, where no statement check stands in the way. Every probe must fail, and
the store, the working directory and the probe's targets must be byte for byte as they were.
On e554ee4 the EXPLAIN ANALYZE COPY probes replaced a stored table and the catalog, and the
`<cwd>/.tmp` probe printed /etc/passwd. docs/reliability.md quotes the count.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import derive_run, table_file
from triage.archive import catalog, query
from triage.archive.run_manifests import manifest_file
from triage.archive.store import Store
from triage.archive.tables import BATCH_ROWS, PARQUET_OPTIONS
from triage.base.hashing import hash_file

GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
# An Arrow table in the caller's scope: with replacement scans a query could name it.
PRIVATE = pa.table({"secret": ["not a view"]})

PROBES = {
    "COPY over a stored table": "COPY (SELECT 'x' AS x) TO '{table}' (FORMAT csv)",
    "EXPLAIN ANALYZE COPY over a stored table":
        "EXPLAIN ANALYZE COPY (SELECT 'x' AS x) TO '{table}' (FORMAT csv)",
    "EXPLAIN ANALYZE COPY over the catalog":
        "EXPLAIN ANALYZE COPY (SELECT 'forged' AS gpu) TO '{catalog}' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY into the working directory":
        "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO 'out.csv'",
    "EXPORT DATABASE": "EXPORT DATABASE '{cwd}/export'",
    "ATTACH a database file": "ATTACH '{store}/x.db' AS x",
    "INSTALL an extension": "INSTALL httpfs",
    "LOAD an extension file": "LOAD '{cwd}/x.duckdb_extension'",
    "PRAGMA profiling_output": "PRAGMA profiling_output = '{cwd}/profile.json'",
    "SET file access back on": "SET enable_external_access = true",
    "SET the spill directory into the store": "SET temp_directory = '{store}'",
    "RESET the configuration lock": "RESET lock_configuration",
    "CREATE PERSISTENT SECRET (a file under ~)":
        "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
    "read_text, absolute path": "SELECT * FROM read_text('/etc/passwd')",
    "read_text through <cwd>/.tmp linked to /":
        "SELECT content FROM read_text('{cwd}/.tmp/etc/passwd')",
    "read_csv, relative path through .tmp": "SELECT * FROM read_csv('.tmp/etc/passwd')",
    "read_blob of a stored table": "SELECT * FROM read_blob('{table}')",
    "read_parquet of the catalog through a symlink":
        "SELECT * FROM read_parquet('{cwd}/store/index/*.parquet')",
    "glob with ..": "SELECT * FROM glob('{store}/objects/../index/*')",
    "read_text out of the spill directory by ..":
        "SELECT * FROM read_text(current_setting('temp_directory') || '/../../etc/passwd')",
    "file:// URL": "SELECT * FROM read_text('file:///etc/passwd')",
    "CTE": "WITH t AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM t",
    "subquery beside a view": "SELECT (SELECT count(*) FROM read_blob('{table}')) n FROM runs",
    "two statements": "SELECT 1; COPY (SELECT 1 AS x) TO '{cwd}/two.csv'",
    "prepared statement": "PREPARE p AS SELECT * FROM read_text($1); EXECUTE p('/etc/passwd')",
    "a Python variable by name": "SELECT * FROM PRIVATE",
}


@pytest.fixture
def runs(triage: Any, archived: Any) -> list[str]:
    return archived(*((n,) for n in GEMM))


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_dir: Path,
            runs: list[str]) -> Path:
    """A working directory whose `.tmp` links to / and whose `store` links to the store."""
    cwd = tmp_path / "hostile"
    cwd.mkdir()
    (cwd / ".tmp").symlink_to("/")
    (cwd / "store").symlink_to(store_dir)
    monkeypatch.chdir(cwd)
    return cwd


def snapshot(*roots: Path) -> dict[str, tuple[str, int]]:
    """Every file and link under the roots (links not followed): its hash or target, and mode."""
    entries: dict[str, tuple[str, int]] = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(folder, name)
                if path.is_symlink():
                    entries[str(path)] = (os.readlink(path), 0)
                elif path.is_file():
                    entries[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(),
                                          path.stat().st_mode)
    return entries


def probe_sql(template: str, store_dir: Path, cwd: Path) -> str:
    store = Store.open(store_dir)
    found = catalog.scan_unordered(store).table
    tables = json.loads(found.column("tables")[0].as_py())
    run_id = found.column("id")[0].as_py()
    table = store.root / store.tables.key(run_id, "kernels", tables["kernels"])
    return template.format(table=table, cwd=cwd, store=store_dir,
                           catalog=store.root / catalog.segments(store)[0])


@pytest.mark.parametrize("name", PROBES)
def test_probe_fails_through_the_cli(triage: Any, store_dir: Path, hostile: Path,
                                     name: str) -> None:
    sql = probe_sql(PROBES[name], store_dir, hostile)
    before = snapshot(store_dir, hostile)
    result = triage("query", sql, expect=None)
    assert result.exit_code in (1, 2), (sql, result.output)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "root:" not in result.output
    assert snapshot(store_dir, hostile) == before


@pytest.mark.parametrize("name", PROBES)
def test_probe_fails_on_the_sealed_connection(store_dir: Path, hostile: Path, name: str) -> None:
    """No statement check here: the connection itself refuses."""
    sql = probe_sql(PROBES[name], store_dir, hostile)
    before = snapshot(store_dir, hostile)
    with query.sealed_connection() as con:
        query.build_views(con, Store.open(store_dir), sql)
        with pytest.raises(duckdb.Error):
            con.execute(sql).fetchall()
    assert snapshot(store_dir, hostile) == before


def test_views_still_answer_from_a_hostile_cwd(triage: Any, runs: list[str], hostile: Path
                                               ) -> None:
    rows = triage.json("query", "select r.id, count(*) n, max(k.run_id) = r.id same from runs r "
                       "join kernels k on k.run_id = r.id group by r.id order by r.id")
    assert [(r["id"], r["same"]) for r in rows] == [(i, True) for i in sorted(runs)]
    one = triage.json("query", "select distinct run_id from metrics", "--run", runs[1])
    assert one == [{"run_id": runs[1]}]


def test_spill_directory_is_private_and_removed(triage: Any, runs: list[str], hostile: Path
                                                ) -> None:
    """DuckDB's default, `.tmp` in the working directory, is where the planted link waits."""
    spill = triage.json("query", "select current_setting('temp_directory') d")[0]["d"]
    assert Path(spill).parent == Path(tempfile.gettempdir()) and not Path(spill).exists()


def test_limit_reads_a_row_group_not_the_run(store_dir: Path, runs: list[str]) -> None:
    """A LIMIT 10 over a run of 1,000,000 kernels (derived from a real report, in the row groups
    triage writes) decodes a few row groups, not the table: Arrow's peak, in a fresh process.
    Reading ahead (e554ee4) decodes the whole table; how many row groups are in flight depends
    on DuckDB's threads (69-72 MB of 286 MB measured), so the bound is half the table."""
    run_id, path = derived_run(Store.open(store_dir), runs[0], 1_000_000)
    measure = ("import sys, pyarrow as pa; from triage.archive import query; "
               "from triage.archive.store import Store; "
               "table = query.run_query(Store.open(sys.argv[1]), sys.argv[2], [sys.argv[3]]); "
               "print(table.num_rows, pa.default_memory_pool().max_memory())")
    sql = "select * from kernels limit 10"
    done = subprocess.run([sys.executable, "-c", measure, str(store_dir), sql, run_id],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows, peak = map(int, done.stdout.split())
    whole = pq.read_table(path).nbytes
    assert rows == 10 and peak < whole / 2, (peak, whole)


def derived_run(store: Store, seed: str, kernels: int) -> tuple[str, Path]:
    """A run like `seed` whose kernels table repeats the real rows `kernels` times over."""
    manifest = store.runs.read_manifest(seed)
    real = pq.read_table(table_file(store.root, seed, "kernels"))
    big = real.take(pa.array([i % real.num_rows for i in range(kernels)]))
    big = big.set_column(big.schema.get_field_index("kernel_index"), "kernel_index",
                         pa.array(range(kernels), pa.int64()))
    temp = store.root / "objects" / "derived-kernels.parquet"
    pq.write_table(big, temp, row_group_size=BATCH_ROWS, **PARQUET_OPTIONS)
    sha, size = hash_file(temp)
    manifest["tables"]["kernels"] = {"sha256": sha, "rows": kernels, "bytes": size}
    manifest["redact_patterns"] = [*manifest.get("redact_patterns", []), "DERIVED"]  # its own id
    run_id = manifest_file(manifest)[0]
    store.objects.publish(store.objects.stage_temp(temp), store.tables.key(run_id, "kernels", sha))
    derive_run(store, seed, manifest)
    annotations = store.annotations.annotate(run_id, "2026-01-02T00:00:00Z", None)
    catalog.add_rows(store, [catalog.catalog_row(store, run_id, manifest, annotations)])
    return run_id, table_file(store.root, run_id, "kernels")
