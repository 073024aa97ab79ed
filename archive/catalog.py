"""The catalog: one row per run in a few Parquet segments under index/, for fast `ls`.

With 10,000 runs, `ls`, `latest` and cross-run queries must not open every manifest. Each archive
adds a small immutable segment (`index/catalog-<sha>.parquet`); when there are many, they are
merged into one. Nothing is locked:

- a segment is written whole (temp + rename) before the segments it replaces are deleted, so a
  reader sees every run at least once; rows are de-duplicated by run id;
- a reader that loses a race with a merge (a listed file vanished) skips it and lists again
  for the merged segment; it never fails for losing such races (`_read_segments`);
- the catalog is derived data: reading it reconciles it with `runs/` (one directory listing), so a
  run whose process died between writing its manifest and its segment is indexed on next read,
  and a row without a manifest is never shown;
- an unreadable segment (truncated, overwritten) counts as missing: its runs are indexed again
  from their manifests. It is left in place for `triage verify` to name, and the next merge
  drops it;
- a run that cannot be indexed whole is listed as far as it can be, and named: one whose
  manifest is damaged gets no row, one whose kernel_summary table is missing or damaged a row
  without its kernel ranking (not written to a segment, so a repaired run is indexed whole).
  `scan` returns those problems beside the rows; no run's damage fails the listing of others.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive import atomic, lease
from triage.archive.store import Store, run_id_of
from triage.archive.tables import PARQUET_OPTIONS, conform, read_table
from triage.errors import CorruptObject, RunNotFound
from triage.hashing import hash_file
from triage.schemas.tables import arrow_schema
from triage.timeutil import utc_now

if TYPE_CHECKING:  # imported where a row is made: `ls` reads rows and needs no model
    from triage.archive.model import RunRecord

SEGMENT_PREFIX = "catalog-"
MERGE_ABOVE = 32
READ_ATTEMPTS = 5


@dataclass(frozen=True)
class Catalog:
    """The catalog as read: one row per run, and one line per run it could index only in part
    (naming the damaged file and what to do)."""

    table: pa.Table
    problems: tuple[str, ...] = ()


def catalog_row(store: Store, run_id: str, manifest: dict, annotations: dict) -> dict:
    """The catalog row of one run, from its manifest, annotations and kernel_summary table."""
    from triage.archive.model import RunRecord

    record = RunRecord.from_manifest(run_id, manifest, annotations)
    summary = record.tables.get("kernel_summary")
    rows = read_table(store, run_id, "kernel_summary", summary.sha256) \
        if summary is not None else None
    return _row(record, rows.to_pylist() if rows is not None else [])


def _row(record: RunRecord, kernel_summary: list[dict]) -> dict:
    env = record.environment
    return {
        "id": record.id,
        "tool": record.tool,
        "tool_version": record.tool_version,
        "created": record.created,
        "archived": record.archived,
        "indexed": utc_now(precise=True),
        "source": record.source,
        "gpu": record.gpu_name,
        "gpu_count": len(env.gpus),
        "driver_version": env.driver_version,
        "cuda_version": env.cuda_version,
        "host": env.host.name,
        "command": record.command,
        "kernels": record.kernels,
        "reports": len(record.reports),
        "report_names": ",".join(r.name for r in record.reports),
        "clock_control": record.setting("clock_control"),
        "cache_control": record.setting("cache_control"),
        "replay_mode": record.setting("replay_mode"),
        "capture_group": record.capture.group if record.capture is not None else None,
        "notes": "\n".join(n.text for n in record.notes) or None,
        "tables": json.dumps({k: v.sha256 for k, v in sorted(record.tables.items())}),
        "kernel_summary": kernel_summary,
    }


def segments(store: Store) -> list[str]:
    """The keys of the catalog's segments, sorted: the one listing rule (verify checks their
    names)."""
    return sorted(f"index/{n}" for n in store.files.names("index")
                  if n.startswith(SEGMENT_PREFIX) and n.endswith(".parquet"))


def segment_sha(key: str) -> str:
    """The hash a segment's name carries (of its bytes)."""
    return key.rsplit("/", 1)[-1][len(SEGMENT_PREFIX):-len(".parquet")]


def _write_segment(store: Store, table: pa.Table) -> str:
    """Write one immutable segment named by the hash of its rows."""
    with atomic.temp_file_in(store.files.temp_folder("index"), ".parquet") as (stream, temp):
        pq.write_table(table, stream, **PARQUET_OPTIONS)
        stream.close()
        sha, _size = hash_file(temp)
        target = f"index/{SEGMENT_PREFIX}{sha}.parquet"
        store.files.publish(temp, target, readonly=False, cache_as=sha)  # a merge reads it
    return target


