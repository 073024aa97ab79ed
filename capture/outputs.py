"""Finding the report files a profiler command wrote.

From the output option (`-o/--export` for ncu, `-o/--output` for nsys) with the tool's default
suffix and its name patterns (%p pid, %q{VAR} environment variable, %h host, %i/%n counters), or,
when no output was named, from a before/after listing of the working directory. Reports written
per rank (`%q{SLURM_PROCID}`) are tagged with the rank the pattern captured.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triage.capture.machine import LOCAL_RANK_VARIABLES, RANK_VARIABLES
from triage.capture.profiler_args import ParsedCommand

REPORT_SUFFIXES = {"ncu": (".ncu-rep", ".nsight-cuprof-report"), "nsys": (".nsys-rep", ".qdrep")}
OUTPUT_OPTION = {"ncu": "--export", "nsys": "--output"}
NSYS_DEFAULT_OUTPUT = "report%n"
_TOKEN = re.compile(r"%q\{([A-Za-z_][A-Za-z0-9_]*)\}|%[phin%]")


@dataclass
class FoundReport:
    path: Path
    rank: int | None = None
    process: dict | None = None


def output_pattern(parsed: ParsedCommand) -> str | None:
    """The output name the command asked for (nsys has a default; ncu writes none without -o);
    None for a command that runs no profiler."""
    if parsed.tool is None:
        return None
    value = parsed.last(OUTPUT_OPTION[parsed.tool])
    if value:
        return value
    return NSYS_DEFAULT_OUTPUT if parsed.tool == "nsys" else None


def _pattern_regex(pattern: str) -> tuple[str, str]:
    """(glob, regex) for a profiler name pattern; the regex names %q{VAR} and %p groups."""
    glob_parts, regex_parts, last, named = [], [], 0, set()
    for match in _TOKEN.finditer(pattern):
        literal = pattern[last:match.start()]
        glob_parts.append(glob.escape(literal))
        regex_parts.append(re.escape(literal))
        token = match.group(0)
        if token == "%%":
            glob_parts.append("%")
            regex_parts.append("%")
        else:
            glob_parts.append("*")
            group = match.group(1) or ("pid" if token == "%p" else None)
            regex_parts.append(f"(?P<{group}>.+?)" if group and group not in named else ".+?")
            named.add(group)
        last = match.end()
    glob_parts.append(glob.escape(pattern[last:]))
    regex_parts.append(re.escape(pattern[last:]))
    return "".join(glob_parts), "".join(regex_parts)


def _with_suffix(pattern: str, tool: str) -> list[str]:
    suffixes = REPORT_SUFFIXES[tool]
    return [pattern] if pattern.endswith(suffixes) else [pattern + s for s in suffixes]


def expected_reports(parsed: ParsedCommand, cwd: Path, since: float) -> list[FoundReport]:
    """Reports matching the output option's pattern, written at or after `since`."""
    pattern = output_pattern(parsed)
    if not pattern or parsed.tool is None:
        return []
    found = []
    for candidate in _with_suffix(str(cwd / pattern) if not os.path.isabs(pattern) else pattern,
                                  parsed.tool):
        glob_text, regex = _pattern_regex(candidate)
        for name in sorted(glob.glob(glob_text)):
            if os.path.getmtime(name) >= since - 1:
                found.append(_tagged(Path(name), re.fullmatch(regex, name)))
    return found


def is_output(parsed: ParsedCommand, cwd: Path) -> Callable[[Path], bool]:
    """Whether a file (by absolute path) is one the command's output pattern names: a report,
    or the .qdstrm nsys writes on the way to one. What the profiler writes there while it runs
    is no part of the source it ran from (`git_state.git_snapshot` leaves these out)."""
    pattern = output_pattern(parsed)
    if not pattern or parsed.tool is None:
        return lambda _path: False
    full = pattern if os.path.isabs(pattern) else str(cwd.resolve() / pattern)
    names = _with_suffix(full, parsed.tool)
    if parsed.tool == "nsys":
        names.append(names[0].removesuffix(".nsys-rep").removesuffix(".qdrep") + ".qdstrm")
    regexes = [re.compile(_pattern_regex(name)[1]) for name in names]
    return lambda path: any(regex.fullmatch(str(path)) for regex in regexes)


def _tagged(path: Path, match: re.Match | None) -> FoundReport:
    """Tag a report with the rank its name captured, read in `rank_of`'s order (a name with both
    %q{SLURM_PROCID} and %q{RANK} is the torchrun worker's); a name with only a local rank is
    tagged by it, which is unique on one node."""
    groups = match.groupdict() if match else {}
    rank = next((groups[v] for v in RANK_VARIABLES + LOCAL_RANK_VARIABLES
                 if groups.get(v, "").isdigit()), None)
    pid = groups.get("pid")
    return FoundReport(path, int(rank) if rank is not None else None,
                       {"pid": int(pid)} if pid and pid.isdigit() else None)


def snapshot(directory: Path, tool: str) -> dict[str, float]:
    """Report-like files in a directory with their modification times."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {}
    return {e.path: e.stat().st_mtime for e in entries
            if e.is_file() and e.name.endswith(REPORT_SUFFIXES[tool])}


def new_reports(before: dict[str, float], after: dict[str, float]) -> list[FoundReport]:
    """Files that appeared or changed between two snapshots."""
    return [FoundReport(Path(p)) for p, mtime in sorted(after.items())
            if p not in before or before[p] < mtime]


def find_reports(parsed: ParsedCommand, cwd: Path, since: float,
                 before: dict[str, float]) -> list[FoundReport]:
    """The reports the command wrote: by its output pattern, else by the directory listing."""
    found = expected_reports(parsed, cwd, since)
    if found or parsed.tool is None:
        return found
    return new_reports(before, snapshot(cwd, parsed.tool))


@dataclass(frozen=True)
class Fingerprint:
    """What a report file was before a run: its inode, mtime (ns), size and sha256."""

    inode: int
    mtime_ns: int
    size: int
    sha256: str


def fingerprints(parsed: ParsedCommand, cwd: Path) -> dict[str, Fingerprint]:
    """The files the command's output pattern names that exist before it runs (whatever their
    age): a report found after the run is new only if it differs from these."""
    from triage.base.hashing import hash_file

    out = {}
    for found in expected_reports(parsed, cwd, since=float("-inf")):
        try:
            stat = found.path.stat()
            out[str(found.path)] = Fingerprint(stat.st_ino, stat.st_mtime_ns, stat.st_size,
                                               hash_file(found.path)[0])
        except OSError:
            continue
    return out


def split_fresh(found: list[FoundReport], before: dict[str, Fingerprint]
                ) -> tuple[list[FoundReport], list[FoundReport]]:
    """(fresh, stale): a report is stale when the same name held the same inode and mtime
    before the run, or the same bytes (the sha256 of the run before; hashed only when the
    sizes agree, since a report of another size is new whatever its bytes)."""
    from triage.base.hashing import hash_file

    fresh: list[FoundReport] = []
    stale: list[FoundReport] = []
    for report in found:
        old = before.get(str(report.path))
        try:
            stat = report.path.stat()
        except OSError:
            continue
        same = old is not None and (
            (stat.st_ino, stat.st_mtime_ns) == (old.inode, old.mtime_ns)
            or (stat.st_size == old.size and hash_file(report.path)[0] == old.sha256))
        (stale if same else fresh).append(report)
    return fresh, stale
