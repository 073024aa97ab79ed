"""An Nsight Systems report file (.nsys-rep, legacy .qdrep): its index, read without nsys, and its
export to SQLite with the user's nsys.

Only nsys can turn a report into tables, and an nsys older than the report refuses it ("Version
number is invalid", "ProtobufParseException"). The report's own index says which nsys wrote it,
so triage can record the capturing version even when another nsys exports the file, and can say
"this nsys is too old" before running it.

Format (checked on every corpus report, nsys 2019.5 to 2026.1): the file starts with
b"NVIDIA Tegra Profiler Report" and ends with a little-endian uint64 offset followed by the 8
bytes b"U3w[END]". The bytes from that offset up to the last 16 are a protobuf message whose
repeated field 1 lists the sections as {1: name, 2: offset, 3: size}. The section "UI Data" is a
message with string fields 4 (capture start, local time without zone), 5 and 40 (host name),
6 (nsys version, e.g. "2026.1.1.204-261137176666v0") and 25 (the nsys command line).

The section "Analysis Options Data" holds what was traced: its field 2 is a message whose
repeated varint field 1 lists the trace kinds, in the order the report's META_DATA_CAPTURE
lists them as CAPTURE_EVENT_TYPE (TRACE_KINDS). Checked against every corpus report that has
both (0x822a5b87 report1/2, streamSimple, unschlagbar prof: the same kinds, in the same order)
and against `--trace` on the command line (demo: nvtx,osrt; unschlagbar: cuda; DongHun:
mpi,cuda,nvtx). Exports by nsys 2023.2 and older have no META_DATA_CAPTURE, and
`nsys nvprof` takes no --trace, so this is the only record of what such a report traced.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triage.capture.formats import NSYS_MAGIC
from triage.capture.protowire import Field, WireError, decode, iter_fields, submessage
from triage.base.errors import DiskFull, ToolMissing, ToolTooOld, UnsupportedReport

TRAILER_MAGIC = b"U3w[END]"
TRAILER_SIZE = 16
# The index and "UI Data" are a few hundred bytes in every corpus report; anything far larger
# is not a real index, and reading it whole could exhaust memory.
MAX_INDEX = 1 << 20
MAX_UI_DATA = 1 << 20
MAX_OPTIONS = 1 << 20
# How far back from the end an end marker followed by appended bytes is looked for.
TAIL_SCAN = 1 << 20
UI_DATA = {
    4: Field("created_local", "str"), 5: Field("host", "str"), 6: Field("version", "str"),
    25: Field("command", "str"), 40: Field("target_host", "str"),
}
ANALYSIS_OPTIONS = {2: Field("trace", {1: Field("kinds", "uint", repeated=True)})}
# Trace kind codes as META_DATA_CAPTURE's CAPTURE_EVENT_TYPE names them. Reports of nsys 2019.5
# to 2021.3 list one more, 1, under every `nsys profile` whatever --trace said: its meaning is
# unknown, so a list holding it (or any code not here) is not read (the command line is asked).
TRACE_KINDS = {123: "Cuda", 12: "NvtxEvents", 127: "OSRuntime", 124: "Graphics"}
VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


@dataclass
class NsysFileInfo:
    """What the report's index and "UI Data" section say about the capture."""

    sections: dict[str, tuple[int, int]] = field(default_factory=dict)
    version: str | None = None
    created_local: str | None = None
    host: str | None = None
    command: str | None = None
    # What "Analysis Options Data" says was traced, as CAPTURE_EVENT_TYPE names (None: unknown)
    trace_kinds: tuple[str, ...] | None = None


def version_number(version: str | None) -> str | None:
    """'2026.1.1.204-261137176666v0' -> '2026.1.1.204' (the build suffix dropped)."""
    match = VERSION.match(version or "")
    return match.group(0) if match else None


def version_tuple(version: str | None) -> tuple[int, ...]:
    """'2022.4.2.1-df9881f' -> (2022, 4, 2, 1); () when there is no version."""
    match = VERSION.match(version or "")
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


