"""Parsing profiler command lines (ncu, nsys) into options, with each tool's defaults.

Reports record the profiler command line as one string (ncu 2022.2 and later; nsys in its report
trailer). To know which settings were in effect, triage needs to know which options take a value,
where the profiled application starts, and what the tool's default was for anything not given.
The option tables below are data, transcribed from `ncu --help` / `nsys profile --help`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# ncu options that take a value; everything else starting with '-' is a flag.
NCU_VALUE_OPTIONS = {
    "--mode", "-p", "--port", "--max-connections", "--check-exit-code", "--injection-path-32",
    "--injection-path-64", "--target-processes", "--target-processes-filter", "--hostname",
    "--kill", "--replay-mode", "--app-replay-buffer", "--app-replay-match", "--app-replay-mode",
    "--range-replay-options", "--graph-profiling", "--set", "--section-folder",
    "--section-folder-recursive", "--apply-rules", "--rule", "--import-source",
    "--query-metrics-mode", "--chips", "--profile-from-start", "--cache-control",
    "--clock-control", "--devices", "--filter-mode", "--kernel-id", "-k", "--kernel-name",
    "--kernel-name-base", "--kernel-regex", "--kernel-regex-base", "-c", "--launch-count", "-s",
    "--launch-skip", "--launch-skip-before-match", "--section", "--metrics", "--nvtx-include",
    "--nvtx-exclude", "--sampling-interval", "--sampling-max-passes", "--sampling-buffer-size",
    "--warp-sampling-interval", "--warp-sampling-max-passes", "--warp-sampling-buffer-size",
    "--pm-sampling-interval", "--pm-sampling-buffer-size", "--pm-sampling-max-passes",
    "--log-file", "-o", "--export", "-i", "--import", "--page", "--print-source",
    "--resolve-source-file", "--print-units", "--print-kernel-base", "--print-metric-instances",
    "--print-nvtx-rename", "--print-summary", "--print-details", "--print-metric-name",
    "--print-metric-attribution", "--config-file", "--config-file-path", "--source-folders",
    "--call-stack-type", "--range-filter", "--rename-kernels", "--rename-kernels-path",
    "--rename-kernels-export", "--kernel-base", "--units", "--summary", "--nvtx-push-pop-scope",
    "--cache-control-mode", "--print-nvtx-scope", "--replay-buffer", "--app-replay-filter",
    "--max-threads", "--tmp-dir", "--cuda-graph", "--preload-binaries",
}
NCU_ALIASES = {
    "-p": "--port", "-k": "--kernel-name", "-c": "--launch-count", "-s": "--launch-skip",
    "-o": "--export", "-i": "--import", "-f": "--force-overwrite", "-v": "--version",
    "-h": "--help", "--kernel-regex": "--kernel-name", "--units": "--print-units",
    "--kernel-base": "--print-kernel-base", "--summary": "--print-summary",
}

# nsys profile options that take a value (both `--opt value` and `--opt=value` forms occur).
NSYS_VALUE_OPTIONS = {
    "-t", "--trace", "-s", "--sample", "-b", "--backtrace", "--cpuctxsw", "-c", "--capture-range",
    "--capture-range-end", "-y", "--delay", "-d", "--duration", "-o", "--output", "-f",
    "--force-overwrite", "-w", "--show-output", "-e", "--env-var", "-n", "--inherit-environment",
    "-p", "--nvtx-capture", "--nvtx-domain-include", "--nvtx-domain-exclude", "-x",
    "--stop-on-exit", "--stats", "--export", "--cuda-memory-usage", "--cudabacktrace",
    "--cuda-um-cpu-page-faults", "--cuda-um-gpu-page-faults", "--cuda-graph-trace",
    "--cuda-flush-interval", "--gpu-metrics-device", "--gpu-metrics-devices",
    "--gpu-metrics-frequency",
    "--gpu-metrics-set", "--gpuctxsw", "--mpi-impl", "--osrt-threshold", "--osrt-backtrace-depth",
    "--osrt-backtrace-stack-size", "--osrt-backtrace-threshold", "--python-sampling",
    "--python-sampling-frequency", "--python-backtrace", "--pytorch", "--sampling-period",
    "--sampling-frequency", "--samples-per-backtrace", "--event-sample",
    "--event-sampling-interval",
    "--cpu-core-events", "--cpu-core-metrics", "--os-events", "--session", "--session-new",
    "--wait", "--kill", "--start-frame-index", "--duration-frames", "--hotkey-capture",
    "--retain-etw-files", "--trace-fork-before-exec", "--run-as", "--resolve-symbols",
    "--process-scope", "--dx-force-declare-adapter-removal-support", "--vulkan-gpu-workload",
    "--opengl-gpu-workload", "--dx12-gpu-workload", "--wddm-additional-events",
    "--nic-metrics", "--ib-switch-metrics-device", "--storage-metrics", "--cuda-event-trace",
    "--cudabacktrace-threshold", "--cuda-trace-scope", "--qdstrm-output",
    "--python-functions-trace",
    "--dask", "--cpu-cluster-events", "--xhv-trace", "--ucx-trace", "--stop-on-range-end",
    "--enable",
}
NSYS_ALIASES = {
    "-t": "--trace", "-s": "--sample", "-b": "--backtrace", "-c": "--capture-range",
    "-y": "--delay", "-d": "--duration", "-o": "--output", "-f": "--force-overwrite",
    "-w": "--show-output", "-e": "--env-var", "-n": "--inherit-environment",
    "-p": "--nvtx-capture", "-x": "--stop-on-exit",
}
# `nsys nvprof` takes nvprof's options instead (transcribed from nsys 2022.4's
# `nsys nvprof --help`, where a value option is spelled `--opt=`; nvprof also took `--opt value`).
NVPROF_VALUE_OPTIONS = {
    "--aggregate-mode", "--annotate-mpi", "--concurrent-kernels", "--context-name",
    "--continuous-sampling-interval", "--cpu-profiling", "--cpu-profiling-explain-ccff",
    "--cpu-profiling-frequency", "--cpu-profiling-max-depth", "--cpu-profiling-mode",
    "--cpu-profiling-percentage-threshold", "--cpu-profiling-scope", "--cpu-profiling-show-ccff",
    "--cpu-profiling-show-library", "--cpu-profiling-thread-mode", "--cpu-profiling-unwind-stack",
    "--cpu-thread-tracing", "--demangling", "--device-buffer-size", "--device-cdp-buffer-size",
    "--devices", "--event-collection-mode", "--events", "--export-profile", "--import-profile",
    "--kernel-latency-timestamps", "--kernels", "--log-file", "--metrics",
    "--normalized-time-unit", "--openacc-profiling", "--openacc-summary-mode",
    "--openmp-profiling", "--pc-sampling-period", "--process-name", "--profile-api-trace",
    "--profile-from-start", "--profiling-semaphore-pool-size", "--replay-mode",
    "--skip-kernel-replay-save-restore", "--source-level-analysis", "--stream-name",
    "--system-profiling", "--timeout", "--trace", "--track-memory-allocations",
    "--unified-memory-profiling", "-a", "-e", "-i", "-m", "-o", "-t", "-u",
}
NVPROF_ALIASES = {
    "-e": "--events", "-m": "--metrics", "-a": "--source-level-analysis", "-t": "--timeout",
    "-u": "--normalized-time-unit", "-s": "--print-summary", "-o": "--export-profile",
    "-f": "--force-overwrite", "-i": "--import-profile", "-h": "--help", "-V": "--version",
}
NSYS_SUBCOMMANDS = {"profile", "launch", "start", "stop", "cancel", "export", "stats", "analyze",
                    "status", "shutdown", "sessions", "recipe", "nvprof", "service"}


def split_command_line(text: str) -> list[str]:
    """Split a recorded command line: double quotes group, backslashes stay (Windows paths)."""
    return [m.group(1) if m.group(1) is not None else m.group(2)
            for m in re.finditer(r'"([^"]*)"|(\S+)', text)]


@dataclass
class ParsedCommand:
    """A profiler invocation: which tool, its options, and the profiled application."""

    tool: str | None
    executable: str | None = None
    subcommand: str | None = None
    options: dict[str, list[str]] = field(default_factory=dict)
    application: list[str] = field(default_factory=list)

    def last(self, name: str) -> str | None:
        values = self.options.get(name)
        return values[-1] if values else None

    def has(self, name: str) -> bool:
        return name in self.options


def tool_of(executable: str) -> str | None:
    """'ncu' or 'nsys' from the executable's file name, whatever its path or extension."""
    base = re.split(r"[\\/]", executable)[-1].lower()
    base = re.sub(r"\.(exe|bat)$", "", base)
    if base in ("ncu", "nv-nsight-cu-cli", "ncu-ui"):
        return "ncu"
    if base == "nsys":
        return "nsys"
    return None


