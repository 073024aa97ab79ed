"""The catalog as readers see it: the merged segment paged from its end, the few rows after it
slotted in, one row per run (catalog.py writes and lists the segments; `catalog.open_view`
reads them into a `View`).

A merge writes its rows oldest archive first, one per run, with an index of their ids in the
file's footer (IDS). So the newest page of 100,000 runs is the segment's last row group and the
rows of the segments written since; `latest` is the newest of those; an id prefix is a binary
search of the index. Nothing here converts every row to Python, or imports pyarrow.compute
(50 ms) to order a few rows.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from triage.archive.run_manifests import run_id_of
from triage.archive.tables import conform
from triage.schemas.tables import arrow_schema

IDS = b"triage.ids"  # a merged segment's index: (id, row) sorted by id
ENTRY = 36  # bytes an IDS entry takes: the id's 32, the row's 4
KEY_COLUMNS = ("id", "archived", "indexed")  # what every reader keys and de-duplicates rows by
BATCH_ROWS = 1000  # rows a listing of every run converts at a time
TAKE_BY_SLICES = 256  # up to this many rows are picked by slices, not by `take`


def catalog_schema(columns: list[str] | None) -> pa.Schema:
    """The catalog schema, or its `columns` (with the ones every reader keys rows by)."""
    schema = arrow_schema("catalog")
    if columns is None:
        return schema
    return pa.schema([schema.field(c) for c in dict.fromkeys([*KEY_COLUMNS, *columns])])


def _index_find(index: bytes, run_id: str) -> int | None:
    """The row of `run_id` in a merged segment by its IDS index, or None."""
    try:
        raw = bytes.fromhex(run_id)
    except ValueError:
        return None
    at = _lower_bound(index, raw)
    if index[at:at + 32] == raw:
        return int.from_bytes(index[at + 32:at + ENTRY], "big")
    return None



def _index_prefixed(index: bytes, prefix: str) -> list[str]:
    """The ids in an IDS index that begin with the hex digits `prefix`."""
    at, found = _lower_bound(index, bytes.fromhex(prefix.ljust(64, "0"))), []
    while at < len(index) and (run_id := index[at:at + 32].hex()).startswith(prefix):
        found.append(run_id)
        at += ENTRY
    return found



def _lower_bound(index: bytes, raw: bytes) -> int:
    """The offset of the first entry whose id is not below `raw`."""
    low, high = 0, len(index) // ENTRY
    while low < high:
        middle = (low + high) // 2
        if index[middle * ENTRY:middle * ENTRY + 32] < raw:
            low = middle + 1
        else:
            high = middle
    return low * ENTRY



def present_columns(source: pq.ParquetFile, schema: pa.Schema) -> list[str]:
    stored = set(source.schema_arrow.names)  # a property that builds the schema each time
    return [n for n in schema.names if n in stored]


def read_conformed(source: pq.ParquetFile, schema: pa.Schema) -> pa.Table:
    """A segment's rows, whole, in `schema`: only its columns are read, and the ones added
    since it was written are null."""
    return conformed(source.read(columns=present_columns(source, schema)), schema)



def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema` (cast only where a type differs: a cast imports pyarrow.compute)."""
    table = conform(table, schema)
    return table if table.schema.equals(schema) else table.cast(schema)



