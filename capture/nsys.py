"""Reading Nsight Systems reports (.nsys-rep, legacy .qdrep, and their .sqlite exports).

A .nsys-rep can only be read by exporting it with nsys (`nsys_file.export_sqlite`); a .sqlite
export is read as it is, with the standard `sqlite3` module. Export schemas differ across nsys
2019.5 ... 2026.1 (tables absent when empty, columns added and renamed), so every query is built
from the columns the file actually has. Launch-level tables are streamed in batches from SQLite
cursors straight into Arrow, so no table is ever held in Python whole.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.request import pathname2url

from triage.capture.nsys_file import (NsysFileInfo, export_sqlite, read_nsys_file,
                                      version_number)
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.errors import UnsupportedReport
from triage.timeutil import from_epoch

BATCH = 65536
INT64_MAX = (1 << 63) - 1
# CUPTI_ACTIVITY_KIND_MEMCPY.copyKind when the export has no ENUM_CUDA_MEMCPY_OPER table:
# CUpti_ActivityMemcpyKind 0-10 from the CUPTI docs; 11-13 are nsys's unified-memory kinds
# (as ENUM_CUDA_MEMCPY_OPER lists them in every corpus export that has it).
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH",
                13: "UVM DtoD"}
# NVTX_EVENTS.eventType when the export has no ENUM_NSYS_EVENT_TYPE table (nsys docs, and the
# enum table of every corpus export that has one).
NVTX_EVENT_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
PLATFORMS = {"L4X": "linux", "L4T": "linux", "LINUX": "linux", "WINDOWS": "windows",
             "QNX": "qnx", "ANDROID": "android", "MACOS": "osx"}


def _text(value) -> str | None:
    """SQLite text as str; exports can hold bytes that are not UTF-8."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


# -- opening an export -------------------------------------------------------------------------


def open_export(path) -> sqlite3.Connection:
    """A read-only connection whose text comes back as bytes (decoded by the reader)."""
    uri = f"file:{pathname2url(os.path.abspath(path))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        con.text_factory = bytes
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise UnsupportedReport(f"{path}: not a readable SQLite database ({exc}); pass the file "
                                "written by `nsys export --type sqlite`") from None
    return con


class Export:
    """An open nsys SQLite export: its tables and their columns, probed once."""

    def __init__(self, path, con: sqlite3.Connection):
        self.path, self.con = path, con
        rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        self.tables = {_text(name) for (name,) in rows}
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.con.execute(f"PRAGMA table_info({table})") if table in self.tables else []
            self._columns[table] = {_text(row[1]) for row in rows}
        return self._columns[table]

    def col(self, table: str, name: str, alias: str = "t") -> str:
        """`alias.name` when the table has that column, else NULL."""
        return f"{alias}.{name}" if name in self.columns(table) else "NULL"

    def pairs(self, table: str) -> list[tuple[str, str]]:
        if not {"name", "value"} <= self.columns(table):
            return []
        rows = self.con.execute(f"SELECT name, value FROM {table}")
        return [(_text(name), _text(value)) for name, value in rows]

    def check_is_nsys(self) -> None:
        if "StringIds" not in self.tables or not any(t.startswith("TARGET_INFO_")
                                                     for t in self.tables):
            raise UnsupportedReport(f"{self.path}: an SQLite database but not an Nsight Systems "
                                    "export (no StringIds / TARGET_INFO_* tables); pass the file "
                                    "written by `nsys export --type sqlite REPORT.nsys-rep`")

    def string(self, column: str) -> str:
        """SQL for a StringIds id column resolved to its text (older exports held text inline)."""
        return (f"(CASE WHEN typeof({column}) = 'integer' THEN (SELECT value FROM StringIds "
                f"WHERE id = {column}) ELSE {column} END)")


# -- streaming rows into Arrow -----------------------------------------------------------------


def _arrow_fields(fields):
    """(name, 'int'|'str') pairs -> Arrow fields; text arrives as bytes, checked afterwards."""
    import pyarrow as pa

    return [pa.field(name, pa.int64() if kind == "int" else pa.binary()) for name, kind in fields]


