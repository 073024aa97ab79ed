"""The catalog: one row per run in a few Parquet segments under index/, for fast `ls`.

With 10,000 runs, `ls`, `latest` and cross-run queries must not open every manifest. Each archive
adds a small immutable segment (`index/catalog-<sha>.parquet`); when there are many, they are
merged into one. Nothing is locked:

- a segment is written whole (temp + rename) before the segments it replaces are deleted, so a
  reader sees every run at least once; rows are de-duplicated by run id;
- a reader that loses a race with a merge (a listed file vanished) skips it and lists again
  for the merged segment; it never fails for losing such races (`_read_segments`);
- a merge writes one row per run, oldest archive first, with an index of its ids, so a reader
  pages it from its end and merges in only the few segments written since (catalogview.py);
- the catalog is derived data, reconciled with `runs/` (one directory listing) whenever a row
  may be missing: while a lease shows a writer at work (or one that died: gc indexes its runs
  before removing its lease), after an unreadable segment, or before the first merge. So a run
  whose process died between writing its manifest and its segment is indexed on next read, and
  a row without a manifest is not shown; a merge indexes whatever else has no row;
- an unreadable segment (truncated, overwritten) counts as missing: its runs are indexed again
  from their manifests. It is left in place for `triage verify` to name, and the next merge
  drops it;
- a run that cannot be indexed whole is listed as far as it can be, and named: one whose
  manifest is damaged gets no row, one whose kernel_summary table is missing or damaged a row
  without its kernel ranking (not written to a segment, so a repaired run is indexed whole).
  `scan` returns those problems beside the rows; no run's damage fails the listing of others;
- every segment carries the version of its rows (VERSION; a merge's is the oldest of what it
  merged). A column added to the catalog reads as null in rows written before it (their
  manifests hold the value): a reader that selects runs by such a column (`diff inv:NAME`)
  refuses a catalog holding older rows (`require_current`) rather than miss runs, and `triage
  migrate` indexes runs/ afresh; re-indexing on read would open every manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive import atomic, lease
from triage.archive.store import Store
from triage.archive.catalogview import (IDS, Segments, View, catalog_schema, ids_index,
                                       interleaved, order_of, read_conformed, reconcile,
                                       take_rows)
from triage.archive.tables import PARQUET_OPTIONS, read_table
from triage.base.errors import CorruptObject, RunNotFound, StoreError
from triage.base.hashing import hash_file
from triage.schemas.tables import arrow_schema
from triage.base.timeutil import utc_now

if TYPE_CHECKING:  # imported where a row is made: `ls` reads rows and needs no model
    from triage.archive.model import RunRecord

SEGMENT_PREFIX = "catalog-"
MERGE_ABOVE = 32
READ_ATTEMPTS = 5
MERGED = b"triage.merged"  # metadata of a merged segment: one row per run, oldest archive first
UNINDEXED = b"triage.unindexed"  # a merged segment's: the runs it lacks a row of, comma-separated
MERGED_ROWS = 2048  # a merged segment's row group: the most `ls` of the newest page reads
VERSION = b"triage.catalog_version"  # every segment's: the version of the rows it holds
CATALOG_VERSION = 2  # 2: rows hold rerun_of and investigation; 1 (unmarked): null in some rows


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
        "rerun_of": record.capture.rerun_of if record.capture is not None else None,
        "investigation": record.capture.investigation if record.capture is not None else None,
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


def _write_segment(store: Store, table: pa.Table, merged: bool = False,
                   unindexed: frozenset[str] = frozenset(),
                   version: int = CATALOG_VERSION) -> str:
    """Write one immutable segment named by the hash of its rows. A merge's is marked MERGED,
    carries its IDS index and is cut in row groups of MERGED_ROWS, so that a reader pages
    through it from its end and finds a run in it without reading its ids; it names the runs
    it has no row of though they have a manifest (`unindexed`), which a reader that trusts it
    would otherwise never list."""
    with atomic.temp_file_in(store.files.temp_folder("index"), ".parquet") as (stream, temp):
        with pq.ParquetWriter(stream, table.schema, **PARQUET_OPTIONS) as writer:
            writer.write_table(table, row_group_size=MERGED_ROWS if merged else None)
            marks = {VERSION: str(version).encode()}
            if merged:
                index = ids_index(table)
                named = ",".join(sorted(unindexed)).encode()
                marks.update({MERGED: b"1", **({IDS: index} if index else {}),
                              **({UNINDEXED: named} if named else {})})
            writer.add_key_value_metadata(marks)
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


def _read_segments(store: Store, schema: pa.Schema, listed: list[str] | None = None
                   ) -> tuple[Segments, list[str]]:
    """Every segment's rows (with duplicates), the merged ones left open, and the files they
    came from (`Segments.whole`: each of them read); `listed`: the caller's listing of them
    just now, the first attempt's (on S3 a listing is a request).

    A file that a merge removed between listing and reading is skipped: the merge wrote its rows
    into a new segment first, so listing again finds them. Eight writers merging on a loaded
    machine can keep that up for a while, so after READ_ATTEMPTS listings the rows read so far
    are returned rather than failing: the reader indexes any run they miss from its manifest
    (slower, never wrong), and a merge deletes only the files it read.
    """
    parts: dict[str, pa.Table | tuple[Path, pq.ParquetFile] | None] = {}
    for attempt in range(READ_ATTEMPTS):
        vanished = False
        for key in listed if listed is not None and not attempt else segments(store):
            if key in parts:
                continue
            try:
                parts[key] = read_segment(store.objects.local_copy(key, segment_sha(key)), schema)
            except FileNotFoundError:
                vanished = True
            except CorruptObject:  # a remote segment whose bytes are not its name's
                parts[key] = None
        if not vanished:
            break
    found = Segments.of([part for part in parts.values() if part is not None], schema)
    whole = not vanished and None not in parts.values()
    return dataclasses.replace(found, whole=whole), list(parts)


def read_segment(path: Path, schema: pa.Schema) -> pa.Table | tuple[Path, pq.ParquetFile] | None:
    """One segment: a merged one (MERGED) open, to be read a row group at a time; any other
    read whole in the current catalog schema (columns added since it was written are null).
    None when it cannot be read, FileNotFoundError when a merge removed it."""
    try:
        source = pq.ParquetFile(path)
        if MERGED in (source.metadata.metadata or {}):
            return path, source
        return read_conformed(source, schema)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError):  # pyarrow reports bad thrift as a bare OSError
        return None


def merge(store: Store) -> None:
    """Replace all current segments by one (write first, then delete), oldest archive first,
    one row per run, with the runs that had a manifest and no row: readers page through it and
    merge only the segments written since.

    runs/ is listed after the segments are read: every row read then finds its manifest (a
    manifest is written before its row), so no row of a run archived meanwhile is dropped with
    the segment that held it."""
    found, keys = _read_segments(store, catalog_schema(None))
    # never newer than this triage writes: a newer one's columns were read away just now
    version = min([CATALOG_VERSION, *(segment_version(store, key) for key in keys)])
    view = reconcile(found, store.runs.file_names())
    table, unindexed = view.table(), frozenset[str]()
    if view.missing:
        indexed = _index_rows(store, view.missing)
        rows = pa.Table.from_pylist(indexed.rows, schema=found.schema)
        table = interleaved(table, take_rows(rows, order_of(rows)))
        unindexed = indexed.unindexed
    target = _write_segment(store, table, merged=True, unindexed=unindexed, version=version)
    for key in keys:
        if key != target:
            store.files.delete(key)


def _index_missing(store: Store, missing: frozenset[str]) -> Catalog:
    """Catalog rows for runs that have a manifest but no row (their archiver died early, or
    their segment is unreadable), written to a segment if the store is writable, and what
    stopped some being indexed whole."""
    indexed = _index_rows(store, missing)
    if store.writable():
        add_rows(store, indexed.rows)
    return Catalog(pa.Table.from_pylist(indexed.rows + indexed.partial,
                                        schema=arrow_schema("catalog")), indexed.problems)


@dataclass(frozen=True)
class _Indexed:
    """Runs indexed from their manifests: the whole rows; the rows of runs that can be indexed
    only in part (never written: a repaired run is indexed whole); why; and the ids of every
    run that got no whole row (a merge records them, so that readers of it try them again)."""

    rows: list[dict]
    partial: list[dict]
    problems: tuple[str, ...]
    unindexed: frozenset[str]


def _index_rows(store: Store, missing: frozenset[str]) -> _Indexed:
    """The rows of runs that have a manifest and no row."""
    from triage.archive.model import RunRecord

    rows, partial, problems, unindexed = [], [], [], set()
    for run_id in sorted(missing):
        try:
            manifest = store.runs.read_manifest(run_id)
        except RunNotFound:
            continue  # removed since the listing
        except CorruptObject as exc:
            problems.append(str(exc))
            unindexed.add(run_id)
            continue
        annotations = store.annotations.read(run_id)
        try:
            rows.append(catalog_row(store, run_id, manifest, annotations))
        except (OSError, pa.ArrowException) as exc:  # pyarrow: FileNotFoundError, ArrowInvalid
            partial.append(_row(RunRecord.from_manifest(run_id, manifest, annotations), []))
            problems.append(_summary_problem(store, run_id, manifest, exc))
            unindexed.add(run_id)
    return _Indexed(rows, partial, tuple(problems), frozenset(unindexed))


def _summary_problem(store: Store, run_id: str, manifest: dict, exc: Exception) -> str:
    sha = manifest["tables"]["kernel_summary"]["sha256"]
    where = store.tables.key(run_id, "kernel_summary", sha)
    state = "missing" if isinstance(exc, FileNotFoundError) else "damaged"
    return (f"run {run_id[:12]}: its kernel_summary table {where} is {state}, so it is listed "
            "without its kernel ranking; `triage verify` lists what is damaged")


def open_view(store: Store, columns: list[str] | None = None) -> View:
    """The catalog: one row per run that has a manifest, with the problems of runs that could
    be indexed only in part; `columns` limits what is read (id, archived and indexed always
    are). Runs that have a manifest but no row are indexed now (and written, if the store is).

    runs/ (100,000 names) is listed only when the catalog may lack a run: while a writer is at
    work or after one died (a lease is in leases/: every writer holds one from before its
    manifest to after its row, and gc indexes what a dead one left before removing its lease),
    when a segment could not be read, and on a store not yet merged by this triage. Otherwise
    every manifest has its row, and the newest page costs a row group."""
    busy = _writers_at_work(store)
    listed = segments(store)
    memo = (store.where, tuple(listed), tuple(columns or ()))
    view = _TRUSTED.get(memo) if not busy else None
    if view is None:
        found = _read_segments(store, catalog_schema(columns), listed)[0]
        trusted = not busy and found.whole and found.base is not None
        view = reconcile(found, None if trusted else store.runs.file_names())
        if trusted:  # segments are immutable: the same names hold the same rows
            view = dataclasses.replace(view, missing=_unindexed(found, view))
            _TRUSTED.clear()
            _TRUSTED[memo] = view
    if not view.missing:
        return view
    indexed = _index_missing(store, view.missing)
    tail = pa.concat_tables([view.tail, indexed.table.select(view.tail.column_names)])
    return dataclasses.replace(view, tail=take_rows(tail, order_of(tail)),
                               count=view.count + indexed.table.num_rows,
                               missing=frozenset(), problems=indexed.problems)


def _unindexed(found: Segments, view: View) -> frozenset[str]:
    """The runs the merged segment names as having a manifest and no row (damaged when it was
    written), less those a segment written since holds a row of (repaired and indexed)."""
    assert found.base is not None
    named = (found.base.metadata.metadata or {}).get(UNINDEXED, b"").decode()
    if not named:
        return frozenset()
    return frozenset(named.split(",")) - set(view.tail.column("id").to_pylist())


# The view of a trusted catalog read last in this process, by store, segment names and columns:
# `diff A B` resolves two id prefixes, `show latest` a ref and then its labels, from one read.
_TRUSTED: dict[tuple, View] = {}


def _writers_at_work(store: Store) -> bool:
    """Whether leases/ holds a lease (of a writer at work, or of one that died)."""
    return any(name.endswith(".json") for name in store.files.names("leases"))


def scan_unordered(store: Store, columns: list[str] | None = None) -> Catalog:
    """The catalog as one table, one row per run in no particular order (the merged rows, then
    the others), with the problems of runs that could be indexed only in part (see
    `open_view`): for a reader that orders or groups the rows itself."""
    view = open_view(store, columns)
    return Catalog(view.table(ordered=False), view.problems)


def segment_version(store: Store, key: str) -> int:
    """The version of a segment's rows: its VERSION mark. One written before segments were
    marked is current if its rows were made from manifests with every column there (not a
    merge, which may have carried older rows over with nulls), else 1. A segment gone or
    unreadable counts as current (a merge took it, or its runs are indexed afresh)."""
    try:
        source = pq.ParquetFile(store.objects.local_copy(key, segment_sha(key)))
    except (FileNotFoundError, CorruptObject, pa.ArrowException, OSError):
        return CATALOG_VERSION
    marks = source.metadata.metadata or {}
    if VERSION in marks:
        return int(marks[VERSION]) if marks[VERSION].isdigit() else 1
    whole = {"investigation", "rerun_of"} <= set(source.schema_arrow.names)
    return CATALOG_VERSION if whole and MERGED not in marks else 1


def stale(store: Store) -> bool:
    """Whether some segment holds rows older than CATALOG_VERSION (`triage migrate` re-indexes
    them). Reads each segment's footer, no rows."""
    return any(segment_version(store, key) < CATALOG_VERSION for key in segments(store))


def require_current(store: Store, what: str) -> None:
    """Refuse `what` (a lookup by a column older rows lack) on a catalog holding such rows."""
    if stale(store):
        raise StoreError(f"{what}: the catalog holds rows indexed by an older triage, without "
                         "the investigation and rerun_of of their runs; run `triage migrate` "
                         "once to re-index it")


def segment_digest(store: Store, key: str) -> str:
    """sha256 of a segment file (its name carries the same hash; verify compares them)."""
    return hashlib.sha256(store.files.read(key)).hexdigest()