def _corrupt(path, what: str) -> UnsupportedReport:
    return UnsupportedReport(f"{path}: truncated or corrupt Nsight Systems report ({what}); "
                             "copy the report again from the machine that captured it")


def _read_at(stream, offset: int, size: int) -> bytes:
    stream.seek(offset)
    return stream.read(size)


def _index_bounds(path, stream, size: int) -> tuple[int, int]:
    """(offset, size) of the index message, checked against the file size."""
    if size < len(NSYS_MAGIC) + TRAILER_SIZE:
        raise _corrupt(path, "too short")
    trailer = _read_at(stream, size - TRAILER_SIZE, TRAILER_SIZE)
    if trailer[8:] != TRAILER_MAGIC:
        raise _corrupt(path, "no end-of-file index")
    (offset,) = struct.unpack("<Q", trailer[:8])
    end = size - TRAILER_SIZE
    if not len(NSYS_MAGIC) <= offset <= end or end - offset > MAX_INDEX:
        raise _corrupt(path, "index offset out of range")
    return offset, end - offset


def _sections(path, index: bytes, limit: int) -> dict[str, tuple[int, int]]:
    """{section name: (offset, size)}; every section must lie before the index."""
    entry = {1: Field("name", "str"), 2: Field("offset", "uint"), 3: Field("size", "uint")}
    out: dict[str, tuple[int, int]] = {}
    try:
        for number, wire, raw in iter_fields(index):
            message = submessage(wire, raw)
            if number != 1 or message is None:
                continue
            item = decode(message, entry)
            start, length = item.get("offset", -1), item.get("size", -1)
            if start < 0 or length < 0 or start + length > limit:
                raise _corrupt(path, f"section {item.get('name')!r} out of range")
            out.setdefault(item.get("name", ""), (start, length))
    except WireError as exc:
        raise _corrupt(path, f"index: {exc}") from None
    return out


def read_nsys_file(path: str | os.PathLike) -> NsysFileInfo:
    """Validate the framing of a .nsys-rep/.qdrep and read its "UI Data" section."""
    with open(path, "rb") as stream:
        if stream.read(len(NSYS_MAGIC)) != NSYS_MAGIC:
            raise UnsupportedReport(f"{path}: not an Nsight Systems report (no report header)")
        size = stream.seek(0, os.SEEK_END)
        framed = _framed_size(stream, size)
        info = _read_framed(path, stream, framed)
    if framed != size:
        version = version_number(info.version) or "an unknown version"
        raise UnsupportedReport(
            f"{path}: {size - framed} stray bytes after the end marker of an Nsight Systems "
            f"report written by nsys {version} (appended to, or a bad copy); copy the report "
            f"again from the machine that captured it, or cut it to its first {framed} bytes")
    return info


def _framed_size(stream, size: int) -> int:
    """Where the report's own end marker ends: `size`, unless bytes were appended after it
    (then the report is whole and can name its version); `size` when no marker is found."""
    if _read_at(stream, max(0, size - len(TRAILER_MAGIC)), len(TRAILER_MAGIC)) == TRAILER_MAGIC:
        return size
    start = max(0, size - TAIL_SCAN)
    found = _read_at(stream, start, size - start).rfind(TRAILER_MAGIC)
    return size if found < 0 else start + found + len(TRAILER_MAGIC)


def _read_framed(path, stream, size: int) -> NsysFileInfo:
    """The index and "UI Data" of a report whose end marker ends at `size`."""
    index_offset, index_size = _index_bounds(path, stream, size)
    sections = _sections(path, _read_at(stream, index_offset, index_size), index_offset)
    info = NsysFileInfo(sections=sections)
    if "UI Data" in sections:
        offset, length = sections["UI Data"]
        if length > MAX_UI_DATA:
            raise _corrupt(path, "oversized UI Data section")
        _fill_ui_data(path, info, _read_at(stream, offset, length))
    if "Analysis Options Data" in sections:
        offset, length = sections["Analysis Options Data"]
        if length <= MAX_OPTIONS:
            info.trace_kinds = _trace_kinds(_read_at(stream, offset, length))
    return info