def parse_command(argv: list[str] | str) -> ParsedCommand:
    """Parse an ncu or nsys command (argv list or recorded string)."""
    if isinstance(argv, str):
        argv = split_command_line(argv)
    # Skip wrappers (numactl, env, srun ...) up to the profiler itself.
    start = next((i for i, word in enumerate(argv) if tool_of(word)), None)
    if start is None:
        return ParsedCommand(tool=None, application=list(argv))
    tool = tool_of(argv[start])
    parsed = ParsedCommand(tool=tool, executable=argv[start])
    rest = argv[start + 1:]
    if tool == "nsys" and rest and rest[0] in NSYS_SUBCOMMANDS:
        parsed.subcommand, rest = rest[0], rest[1:]
    if tool == "ncu":
        values, aliases = NCU_VALUE_OPTIONS, NCU_ALIASES
    elif parsed.subcommand == "nvprof":
        values, aliases = NVPROF_VALUE_OPTIONS, NVPROF_ALIASES
    else:
        values, aliases = NSYS_VALUE_OPTIONS, NSYS_ALIASES
    _parse_options(rest, values, aliases, parsed)
    return parsed


def _parse_options(words: list[str], value_options: set[str], aliases: dict[str, str],
                   parsed: ParsedCommand) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            parsed.application = words[i + 1:]
            return
        if not word.startswith("-") or word == "-":
            parsed.application = words[i:]
            return
        name, eq, inline = word.partition("=")
        if eq:
            value = inline
        elif name in value_options and i + 1 < len(words):
            i += 1
            value = words[i]
        else:
            value = ""
        parsed.options.setdefault(aliases.get(name, name), []).append(value)
        i += 1
