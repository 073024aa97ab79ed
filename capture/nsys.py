"""Reading Nsight Systems reports (.nsys-rep, legacy .qdrep, and their .sqlite exports).

A .nsys-rep can only be read by exporting it with nsys (`nsys_file.export_report`: Arrow, else
SQLite); a user's .sqlite export is read as it is (`nsys_export` opens either). `nsys_tables`
reads the export's tables in batches; this module reads how the report was captured
(versions, GPUs, host, environment, settings) and ties the two together in `PreparedNsys`.
"""

from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.base.duck import import_duckdb
from triage.base.hashing import hash_file
from triage.capture.nsys_export import Export, as_text, open_export
from triage.capture.nsys_file import (NsysFileInfo, export_report, read_nsys_file,
                                      version_number)
from triage.capture.nsys_tables import (Implausible, nvtx_batches, source_batches,
                                       started_reads)
from triage.capture.profiler_args import ParsedCommand, parse_command
from triage.capture.settings import joined_option, resolve
from triage.base.errors import UnsupportedReport
from triage.base.timeutil import from_epoch

if TYPE_CHECKING:
    from triage.capture.formats import TableBatch
    from triage.capture.nsys_tables import Started

PLATFORMS = {"L4X": "linux", "L4T": "linux", "LINUX": "linux", "WINDOWS": "windows",
             "QNX": "qnx", "ANDROID": "android", "MACOS": "osx"}


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
    text = (raw or "").strip()
    if not text.isdigit() or int(text) == 0:
        return None
    value = int(text)
    return f"{value // 1000}.{value % 1000 // 10}"


def _gpu(row: dict) -> dict:
    major, minor = row.get("computeMajor"), row.get("computeMinor")
    clock = row.get("clockRate")
    return {
        "name": (as_text(row.get("name")) or "").strip() or None,
        "index": row.get("id"),
        "compute_capability": f"{major}.{minor}" if major is not None else None,
        "sm_count": row.get("smCount"),
        "max_sm_clock_khz": clock // 1000 if isinstance(clock, int) else None,
        "max_mem_clock_khz": None,
        "memory_bytes": row.get("totalMemory"),
        "l2_cache_bytes": row.get("l2CacheSize"),
        "chip": as_text(row.get("chipName")) or None,
        "uuid": as_text(row.get("uuid")) or None,
        "bus": as_text(row.get("busLocation")) or None,
    }


def gpus(export: Export) -> list[dict]:
    """TARGET_INFO_GPU rows, same keys as the ncu reader plus uuid and bus, by device id."""
    if "TARGET_INFO_GPU" not in export.tables:
        return []
    names, values = export.rows("SELECT * FROM TARGET_INFO_GPU")
    rows = [dict(zip(names, row, strict=True)) for row in values]
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


TRACE_NAMES = {"Cuda": "cuda", "NvtxEvents": "nvtx", "OSRuntime": "osrt", "Graphics": "opengl"}


def _trace(report: dict) -> str | None:
    """CAPTURE_EVENT_TYPE rows -> the --trace spelling, in nsys's own default order."""
    kinds = [k for k in (report.get("CAPTURE_EVENT_TYPE") or "").split(",") if k]
    return _trace_spelling([TRACE_NAMES.get(k, k.lower()) for k in kinds]) if kinds else None


def _trace_spelling(kinds: list[str]) -> str:
    """--trace values in nsys's own default order (cuda, nvtx, osrt, opengl), others after."""
    order = list(TRACE_NAMES.values())
    return ",".join(sorted(kinds, key=lambda k: (order.index(k) if k in order else 99, k)))


# An export's tables that hold one trace domain's events: nsys writes a table only where that
# domain recorded something, so what is there proves the domain was traced (what is missing
# proves nothing: a traced domain with no events leaves no table).
DOMAIN_TABLES = {"CUPTI_ACTIVITY_KIND_RUNTIME": "cuda", "NVTX_EVENTS": "nvtx", "OSRT_API": "osrt",
                 "OPENGL_API": "opengl", "VULKAN_API": "vulkan", "CUBLAS_EVENTS": "cublas",
                 "CUDNN_EVENTS": "cudnn", "MPI_P2P_EVENTS": "mpi", "MPI_COLLECTIVES_EVENTS": "mpi"}