def _trace_kinds(raw: bytes) -> tuple[str, ...] | None:
    """The trace kinds "Analysis Options Data" lists; None when it lists none, a code not in
    TRACE_KINDS, or cannot be decoded (an optional record: the report is still read)."""
    try:
        codes = decode(raw, ANALYSIS_OPTIONS).get("trace", {}).get("kinds")
    except WireError:
        return None
    if not codes or any(code not in TRACE_KINDS for code in codes):
        return None
    return tuple(TRACE_KINDS[code] for code in codes)


def _fill_ui_data(path, info: NsysFileInfo, raw: bytes) -> None:
    try:
        values = decode(raw, UI_DATA)
    except WireError as exc:
        raise _corrupt(path, f"UI Data: {exc}") from None
    info.version = values.get("version") or None
    info.created_local = values.get("created_local") or None
    info.host = values.get("target_host") or values.get("host") or None
    info.command = values.get("command") or None


# -- exporting with the user's nsys ------------------------------------------------------------

# What an nsys older than the report prints when it cannot parse it.
TOO_OLD_MARKERS = ("Version number is invalid", "ProtobufParseException")


# Export formats tried in order. Arrow first: the same tables and columns as SQLite (NVIDIA
# calls both "core" export formats), written faster by nsys and read by triage without a
# Python object per value (benchmarks/bench_nsys_archive.py). SQLite when Arrow fails.
EXPORT_FORMATS = ("arrow", "sqlite")


@dataclass
class Exported:
    """A report exported by a local nsys: the file and its format ("arrow" or "sqlite")."""

    file: str
    format: str
    nsys: str
    nsys_version: str | None


def _fallback_hint(path) -> str:
    name = os.path.basename(os.fspath(path))
    return (f"or archive the .sqlite export made with `nsys export --type sqlite {name}` "
            "on a machine with a recent nsys")


def find_nsys(path, info: NsysFileInfo, nsys: str | None) -> str:
    """The nsys to export with: the one given (--nsys, $TRIAGE_NSYS), else nsys on PATH."""
    wanted = version_number(info.version) or "the report's version"
    if nsys:
        found = shutil.which(nsys)
        if not found:
            raise ToolMissing(f"{path}: nsys not found at {nsys} (from --nsys or $TRIAGE_NSYS); "
                              f"point it at an nsys >= {wanted}, {_fallback_hint(path)}")
        return found
    found = shutil.which("nsys")
    if not found:
        raise ToolMissing(f"{path}: reading a .{_suffix(path)} needs nsys to export it and none is "
                          f"on PATH; install Nsight Systems >= {wanted} or pass --nsys PATH, "
                          f"{_fallback_hint(path)}")
    return found


def _suffix(path) -> str:
    return os.fspath(path).rsplit(".", 1)[-1]


def local_version(nsys: str) -> str | None:
    """'2022.4.2.1-df9881f' from `nsys --version` (asked once a process: a capture asked it
    already), or None when it prints no version."""
    import subprocess

    from triage.capture.profilers import version_output

    try:
        text = version_output(nsys, timeout=120)
    except (OSError, subprocess.TimeoutExpired, ToolMissing) as exc:
        raise ToolMissing(f"{nsys} cannot be run ({exc}); check the nsys installation") from None
    match = re.search(r"\d{4}\.\d+(?:\.\d+)*(?:-\w+)?", text)
    return match.group(0) if match else None


def too_old(path, info: NsysFileInfo, nsys: str, local: str | None, reason: str = "") -> ToolTooOld:
    """The one-line "this nsys cannot read that report" error."""
    written = version_number(info.version)
    wanted = ".".join(str(p) for p in version_tuple(written)[:2])
    because = f" ({reason})" if reason else ""
    return ToolTooOld(f"{path} was written by nsys {written or '(version not recorded)'} but "
                      f"{nsys} is {version_number(local) or 'of unknown version'}, which cannot "
                      f"read it{because}; export it with "
                      f"{'nsys >= ' + wanted if wanted else 'a newer nsys'} (pass --nsys PATH or "
                      f"set $TRIAGE_NSYS), {_fallback_hint(path)}")