@dataclass(frozen=True)
class Segments:
    """The segments as read: the biggest merged one (`base`), left on disk; every other row
    (`tail`, a few hundred at most on a store merged by this triage), read whole."""

    base: pq.ParquetFile | None
    tail: pa.Table
    schema: pa.Schema
    index: bytes | None = None  # the base's IDS index, if it has one
    base_path: Path | None = None
    whole: bool = True  # every segment listed was read (none unreadable, none merged away)

    @classmethod
    def of(cls, parts: list[pa.Table | tuple[Path, pq.ParquetFile]],
           schema: pa.Schema) -> Segments:
        """Two merged segments live side by side only while two merges race: the smaller is
        read whole like any other."""
        merged = [p for p in parts if isinstance(p, tuple)]
        path, base = max(merged, key=lambda m: m[1].metadata.num_rows, default=(None, None))
        tables = [p for p in parts if isinstance(p, pa.Table) and p.num_rows]
        tables += [read_conformed(f, schema) for _path, f in merged if f is not base]
        index = (base.metadata.metadata or {}).get(IDS) if base is not None else None
        return cls(base, pa.concat_tables(tables) if tables else schema.empty_table(), schema,
                   index, path)

    def row_groups(self, schema: pa.Schema) -> Iterator[tuple[int, pa.Table]]:
        """The base's row groups in `schema`, newest first, each with the position of its
        first row."""
        if self.base is None:
            return
        sizes = [self.base.metadata.row_group(g).num_rows
                 for g in range(self.base.num_row_groups)]
        start = sum(sizes)
        present = present_columns(self.base, schema)
        for group in reversed(range(len(sizes))):
            start -= sizes[group]
            yield start, conformed(self.base.read_row_group(group, columns=present), schema)

    def base_table(self) -> pa.Table | None:
        """The base's rows, whole, in the view's schema."""
        return read_conformed(self.base, self.schema) if self.base is not None else None

    def base_column(self, name: str) -> list:
        if self.base is None:
            return []
        return self.base.read(columns=[name]).column(name).to_pylist()

    def index_row(self, run_id: str) -> int | None:
        return _index_find(self.index or b"", run_id)

    def base_values(self, name: str, positions: list[int]) -> dict[int, Any]:
        """One column's values at a few of the base's rows, reading only their row groups."""
        out: dict[int, Any] = {}
        for start, inside, group in self._groups_holding(positions, [name]):
            column = group.column(name)
            out.update({p: column[p - start].as_py() for p in inside})
        return out

    def base_values_count(self, column: str) -> int:
        """How many values the base holds in `column`'s first leaf (for a list column, one per
        element, and one per empty list): from its footer, nothing read."""
        if self.base is None:
            return 0
        meta = self.base.metadata
        leaf = next((i for i in range(meta.num_columns)
                     if meta.schema.column(i).path.split(".")[0] == column), None)
        return 0 if leaf is None else sum(meta.row_group(g).column(leaf).num_values
                                          for g in range(meta.num_row_groups))

    def base_rows(self, positions: list[int]) -> pa.Table:
        """The base's rows at `positions` (sorted), in the view's schema, reading only their
        row groups."""
        present = present_columns(self.base, self.schema) if self.base is not None else []
        picked = [take_rows(group, [p - start for p in inside])
                  for start, inside, group in self._groups_holding(positions, present)]
        return conformed(pa.concat_tables(picked), self.schema) if picked \
            else self.schema.empty_table()

    def _groups_holding(self, positions: list[int], columns: list[str]
                        ) -> Iterator[tuple[int, list[int], pa.Table]]:
        """Each base row group that holds some of `positions`, in `columns`: its first row's
        position, the positions inside it (sorted), the group."""
        if self.base is None:
            return
        wanted, start = sorted(positions), 0
        for number in range(self.base.num_row_groups):
            size = self.base.metadata.row_group(number).num_rows
            inside = [p for p in wanted if start <= p < start + size]
            if inside:
                yield start, inside, self.base.read_row_group(number, columns=columns)
            start += size



def _key(row) -> tuple[str, str]:
    """The catalog's order: archive time, then id; a run of unknown archive time first."""
    return row["archived"] or "", row["id"] or ""



