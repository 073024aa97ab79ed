"""Nsight Systems exports: their launch-level tables as batches of triage's tables.

Export schemas differ across nsys 2019.5 ... 2026.1 (tables absent when empty, columns added and
renamed), so every query is built from the columns the export actually has (`nsys_export`).
Launch-level tables are streamed in Arrow batches, so no table is ever held whole; rows are
ordered by time with the export's row order breaking ties, so the same export gives the same
bytes (nsys 2025.6 and later no longer export rows in time order). How the report was captured
(versions, GPUs, settings) is read by `nsys`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from triage.base.arrays import arrow_array
from triage.capture.nsys_export import Export, Query, as_text

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from triage.capture.formats import TableBatch

INT64_MAX = (1 << 63) - 1
# The push/pop ranges still open after a batch: their threads and their ends.
Carry = tuple["pa.Array", "np.ndarray"]
# CUPTI_ACTIVITY_KIND_MEMCPY.copyKind when the export has no ENUM_CUDA_MEMCPY_OPER table:
# CUpti_ActivityMemcpyKind 0-10 from the CUPTI docs; 11-13 are nsys's unified-memory kinds
# (as ENUM_CUDA_MEMCPY_OPER lists them in every corpus export that has it).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH",
                13: "UVM DtoD"}
# NVTX_EVENTS.eventType when the export has no ENUM_NSYS_EVENT_TYPE table (nsys docs, and the
# enum table of every corpus export that has one).
NVTX_EVENT_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}


class ReadAhead:
    """A read's batches, each next one fetched on a worker thread while this one is shaped and
    written: fetching (SQLite stepping, rows converted) overlaps Arrow compute and Parquet
    encoding (which release the GIL). The first is asked for when the read is made: SQLite
    sorts the rows of an ORDER BY before its first, so a read made early sorts while the
    archive sets up. Only that thread touches the read meanwhile."""

    def __init__(self, batches: Iterator[pa.Table]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._batches = batches
        self._fetcher = ThreadPoolExecutor(max_workers=1)
        self._ahead = self._fetcher.submit(next, batches, None)

    def __iter__(self) -> Iterator[pa.Table]:
        try:
            while (batch := self._ahead.result()) is not None:
                self._ahead = self._fetcher.submit(next, self._batches, None)
                yield batch
        finally:
            self.close()

    def close(self) -> None:
        """Stop: the batch being fetched is waited for (SQLite's step cannot be cut short),
        then the read is closed, which ends its statement."""
        self._fetcher.shutdown(wait=True)
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


class Implausible:
    """Rows no intact export holds, counted per triage table as batches stream past: kernels
    whose name string is missing, intervals that end before they start. A damaged export
    archives, but says so (notices), rather than diffing as nameless or negative kernels."""

    def __init__(self) -> None:
        self.unnamed_kernels = 0
        self.backwards: dict[str, int] = {}  # triage table -> rows

    def check(self, table_name: str, table: pa.Table) -> None:
        import pyarrow.compute as pc

        if table_name == "kernels":
            self.unnamed_kernels += table["name"].null_count
        if "duration_ns" in table.column_names:
            found = pc.sum(pc.less(table["duration_ns"], 0)).as_py() or 0
            if found:
                self.backwards[table_name] = self.backwards.get(table_name, 0) + found

    def notices(self) -> list[str]:
        unnamed = ([f"{self.unnamed_kernels:,} kernels have no name (their string ids point "
                    "nowhere): a damaged export?"] if self.unnamed_kernels else [])
        return unnamed + [f"{n:,} {name.replace('_', ' ')} end before they start: a damaged "
                          "export?" for name, n in self.backwards.items()]


def _shaped(name: str, batch: pa.Table, report_index: int, implausible: Implausible,
            **constants: str) -> pa.Table:
    """Add the report index, durations and constant columns, null-fill the rest, check."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from triage.schemas.tables import named_table

    n = batch.num_rows
    columns = {"report_index": pa.repeat(report_index, n).cast(pa.int32())}
    if "start_ns" in batch.column_names:
        columns["duration_ns"] = pc.subtract(batch["end_ns"], batch["start_ns"])
    columns.update({k: pa.repeat(v, n) for k, v in constants.items()})
    for column in batch.column_names:
        columns[column] = batch[column]
    table = named_table(name, columns, n)
    implausible.check(name, table)
    return table


# -- tables ------------------------------------------------------------------------------------

# What each launch-level table reads: (column written, "int" | "str", export column, how):
# how is None (as stored), "string" (a StringIds id), "api" (a StringIds id naming a CUDA API
# function, without the "_v7000"-style ABI suffix, as `nsys stats` shows it) or "pid" (the
# process in a globalPid).
Spec = list[tuple[str, str, str, str | None]]
KERNELS: Spec = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("name", "str", "demangledName", "string"), ("short_name", "str", "shortName", "string"),
    ("mangled_name", "str", "mangledName", "string"),
    *((f"{part}_{axis}", "int", f"{part}{axis.upper()}", None)
      for part in ("grid", "block") for axis in "xyz"),
    ("registers_per_thread", "int", "registersPerThread", None),
    ("static_shared_bytes", "int", "staticSharedMemory", None),
    ("dynamic_shared_bytes", "int", "dynamicSharedMemory", None),
    ("device_id", "int", "deviceId", None), ("context_id", "int", "contextId", None),
    ("stream_id", "int", "streamId", None), ("correlation_id", "int", "correlationId", None),
    ("process_id", "int", "globalPid", "pid"),
]
API_CALLS: Spec = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("thread_id", "int", "globalTid", None), ("correlation_id", "int", "correlationId", None),
    ("name", "str", "nameId", "api"), ("return_value", "int", "returnValue", None),
]
MEMOPS: Spec = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("bytes", "int", "bytes", None), ("device_id", "int", "deviceId", None),
    ("context_id", "int", "contextId", None), ("stream_id", "int", "streamId", None),
    ("correlation_id", "int", "correlationId", None),
]
OSRT_CALLS: Spec = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("thread_id", "int", "globalTid", None), ("name", "str", "nameId", "string"),
    ("return_value", "int", "returnValue", None), ("nesting_level", "int", "nestingLevel", None),
]
# Row order: by time, then by what tells simultaneous rows apart, so that the order does not
# rest on the export's row order (which nsys no longer keeps in time order from 2025.6 on).
GPU_ORDER = ("start", "end", "deviceId", "streamId", "correlationId")
CPU_ORDER = ("start", "end", "globalTid", "correlationId", "nestingLevel")
# Every source table, in the order its rows are written: (triage table, export table, spec,
# constant columns, order).
SOURCES: list[tuple[str, str, Spec, dict[str, str], tuple[str, ...]]] = [
    ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", KERNELS, {}, GPU_ORDER),
    ("api_calls", "CUPTI_ACTIVITY_KIND_RUNTIME", API_CALLS, {"api": "runtime"}, CPU_ORDER),
    ("api_calls", "CUPTI_ACTIVITY_KIND_DRIVER", API_CALLS, {"api": "driver"}, CPU_ORDER),
    ("memops", "CUPTI_ACTIVITY_KIND_MEMCPY", MEMOPS, {"op": "memcpy"}, GPU_ORDER),
    ("memops", "CUPTI_ACTIVITY_KIND_MEMSET", MEMOPS, {"op": "memset", "kind": "memset"},
     GPU_ORDER),
    ("osrt_calls", "OSRT_API", OSRT_CALLS, {}, CPU_ORDER),
]