def _utf8(array):
    """Binary -> string; bytes that are not UTF-8 are decoded with replacement characters."""
    import pyarrow as pa

    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([_text(v) for v in array.to_pylist()], pa.string())


def _coerce(values, kind):
    """Slow path for a batch whose SQLite values do not have their declared types."""
    import pyarrow as pa

    if kind == "int":
        return pa.array([int(v) if isinstance(v, int) or (isinstance(v, float) and abs(v) < 2**63)
                         else None for v in values], pa.int64())
    return pa.array([_text(v) if isinstance(v, bytes) or v is None else str(v) for v in values],
                    pa.string())


def _to_arrow(rows: list[tuple], fields):
    """One fetched batch as an Arrow table, converted in C++ unless the values are unusual."""
    import pyarrow as pa

    try:
        arrays = pa.array(rows, type=pa.struct(_arrow_fields(fields))).flatten()
        arrays = [_utf8(a) if kind == "str" else a for a, (_, kind) in zip(arrays, fields)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arrays = [_coerce(col, kind) for col, (_, kind) in zip(zip(*rows), fields)]
    return pa.table(arrays, names=[name for name, _ in fields])


def stream(export: Export, sql: str, fields, params=()):
    """Yield Arrow tables of at most BATCH rows of a query (fetchmany, never fetchall)."""
    cursor = export.con.execute(sql, params)
    while rows := cursor.fetchmany(BATCH):
        yield _to_arrow(rows, fields)


def write_stream(batches, write) -> int:
    """Write each batch on a worker thread while the next one is fetched; returns the rows.

    Converting SQLite rows holds the GIL, while Arrow compute and Parquet encoding release it,
    so the two overlap. One worker keeps the batches in order (depth carries across them).
    """
    from concurrent.futures import ThreadPoolExecutor

    count, pending = 0, None
    with ThreadPoolExecutor(max_workers=1) as pool:
        for batch in batches:
            count += pending.result() if pending else 0
            pending = pool.submit(write, batch)
        count += pending.result() if pending else 0
    return count


def _write_batch(batch, writer, report_index: int, **constants):
    """Add the report index, durations and constant columns, null-fill the rest, write."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    columns = {"report_index": pa.repeat(report_index, n).cast(pa.int32())}
    if "start_ns" in batch.column_names:
        columns["duration_ns"] = pc.subtract(batch["end_ns"], batch["start_ns"])
    columns.update({k: pa.repeat(v, n) for k, v in constants.items()})
    for name in batch.column_names:
        columns[name] = batch[name]
    table = pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type))
                      for f in writer.schema})
    writer.write_arrow(table)
    return n


# -- tables ------------------------------------------------------------------------------------

# What each launch-level table reads: (column written, "int" | "str", export column, how):
# how is None (as stored), "string" (a StringIds id), "api" (a StringIds id naming a CUDA API
# function, without the "_v7000"-style ABI suffix, as `nsys stats` shows it) or "pid" (the
# process in a globalPid).
KERNELS = [
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
API_CALLS = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("thread_id", "int", "globalTid", None), ("correlation_id", "int", "correlationId", None),
    ("name", "str", "nameId", "api"), ("return_value", "int", "returnValue", None),
]
MEMOPS = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("bytes", "int", "bytes", None), ("device_id", "int", "deviceId", None),
    ("context_id", "int", "contextId", None), ("stream_id", "int", "streamId", None),
    ("correlation_id", "int", "correlationId", None),
]
OSRT_CALLS = [
    ("start_ns", "int", "start", None), ("end_ns", "int", "end", None),
    ("thread_id", "int", "globalTid", None), ("name", "str", "nameId", "string"),
    ("return_value", "int", "returnValue", None), ("nesting_level", "int", "nestingLevel", None),
]
# Every source table, in the order its rows are written: (triage table, export table, spec,
# constant columns, order).
SOURCES = [
    ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", KERNELS, {},
     ("start", "end", "deviceId", "streamId", "correlationId")),
    ("api_calls", "CUPTI_ACTIVITY_KIND_RUNTIME", API_CALLS, {"api": "runtime"}, ("start",)),
    ("api_calls", "CUPTI_ACTIVITY_KIND_DRIVER", API_CALLS, {"api": "driver"}, ("start",)),
    ("memops", "CUPTI_ACTIVITY_KIND_MEMCPY", MEMOPS, {"op": "memcpy"}, ("start",)),
    ("memops", "CUPTI_ACTIVITY_KIND_MEMSET", MEMOPS, {"op": "memset", "kind": "memset"},
     ("start",)),
    ("osrt_calls", "OSRT_API", OSRT_CALLS, {}, ("start",)),
]


def _expression(export: Export, table: str, column: str, how: str | None) -> str:
    expr = export.col(table, column)
    if expr == "NULL" or how is None:
        return expr
    if how == "pid":
        return f"(({expr} >> 24) & 16777215)"
    text = export.string(expr)
    if how == "api":
        return (f"(SELECT CASE substr(n, -6, 2) WHEN '_v' THEN substr(n, 1, length(n) - 6) "
                f"ELSE n END FROM (SELECT {text} AS n))")
    return text


def memcpy_kinds(export: Export) -> dict[int, str]:
    """copyKind -> 'HtoD' ..., from ENUM_CUDA_MEMCPY_OPER when the export has it."""
    if not {"id", "name"} <= export.columns("ENUM_CUDA_MEMCPY_OPER"):
        return dict(MEMCPY_KINDS)
    kinds = {}
    for kind_id, name in export.con.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
        name = _text(name) or ""
        match = re.fullmatch(r"CUDA_MEMCPY_KIND_(UVM_)?([A-Z])TO([A-Z])", name)
        if match:
            kinds[kind_id] = f"{'UVM ' if match.group(1) else ''}{match.group(2)}to{match.group(3)}"
        else:
            kinds[kind_id] = name.removeprefix("CUDA_MEMCPY_KIND_").capitalize() or str(kind_id)
    return kinds


def source_query(export: Export, table: str, spec, order) -> tuple[str, list, list]:
    """SELECT for one source table, from the columns it has: (sql, fields, parameters)."""
    select = [_expression(export, table, column, how) for _, _, column, how in spec]
    fields = [(name, kind) for name, kind, _, _ in spec]
    params: list = []
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY" and "copyKind" in export.columns(table):
        kinds = sorted(memcpy_kinds(export).items())
        select.append("CASE t.copyKind " + " ".join("WHEN ? THEN ?" for _ in kinds)
                      + " ELSE 'kind ' || t.copyKind END")
        fields.append(("kind", "str"))
        params = [value for pair in kinds for value in pair]
    keys = [export.col(table, c) for c in order if c in export.columns(table)]
    sql = (f"SELECT {', '.join(select)} FROM {table} t"
           + (f" ORDER BY {', '.join(keys)}" if keys else ""))
    return sql, fields, params


def _numbered(batches):
    """kernel_index: launch order by start, across batches."""
    import pyarrow as pa

    count = 0
    for batch in batches:
        yield batch.append_column("kernel_index",
                                  pa.array(range(count, count + batch.num_rows), pa.int64()))
        count += batch.num_rows


def write_sources(export: Export, tables, report_index: int) -> dict[str, int]:
    """Every launch-level table but NVTX; returns rows written per triage table."""
    counts: dict[str, int] = {}
    for name, table, spec, constants, order in SOURCES:
        counts.setdefault(name, 0)
        if table not in export.tables:
            continue
        sql, fields, params = source_query(export, table, spec, order)
        batches = stream(export, sql, fields, params)
        writer = tables.writer(name)
        counts[name] += write_stream(
            _numbered(batches) if name == "kernels" else batches,
            lambda batch, c=constants: _write_batch(batch, writer, report_index, **c))
    return counts


NVTX_FIELDS = [("event_type", "int"), ("start_ns", "int"), ("end_ns", "int"),
               ("thread_id", "int"), ("text", "str"), ("domain_id", "int")]


def nvtx_event_types(export: Export) -> dict[str, int]:
    """eventType ids by name, from ENUM_NSYS_EVENT_TYPE when the export has it."""
    types = dict(NVTX_EVENT_TYPES)
    if {"id", "name"} <= export.columns("ENUM_NSYS_EVENT_TYPE"):
        for type_id, name in export.con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if _text(name) in types:
                types[_text(name)] = type_id
    return types


def _nvtx_text(export: Export, alias: str) -> str:
    """Range text: inline `text`, or a registered string via `textId`."""
    parts = [f"{alias}.text"] if "text" in export.columns("NVTX_EVENTS") else []
    if "textId" in export.columns("NVTX_EVENTS"):
        parts.append(f"(SELECT value FROM StringIds WHERE id = {alias}.textId)")
    return f"coalesce({', '.join(parts)})" if len(parts) > 1 else (parts or ["NULL"])[0]


def write_nvtx_ranges(export: Export, tables, report_index: int) -> int:
    """Push/pop ranges (with their depth per thread) and start/end ranges; marks are skipped.

    One pass in start order: domain-create events come before the ranges of their domain, so
    their names are known by the time a range needs one.
    """
    if not {"eventType", "start"} <= export.columns("NVTX_EVENTS"):
        return 0
    types = nvtx_event_types(export)
    wanted = [types[name] for name in ("NvtxPushPopRange", "NvtxStartEndRange",
                                       "NvtxDomainCreate")]
    c = lambda name: export.col("NVTX_EVENTS", name, "e")  # noqa: E731 - local shorthand
    sql = (f"SELECT e.eventType, e.start, {c('end')}, {c('globalTid')}, "
           f"{_nvtx_text(export, 'e')}, {c('domainId')} FROM NVTX_EVENTS e "
           f"WHERE e.eventType IN (?, ?, ?) AND e.start IS NOT NULL "
           f"ORDER BY e.start, {c('end')} DESC")
    batches = stream(export, sql, NVTX_FIELDS, wanted)
    return write_stream(batches, NvtxBatches(tables.writer("nvtx_ranges"), report_index, wanted))


class NvtxBatches:
    """Writes NVTX batches in order, remembering domain names and push/pop ranges still open."""

    def __init__(self, writer, report_index: int, event_types: list[int]):
        self.writer, self.report_index = writer, report_index
        self.push_pop, self.start_end, self.create = event_types
        self.domains: dict[tuple[int, int], str] = {}  # (globalTid >> 24, domainId) -> name
        self.carry = None

    def __call__(self, batch) -> int:
        import pyarrow as pa
        import pyarrow.compute as pc

        creates = pc.equal(batch["event_type"], self.create)
        for row in batch.filter(creates).to_pylist():
            if row["thread_id"] is not None and row["domain_id"] is not None:
                self.domains[(row["thread_id"] >> 24, row["domain_id"])] = row["text"]
        ranges = batch.filter(pc.invert(creates))
        if ranges.num_rows == 0:
            return 0
        is_push_pop = pc.equal(ranges["event_type"], self.push_pop)
        table = pa.table({
            "start_ns": ranges["start_ns"], "end_ns": ranges["end_ns"],
            "thread_id": ranges["thread_id"], "text": ranges["text"],
            "domain": self._domain(ranges),
            "kind": pc.if_else(is_push_pop, "push_pop", "start_end"),
            "depth": self._depth(ranges, is_push_pop),
        })
        return _write_batch(table, self.writer, self.report_index)

    def _depth(self, ranges, is_push_pop):
        import pyarrow as pa
        import pyarrow.compute as pc

        nested = ranges.filter(is_push_pop)
        depth = pa.nulls(ranges.num_rows, pa.int32())
        if nested.num_rows == 0:
            return depth
        nested_depth, self.carry = push_pop_depth(nested, self.carry)
        return pc.replace_with_mask(depth, is_push_pop.combine_chunks(), nested_depth)

    def _domain(self, ranges):
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


def push_pop_depth(batch, carry):
    """Nesting depth of each push/pop range on its thread, for a batch sorted by start.

    Vectorized as a sweep: every range is a +1 event at its start and a -1 event at its end;
    in time order per thread, the running sum at a start event is the depth + 1. A stable sort
    on (thread, time) keeps the concatenation order for equal times: ends first, then starts
    (parents before children, as the query orders them), then the ends of empty ranges. Ranges
    still open at the end of a batch are carried into the next as starts at -infinity.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    c_tid, c_end = carry or (pa.array([], pa.int64()), pa.array([], pa.int64()))
    start, tid = batch["start_ns"].combine_chunks(), batch["thread_id"].combine_chunks()
    end = pc.fill_null(batch["end_ns"].combine_chunks(), INT64_MAX)
    empty = pc.less_equal(end, start)
    lasting = pc.invert(empty)
    fill = lambda like, v: pa.repeat(v, len(like)).cast(pa.int64())  # noqa: E731 - shorthand
    segments = [  # (thread, time, +1/-1, row of a batch start or -1), in tie-breaking order
        (c_tid, c_end, fill(c_tid, -1), fill(c_tid, -1)),
        (tid.filter(lasting), end.filter(lasting), fill(tid.filter(lasting), -1),
         fill(tid.filter(lasting), -1)),
        (c_tid, fill(c_tid, -INT64_MAX), fill(c_tid, 1), fill(c_tid, -1)),
        (tid, start, fill(tid, 1), pa.array(range(n), pa.int64())),
        (tid.filter(empty), start.filter(empty), fill(tid.filter(empty), -1),
         fill(tid.filter(empty), -1)),
    ]
    events = pa.table([pa.concat_arrays([seg[i] for seg in segments]) for i in range(4)],
                      names=["tid", "time", "delta", "row"])
    order = pc.sort_indices(events, [("tid", "ascending"), ("time", "ascending")])
    events = events.take(order)
    level = pc.subtract(pc.cumulative_sum(events["delta"]), 1)
    starts = pc.greater_equal(events["row"], 0)
    depth = pa.table({"row": events["row"].filter(starts), "depth": level.filter(starts)})
    depth = depth.sort_by("row")["depth"].combine_chunks().cast(pa.int32())
    last = start[n - 1]
    keep_c, keep_b = pc.greater(c_end, last), pc.greater(end, last)
    carry = (pa.concat_arrays([c_tid.filter(keep_c), tid.filter(keep_b)]),
             pa.concat_arrays([c_end.filter(keep_c), end.filter(keep_b)]))
    return depth, carry


# -- provenance --------------------------------------------------------------------------------


def driver_version(raw: str | None) -> str | None:
    """'560.94' stays; exports before 2023 hold digits: 4602704 -> '460.27.04', 47082 -> '470.82'.

    The last two digits are the patch and the first three the major, whatever the length in
    between (52510517 -> '525.105.17'), as the corpus's driver versions show.
    """
    raw = (raw or "").strip()
    if not raw or raw == "0":
        return None
    if not raw.isdigit() or len(raw) < 4:
        return raw
    major, rest = raw[:3], raw[3:]
    return f"{major}.{rest}" if len(rest) <= 2 else f"{major}.{rest[:-2]}.{rest[-2:]}"


def cuda_version(raw: str | None) -> str | None:
    """CudaDriverVersion 12060 -> '12.6'."""
    if not (raw or "").strip().isdigit() or int(raw) == 0:
        return None
    value = int(raw)
    return f"{value // 1000}.{value % 1000 // 10}"


def _gpu(row: dict) -> dict:
    major, minor = row.get("computeMajor"), row.get("computeMinor")
    clock = row.get("clockRate")
    return {
        "name": (_text(row.get("name")) or "").strip() or None,
        "index": row.get("id"),
        "compute_capability": f"{major}.{minor}" if major is not None else None,
        "sm_count": row.get("smCount"),
        "max_sm_clock_khz": clock // 1000 if isinstance(clock, int) else None,
        "max_mem_clock_khz": None,
        "memory_bytes": row.get("totalMemory"),
        "l2_cache_bytes": row.get("l2CacheSize"),
        "chip": _text(row.get("chipName")) or None,
        "uuid": _text(row.get("uuid")) or None,
        "bus": _text(row.get("busLocation")) or None,
    }


def gpus(export: Export) -> list[dict]:
    """TARGET_INFO_GPU rows, same keys as the ncu reader plus uuid and bus, by device id."""
    if "TARGET_INFO_GPU" not in export.tables:
        return []
    cursor = export.con.execute("SELECT * FROM TARGET_INFO_GPU")
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, row)) for row in cursor]
    return [_gpu(r) for r in sorted(rows, key=lambda r: (r.get("id") is None, r.get("id") or 0))]