@dataclass(frozen=True)
class View:
    """The catalog reconciled with runs/: one row per run that has a manifest. The merged
    segment's rows stay on disk (less the positions in `skip`: runs it holds an older row of,
    or no manifest of); every other row is in `tail`, oldest first. A reader pages through
    it newest first (`newest`) or reads it whole (`table`)."""

    segments: Segments
    skip: frozenset[int]
    tail: pa.Table
    count: int
    missing: frozenset[str] = frozenset()  # runs with a manifest and no row
    problems: tuple[str, ...] = ()

    def newest(self, columns: Sequence[str], rows: int = BATCH_ROWS) -> Iterator[list[dict]]:
        """Rows as dicts with `columns` (id and archived among them), newest first, about
        `rows` at a time: the merged segment is read one row group at a time from its end,
        and the few other rows are slotted in by their order, so the newest page of 100,000
        runs converts a page of them and `ls` of every run never holds them all."""
        schema = catalog_schema(list(columns))
        tail = self.tail.select(list(columns)).to_pylist()
        ahead, out = len(tail), []
        for start, group in self.segments.row_groups(schema):
            group = group.select(list(columns))
            for end in range(group.num_rows, 0, -rows):
                first = max(end - rows, 0)
                piece = group.slice(first, end - first).to_pylist()
                for position, row in zip(range(start + end - 1, start + first - 1, -1),
                                         reversed(piece), strict=True):
                    if position in self.skip:
                        continue
                    while ahead and _key(tail[ahead - 1]) > _key(row):
                        ahead -= 1
                        out.append(tail[ahead])
                    out.append(row)
                if len(out) >= rows:
                    yield out
                    out = []
        out.extend(reversed(tail[:ahead]))
        for start in range(0, len(out), rows):
            yield out[start:start + rows]

    def prefixed(self, prefix: str) -> list[str]:
        """The ids of the runs whose id begins with the hex digits `prefix`, sorted: a binary
        search of the merged segment's IDS index, and the tail's few ids."""
        found = self.segments
        if found.index is not None:
            base = [run_id for run_id in _index_prefixed(found.index, prefix)
                    if found.index_row(run_id) not in self.skip]
        else:
            base = [run_id for p, run_id in enumerate(found.base_column("id"))
                    if run_id.startswith(prefix) and p not in self.skip]
        tail = [i for i in self.tail.column("id").to_pylist() if i.startswith(prefix)]
        return sorted({*base, *tail})

    def merged_dataset(self):  # -> pyarrow.dataset.Dataset | None (imported here only)
        """The merged segment as a dataset in the view's schema, less the rows in `skip`: a
        reader of a few columns (DuckDB through `triage query`) reads only those, streamed."""
        found = self.segments
        if found.base is None or found.base_path is None:
            return None
        import pyarrow.dataset as ds

        dataset = ds.dataset(str(found.base_path), schema=found.schema, format="parquet")
        if not self.skip:
            return dataset
        skipped = found.base_values("id", sorted(self.skip)).values()
        return dataset.filter(~ds.field("id").isin(pa.array(list(skipped), type=pa.string())))

    def rows_of(self, ids: Iterable[str]) -> pa.Table:
        """The rows of the runs `ids` that the view holds, in no particular order: the merged
        segment's row groups that hold them are read, not the segment (`triage query --run`,
        a few runs of 100,000)."""
        wanted, found = set(ids), self.segments
        tail_ids = self.tail.column("id").to_pylist()
        tail = take_rows(self.tail, [p for p, run_id in enumerate(tail_ids) if run_id in wanted])
        base_ids = found.base_column("id") if found.index is None else None
        positions = [p for p in _in_base(found, base_ids, wanted) if p not in self.skip]
        return pa.concat_tables([found.base_rows(sorted(positions)), tail])

    def table(self, ordered: bool = True, base: pa.Table | None = None) -> pa.Table:
        """Every row in the view's columns, oldest first (`ordered`), else the merged rows and
        then the others; `base`: the merged segment's rows in the view's schema, where the
        caller kept them from an earlier read (a merged segment never changes)."""
        base = self.segments.base_table() if base is None else base
        if base is None:
            return self.tail
        merged = _without(base, self.skip)
        if not ordered or not self.tail.num_rows:
            return pa.concat_tables([merged, self.tail])
        return interleaved(merged, self.tail)



def interleaved(merged: pa.Table, tail: pa.Table) -> pa.Table:
    """Two tables in the catalog's order as one in that order: the few tail rows are slotted
    between slices of the merged ones (no row copied)."""
    last = _key({"archived": merged.column("archived")[-1].as_py(),
                 "id": merged.column("id")[-1].as_py()}) if merged.num_rows else ("", "")
    keys = [_key(row) for row in tail.select(list(KEY_COLUMNS)).to_pylist()]
    if not keys or keys[0] > last:
        return pa.concat_tables([merged, tail])
    merged_keys = list(zip([a or "" for a in merged.column("archived").to_pylist()],
                           [i or "" for i in merged.column("id").to_pylist()], strict=True))
    pieces, start = [], 0
    for position, key in enumerate(keys):
        at = bisect.bisect_right(merged_keys, key)
        pieces += [merged.slice(start, at - start), tail.slice(position, 1)]
        start = at
    return pa.concat_tables([*pieces, merged.slice(start)])