def _expression(export: Export, table: str, column: str, how: str | None) -> str:
    expr = export.col(table, column)
    if expr == "NULL" or how is None:
        return expr
    if how == "pid":
        return f"(({expr} >> 24) & 16777215)"
    text = export.string(table, column)
    if how == "api":
        return (f"(SELECT CASE substr(n, -6, 2) WHEN '_v' THEN substr(n, 1, length(n) - 6) "
                f"ELSE n END FROM (SELECT {text} AS n))")
    return text


def memcpy_kinds(export: Export) -> dict[int, str]:
    """copyKind -> 'HtoD' ..., from ENUM_CUDA_MEMCPY_OPER when the export has it."""
    if not {"id", "name"} <= export.columns("ENUM_CUDA_MEMCPY_OPER"):
        return dict(MEMCPY_KINDS)
    kinds = {}
    for kind_id, name in export.rows("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER")[1]:
        name = as_text(name) or ""
        match = re.fullmatch(r"CUDA_MEMCPY_KIND_(UVM_)?([A-Z])TO([A-Z])", name)
        if match:
            kinds[kind_id] = f"{'UVM ' if match.group(1) else ''}{match.group(2)}to{match.group(3)}"
        else:
            kinds[kind_id] = name.removeprefix("CUDA_MEMCPY_KIND_").capitalize() or str(kind_id)
    return kinds


