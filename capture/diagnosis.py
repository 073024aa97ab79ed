"""Why a profiler left no report: decided by its exit status and its own last messages, each
cause with its fix; and the temporary reports it leaves behind when it fails.

nsys 2022.4 asked to write an `-o` file that exists (without --force-overwrite true) says "File
exists", exits 0 and writes the report to $TMPDIR/nsys-report-<hex>.nsys-rep instead, after a
"Generating '...qdstrm'" line: the file-exists line decides, not the .qdstrm one.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from triage.capture.outputs import FoundReport

NO_GPU = ("No kernels were profiled", "no CUDA-capable device", "CUDA_ERROR_NO_DEVICE",
          "No GPU")
# (what the profiler says, what it means and how to fix it), in order: the first that matches
CAUSES = (
    (("File exists",), "{tool} refused to overwrite its existing output file: add "
     "--force-overwrite true (nsys) or -f (ncu), or name another -o"),
    (("ERR_NVGPUCTRPERM",), "the GPU performance counters are restricted to admin users "
     "(ERR_NVGPUCTRPERM): run as root, or load nvidia with NVreg_RestrictProfilingToAdminUsers=0 "
     "(`triage env` checks)"),
    (("Permission denied", "permission denied"), "{tool} was denied permission: make the -o "
     "directory and the program readable and writable by this user"),
    (NO_GPU, "{tool} found no GPU work to profile (no GPU, no driver, or the filters matched no "
     "kernel): run where `nvidia-smi` lists a GPU (`triage env` checks)"),
)
IMPORTER = ("{tool} left a .qdstrm stream it could not import (its QdstrmImporter is missing; "
            "Debian's nsys needs the link /usr/lib/x86_64-linux-gnu/nsight-systems/"
            "host-linux-x64/QdstrmImporter)")
ERROR_WORDS = re.compile(r"error|illegal|invalid|fail|cannot|can't|unable|denied|not found|"
                         r"no such", re.IGNORECASE)
TEMP_REPORT = re.compile(r"(/\S*nsys-report-[0-9a-f]+\.(?:qdstrm|nsys-rep))")


def last_message(tail: list[str]) -> str | None:
    """The profiler's last message that says something: its last line with an error word (a
    usage hint after it says less), else its last line that is not a progress bar."""
    said = [line.strip() for line in tail[-40:]
            if line.strip() and not line.strip().startswith("[") and line.strip() != "Generated:"]
    errors = [line for line in said if ERROR_WORDS.search(line)]
    last = errors or said
    return last[-1] if last else None


def cause(tool: str, tail: list[str]) -> tuple[str | None, str | None]:
    """(the profiler's line that says what went wrong, that cause with its fix); (its last
    message, None) when it says nothing known. Only the last lines count."""
    recent = tail[-40:]
    for needles, text in CAUSES:
        said = next((line.strip() for line in reversed(recent)
                     if any(needle in line for needle in needles)), None)
        if said:
            return said, text.format(tool=tool)
    qdstrm = next((line.strip() for line in reversed(recent) if ".qdstrm" in line), None)
    generated = any(line.strip() == "Generated:" for line in recent)
    if tool == "nsys" and qdstrm and not generated:
        return qdstrm, IMPORTER.format(tool=tool)
    return last_message(tail), None


def stale_text(stale: list[FoundReport]) -> str:
    names = ", ".join(found.path.name for found in stale)
    return (f"{names} is left from before this run (same name, inode, mtime and sha256), so it "
            "is not archived again")


def _temp_dir(environ) -> Path:
    """The temporary directory nsys writes its own reports to, as the capture's environment
    sets it."""
    return Path(os.path.realpath(environ.get("TMPDIR") or "/tmp"))


def remove_temporary_reports(tail: list[str], environ) -> list[str]:
    """Remove the reports nsys wrote to the temporary directory instead of where it was asked
    (named in its output); returns their paths."""
    temp = str(_temp_dir(environ))
    removed = []
    for line in tail:
        for match in TEMP_REPORT.finditer(line):
            path = Path(match.group(1).strip("'\""))
            if os.path.realpath(path.parent) == temp and path.is_file():
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(str(path))
    return list(dict.fromkeys(removed))


def remove_abandoned_reports(environ, since: float) -> list[str]:
    """After the capture ended the profiler (interrupt, timeout): nsys's temporary reports
    (`$TMPDIR/nsys-report-*`) made since `since` that no live process holds open, which it
    never got to name in its output; returns their paths. One held open belongs to a profiler
    still at work (another capture's), and stays."""
    temp = _temp_dir(environ)
    with contextlib.suppress(OSError):
        made = [p for p in temp.glob("nsys-report-*") if p.is_file() and p.stat().st_mtime >= since]
        held = _open_files() if made else set()
        removed = []
        for path in made:
            if str(path) not in held:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(str(path))
        return removed
    return []


def _open_files() -> set[str]:
    """The paths open in the processes this user may read the descriptors of."""
    held = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            held.add(os.readlink(fd))
    return held
