"""The block structure of an Nsight Compute report, read without `ncu_report`.

`ncu_report` reads the profile results but not the session details (tool, driver and CUDA
versions, the profiler command line, settings, host), and it silently accepts truncated files.
This module walks the file's framing itself, so that triage can (1) refuse foreign, truncated,
corrupt and newer-format files with a clear message before `ncu_report` sees them, and (2)
recover how the report was captured.

Format (checked on the corpus and against Debian nsight-compute's `extras/FileFormat/*.proto`):
`NVR\\0`, a little-endian uint32 length and a FileHeader message, then blocks of (uint32 length,
BlockHeader message, payload of BlockHeader.PayloadSize bytes). A payload holds NumSources
SourceData, NumResults ProfileResult and NumRangeResults RangeResult messages, each prefixed by its
uint32 length. Session details (BlockHeader field 3) may sit in one block (older and GUI-made
reports) or be spread over many small blocks (newer command-line reports): they are merged.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Protocol

from triage.capture.protowire import Field, WireError, decode, last_field, submessage
from triage.base.errors import NewerFormat, UnsupportedReport
from triage.base.hashing import HashingReader

MAGIC = b"NVR\x00"
# The FileHeader version of every report in the corpus, ncu 2019.x (PerfWorks 0.105) to 2026.2.
KNOWN_FILE_VERSION = 7
# A length prefix beyond this is not a real block (the largest corpus block is a few MB).
MAX_MESSAGE = 1 << 31

SYSTEM_INFO = {
    1: Field("os_name", "str"), 2: Field("build", "str"), 3: Field("processor", "str"),
    4: Field("architecture", "str"), 5: Field("computer_name", "str"), 6: Field("platform", "uint"),
}
VERSION_INFO = {1: Field("provider", "str"), 2: Field("version", "str")}
METRIC_VALUE = {
    1: Field("str", "str"), 2: Field("float", "float"), 3: Field("double", "double"),
    4: Field("uint32", "uint"), 5: Field("uint64", "uint"),
}
DEVICE_ATTRIBUTES = {
    1: Field("id", "uint"), 2: Field("name", "str"),
    3: Field("attributes", {1: Field("name", "str"), 2: Field("value", METRIC_VALUE)},
             repeated=True),
}
EXECUTABLE_SETTINGS = {
    1: Field("executable", "str"), 2: Field("working_directory", "str"),
    3: Field("arguments", "str"), 4: Field("environment", "str"),
}
PROFILER_SETTINGS = {
    1: Field("enable_nvtx", "bool"), 2: Field("disable_profiling_start_stop", "bool"),
    3: Field("enable_profiling_from_start", "bool"), 4: Field("activity_type", "str"),
    5: Field("filter", {
        1: Field("kernel_name", "str"), 2: Field("kernel_name_base", "str"),
        3: Field("kernel_id", "str"), 4: Field("skip_count", "uint"),
        5: Field("skip_before_match_count", "uint"), 6: Field("capture_count", "uint"),
    }),
    6: Field("other", {1: Field("apply_rules", "bool"), 2: Field("metrics", "str")}),
    7: Field("enabled_sections", "str"), 8: Field("clock_control_mode", "str"),
    10: Field("import_source", "bool"), 11: Field("replay_mode", "str"),
}
SESSION_DETAILS = {
    1: Field("process_id", "uint"), 2: Field("creation_time", "uint"),
    3: Field("host", SYSTEM_INFO), 4: Field("target", SYSTEM_INFO),
    6: Field("devices", DEVICE_ATTRIBUTES, repeated=True), 7: Field("comments", "str"),
    8: Field("versions", VERSION_INFO, repeated=True), 9: Field("executable", EXECUTABLE_SETTINGS),
    10: Field("settings", PROFILER_SETTINGS), 11: Field("command_line", "str"),
}
BLOCK_HEADER = {
    1: Field("num_sources", "uint"), 2: Field("num_results", "uint"),
    3: Field("session", SESSION_DETAILS), 5: Field("payload_size", "uint"),
    6: Field("process", {1: Field("pid", "uint"), 2: Field("hostname", "str"),
                         3: Field("name", "str")}),
    7: Field("num_range_results", "uint"),
}
CLOCK_STATUS = {1: Field("requested_lock", "bool"), 2: Field("executed_locked", "bool")}
RESULT_FIELD_CLOCK_STATUS = 25


class Readable(Protocol):
    """What the framing reader needs of a stream: a file, or a HashingReader around one."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass
class ClockStatus:
    """How many profile results asked for locked clocks and how many ran locked."""

    results: int = 0
    recorded: int = 0
    requested_lock: int = 0
    executed_locked: int = 0


@dataclass
class NcuFileInfo:
    """What the report's framing says about how it was captured."""

    file_version: int
    session: dict = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    processes: list[dict] = field(default_factory=list)
    clock: ClockStatus = field(default_factory=ClockStatus)
    # Per result, in file order: ExecutedLocked, or None where the result records no ClockStatus.
    result_clock_locked: list[bool | None] = field(default_factory=list)
    sha256: str | None = None  # of the bytes validated: the report's key in the store
    range_results: int = 0  # RangeResult messages (range replay); profile results: clock.results


def _read_exact(stream: Readable, size: int, path: str, what: str) -> bytes:
    """Read exactly `size` bytes or report the file as truncated."""
    data = stream.read(size)
    if len(data) != size:
        raise UnsupportedReport(
            f"{path}: truncated Nsight Compute report ({what} cut short); re-copy or re-capture it")
    return data