def traced_domains(tables: Iterable[str]) -> str | None:
    """The trace domains an export's tables prove were traced, in --trace spelling; None when
    none is (then nothing is proved)."""
    kinds = sorted({DOMAIN_TABLES[t] for t in tables if t in DOMAIN_TABLES})
    return _trace_spelling(kinds) if kinds else None


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
    return f"{int(milliseconds) / 1000:g}" if milliseconds and milliseconds.isdigit() else None


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


def _switch(command: ParsedCommand, option: str, on: str, off: str) -> str | None:
    """An nvprof on/off switch as the nsys setting it stands for; None when not given."""
    value = command.last(option)
    return None if value is None else on if value == "on" else off


def _nvprof_trace(command: ParsedCommand) -> str | None:
    """--trace from nvprof's switches (the user guide maps --profile-api-trace to cuda,
    --cpu-thread-tracing to osrt, --annotate-mpi to mpi); None when none of them is given."""
    api, threads, mpi = (command.last(o) for o in
                         ("--profile-api-trace", "--cpu-thread-tracing", "--annotate-mpi"))
    if api is None and threads is None and mpi is None:
        return None
    kinds = ["nvtx"] + ([] if api == "none" else ["cuda"]) + (["osrt"] if threads == "on" else [])
    return _trace_spelling(kinds + ([] if mpi in (None, "off") else ["mpi"]))


def _unknown(command: ParsedCommand) -> None:
    return None


# `nsys nvprof` takes nvprof's switches, mapped to nsys settings as the nsys user guide's
# "Migrating from NVIDIA nvprof" says, and has its own defaults: `nsys nvprof --help` (2022.4)
# for sampling (--cpu-profiling off) and the capture range (--profile-from-start on); for trace,
# what its reports record (cuda,nvtx: cardiac-simulation, nsys 2021.3.3; NVIDIA_SGEMM_PRACTICE,
# 2023.2.3); delay, GPU metrics and memory usage have no nvprof switch, so stay off. Context
# switches and the capture range's end are not documented: unknown. {setting: (from argv,
# default)}.
NVPROF_SETTINGS: dict[str, tuple[Callable[[ParsedCommand], str | None], str | None]] = {
    "trace": (_nvprof_trace, "cuda,nvtx"),
    "sample": (lambda c: _switch(c, "--cpu-profiling", "process-tree", "none"), "none"),
    "cpuctxsw": (_unknown, None),
    "capture_range": (lambda c: _switch(c, "--profile-from-start", "none", "cudaProfilerApi"),
                      "none"),
    "capture_range_end": (_unknown, None),
    "delay": (_unknown, "0"),
    "duration": (lambda c: c.last("--timeout"), "0"),
    "cuda_memory_usage": (_unknown, "false"),
    "gpu_metrics": (_unknown, "none"),
}


def derive_settings(report: dict, command: ParsedCommand) -> tuple[dict, dict]:
    """Each setting's value and source: "report" (META_DATA_CAPTURE), "command" or "default".

    Defaults are `nsys profile`'s, and `nsys nvprof`'s for its nvprof-style switches
    (NVPROF_SETTINGS); other subcommands' settings stay unknown (None) unless recorded.
    """
    rows = []
    for name, from_report, options, profile_default in SETTINGS:
        default: str | None
        if command.subcommand == "nvprof":
            from_command, default = NVPROF_SETTINGS[name]
            given = from_command(command)
        else:
            given = joined_option(command, *options)
            default = profile_default if command.subcommand in (None, "profile") else None
        rows.append((name, from_report(report), given, default))
    return resolve(rows)