def _host(system: dict, info: NsysFileInfo | None, capture: dict) -> dict:
    os_name = " ".join(p for p in (system.get("OsDescription"),
                                   system.get("SoftwareReleaseVersion")) if p)
    platform = system.get("SoftwarePlatform")
    return {
        "name": (system.get("Hostname") or capture.get("DEVICE_DISPLAY_NAME")
                 or (info.host if info else None) or None),
        "os": os_name or None,
        "cpu": system.get("CpuDescription") or None,
        "arch": system.get("CpuArchitecture") or system.get("HardwarePlatform") or None,
        "platform": PLATFORMS.get((platform or "").upper(), (platform or "").lower() or None),
    }


def split_environment(text: str | None) -> dict[str, str] | None:
    """DeviceEnvironment: NUL-separated before 2023, ';'-separated since (values may hold ';')."""
    if not text:
        return None
    out: dict[str, str] = {}
    last = None
    for item in text.split("\x00" if "\x00" in text else ";"):
        name, eq, value = item.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
            out[name], last = value, name
        elif last is not None and "\x00" not in text:
            out[last] += ";" + item  # a ';' inside the previous value (LS_COLORS, PROMPT_COMMAND)
    return out or None


def _captured_environment(rows: list[tuple[str, str]]) -> dict[str, str] | None:
    """PROCESS_0:ENVIRONMENT_VARIABLE rows, NAME="value"."""
    out = {}
    for name, value in rows:
        if name == "PROCESS_0:ENVIRONMENT_VARIABLE" and value and "=" in value:
            key, _, raw = value.partition("=")
            out[key] = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw
    return out or None