def reconcile(found: Segments, files: list[str] | None) -> View:
    """The rows of `found`, one per run: the most recently indexed (notes may have been added;
    of rows indexed at the same time, the merged one, then the first read); with `files` (the
    names in runs/) reconciled with them: only runs that have a manifest, and the runs that
    have one but no row. Without, the rows are trusted (`open_view` says when).

    One set of the names settles the reconciliation for 100,000 runs in tens of milliseconds:
    usually the rows name exactly the manifests, once each."""
    base_ids = found.base_column("id") if files is not None or found.index is None else None
    tail, skip = _tail_over_base(found, base_ids)
    base_rows = found.base.metadata.num_rows if found.base is not None else 0
    count = base_rows - len(skip) + tail.num_rows
    if files is None:
        return View(found, frozenset(skip), tail, count)
    assert base_ids is not None
    listed = set(files)
    base_names = [f"{run_id}.json" for run_id in base_ids]
    tail_names = [f"{run_id}.json" for run_id in tail.column("id").to_pylist()]
    if count == len(listed) and listed.issuperset(base_names) and listed.issuperset(tail_names):
        return View(found, frozenset(skip), tail, count)
    skip |= {p for p, name in enumerate(base_names) if name not in listed}
    tail = _without(tail, {p for p, name in enumerate(tail_names) if name not in listed})
    missing = listed - {*base_names, *tail_names}
    return View(found, frozenset(skip), tail, base_rows - len(skip) + tail.num_rows,
                frozenset(i for i in map(run_id_of, missing) if i))



def _tail_over_base(found: Segments, base_ids: list[str] | None) -> tuple[pa.Table, set[int]]:
    """The tail's rows, one per run, oldest first, less those the base holds a newer row of;
    and the base positions of runs a tail row replaces. A tail row's run is looked up in the
    base's IDS index, or among `base_ids` where it has none."""
    ids = found.tail.column("id").to_pylist()
    stamps = [s or "" for s in found.tail.column("indexed").to_pylist()]
    best: dict[str, int] = {}
    for position, run_id in enumerate(ids):
        if run_id not in best or stamps[position] > stamps[best[run_id]]:
            best[run_id] = position
    skip = set()
    in_base = _in_base(found, base_ids, best)
    for position, stamp in found.base_values("indexed", list(in_base)).items():
        run_id = in_base[position]
        if stamps[best[run_id]] > (stamp or ""):
            skip.add(position)
        else:
            del best[run_id]
    return take_rows(found.tail, order_of(found.tail, best.values())), skip



def _in_base(found: Segments, base_ids: list[str] | None,
             wanted: Collection[str]) -> dict[int, str]:
    """The base positions of the runs in `wanted` that it holds, with their ids."""
    if not wanted or found.base is None:
        return {}
    if base_ids is None:
        rows = {run_id: found.index_row(run_id) for run_id in wanted}
        return {row: run_id for run_id, row in rows.items() if row is not None}
    return {p: run_id for p, run_id in enumerate(base_ids) if run_id in wanted}


def take_rows(table: pa.Table, positions: list[int]) -> pa.Table:
    """The rows at `positions`, in that order: a few by slices (`take` would import
    pyarrow.compute, 50 ms), many by `take`."""
    if positions == list(range(table.num_rows)):
        return table
    if len(positions) <= TAKE_BY_SLICES:
        return pa.concat_tables([table.slice(p, 1) for p in positions]) if positions \
            else table.slice(0, 0)
    return table.take(pa.array(positions, type=pa.int64()))



def _without(table: pa.Table, drop: set[int] | frozenset[int]) -> pa.Table:
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



def order_of(table: pa.Table, positions: Iterable[int] | None = None) -> list[int]:
    """The positions of a few rows (all, or `positions`) in the catalog's order."""
    keys = table.select(list(KEY_COLUMNS)).to_pylist()
    return sorted(range(len(keys)) if positions is None else positions,
                  key=lambda p: _key(keys[p]))



def ids_index(table: pa.Table) -> bytes | None:
    """A merged segment's IDS: each run's id as 32 bytes and its row as 4, sorted by id (36
    bytes a run, in the footer every reader opens anyway), for a binary search. None for rows
    holding an id that is not 64 hex digits: readers then read the segment's ids."""
    try:
        raw = [bytes.fromhex(run_id) for run_id in table.column("id").to_pylist()]
    except (TypeError, ValueError):
        return None
    if any(len(r) != 32 for r in raw):
        return None
    return b"".join(sorted(r + p.to_bytes(4, "big") for p, r in enumerate(raw)))