def add_rows(store: Store, rows: list[dict]) -> None:
    """Index new runs; merge the segments when there are many. Under a lease: a segment's temp
    file is a leftover to `triage gc` until it is renamed (lease.py)."""
    if not rows and len(segments(store)) <= MERGE_ABOVE:
        return
    with lease.held(store, "catalog"):
        if rows:
            _write_segment(store, pa.Table.from_pylist(rows, schema=arrow_schema("catalog")))
        if len(segments(store)) > MERGE_ABOVE:
            merge(store)


def _read_segments(store: Store, columns: list[str] | None = None
                   ) -> tuple[pa.Table, list[str]]:
    """All segment rows (with duplicates) and the files they came from.

    A file that a merge removed between listing and reading is skipped: the merge wrote its rows
    into a new segment first, so listing again finds them. Eight writers merging on a loaded
    machine can keep that up for a while, so after READ_ATTEMPTS listings the rows read so far
    are returned rather than failing: `scan` indexes any run they miss from its manifest
    (slower, never wrong), and a merge deletes only the files it read.
    """
    schema = arrow_schema("catalog")
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    parts: dict[str, pa.Table | None] = {}
    for _attempt in range(READ_ATTEMPTS):
        vanished = False
        for key in segments(store):
            if key in parts:
                continue
            try:
                parts[key] = _read_segment(store.local_copy(key, segment_sha(key)), schema)
            except FileNotFoundError:
                vanished = True
            except CorruptObject:  # a remote segment whose bytes are not its name's
                parts[key] = None
        if not vanished:
            break
    tables = _by_first_row([part for part in parts.values() if part is not None and part.num_rows])
    return (pa.concat_tables(tables) if tables else schema.empty_table()), list(parts)


def _by_first_row(tables: list[pa.Table]) -> list[pa.Table]:
    """Segments in the archive order of their first rows: a merge writes its rows oldest
    first and each archive adds newer runs, so the rows usually read in order and a reader of
    every row need not reorder 100,000 of them (`scan`)."""
    if not tables or "archived" not in tables[0].column_names:
        return tables
    return sorted(tables, key=lambda t: (t.column("archived")[0].as_py() or "",
                                         t.column("id")[0].as_py() or ""))


def _read_segment(path: Path, schema: pa.Schema) -> pa.Table | None:
    """One segment in the current catalog schema (columns added since it was written are null);
    None when it cannot be read, FileNotFoundError when a merge removed it."""
    try:
        source = pq.ParquetFile(path)
        stored = set(source.schema_arrow.names)  # a property that builds the schema each time
        present = [n for n in schema.names if n in stored]
        return conform(source.read(columns=present), schema).cast(schema)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError):  # pyarrow reports bad thrift as a bare OSError
        return None


def _reconcile(table: pa.Table, files: list[str]) -> tuple[pa.Table, set[str]]:
    """One row per run that has a manifest among `files` (the names in runs/), and the runs
    that have one but no row.

    One Python dict of the rows' names settles it for 100,000 runs in tens of milliseconds:
    usually the rows name exactly the manifests, once each; otherwise only the few names and
    rows that differ are looked at one by one. (Arrow's hash kernels are quicker in a warm
    process, but a fresh one pays three times the memory in page faults.)"""
    import pyarrow.compute as pc  # only here: appending a segment (archive) needs none

    names = pc.binary_join_element_wise(table.column("id"), ".json", "")
    named = names.to_pylist()
    counts = Counter(named)
    drop = _older_duplicates(table, names, counts) if len(counts) < len(named) else set()
    if len(counts) == len(files) and all(map(counts.__contains__, files)):  # the same names
        return _without(table, drop), set()
    listed = set(files)
    drop |= _positions(names, counts.keys() - listed)  # no manifest: never shown
    missing = {run_id for run_id in map(run_id_of, listed - counts.keys()) if run_id}
    return _without(table, drop), missing


def _older_duplicates(table: pa.Table, names: pa.ChunkedArray, counts: Counter) -> set[int]:
    """The rows to drop so that one row per run is left: the most recently indexed (notes may
    have been added); of rows indexed at the same time, the first read."""
    positions = sorted(_positions(names, {name for name, n in counts.items() if n > 1}))
    rows = table.select(["id", "indexed"]).take(pa.array(positions, type=pa.int64()))
    newest: dict[str, tuple[str, int]] = {}
    for position, row in zip(positions, rows.to_pylist(), strict=True):
        stamp = row["indexed"] or ""
        if row["id"] not in newest or stamp > newest[row["id"]][0]:
            newest[row["id"]] = (stamp, position)
    return set(positions) - {position for _stamp, position in newest.values()}