def _application(capture: dict, rows, parsed: ParsedCommand) -> dict | None:
    """The profiled program: META_DATA_CAPTURE's PROCESS_0, else from the command line."""
    if capture.get("PROCESS_0:COMMAND"):
        args = sorted(((int(n.rsplit("_", 1)[1]), v) for n, v in rows
                       if re.fullmatch(r"PROCESS_0:ARGUMENT_\d+", n or "")))
        return {"argv": [capture["PROCESS_0:COMMAND"]] + [v for _, v in args]}
    return {"argv": parsed.application} if parsed.application else None


def _trace(report: dict) -> str | None:
    """CAPTURE_EVENT_TYPE rows -> the --trace spelling, in nsys's own default order."""
    names = {"Cuda": "cuda", "NvtxEvents": "nvtx", "OSRuntime": "osrt", "Graphics": "opengl"}
    kinds = [k for k in (report.get("CAPTURE_EVENT_TYPE") or "").split(",") if k]
    if not kinds:
        return None
    spelled = [names.get(k, k.lower()) for k in kinds]
    order = list(names.values())
    return ",".join(sorted(spelled, key=lambda k: (order.index(k) if k in order else 99, k)))


def _perf_mode(report: dict, key: str) -> str | None:
    """A Linux perf switch: 'none' when off, else its collection scope (process-tree ...)."""
    value = report.get(f"LINUX_PERF_OPTIONS:{key}")
    if value is None:
        return None
    if value != "true":
        return "none"
    mode = report.get("LINUX_PERF_OPTIONS:COLLECTION_MODE") or "ProcessTree"
    return re.sub(r"(?<!^)(?=[A-Z])", "-", mode).lower()


