"""Which reader handles a file, decided by its first bytes (not its name).

Every reader is prepared (validated, converted if needed) before anything is written to the
store, so a bad input leaves the store untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from triage.errors import UnsupportedReport

NCU_MAGIC = b"NVR\x00"
NSYS_MAGIC = b"NVIDIA Tegra Profiler Report"
NSYS_STREAM_MAGIC = b"NVIDIA Nsight Systems Stream"
SQLITE_MAGIC = b"SQLite format 3\x00"
SUFFIX_FORMATS = {".ncu-rep": "ncu-rep", ".nsight-cuprof-report": "nsight-cuprof-report",
                  ".nsight-cuprof": "ncu-rep", ".nsys-rep": "nsys-rep", ".qdrep": "qdrep"}


class PreparedReport(Protocol):
    """A validated report ready to be written into a run's tables."""

    path: Path
    tool: str
    format: str
    sha256: str  # of the report file, taken while preparing it (its key in the store)

    def write_tables(self, tables, report_index: int) -> dict:
        """Append this report's rows; return its provenance (manifest parts)."""

    def close(self) -> None:
        """Release temp files (an nsys export) and handles."""


def detect_format(path: Path) -> str:
    """'ncu-rep', 'nsight-cuprof-report', 'nsys-rep', 'qdrep' or 'sqlite', from the bytes."""
    with open(path, "rb") as stream:
        head = stream.read(64)
    if not head:
        raise UnsupportedReport(f"{path}: empty file; not a report")
    suffix_format = SUFFIX_FORMATS.get(path.suffix.lower())
    if head.startswith(NCU_MAGIC):
        return suffix_format if suffix_format in ("ncu-rep", "nsight-cuprof-report") else "ncu-rep"
    if head.startswith(NSYS_MAGIC):
        return suffix_format if suffix_format in ("nsys-rep", "qdrep") else "nsys-rep"
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if NSYS_STREAM_MAGIC in head:
        raise UnsupportedReport(
            f"{path}: an unfinished nsys stream (.qdstrm), not a report: nsys's QdstrmImporter "
            "turns it into a .nsys-rep (`QdstrmImporter -i FILE.qdstrm`; Debian's nsys needs the "
            "link /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64/QdstrmImporter)")
    expected = f" (its name says {suffix_format})" if suffix_format else ""
    raise UnsupportedReport(f"{path}: not an Nsight Compute or Nsight Systems report{expected}; "
                            "triage reads .ncu-rep, .nsight-cuprof-report, .nsys-rep, .qdrep "
                            "and nsys .sqlite exports")


def prepare_report(path: Path, nsys: str | None = None,
                   sha256: str | None = None) -> PreparedReport:
    """Validate (and for .nsys-rep, export) a report; nothing is written to the store.

    `sha256`: the file's hash when the caller has already taken it (ncu reports are hashed
    by their validation read anyway)."""
    fmt = detect_format(path)
    if fmt in ("ncu-rep", "nsight-cuprof-report"):
        from triage.capture.ncu import PreparedNcu

        return PreparedNcu.open(path, fmt)
    from triage.capture.nsys import PreparedNsys

    return PreparedNsys.open(path, fmt, nsys=nsys, sha256=sha256)