def _failure_reason(output: str) -> str:
    """The line of nsys's output that says what went wrong (progress bars dropped)."""
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", output) if ln.strip()]
    for line in reversed(lines):
        if re.search(r"error|exception|fail|invalid", line, re.IGNORECASE):
            return re.sub(r"^(std::exception::what:|Exportation error:)\s*", "", line)[:200]
    return lines[-1][:200] if lines else "no output"


# A hung nsys must not hang `triage archive`; big reports export in minutes, not hours.
EXPORT_TIMEOUT_S = 3600


def export_report(path, info: NsysFileInfo, nsys: str | None, new_file: Callable[[str], Path],
                  formats: tuple[str, ...] = EXPORT_FORMATS) -> Exported:
    """Run `nsys export` into a file `new_file(suffix)` makes (the first of `formats` that
    works; a failed one's file is removed); clear errors when nsys cannot.

    `nsys --version` (0.02-0.15 s) is asked beside the first export, not before it: a report
    newer than this nsys is refused by its version once that is known, whether or not the
    export got anywhere, so the outcome is the one asking first gave."""
    from concurrent.futures import ThreadPoolExecutor

    exe = find_nsys(path, info, nsys)
    reason = None
    with ThreadPoolExecutor(max_workers=1) as asking:
        asked = asking.submit(local_version, exe)
        for fmt in formats:
            out = os.fspath(new_file(f"-export.{fmt}"))
            try:
                reason = _run_export(path, exe, fmt, out)
                local = asked.result()
                if local and version_tuple(info.version)[:2] > version_tuple(local)[:2]:
                    raise too_old(path, info, exe, local)  # nsys failed, or would have
            except BaseException:
                Path(out).unlink(missing_ok=True)
                raise
            if reason is None:
                return Exported(out, fmt, exe, local)
            full = _disk_full(path, out)
            Path(out).unlink(missing_ok=True)  # nsys may have removed it itself
            if full is not None:
                raise full
            if any(marker in reason for marker in TOO_OLD_MARKERS):
                raise too_old(path, info, exe, local, reason.split(":")[0])
    raise UnsupportedReport(f"{path}: `{exe} export --type sqlite` failed ({reason}); "
                            f"try a newer nsys (--nsys PATH), {_fallback_hint(path)}")


# Free bytes below which a failed export is taken to have filled the disk.
LOW_SPACE = 1 << 20


def _disk_full(path, out: str) -> DiskFull | None:
    """nsys words a full disk many ways ("database or disk is full", a bare RuntimeException),
    so a failed export is judged by the space left beside its output, before that is removed."""
    directory = os.path.dirname(out) or "."
    free = shutil.disk_usage(directory).free
    if free >= LOW_SPACE:
        return None
    needed = _size(out) + free
    return DiskFull(f"store disk full: more than {needed} bytes needed at {directory} for "
                    f"`nsys export` of {path}; free space there or choose another store with "
                    "--store")


def _size(file: str) -> int:
    """A file's size; 0 when it is not there (nsys removes its output when it fails)."""
    try:
        return os.path.getsize(file)
    except OSError:
        return 0


def _run_export(path, exe: str, fmt: str, out: str) -> str | None:
    """Run one `nsys export`; return why it failed, or None when `out` was written."""
    import subprocess

    from triage.capture.process_tree import run_ended

    timeout = float(os.environ.get("TRIAGE_NSYS_TIMEOUT", EXPORT_TIMEOUT_S))
    try:
        # The output file exists (made empty where triage stages it): overwritten.
        done = run_ended([exe, "export", "--type", fmt, "--force-overwrite", "true",
                          "--output", out, os.fspath(path)], timeout,
                         text=True, errors="replace", stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UnsupportedReport(f"{path}: `{exe} export --type {fmt}` did not finish in "
                                f"{timeout:.0f} s; raise $TRIAGE_NSYS_TIMEOUT or "
                                f"{_fallback_hint(path)}") from None
    if done.returncode != 0 or not _size(out):
        return (_failure_reason(done.stdout + "\n" + done.stderr)
                or (f"exit code {done.returncode}" if done.returncode else "no file written"))
    return None