def _seconds(milliseconds: str | None) -> str | None:
    return f"{int(milliseconds) / 1000:g}" if (milliseconds or "").isdigit() else None


START_TRIGGERS = {"Immediate": "none", "CudaProfilerApi": "cudaProfilerApi", "Nvtx": "nvtx",
                  "Hotkey": "hotkey"}
# Each setting: (name, reading of META_DATA_CAPTURE, command-line options, nsys profile's
# default). Defaults are those of `nsys profile --help` on Linux; --trace has defaulted to
# cuda,nvtx,osrt,opengl in every version the corpus holds (2019.5 ... 2026.1: the reports made
# without -t record exactly those four in META_DATA_CAPTURE, and nsys 2022.4's help says so).
SETTINGS = [
    ("trace", _trace, ("--trace",), "cuda,nvtx,osrt,opengl"),
    ("sample", lambda r: _perf_mode(r, "COLLECT_IP_BACKTRACE_SAMPLES"), ("--sample",),
     "process-tree"),
    ("cpuctxsw", lambda r: _perf_mode(r, "COLLECT_CPU_CTXSW_TRACE"), ("--cpuctxsw",),
     "process-tree"),
    ("capture_range", lambda r: START_TRIGGERS.get(r.get("START_TRIGGER"), r.get("START_TRIGGER")),
     ("--capture-range",), "none"),
    ("capture_range_end", lambda r: None, ("--capture-range-end",), "stop-shutdown"),
    ("delay", lambda r: _seconds(r.get("START_DELAY_MS")), ("--delay",), "0"),
    ("duration", lambda r: None, ("--duration",), "0"),
    ("cuda_memory_usage", lambda r: r.get("COLLECT_GPU_MEMORY_USAGE"), ("--cuda-memory-usage",),
     "false"),
    ("gpu_metrics", lambda r: None, ("--gpu-metrics-devices", "--gpu-metrics-device"), "none"),
]