def _export_meta(export: Export) -> dict:
    """META_DATA_EXPORT (nsys 2023.3 on) or EXPORT_META_DATA (before); {} in older exports."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in export.tables:
            return dict(export.pairs(table))
    return {}


def _created(export: Export) -> str | None:
    if "utcEpochNs" not in export.columns("TARGET_INFO_SESSION_START_TIME"):
        return None
    rows = export.rows("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[1]
    return from_epoch(rows[0][0] / 1e9) if rows and isinstance(rows[0][0], int) else None


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


def _recorded(rows: list[tuple[str, str]], info: NsysFileInfo | None) -> dict[str, str]:
    """META_DATA_CAPTURE as {name: value}; CAPTURE_EVENT_TYPE repeats, so its values are joined.
    An export without it (nsys 2023.2 and older write no META_DATA_CAPTURE) takes the trace kinds
    the report file itself lists (nsys_file: "Analysis Options Data")."""
    out: dict[str, str] = {}
    for name, value in rows:
        joined = name == "CAPTURE_EVENT_TYPE" and name in out
        out[name] = f"{out[name]},{value}" if joined else value
    if "CAPTURE_EVENT_TYPE" not in out and info is not None and info.trace_kinds:
        out["CAPTURE_EVENT_TYPE"] = ",".join(info.trace_kinds)
    return out


def _cuda_version_of(system: dict) -> dict[str, str]:
    """{"cuda_version_of": "library"} when CudaDriverVersion is not a running driver's: with no
    GPU driver loaded (NvDriverVersion 0) it is what the installed CUDA driver library (libcuda)
    answers without a GPU, e.g. 12.2 from Debian's libcuda1 535 on a machine with no GPU (not
    nsys's: it bundles CUPTI 10.0-11.8). Empty otherwise, so other manifests stay as they were."""
    if (system.get("NvDriverVersion") or "").strip() == "0" and \
            cuda_version(system.get("CudaDriverVersion")):
        return {"cuda_version_of": "library"}
    return {}