def _positions(names: pa.ChunkedArray, wanted: set) -> set[int]:
    """Where the few `wanted` names are among 100,000 (a small value set is quick to hash)."""
    if not wanted:
        return set()
    import pyarrow.compute as pc

    found = pc.is_in(names, value_set=pa.array(list(wanted), type=pa.string()))
    return set(pc.indices_nonzero(found).to_pylist())


def _without(table: pa.Table, drop: set[int]) -> pa.Table:
    """The table less the few rows at `drop`: slices between them, no row copied."""
    if not drop:
        return table
    pieces, start = [], 0
    for position in sorted(drop):
        pieces.append(table.slice(start, position - start))
        start = position + 1
    return pa.concat_tables([*pieces, table.slice(start)])


def oldest_first(table: pa.Table) -> pa.Array:
    """The order of the rows by archive time, then id; a run of unknown archive time first."""
    import pyarrow.compute as pc

    return pc.sort_indices(table, sort_keys=[("archived", "ascending", "at_start"),
                                             ("id", "ascending", "at_start")])


def merge(store: Store) -> None:
    """Replace all current segments by one (write first, then delete), oldest archive first.

    runs/ is listed after the segments are read: every row read then finds its manifest (a
    manifest is written before its row), so no row of a run archived meanwhile is dropped with
    the segment that held it."""
    table, keys = _read_segments(store)
    rows = _reconcile(table, store.run_files())[0]
    merged = rows.take(oldest_first(rows))
    target = _write_segment(store, merged)
    for key in keys:
        if key != target:
            store.files.delete(key)


def _index_missing(store: Store, missing: set[str]) -> Catalog:
    """Catalog rows for runs that have a manifest but no row (their archiver died early, or
    their segment is unreadable), and what stopped some being indexed whole."""
    from triage.archive.model import RunRecord

    rows, partial, problems = [], [], []
    for run_id in sorted(missing):
        try:
            manifest = store.read_manifest(run_id)
        except RunNotFound:
            continue  # removed since the listing
        except CorruptObject as exc:
            problems.append(str(exc))
            continue
        annotations = store.read_annotations(run_id)
        try:
            rows.append(catalog_row(store, run_id, manifest, annotations))
        except (OSError, pa.ArrowException) as exc:  # pyarrow: FileNotFoundError, ArrowInvalid
            partial.append(_row(RunRecord.from_manifest(run_id, manifest, annotations), []))
            problems.append(_summary_problem(store, run_id, manifest, exc))
    if store.writable():
        add_rows(store, rows)
    return Catalog(pa.Table.from_pylist(rows + partial, schema=arrow_schema("catalog")),
                   tuple(problems))


def _summary_problem(store: Store, run_id: str, manifest: dict, exc: Exception) -> str:
    sha = manifest["tables"]["kernel_summary"]["sha256"]
    where = store.table_key(run_id, "kernel_summary", sha)
    state = "missing" if isinstance(exc, FileNotFoundError) else "damaged"
    return (f"run {run_id[:12]}: its kernel_summary table {where} is {state}, so it is listed "
            "without its kernel ranking; `triage verify` lists what is damaged")


def scan(store: Store, columns: list[str] | None = None) -> Catalog:
    """The catalog, reconciled with the runs on disk: one row per run, oldest archive first,
    with the problems of runs that could be indexed only in part.

    `columns` limits what is read (id, archived and indexed are always included).
    """
    found = scan_unordered(store, columns)
    order = oldest_first(found.table)
    if order.equals(pa.array(range(len(order)), type=order.type)):  # read in order
        return found
    return Catalog(found.table.take(order), found.problems)


def scan_unordered(store: Store, columns: list[str] | None = None) -> Catalog:
    """`scan` in no particular order: a reader that wants a few rows of 100,000 (the newest
    page, `latest`) orders them by `oldest_first` and takes those alone."""
    if columns is not None:
        columns = list(dict.fromkeys(["id", "archived", "indexed", *columns]))
    files = store.run_files()  # before the segments: a run archived meanwhile waits a read
    table, _paths = _read_segments(store, columns)
    table, missing = _reconcile(table, files)
    if not missing:
        return Catalog(table)
    found = _index_missing(store, missing)
    return Catalog(pa.concat_tables([table, found.table.select(table.column_names)]),
                   found.problems)


def read_catalog(store: Store, columns: list[str] | None = None) -> pa.Table:
    """The catalog's rows alone (see `scan`), for readers that do not list problems."""
    return scan(store, columns).table


def segment_digest(store: Store, key: str) -> str:
    """sha256 of a segment file (its name carries the same hash; verify compares them)."""
    return hashlib.sha256(store.files.read(key)).hexdigest()