def derive_settings(report: dict, command: ParsedCommand) -> tuple[dict, dict]:
    """Each setting's value and source: "report" (META_DATA_CAPTURE), "command" or "default".

    Defaults are `nsys profile`'s; other subcommands (`nsys nvprof`) have their own, so their
    settings stay unknown (None) unless recorded.
    """
    settings, sources = {}, {}
    for name, from_report, options, default in SETTINGS:
        given = [",".join(command.options[o]) for o in options if command.has(o)]
        fallback = default if command.subcommand in (None, "profile") else None
        candidates = (("report", from_report(report)), ("command", given[0] if given else None),
                      ("default", fallback))
        settings[name], sources[name] = next(((v, s) for s, v in candidates if v is not None),
                                             (None, "default"))
    return settings, sources


def _export_meta(export: Export) -> dict:
    """META_DATA_EXPORT (nsys 2023.3 on) or EXPORT_META_DATA (before); {} in older exports."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in export.tables:
            return dict(export.pairs(table))
    return {}


def _created(export: Export) -> str | None:
    if "utcEpochNs" not in export.columns("TARGET_INFO_SESSION_START_TIME"):
        return None
    row = export.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return from_epoch(row[0] / 1e9) if row and isinstance(row[0], int) else None


def _notices(counts: dict, system: dict, tool_version: str | None) -> list[str]:
    notices = []
    if counts.get("kernels", 0) == 0 and counts.get("api_calls", 0) > 0:
        wsl = "; WSL2 captures often lack GPU activity" if "WSL2" in (
            system.get("SoftwareReleaseVersion") or "") else ""
        notices.append(f"no kernel activity recorded ({counts['api_calls']} CUDA API calls but no "
                       f"GPU kernel rows{wsl})")
    if tool_version is None:
        notices.append("nsys version unknown: this export records no nsys version")
    return notices


def _recorded(rows: list[tuple[str, str]]) -> dict[str, str]:
    """META_DATA_CAPTURE as {name: value}; CAPTURE_EVENT_TYPE repeats, so its values are joined."""
    out: dict[str, str] = {}
    for name, value in rows:
        joined = name == "CAPTURE_EVENT_TYPE" and name in out
        out[name] = f"{out[name]},{value}" if joined else value
    return out


def provenance(export: Export, info: NsysFileInfo | None, by: str, exporter: str | None,
               counts: dict) -> dict:
    """The manifest parts an nsys report supplies, with the same keys as the ncu reader's."""
    capture_rows = export.pairs("META_DATA_CAPTURE")
    report = _recorded(capture_rows)
    system = dict(reversed(export.pairs("TARGET_INFO_SYSTEM_ENV")))
    meta = _export_meta(export)
    exported_by = meta.get("EXPORT_PRODUCT_VERSION") or version_number(exporter)
    schema = meta.get("EXPORT_SCHEMA_VERSION")
    tool_version = version_number(info.version) if info else version_number(exported_by)
    command = info.command if info else None
    parsed = parse_command(command or "")
    settings, sources = derive_settings(report, parsed)
    return {
        "tool": "nsys",
        "tool_version": tool_version,
        "created": _created(export),
        "command": command,
        "environment": {
            "driver_version": driver_version(system.get("NvDriverVersion")),
            "cuda_version": cuda_version(system.get("CudaDriverVersion")),
            "gpus": gpus(export),
            "host": _host(system, info, report),
            "working_directory": report.get("PROCESS_0:WORKING_DIR") or None,
            "variables": (_captured_environment(capture_rows)
                          or split_environment(system.get("DeviceEnvironment"))),
        },
        "application": _application(report, capture_rows, parsed),
        "settings": settings,
        "settings_source": sources,
        "evidence": {},
        "versions": {"nsys capture": info.version if info else None,
                     "nsys export": exported_by, "export schema": schema},
        "export": {"nsys_version": exported_by, "schema_version": schema, "by": by},
        "notices": _notices(counts, system, tool_version),
    }


