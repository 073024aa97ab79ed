"""The profiler executables on this machine: where they are, their versions, and what the ncu
that runs a capture knows (`--list-sections`, `--list-sets`).

Section and set names change across ncu releases; a capture records the lists of the ncu that ran
so that a diff weeks later can tell a renamed section from a missing one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triage.base.errors import ToolMissing
from triage.capture.process_tree import run_ended

if TYPE_CHECKING:
    import pyarrow as pa

TIMEOUT_S = 60
INSTALL_HINTS = {
    "ncu": "install Nsight Compute (the CUDA toolkit ships it; on Debian: apt install "
           "nsight-compute from the non-free component) or give its full path",
    "nsys": "install Nsight Systems (the CUDA toolkit ships it; on Debian: apt install "
            "nsight-systems nsight-systems-target from non-free) or pass --nsys PATH / "
            "$TRIAGE_NSYS",
}
VERSION_PATTERNS = {
    "ncu": re.compile(r"Version\s+(\d{4}\.\d+\.\d+(?:\.\d+)?)"),
    "nsys": re.compile(r"version\s+(\d{4}\.\d+\.\d+(?:\.\d+)?)", re.IGNORECASE),
}


def find_tool(tool: str, given: str | None = None) -> str:
    """The executable for `tool`: the given path/name, else the one on PATH."""
    candidate = given or tool
    found = shutil.which(candidate) if os.sep not in candidate else (
        candidate if os.access(candidate, os.X_OK) else None)
    if not found:
        where = f"{candidate} is not an executable" if os.sep in candidate else \
            f"{candidate} not found on PATH"
        raise ToolMissing(f"{where}; {INSTALL_HINTS[tool]}")
    return found


def run_tool(argv: list[str], timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run a profiler query command; its own errors are returned, a missing file raises."""
    try:
        return run_ended(argv, timeout, text=True, errors="replace", stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} not found; {INSTALL_HINTS.get(_tool_name(argv[0]), '')}") \
            from None


def _tool_name(executable: str) -> str:
    return os.path.basename(executable).removesuffix(".exe")


_VERSION_OUTPUTS: dict[tuple[str, int], str] = {}  # (real path, mtime) -> --version's output


def version_output(executable: str, timeout: float = TIMEOUT_S) -> str:
    """`EXECUTABLE --version`'s output (stdout and stderr), run once per executable file in a
    process: a capture probes it beside the profiler, and the archive's `nsys export` checks
    it again (each a fresh start of the tool, 40 ms to a second)."""
    try:
        stat = os.stat(executable)
    except OSError:
        key = None
    else:
        key = (os.path.realpath(executable), stat.st_mtime_ns)
    if key is not None and key in _VERSION_OUTPUTS:
        return _VERSION_OUTPUTS[key]
    done = run_tool([executable, "--version"], timeout)
    text = done.stdout + done.stderr
    if key is not None:
        _VERSION_OUTPUTS[key] = text
    return text


def tool_version(tool: str, executable: str) -> tuple[str | None, str]:
    """('2022.3.0.0', full --version text) — the version is None if it cannot be read."""
    try:
        text = version_output(executable).strip()
    except subprocess.TimeoutExpired:
        return None, "--version timed out"
    match = VERSION_PATTERNS[tool].search(text)
    return (match.group(1) if match else None), text


@dataclass
class Listing:
    """One `ncu --list-*` output: the raw text (kept as a blob) and its parsed rows."""

    text: str
    rows: list[dict]
    error: str | None = None


def parse_fixed_table(text: str) -> list[dict]:
    """Parse ncu's fixed-width tables (dashed rule, header, dashed rule, rows).

    Column extents come from the dashed rules; a row whose first column is blank continues the
    previous row (ncu wraps long cells).
    """
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("---")]
    if len(rules) < 2:
        return []
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rules[0]])]
    header = [_cell(lines[rules[0] + 1], span) for span in spans]
    rows: list[dict] = []
    for line in lines[rules[1] + 1:]:
        if not line.strip() or line.startswith("==") or line.startswith("---"):
            continue
        cells = [_cell(line, span) for span in spans]
        if cells[0] or not rows:
            rows.append(dict(zip(header, cells, strict=True)))
        else:
            for key, cell in zip(header, cells, strict=True):
                rows[-1][key] = rows[-1][key] + cell
    return rows


def _cell(line: str, span: tuple[int, int]) -> str:
    start, end = span
    return line[start:end + 1].strip() if end < len(line) else line[start:].strip()


def ncu_listing(executable: str, flag: str) -> Listing:
    """`ncu --list-sections` or `--list-sets`, parsed; failures become an error string."""
    try:
        done = run_tool([executable, flag])
    except subprocess.TimeoutExpired:
        return Listing("", [], f"{flag} timed out")
    text = done.stdout if done.stdout.strip() else done.stderr
    if done.returncode != 0:
        return Listing(text, [], f"{flag} exited {done.returncode}")
    return Listing(text, parse_fixed_table(text))


def section_table(listing: Listing) -> pa.Table:
    """The `ncu_section_list` table."""
    from triage.schemas.tables import records_table

    return records_table("ncu_section_list", [
        {"identifier": r.get("Identifier"), "display_name": r.get("Display Name"),
         "enabled": r.get("Enabled") == "yes", "filename": r.get("Filename")}
        for r in listing.rows])


def set_table(listing: Listing) -> pa.Table:
    """The `ncu_set_list` table (sections as one comma-separated string)."""
    from triage.schemas.tables import records_table

    rows = []
    for row in listing.rows:
        metrics = row.get("Estimated Metrics") or ""
        rows.append({"identifier": row.get("Identifier"),
                     "sections": re.sub(r"\s*,\s*", ", ", row.get("Sections", "")),
                     "enabled": row.get("Enabled") == "yes",
                     "estimated_metrics": int(metrics) if metrics.isdigit() else None})
    return records_table("ncu_set_list", rows)
