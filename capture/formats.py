"""Which reader handles a file, decided by its first bytes (not its name), and what every
reader hands the archive.

Every reader is prepared (validated, converted if needed) before anything is written to the
store, so a bad input leaves the store untouched. A reader returns data and never writes:
Arrow tables with named columns (`triage.schemas.tables`), then its provenance; the archive
writes them (`archive/ingest.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

from triage.base.errors import UnsupportedReport

NCU_MAGIC = b"NVR\x00"
NSYS_MAGIC = b"NVIDIA Tegra Profiler Report"
NSYS_STREAM_MAGIC = b"NVIDIA Nsight Systems Stream"
SQLITE_MAGIC = b"SQLite format 3\x00"
SUFFIX_FORMATS = {".ncu-rep": "ncu-rep", ".nsight-cuprof-report": "nsight-cuprof-report",
                  ".nsight-cuprof": "ncu-rep", ".nsys-rep": "nsys-rep", ".qdrep": "qdrep"}


# (table name, rows with the named columns of that table's schema)
TableBatch = tuple[str, "pa.Table"]


class PreparedReport(Protocol):
    """A validated report, ready to hand over its tables and provenance."""

    path: Path
    tool: str
    format: str
    sha256: str  # of the report file, taken while preparing it (its key in the store)

    def batches(self, report_index: int) -> Iterator[TableBatch]:
        """This report's rows, in the order they are to be written, never all at once.

        Called before the archive starts any thread of its own: a reader that forks worker
        processes starts forking here, not when the first batch is asked for.
        """

    def provenance(self) -> dict[str, Any]:
        """The manifest parts this report supplies; complete once `batches` is exhausted
        (some are counted from the rows: sections seen, SM clocks, rows per table)."""

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


def prepare_report(path: Path, nsys: str | None = None, sha256: str | None = None,
                   staging: Callable[[str], Path] | None = None) -> PreparedReport:
    """Validate (and for .nsys-rep, export) a report; nothing is written to the store.

    `sha256`: the file's hash when the caller has already taken it (ncu reports are hashed
    by their validation read anyway). `staging(suffix)`: a new empty file an export may be
    written to (the archive's are temp files in its store)."""
    fmt = detect_format(path)
    if fmt in ("ncu-rep", "nsight-cuprof-report"):
        from triage.capture.ncu import PreparedNcu

        return PreparedNcu.open(path, fmt)
    from triage.capture.nsys import PreparedNsys

    if staging is None:
        return PreparedNsys.open(path, fmt, nsys=nsys, sha256=sha256)
    return PreparedNsys.open(path, fmt, nsys=nsys, sha256=sha256, staging=staging)


def read_together(runs: list[list[PreparedReport]]) -> None:
    """Let the reports of a batch of runs, in the order the archive reads them, share what
    reading them together saves (the ncu ones: one pool of workers for all)."""
    from triage.capture.ncu import PreparedNcu

    PreparedNcu.read_together([(report, index) for run in runs
                               for index, report in enumerate(run)
                               if isinstance(report, PreparedNcu)])