# -- the reader --------------------------------------------------------------------------------


class PreparedNsys:
    """An nsys report validated (and a .nsys-rep exported to a temp dir), ready to be written."""

    tool = "nsys"

    def __init__(self, path: Path, fmt: str, info: NsysFileInfo | None = None,
                 exporter: str | None = None, tempdir: str | None = None):
        self.path, self.format, self.info = path, fmt, info
        self.exporter, self.tempdir = exporter, tempdir
        self.export: Export | None = None

    @classmethod
    def open(cls, path: Path, fmt: str, nsys: str | None = None) -> "PreparedNsys":
        """Validate; for .nsys-rep/.qdrep, export with nsys first. Nothing touches the store."""
        path = Path(path)
        prepared = cls(path, fmt, None if fmt == "sqlite" else read_nsys_file(path))
        try:
            prepared._load(nsys)
        except BaseException:
            prepared.close()
            raise
        return prepared

    def _load(self, nsys: str | None) -> None:
        sqlite_path = self.path
        if self.info is not None:
            self.tempdir = tempfile.mkdtemp(prefix="triage-nsys-")
            exported = export_sqlite(self.path, self.info, nsys, self.tempdir)
            self.exporter, sqlite_path = exported.nsys_version, exported.sqlite
        self.export = Export(self.path, open_export(sqlite_path))
        self.export.check_is_nsys()

    def write_tables(self, tables, report_index: int) -> dict:
        counts = write_sources(self.export, tables, report_index)
        counts["nvtx_ranges"] = write_nvtx_ranges(self.export, tables, report_index)
        by = "user" if self.format == "sqlite" else "triage"
        return provenance(self.export, self.info, by, self.exporter, counts)

    def close(self) -> None:
        if self.export is not None:
            self.export.con.close()
            self.export = None
        if self.tempdir:
            shutil.rmtree(self.tempdir, ignore_errors=True)
            self.tempdir = None
