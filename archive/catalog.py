"""The catalog: one row per run in a few Parquet segments under index/, for fast `ls`.

With 10,000 runs, `ls`, `latest` and cross-run queries must not open every manifest. Each archive
adds a small immutable segment (`index/catalog-<sha>.parquet`); when there are many, they are
merged into one. Nothing is locked:

- a segment is written whole (temp + rename) before the segments it replaces are deleted, so a
  reader sees every run at least once; rows are de-duplicated by run id;
- a reader that loses a race with a merge (a listed file vanished) simply lists again;
- the catalog is derived data: reading it reconciles it with `runs/` (one directory listing), so a
  run whose process died between writing its manifest and its segment is indexed on next read,
  and a row without a manifest is never shown;
- an unreadable segment (truncated, overwritten) counts as missing: its runs are indexed again
  from their manifests. It is left in place for `triage verify` to name, and the next merge
  drops it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive import atomic
from triage.archive.store import Store
from triage.archive.tables import PARQUET_OPTIONS, arrow_schema, read_table
from triage.errors import CorruptObject, RunNotFound
from triage.timeutil import utc_now

SEGMENT_PREFIX = "catalog-"
MERGE_ABOVE = 32
READ_ATTEMPTS = 5


def catalog_row(store: Store, run_id: str, manifest: dict, annotations: dict) -> dict:
    """The catalog row of one run, from its manifest, annotations and kernel_summary table."""
    env = manifest.get("environment") or {}
    gpus = env.get("gpus") or []
    settings = manifest.get("settings") or {}
    tables = manifest.get("tables") or {}
    summary = read_table(store, tables.get("kernel_summary"))
    return {
        "id": run_id,
        "tool": manifest.get("tool"),
        "tool_version": manifest.get("tool_version"),
        "created": manifest.get("created"),
        "archived": annotations.get("archived"),
        "indexed": utc_now(precise=True),
        "source": manifest.get("source"),
        "gpu": gpus[0].get("name") if gpus else None,
        "gpu_count": len(gpus),
        "driver_version": env.get("driver_version"),
        "cuda_version": env.get("cuda_version"),
        "host": (env.get("host") or {}).get("name"),
        "command": manifest.get("command"),
        "kernels": manifest.get("kernels"),
        "reports": len(manifest.get("reports") or []),
        "report_names": ",".join(r.get("name", "") for r in manifest.get("reports") or []),
        "clock_control": settings.get("clock_control"),
        "cache_control": settings.get("cache_control"),
        "replay_mode": settings.get("replay_mode"),
        "capture_group": (manifest.get("capture") or {}).get("group"),
        "notes": "\n".join(n["text"] for n in annotations.get("notes", [])) or None,
        "tables": json.dumps({k: v["sha256"] for k, v in sorted(tables.items())}),
        "kernel_summary": summary.to_pylist() if summary is not None else [],
    }


def _segments(store: Store) -> list[Path]:
    try:
        names = os.listdir(store.index)
    except FileNotFoundError:
        return []
    return sorted(store.index / n for n in names
                  if n.startswith(SEGMENT_PREFIX) and n.endswith(".parquet"))


def _write_segment(store: Store, table: pa.Table) -> Path:
    """Write one immutable segment named by the hash of its rows."""
    store.index.mkdir(parents=True, exist_ok=True)
    with atomic.temp_file_in(store.index, ".parquet") as (stream, temp):
        pq.write_table(table, stream, **PARQUET_OPTIONS)
        stream.close()
        sha, _size = atomic.hash_file(temp)
        target = store.index / f"{SEGMENT_PREFIX}{sha}.parquet"
        atomic.publish(temp, target, readonly=False)
    return target


def add_rows(store: Store, rows: list[dict]) -> None:
    """Index new runs; merge the segments when there are many."""
    if rows:
        _write_segment(store, pa.Table.from_pylist(rows, schema=arrow_schema("catalog")))
    if len(_segments(store)) > MERGE_ABOVE:
        merge(store)


def _read_segments(store: Store, columns: list[str] | None = None
                   ) -> tuple[pa.Table, list[Path]]:
    """All segment rows (with duplicates), retrying when a merge removes a listed file."""
    schema = arrow_schema("catalog")
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    for _attempt in range(READ_ATTEMPTS):
        paths = _segments(store)
        try:
            parts = [_read_segment(p, schema) for p in paths]
        except FileNotFoundError:
            continue
        parts = [part for part in parts if part is not None]
        return (pa.concat_tables(parts) if parts else schema.empty_table()), paths
    raise RuntimeError("index segments kept changing while being read")


def _read_segment(path: Path, schema: pa.Schema) -> pa.Table | None:
    """One segment in the current catalog schema (columns added since it was written are null);
    None when it cannot be read, FileNotFoundError when a merge removed it."""
    try:
        source = pq.ParquetFile(path)
        present = [n for n in schema.names if n in source.schema_arrow.names]
        table = source.read(columns=present)
        return _conform(table, present, schema)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError):  # pyarrow reports bad thrift as a bare OSError
        return None


def _conform(table: pa.Table, present: list[str], schema: pa.Schema) -> pa.Table:
    """Older segments lack columns added since: they read as nulls."""
    for field in schema:
        if field.name not in present:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)


def _dedupe(table: pa.Table, visible: set[str]) -> pa.Table:
    """One row per visible run id: the most recently indexed one (notes may have been added)."""
    ids = table.column("id").to_pylist()
    indexed = table.column("indexed").to_pylist()
    newest: dict[str, int] = {}
    for index, (run_id, stamp) in enumerate(zip(ids, indexed)):
        if run_id in visible and (run_id not in newest or (stamp or "") > (
                indexed[newest[run_id]] or "")):
            newest[run_id] = index
    return table.take(pa.array(sorted(newest.values()), type=pa.int64()))


def merge(store: Store) -> None:
    """Replace all current segments by one (write first, then delete)."""
    table, paths = _read_segments(store)
    merged = _dedupe(table, set(store.run_ids()))
    target = _write_segment(store, merged)
    for path in paths:
        if path != target:
            path.unlink(missing_ok=True)


def _index_missing(store: Store, missing: set[str]) -> pa.Table:
    """Catalog rows for runs that have a manifest but no row (their archiver died early, or
    their segment is unreadable). A damaged manifest gets no row: `show` and `verify` say why."""
    rows = []
    for run_id in sorted(missing):
        try:
            manifest = store.read_manifest(run_id)
        except (CorruptObject, RunNotFound):
            continue
        rows.append(catalog_row(store, run_id, manifest, store.read_annotations(run_id)))
    if os.access(store.root, os.W_OK):
        add_rows(store, rows)
    return pa.Table.from_pylist(rows, schema=arrow_schema("catalog"))


def read_catalog(store: Store, columns: list[str] | None = None) -> pa.Table:
    """The catalog, reconciled with the runs on disk: one row per run, oldest archive first.

    `columns` limits what is read (id, archived and indexed are always included).
    """
    if columns is not None:
        columns = list(dict.fromkeys(["id", "archived", "indexed", *columns]))
    visible = set(store.run_ids())
    table, _paths = _read_segments(store, columns)
    missing = visible - set(table.column("id").to_pylist())
    if missing:
        table = pa.concat_tables([table, _index_missing(store, missing).select(table.column_names)])
    table = _dedupe(table, visible)
    keys = list(zip(table.column("archived").to_pylist(), table.column("id").to_pylist()))
    order = sorted(range(len(keys)), key=lambda i: (keys[i][0] or "", keys[i][1]))
    return table.take(pa.array(order, type=pa.int64()))


def segment_digest(path: Path) -> str:
    """sha256 of a segment file (its name carries the same hash; verify compares them)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