def source_query(export: Export, table: str, spec: Spec,
                 order: tuple[str, ...]) -> tuple[Query, list[tuple[str, str]]]:
    """The SELECT for one source table, from the columns it has, and its fields."""
    select = [_expression(export, table, column, how) for _, _, column, how in spec]
    fields = [(name, kind) for name, kind, _, _ in spec]
    params: list = []
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY" and "copyKind" in export.columns(table):
        kinds = sorted(memcpy_kinds(export).items())
        select.append("CASE t.copyKind " + " ".join("WHEN ? THEN ?" for _ in kinds)
                      + " ELSE 'kind ' || t.copyKind END")
        fields.append(("kind", "str"))
        params = [value for pair in kinds for value in pair]
    keys = [f"{export.col(table, c)} NULLS FIRST" for c in order if c in export.columns(table)]
    return Query(table, "t", tuple(select), ordered(export, table, "t", keys),
                 select_params=tuple(params)), fields


def ordered(export: Export, table: str, alias: str, keys: list[str]) -> tuple[str, ...]:
    """The keys, then the export's own row order, so that ties (and NULLs, placed as SQLite
    places them) come out the same on every run and from either export format."""
    return (*keys, *filter(None, [export.row_order(table, alias)]))


def _numbered(batches: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """kernel_index: launch order by start, across batches (NumPy's numbers: a Python range
    converts one int at a time, 0.35 s per 1M kernels)."""
    import numpy as np

    count = 0
    for batch in batches:
        yield batch.append_column("kernel_index", arrow_array(
            np.arange(count, count + batch.num_rows, dtype=np.int64)))
        count += batch.num_rows


# The reads started early, by what they read: an export table (its rows for triage's table), or
# DOMAINS, the NVTX domains' names.
Started = dict[str, ReadAhead]
DOMAINS = "NVTX domain names"


def started_reads(export: Export) -> Started:
    """The read of the export's largest launch-level table, started now where the export can
    read it beside the others (`Export.early_table`): its ORDER BY sorts meanwhile, instead
    of once the tables before it are read. Before NVTX ranges, the domain names, which
    shaping the first range needs, are read beside them too."""
    started: Started = {}
    table = export.early_table([table for _, table, *_rest in SOURCES] + ["NVTX_EVENTS"])
    if table in {source[1] for source in SOURCES}:
        _name, _table, spec, _constants, order = next(s for s in SOURCES if s[1] == table)
        _read(export, table, *source_query(export, table, spec, order), started)
    elif table == "NVTX_EVENTS":
        types = nvtx_event_types(export)
        query = nvtx_query(export, types)
        if query is not None:
            _read(export, table, query, NVTX_FIELDS, started)
            _read(export, DOMAINS, *domains_query(export, types["NvtxDomainCreate"]), started)
    return started


def _read(export: Export, key: str, query: Query, fields, started: Started) -> ReadAhead:
    """The read: the one started early, or a new one (the same query either way), kept in
    `started` too, so that whoever closes the export first stops every read's thread."""
    if key not in started:
        started[key] = ReadAhead(export.batches(query, fields))
    return started[key]


def source_batches(export: Export, report_index: int, implausible: Implausible,
                   counts: dict[str, int], started: Started | None = None
                   ) -> Iterator[TableBatch]:
    """Every launch-level table but NVTX, batch by batch; counts the rows per triage table."""
    started = {} if started is None else started
    for name, table, spec, constants, order in SOURCES:
        counts.setdefault(name, 0)
        if table not in export.tables:
            continue
        query, fields = source_query(export, table, spec, order)
        batches = _read(export, table, query, fields, started)
        for batch in _numbered(batches) if name == "kernels" else batches:
            counts[name] += batch.num_rows
            yield name, _shaped(name, batch, report_index, implausible, **constants)


NVTX_FIELDS = [("event_type", "int"), ("start_ns", "int"), ("end_ns", "int"),
               ("thread_id", "int"), ("text", "str"), ("domain_id", "int")]


def nvtx_event_types(export: Export) -> dict[str, int]:
    """eventType ids by name, from ENUM_NSYS_EVENT_TYPE when the export has it."""
    types = dict(NVTX_EVENT_TYPES)
    if {"id", "name"} <= export.columns("ENUM_NSYS_EVENT_TYPE"):
        for type_id, name in export.rows("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE")[1]:
            text = as_text(name)
            if text is not None and text in types:
                types[text] = type_id
    return types


def _nvtx_text(export: Export, alias: str) -> str:
    """Range text: inline `text`, or a registered string via `textId`."""
    parts = [f"{alias}.text"] if "text" in export.columns("NVTX_EVENTS") else []
    if "textId" in export.columns("NVTX_EVENTS"):
        parts.append(f"(SELECT value FROM StringIds WHERE id = {alias}.textId)")
    return f"coalesce({', '.join(parts)})" if len(parts) > 1 else (parts or ["NULL"])[0]


def nvtx_query(export: Export, types: dict[str, int]) -> Query | None:
    """The push/pop and start/end ranges in time order, parents first; None where the export
    has no NVTX events."""
    if not {"eventType", "start"} <= export.columns("NVTX_EVENTS"):
        return None
    wanted = [types["NvtxPushPopRange"], types["NvtxStartEndRange"]]
    c = lambda name: export.col("NVTX_EVENTS", name, "e")  # noqa: E731 - local shorthand
    return Query("NVTX_EVENTS", "e", ("e.eventType", "e.start", c("end"), c("globalTid"),
                                      _nvtx_text(export, "e"), c("domainId")),
                 ordered(export, "NVTX_EVENTS", "e", ["e.start", f"{c('end')} DESC NULLS LAST"]),
                 "e.eventType IN (?, ?) AND e.start IS NOT NULL", where_params=tuple(wanted))


def nvtx_batches(export: Export, report_index: int, implausible: Implausible,
                 counts: dict[str, int], started: Started | None = None
                 ) -> Iterator[TableBatch]:
    """Push/pop ranges (with their depth per thread) and start/end ranges; marks are skipped.

    Domain names come first, from the domain-create events, so every range of a named domain
    gets its name wherever its create event falls in the stream.
    """
    started = {} if started is None else started
    counts.setdefault("nvtx_ranges", 0)
    types = nvtx_event_types(export)
    query = nvtx_query(export, types)
    if query is None:
        return
    domains = nvtx_domains(_read(export, DOMAINS,
                                 *domains_query(export, types["NvtxDomainCreate"]), started))
    batches = _read(export, "NVTX_EVENTS", query, NVTX_FIELDS, started)
    ranges = NvtxRanges(report_index, types["NvtxPushPopRange"], domains, implausible)
    for batch in batches:
        counts["nvtx_ranges"] += batch.num_rows
        yield "nvtx_ranges", ranges.shaped(batch)


DOMAIN_FIELDS = [("tid", "int"), ("domain", "int"), ("name", "str")]


def domains_query(export: Export, create_type: int) -> tuple[Query, list[tuple[str, str]]]:
    """The domain-create events in time order, and their fields."""
    c = lambda name: export.col("NVTX_EVENTS", name, "e")  # noqa: E731 - local shorthand
    return Query("NVTX_EVENTS", "e", (c("globalTid"), c("domainId"), _nvtx_text(export, "e")),
                 ordered(export, "NVTX_EVENTS", "e", ["e.start NULLS FIRST"]),
                 "e.eventType = ?", where_params=(create_type,)), DOMAIN_FIELDS


def nvtx_domains(batches: Iterable[pa.Table]) -> dict[tuple[int, int], str | None]:
    """(process, domain id) -> the name its domain-create event gave (the last one wins)."""
    return {(tid >> 24, domain): name for batch in batches
            for tid, domain, name in zip(*(batch[f].to_pylist() for f, _ in DOMAIN_FIELDS),
                                         strict=True)
            if tid is not None and domain is not None}


class NvtxRanges:
    """Shapes NVTX batches in order, carrying the push/pop ranges still open across them."""

    def __init__(self, report_index: int, push_pop: int,
                 domains: dict[tuple[int, int], str | None], implausible: Implausible) -> None:
        self.report_index, self.implausible = report_index, implausible
        self.push_pop, self.domains = push_pop, domains  # (globalTid >> 24, domainId) -> name
        self.carry: Carry | None = None

    def shaped(self, ranges: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        is_push_pop = pc.equal(ranges["event_type"], self.push_pop)
        table = pa.table({
            "start_ns": ranges["start_ns"], "end_ns": ranges["end_ns"],
            "thread_id": ranges["thread_id"], "text": ranges["text"],
            "domain": self._domain(ranges),
            "kind": pc.if_else(is_push_pop, "push_pop", "start_end"),
            "depth": self._depth(ranges, is_push_pop),
        })
        return _shaped("nvtx_ranges", table, self.report_index, self.implausible)

    def _depth(self, ranges: pa.Table, is_push_pop: pa.ChunkedArray) -> pa.Array:
        import pyarrow as pa
        import pyarrow.compute as pc

        # Only the columns the depth needs are filtered (not the text), and not at all in a
        # batch of push/pop ranges only (a capture without start/end ranges)
        nested = ranges.select(["start_ns", "end_ns", "thread_id"])
        everyone = pc.all(is_push_pop).as_py()
        if not everyone:
            nested = nested.filter(is_push_pop)
        depth = pa.nulls(ranges.num_rows, pa.int32())
        if nested.num_rows == 0:
            return depth
        nested_depth, self.carry = push_pop_depth(nested, self.carry)
        if everyone:
            return nested_depth
        return pc.replace_with_mask(depth, is_push_pop.combine_chunks(), nested_depth)

    def _domain(self, ranges: pa.Table) -> pa.Array | pa.ChunkedArray:
        """Null for the default domain (id 0), the created name, else 'domain <id>'."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = ranges["domain_id"]
        named = pc.fill_null(pc.not_equal(ids, 0), False)
        if not pc.any(named).as_py():
            return pa.nulls(ranges.num_rows, pa.string())
        domain = pc.if_else(named, pc.binary_join_element_wise(
            "domain ", ids.cast(pa.string()), ""), pa.scalar(None, pa.string()))
        process = pc.shift_right(ranges["thread_id"], 24)
        for (proc, domain_id), name in self.domains.items():
            here = pc.fill_null(pc.and_(pc.equal(process, proc), pc.equal(ids, domain_id)), False)
            domain = pc.if_else(here, pa.scalar(name, pa.string()), domain)
        return domain


def push_pop_depth(batch: pa.Table, carry: Carry | None) -> tuple[pa.Array, Carry]:
    """Nesting depth of each push/pop range on its thread, for a batch sorted by start.

    A sweep: every range is a +1 event at its start and a -1 event at its end; a range's
    depth is the sum of the events of its thread before its start. Ties are ordered as the
    query orders the rows: at one time, ends first, then starts (parents before children),
    then the ends of empty ranges (end <= start). So, per thread, a row's depth is the ranges
    still open from earlier batches (`carry`), plus the thread's rows before it, less the
    ends at or before its start and the empty ranges that start before it: two binary
    searches in NumPy (a sort of all the events in Arrow took 3x as long). Ranges still open
    at the end of a batch are carried into the next.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    c_tid, c_end = carry or (pa.array([], pa.int64()), np.empty(0, np.int64))
    start = batch["start_ns"].to_numpy()
    end = pc.fill_null(batch["end_ns"], INT64_MAX).to_numpy()
    tid = batch["thread_id"].combine_chunks()
    # Threads as small codes, NULL one of them, the carried ones coded alike.
    codes = pc.dictionary_encode(pa.concat_arrays([c_tid, tid]), null_encoding="encode")
    c_code, code = np.split(codes.indices.to_numpy(), [len(c_tid)])
    depth = np.empty(len(start), np.int32)
    order = np.argsort(code, kind="stable")  # each thread's rows together, in row order
    for rows in np.split(order, np.flatnonzero(np.diff(code[order])) + 1):
        begins, ends = start[rows], end[rows]
        carried = c_end[c_code == code[rows[0]]]
        closed = np.sort(np.concatenate([ends[ends > begins], carried]))
        depth[rows] = (len(carried) + np.arange(len(rows))
                       - np.searchsorted(closed, begins, "right")
                       - np.searchsorted(begins[ends <= begins], begins, "left"))
    last = start[-1]
    keep_c, keep_b = c_end > last, end > last
    carry = (pa.concat_arrays([c_tid.take(arrow_array(np.flatnonzero(keep_c))),
                               tid.take(arrow_array(np.flatnonzero(keep_b)))]),
             np.concatenate([c_end[keep_c], end[keep_b]]))
    return arrow_array(depth), carry