def provenance(export: Export, info: NsysFileInfo | None, by: str, exporter: str | None,
               counts: dict, export_format: str = "sqlite") -> dict:
    """The manifest parts an nsys report supplies, with the same keys as the ncu reader's."""
    capture_rows = export.pairs("META_DATA_CAPTURE")
    report = _recorded(capture_rows, info)
    system = dict(reversed(export.pairs("TARGET_INFO_SYSTEM_ENV")))
    meta = _export_meta(export)
    exported_by = meta.get("EXPORT_PRODUCT_VERSION") or version_number(exporter)
    schema = meta.get("EXPORT_SCHEMA_VERSION")
    tool_version = version_number(info.version) if info else version_number(exported_by)
    command = info.command if info else None
    parsed = parse_command(command or "")
    settings, sources = derive_settings(report, parsed)
    if command is None and sources["trace"] == "default":  # nothing recorded it: what it proves
        derived = traced_domains(export.tables)
        if derived is not None:
            settings["trace"], sources["trace"] = derived, "derived"
    return {
        "tool": "nsys",
        "tool_version": tool_version,
        "created": _created(export),
        "command": command,
        "environment": {
            "driver_version": driver_version(system.get("NvDriverVersion")),
            "cuda_version": cuda_version(system.get("CudaDriverVersion")),
            **_cuda_version_of(system),
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
        "export": {"nsys_version": exported_by, "schema_version": schema, "by": by,
                   "format": export_format},
        "notices": _notices(counts, system, tool_version),
    }


# -- the reader --------------------------------------------------------------------------------


def system_temp(suffix: str) -> Path:
    """A new empty file for an export when no store stages it (the reader used on its own)."""
    fd, name = tempfile.mkstemp(prefix="triage-nsys-", suffix=suffix)
    os.close(fd)
    return Path(name)


class PreparedNsys:
    """An nsys report validated (and a .nsys-rep exported), ready to be written.

    `staging(suffix)` makes the empty file an export is written to: the archive passes one in
    its store, so that what a killed archive leaves is a temp file `triage gc` removes."""

    tool = "nsys"

    def __init__(self, path: Path, fmt: str, info: NsysFileInfo | None = None,
                 staging: Callable[[str], Path] = system_temp):
        self.path, self.format, self.info = path, fmt, info
        self.staging = staging
        self.exporter: str | None = None
        self._files: list[Path] = []  # the exports written, removed on close
        self.export: Export | None = None
        self.export_format = "sqlite"
        self.sha256 = ""
        self._implausible = Implausible()
        self._counts: dict[str, int] = {}  # rows per triage table, as the batches pass
        self._started: Started = {}  # the reads `batches` started, early or not

    @classmethod
    def open(cls, path: Path, fmt: str, nsys: str | None = None, sha256: str | None = None,
             staging: Callable[[str], Path] = system_temp) -> "PreparedNsys":
        """Validate; for .nsys-rep/.qdrep, export with nsys first (into `staging`)."""
        path = Path(path)
        prepared = cls(path, fmt, None if fmt == "sqlite" else read_nsys_file(path), staging)
        prepared.sha256 = sha256 or ""
        try:
            prepared._load(nsys)
        except BaseException:
            prepared.close()
            raise
        return prepared

    def _load(self, nsys: str | None) -> None:
        """Export (a .nsys-rep) and open the export; the report is hashed meanwhile, and what
        reading an export imports is imported while nsys runs."""
        with ThreadPoolExecutor(max_workers=1) as worker:
            digest = None if self.sha256 else worker.submit(hash_file, self.path)
            if self.info is None:
                self.export = _checked(open_export(self.path))
            else:
                imported = worker.submit(import_readers)
                self.export = self._exported(nsys, self.info)
                imported.result()
            if digest is not None:
                self.sha256 = digest.result()[0]

    def _exported(self, nsys: str | None, info: NsysFileInfo) -> Export:
        """nsys's Arrow export; its SQLite export when the Arrow one cannot be read as one."""
        exported = export_report(self.path, info, nsys, self._new_file)
        self.exporter, self.export_format = exported.nsys_version, exported.format
        try:
            return _checked(open_export(self.path, exported.file, exported.format))
        except UnsupportedReport:
            if exported.format == "sqlite":
                raise
        Path(exported.file).unlink(missing_ok=True)
        exported = export_report(self.path, info, nsys, self._new_file, ("sqlite",))
        self.export_format = exported.format
        return _checked(open_export(self.path, exported.file, exported.format))

    def _new_file(self, suffix: str) -> Path:
        made = self.staging(suffix)
        self._files.append(made)
        return made

    def batches(self, report_index: int) -> Iterator[TableBatch]:
        """The launch-level tables, then the NVTX ranges, batch by batch. The largest one's
        read starts now (`started_reads`: SQLite sorts it while the archive sets up); when it
        holds CUDA activity, DuckDB, which its summaries need, is imported meanwhile."""
        export = self._export()
        self._close_reads()
        self._started = started_reads(export)
        if self._started and "NVTX_EVENTS" not in self._started:
            import_duckdb()
        return self._batches(export, report_index)

    def _batches(self, export: Export, report_index: int) -> Iterator[TableBatch]:
        yield from source_batches(export, report_index, self._implausible, self._counts,
                                  self._started)
        yield from nvtx_batches(export, report_index, self._implausible, self._counts,
                                self._started)

    def provenance(self) -> dict[str, Any]:
        by = "user" if self.format == "sqlite" else "triage"
        found = provenance(self._export(), self.info, by, self.exporter, self._counts,
                           self.export_format)
        found["notices"] += self._implausible.notices()
        return found

    def _export(self) -> Export:
        if self.export is None:
            raise RuntimeError(f"{self.path}: read after close")
        return self.export

    def _close_reads(self) -> None:
        """Stop the reads `batches` started, early or not (their threads), before the export
        closes under them."""
        for read in self._started.values():
            read.close()
        self._started = {}

    def close(self) -> None:
        self._close_reads()
        if self.export is not None:
            self.export.close()
            self.export = None
        for made in self._files:
            made.unlink(missing_ok=True)
        self._files = []


def import_readers() -> None:
    """Import DuckDB and pyarrow.compute, which the Arrow export's reader and the summaries
    need, and open the summaries' connection: 0.2 s that would otherwise follow
    `nsys export`, which leaves a core idle (a capture calls it while its profiler runs)."""
    import pyarrow.compute  # noqa: F401

    from triage.base.duck import summary_connection

    summary_connection()


def _checked(export: Export) -> Export:
    """The export, if it is an nsys export; closed (not leaked) when it is not."""
    try:
        export.check_is_nsys()
    except BaseException:
        export.close()
        raise
    return export