def _read_length(stream: Readable, path: str, what: str) -> int | None:
    """Read a uint32 length prefix; None at a clean end of file."""
    raw = stream.read(4)
    if not raw:
        return None
    if len(raw) != 4:
        raise UnsupportedReport(f"{path}: truncated Nsight Compute report ({what} cut short)")
    (length,) = struct.unpack("<I", raw)
    if length > MAX_MESSAGE:
        raise UnsupportedReport(f"{path}: corrupt Nsight Compute report (impossible {what} length)")
    return length


def _merge_session(into: dict, versions: dict[str, str], part: dict) -> None:
    """Merge one block's session details: first value wins, version pairs accumulate."""
    for pair in part.pop("versions", []):
        if pair.get("provider"):
            versions.setdefault(pair["provider"], pair.get("version", ""))
    for key, value in part.items():
        if key == "devices":
            into.setdefault("devices", []).extend(value)
        elif value not in (None, "", {}, []) and key not in into:
            into[key] = value


def _scan_payload(stream: Readable, header: dict, info: NcuFileInfo, path: str) -> None:
    """Stream the length-prefixed messages of one payload; collect each result's ClockStatus.

    One message is held at a time, so a block with many results never sits in memory whole.
    """
    remaining = header.get("payload_size", 0)
    counts = (header.get("num_sources", 0), header.get("num_results", 0),
              header.get("num_range_results", 0))
    for kind, count in enumerate(counts):
        for _ in range(count):
            length = _read_length(stream, path, "result")
            if length is None or length + 4 > remaining:
                raise UnsupportedReport(
                    f"{path}: truncated or corrupt Nsight Compute report (result cut short)")
            message = _read_exact(stream, length, path, "result")
            remaining -= length + 4
            if kind == 1:
                _note_clock(memoryview(message), info)
            info.range_results += kind == 2
    if remaining:
        # Bytes the counts do not account for: skip them, but they must exist.
        _skip_exact(stream, remaining, path)


def _skip_exact(stream: Readable, size: int, path: str) -> None:
    """Skip `size` bytes in chunks, reporting truncation like _read_exact."""
    while size > 0:
        chunk = _read_exact(stream, min(size, 1 << 20), path, "block payload")
        size -= len(chunk)


def _note_clock(result: memoryview, info: NcuFileInfo) -> None:
    """Record the ClockStatus of one ProfileResult (field 25), if it has one."""
    info.clock.results += 1
    field = last_field(result, RESULT_FIELD_CLOCK_STATUS)
    message = submessage(*field) if field else None
    status = decode(message, CLOCK_STATUS) if message is not None else None
    if status is None:
        info.result_clock_locked.append(None)
        return
    info.clock.recorded += 1
    info.clock.requested_lock += bool(status.get("requested_lock"))
    info.clock.executed_locked += bool(status.get("executed_locked"))
    info.result_clock_locked.append(bool(status.get("executed_locked")))


def read_ncu_file(path: str | os.PathLike) -> NcuFileInfo:
    """Validate the framing of an ncu report and return its merged session details.

    Raises UnsupportedReport for anything that is not a complete ncu report, and NewerFormat for
    a file header version newer than any ncu so far.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as raw:
            stream = HashingReader(raw)
            info = _read_stream(stream, path)
    except WireError as exc:
        raise UnsupportedReport(f"{path}: corrupt Nsight Compute report ({exc})") from None
    info.sha256 = stream.digest.hexdigest()
    return info


def _read_stream(stream: Readable, path: str) -> NcuFileInfo:
    magic = stream.read(4)
    if magic != MAGIC:
        what = "empty file" if not magic else "no NVR header"
        raise UnsupportedReport(f"{path}: not an Nsight Compute report ({what})")
    length = _read_length(stream, path, "file header")
    if length is None:
        raise UnsupportedReport(f"{path}: truncated Nsight Compute report (no file header)")
    version = decode(_read_exact(stream, length, path, "file header"), {1: Field("v", "uint")})
    info = NcuFileInfo(file_version=version.get("v", 0))
    if info.file_version == 0:  # a required field: ncu_report itself cannot parse the header
        raise UnsupportedReport(f"{path}: corrupt Nsight Compute report (its file header holds "
                                "no format version); re-copy or re-capture it")
    if info.file_version > KNOWN_FILE_VERSION:
        raise NewerFormat(
            f"{path}: report format version {info.file_version} is newer than this triage reads "
            f"(up to {KNOWN_FILE_VERSION}); upgrade triage and ncu-report "
            "(pip install -U ncu-report)")
    blocks = 0
    while (length := _read_length(stream, path, "block header")) is not None:
        if length == 0:  # refused at once: zeros would otherwise be read as 4-byte blocks
            raise UnsupportedReport(f"{path}: corrupt Nsight Compute report (an empty block "
                                    "header); re-copy or re-capture it")
        header = decode(_read_exact(stream, length, path, "block header"), BLOCK_HEADER)
        _scan_payload(stream, header, info, path)
        if "session" in header:
            _merge_session(info.session, info.versions, header["session"])
        if header.get("process") and header["process"] not in info.processes:
            info.processes.append(header["process"])
        blocks += 1
    if blocks == 0:
        raise UnsupportedReport(f"{path}: truncated Nsight Compute report (no blocks)")
    if info.clock.results == 0 and info.range_results == 0:
        raise UnsupportedReport(f"{path}: an Nsight Compute report that holds no profile "
                                "result; profile at least one kernel (or range) and archive that")
    return info
