"""`triage top RUN`: where an nsys run spends GPU time, and the ncu commands to run next.

nsys decides which kernel to look at; ncu (`triage explain`) then decides why. So `top` ranks
kernels by total GPU time with the cumulative share (the long tail usually adds up to little),
then shows what keeps the GPU from running kernels at all: idle gaps between kernels (host
stalls: synchronisation, Python overhead, data loading), host<->device copies that run while no
kernel runs on their device, NCCL time not hidden behind compute, and NVTX ranges with the
kernel time inside them. For the top k kernels it writes the ncu command that profiles one
representative launch, ready to paste.

Interval arithmetic: kernels of a device are merged into busy intervals (all streams); `Busy`
answers "how much of [a, b] was busy" in O(log n) from prefix sums.
"""

from __future__ import annotations

import re
import shlex
import statistics
from bisect import bisect_left, bisect_right
from itertools import accumulate

from triage.archive.model import RunRecord
from triage.compare.rundata import RunData
from triage.compare.top_result import (CallTotal, Copies, Copy, CopyKind, DeviceBusy, Gap,
                                       GpuIdle, HostTime, KernelTime, MemopKind, NcuSuggestion,
                                       Nccl, NvtxGpuTime, NvtxTotal, RankedKernel, Ranking, Rest,
                                       TopResult)
from triage.base.errors import UsageError

# top's own numbers (rows listed, warm-up, what counts as typical), echoed under "settings"
# in --json; not to be confused with the profiler settings a manifest records.
PARAMETERS = {
    "shown": 10,            # kernels, NVTX ranges listed
    "gaps_shown": 5,        # largest idle gaps listed
    "copies_shown": 5,      # largest serialised copies listed
    "warmup_launches": 2,   # launches skipped as warm-up before picking one to profile
    "typical_pct": 10,      # a launch within this much of the median duration is typical
    "tail_pct": 80,         # "N kernels make up 80% of GPU time"
}
# Host<->device transfers: kind -> what overlap with a kernel means for it.
HOST_DEVICE_COPIES = {
    "HtoD": "a copy running under a kernel is hidden",
    "DtoH": "a copy running under a kernel is hidden",
    "UVM HtoD": "unified-memory migration: under a kernel it is a page fault that stalls it",
    "UVM DtoH": "unified-memory migration: under a kernel it is a page fault that stalls it",
}
NVTX_QUANTIFIERS = "@,[]/*+"  # escaped with a backslash in --nvtx-include (ncu CLI manual)
NO_PROGRAM = "<your program>"


class Busy:
    """Merged [start, end) intervals with prefix sums of their lengths."""

    def __init__(self, intervals) -> None:
        merged: list[list[int]] = []
        for start, end in sorted(intervals):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.starts = [s for s, _e in merged]
        self.ends = [e for _s, e in merged]
        self.prefix = list(accumulate((e - s for s, e in merged), initial=0))

    @property
    def total(self) -> int:
        return self.prefix[-1]

    def intervals(self) -> list[tuple[int, int]]:
        return list(zip(self.starts, self.ends, strict=True))

    def covered(self, a: int, b: int) -> int:
        """Busy time inside [a, b]."""
        i, j = bisect_right(self.ends, a), bisect_left(self.starts, b)
        if b <= a or i >= j:
            return 0
        return (self.prefix[j] - self.prefix[i] - max(0, a - self.starts[i])
                - max(0, self.ends[j - 1] - b))


def _rows(run: RunData, table: str, columns: list[str] | None = None) -> list[dict]:
    data = run.table(table, columns)
    return data.to_pylist() if data is not None else []


def _by_device(rows: list[dict]) -> dict[int, Busy]:
    devices: dict[int, list] = {}
    for row in rows:
        if row["start_ns"] is not None and row["end_ns"] is not None:
            devices.setdefault(row["device_id"] or 0, []).append((row["start_ns"], row["end_ns"]))
    return {device: Busy(spans) for device, spans in devices.items()}


def _share(part, whole) -> float | None:
    return part / whole if whole else None


# -- ranking -----------------------------------------------------------------------------------


def ranking(summary: list[dict], shown: int) -> Ranking:
    """Kernels by total GPU time with cumulative share, and what the rest adds up to."""
    total = sum(r["total_ns"] or 0 for r in summary)
    rows, running = [], 0.0
    for row in summary:
        running += row["total_ns"] or 0
        rows.append(RankedKernel(row["name"], row["short_name"], row["instances"],
                                 row["total_ns"], row["avg_ns"], row["median_ns"],
                                 _share(row["total_ns"] or 0, total), _share(running, total)))
    rest = sum(r.total_ns or 0 for r in rows[shown:])
    head = next((i + 1 for i, r in enumerate(rows)
                 if (r.cumulative or 0) * 100 >= PARAMETERS["tail_pct"]), len(rows))
    return Ranking(total, len(rows), tuple(rows[:shown]),
                   Rest(len(rows[shown:]), rest, _share(rest, total)), head,
                   PARAMETERS["tail_pct"])


# -- GPU busy / idle ---------------------------------------------------------------------------


# What the host was doing during a gap, by the CUDA API call that covers most of it.
GAP_CAUSES = ((r"Synchronize|StreamWait|EventQuery|StreamQuery", "synchronisation"),
              (r"[Mm]emcpy|[Mm]emset|[Pp]refetch", "memory copy"),
              (r"[Mm]alloc|[Ff]ree|[Hh]ostRegister|[Hh]ostAlloc", "allocation"),
              (r"[Ll]aunch", "kernel launch overhead"),
              (r"", "other CUDA API"))


def _covering(rows: list[dict], key: str, start: int, end: int) -> tuple[str | None, int, int]:
    """(the value of `key` covering most of [start, end], its time there, all rows' union)."""
    cover: dict[str | None, int] = {}
    inside = [(max(r["start_ns"], start), min(r["end_ns"], end)) for r in rows
              if r["start_ns"] < end and r["end_ns"] > start]
    for r in rows:
        overlap = min(r["end_ns"], end) - max(r["start_ns"], start)
        if overlap > 0:
            cover[r[key]] = cover.get(r[key], 0) + overlap
    top = max(cover, key=cover.__getitem__) if cover else None
    return top, cover.get(top, 0), Busy(inside).total


def gap_activity(gap: dict, api: list[dict], nvtx: list[dict], copies: Busy | None) -> Gap:
    """What ran on the host and the device during one idle gap, and the likely cause."""
    start, end, length = gap["start_ns"], gap["end_ns"], gap["gap_ns"]
    name, name_ns, api_ns = _covering(api, "name", start, end)
    text, text_ns, _all = _covering(nvtx, "text", start, end)
    outside = length - api_ns
    where = f"NVTX range {text} covers {text_ns / length:.0%}" if text and \
        text_ns * 4 >= length else "Python, data loading, I/O"
    cause = next(label for pattern, label in GAP_CAUSES if re.search(pattern, name or "")) \
        if name and name_ns >= outside else f"host work outside CUDA calls ({where})"
    return Gap(gap["device_id"], start, end, length, gap["before_kernel"], gap["after_kernel"],
               name, name_ns, outside, text, text_ns,
               copies.covered(start, end) if copies else 0, cause)


def gpu_busy_and_gaps(run: RunData, busy: dict[int, Busy], copies: dict[int, Busy],
             nvtx: list[dict]) -> GpuIdle:
    """Per device busy vs idle, and the largest gaps with what the host did meanwhile."""
    devices = []
    for device, b in sorted(busy.items()):
        span = b.ends[-1] - b.starts[0]
        devices.append(DeviceBusy(device, span, b.total, span - b.total,
                                  _share(span - b.total, span)))
    gaps = _rows(run, "gpu_gaps") or [
        {"device_id": d, "start_ns": e, "end_ns": s, "gap_ns": s - e,
         "before_kernel": None, "after_kernel": None}
        for d, b in busy.items()
        for (_s0, e), (s, _e1) in zip(b.intervals(), b.intervals()[1:], strict=False)]
    largest = sorted(gaps, key=lambda g: -g["gap_ns"])[:PARAMETERS["gaps_shown"]]
    api = [c for c in _rows(run, "api_calls", ["name", "start_ns", "end_ns"])
           if any(c["start_ns"] < g["end_ns"] and c["end_ns"] > g["start_ns"] for g in largest)]
    return GpuIdle(tuple(devices), len(gaps), sum(g["gap_ns"] for g in gaps),
                   tuple(gap_activity(g, api, nvtx, copies.get(g["device_id"] or 0))
                         for g in largest))


# -- memory copies, NCCL, NVTX -----------------------------------------------------------------


def serialised_copies(memops: list[dict], busy: dict[int, Busy]) -> Copies:
    """Host<->device copies and how much of each ran while no kernel ran on its device."""
    by_kind: dict[str, dict] = {}
    alone = []
    for op in memops:
        if op["kind"] not in HOST_DEVICE_COPIES or op["start_ns"] is None:
            continue
        device = busy.get(op["device_id"] or 0)
        overlap = device.covered(op["start_ns"], op["end_ns"]) if device else 0
        exposed = op["end_ns"] - op["start_ns"] - overlap
        entry = by_kind.setdefault(op["kind"], {"kind": op["kind"], "count": 0, "total_ns": 0,
                                                "meaning": HOST_DEVICE_COPIES[op["kind"]],
                                                "serialised": 0, "serialised_ns": 0,
                                                "exposed_ns": 0, "serialised_bytes": 0})
        entry["count"] += 1
        entry["total_ns"] += op["end_ns"] - op["start_ns"]
        entry["exposed_ns"] += exposed
        if overlap == 0:
            entry["serialised"] += 1
            entry["serialised_ns"] += op["end_ns"] - op["start_ns"]
            entry["serialised_bytes"] += op["bytes"] or 0
            alone.append(op)
    largest = sorted(alone, key=lambda o: o["start_ns"] - o["end_ns"])[:PARAMETERS["copies_shown"]]
    return Copies(tuple(CopyKind(**e) for e in sorted(by_kind.values(),
                                                      key=lambda e: -e["exposed_ns"])),
                  tuple(Copy(o["kind"], o["bytes"], o["start_ns"], o["end_ns"], o["device_id"],
                             o["stream_id"]) for o in largest))


def nccl_overlap(kernels: list[dict]) -> Nccl:
    """NCCL kernel time, and how much of it ran while compute kernels ran on the same device."""
    nccl = [k for k in kernels if "nccl" in (k["name"] or "").lower()]
    if not nccl:
        return Nccl(traced=False)
    comm = _by_device(nccl)
    compute = _by_device([k for k in kernels if "nccl" not in (k["name"] or "").lower()])
    overlap = sum(compute[d].covered(s, e) for d, b in comm.items() if d in compute
                  for s, e in b.intervals())
    total = sum(b.total for b in comm.values())
    return Nccl(True, len(nccl), total, overlap, total - overlap, _share(overlap, total))


def nvtx_gpu_time(ranges: list[dict], busy: dict[int, Busy]) -> tuple[NvtxGpuTime, ...]:
    """Per range text: wall time of its ranges and the kernel time (all GPUs) inside them."""
    out: dict[tuple, dict] = {}
    for r in ranges:
        if r["start_ns"] is None or r["end_ns"] is None:
            continue
        entry = out.setdefault((r["domain"], r["text"], r["kind"]), {
            "domain": r["domain"], "text": r["text"], "kind": r["kind"], "instances": 0,
            "range_ns": 0, "gpu_ns": 0})
        entry["instances"] += 1
        entry["range_ns"] += r["end_ns"] - r["start_ns"]
        entry["gpu_ns"] += sum(b.covered(r["start_ns"], r["end_ns"]) for b in busy.values())
    ranked = sorted(out.values(), key=lambda e: (-e["gpu_ns"], -e["range_ns"]))
    return tuple(NvtxGpuTime(**e, gpu_share=_share(e["gpu_ns"], e["range_ns"]))
                 for e in ranked[:PARAMETERS["shown"]])


# -- the ncu commands --------------------------------------------------------------------------


def function_name(name: str, short_name: str | None = None) -> str:
    """The bare function name ncu matches by default (--kernel-name-base function): no return
    type, namespace, template arguments or parameters."""
    text, previous = name or "", None
    while text != previous:
        previous, text = text, re.sub(r"<[^<>]*>|\([^()]*\)", "", text)
    tokens = [t for t in re.split(r"\s+|::", text) if t]
    return tokens[-1] if tokens and re.fullmatch(r"\w+", tokens[-1]) else (short_name or name)


def pick_launch(durations: list[float]) -> int:
    """Index of a typical launch after the warm-up: the first within typical_pct of the median,
    else the one closest to it."""
    first = min(PARAMETERS["warmup_launches"], len(durations) - 1)
    median = statistics.median(durations[first:])
    later = range(first, len(durations))
    typical = [i for i in later
               if abs(durations[i] - median) <= median * PARAMETERS["typical_pct"] / 100]
    return typical[0] if typical else min(later, key=lambda i: abs(durations[i] - median))


def _launch_order(kernel: dict) -> tuple:
    return (kernel["process_id"] or 0, kernel["correlation_id"] or 0, kernel["start_ns"] or 0)


def nvtx_config(entry: dict) -> str | None:
    """An --nvtx-include expression for a range: push/pop ranges end in '/'."""
    text = entry["text"] or ""
    if not text or "\\" in text:
        return None
    escaped = "".join("\\" + c if c in NVTX_QUANTIFIERS else c for c in text)
    domain = f"{entry['domain']}@" if entry.get("domain") else ""
    return domain + escaped + ("/" if entry["kind"] == "push_pop" else "")


class Launcher:
    """Which NVTX ranges held a kernel launch: those open when its launch API call was made, on
    the launching thread for push/pop ranges (that is what ncu's --nvtx filter sees)."""

    def __init__(self, api: list[dict], ranges: list[dict]):
        self.calls = {c["correlation_id"]: c for c in api if c["correlation_id"] is not None}
        self.ranges = [r for r in ranges if r["start_ns"] is not None and r["end_ns"] is not None]

    def held(self, kernel: dict, ranges: list[dict] | None = None) -> list[dict]:
        """Innermost push/pop range first, then start/end ranges shortest first."""
        call = self.calls.get(kernel["correlation_id"])
        if call is None:
            return []
        held = [r for r in (self.ranges if ranges is None else ranges)
                if r["start_ns"] <= call["start_ns"] <= r["end_ns"]
                and (r["kind"] != "push_pop" or r["thread_id"] == call["thread_id"])]
        return sorted(held, key=lambda r: (r["kind"] != "push_pop", -(r["depth"] or 0),
                                           r["end_ns"] - r["start_ns"]))


def _command(run: RunData, ident: str, skip: int, extra: list[str]) -> str:
    argv = run.record.application_argv or ()
    words = ["ncu", "-k", f"regex:^{re.escape(ident)}$", "-s", str(skip), "-c", "1", *extra,
             "--set", "full", "-o", f"{ident[:60]}-s{skip}-from-{run.id[:12]}"]
    return shlex.join(words) + " " + (shlex.join(argv) if argv else NO_PROGRAM)


def ncu_suggestion(run: RunData, entry: RankedKernel, launches: list[dict],
                   launcher: Launcher) -> NcuSuggestion | None:
    """The ncu command(s) that profile one typical launch of a ranked kernel."""
    ident = function_name(entry.name or "", entry.short_name)
    same = sorted((k for k in launches if function_name(k["name"], k["short_name"]) == ident),
                  key=_launch_order)
    mine = [i for i, k in enumerate(same) if k["name"] == entry.name]
    if not mine:
        return None
    chosen = mine[pick_launch([same[i]["duration_ns"] or 0 for i in mine])]
    command = _command(run, ident, chosen, [])
    notes = [f"{len(same) - len(mine)} launches of other kernels named {ident} (template "
             "instances, overloads) are counted by -s"] if len(same) > len(mine) else []
    held = launcher.held(same[chosen])
    config = nvtx_config(held[0]) if held else None
    nvtx_command = None
    if config:
        alike = [r for r in launcher.ranges if nvtx_config(r) == config]
        inside = [k for k in same if launcher.held(k, alike)]
        nvtx_command = _command(run, ident, inside.index(same[chosen]),
                                ["--nvtx", "--nvtx-include", config])
    return NcuSuggestion(entry.name, ident, mine.index(chosen), len(mine), chosen,
                         run.id, tuple(notes + _command_notes(run, same)), command,
                         f"triage capture --from {run.id[:12]} -- {command}", config or None,
                         nvtx_command)


def _command_notes(run: RunData, launches: list[dict]) -> list[str]:
    notes = []
    if not run.record.application_argv:
        notes.append(f"the run does not record the profiled command: replace {NO_PROGRAM}")
    workdir = run.record.environment.working_directory
    if workdir:
        notes.append(f"run from {workdir}")
    if len({k["process_id"] for k in launches}) > 1:
        notes.append("launches come from several processes; ncu counts -s over all of them")
    return notes


# -- top ---------------------------------------------------------------------------------------


def host_time(run: RunData) -> HostTime:
    """Where the host's time went, for a run with no GPU kernels to rank (a CPU program, or a
    capture that missed --trace=cuda): the NVTX ranges, OS runtime calls and CUDA API calls
    with most total time, so `top` still answers "what deserves attention"."""
    shown = PARAMETERS["shown"]
    nvtx = _rows(run, "nvtx_summary", ["text", "domain", "kind", "instances", "total_ns"])
    api = _rows(run, "api_summary", ["api", "name", "calls", "total_ns"])
    return HostTime(tuple(MemopKind(**row) for row in _rows(run, "memop_summary")),
                    tuple(NvtxTotal(**row) for row in nvtx[:shown]), _osrt_summary(run)[:shown],
                    tuple(CallTotal(r["name"], r["calls"], r["total_ns"], r["api"])
                          for r in api[:shown]), cuda_traced(run.record))


def cuda_traced(record: RunRecord) -> bool | None:
    """Whether the capture traced CUDA, as the run records or proves it (None: unknown), so
    that "no kernels" is told apart from "kernels not traced"."""
    trace = record.recorded_setting("trace")
    if trace is None:
        return None
    traced = "cuda" in str(trace).split(",")
    derived = record.settings["trace"].source == "derived"  # a lower bound: absence proves none
    return None if derived and not traced else traced


def _osrt_summary(run: RunData) -> tuple[CallTotal, ...]:
    """OS runtime calls by function, most total time first (no summary table is stored)."""
    calls = run.table("osrt_calls", ["name", "duration_ns"])
    if calls is None or not calls.num_rows:
        return ()
    grouped = calls.group_by("name").aggregate([("duration_ns", "count"),
                                                ("duration_ns", "sum")])
    rows = [CallTotal(r["name"], r["duration_ns_count"], r["duration_ns_sum"])
            for r in grouped.to_pylist()]
    return tuple(sorted(rows, key=lambda r: (-(r.total_ns or 0), r.name or "")))


KERNEL_COLUMNS = ["name", "short_name", "start_ns", "end_ns", "duration_ns", "device_id",
                  "correlation_id", "process_id"]


def top_run(run: RunData, k: int = 3) -> TopResult:
    """`triage top RUN`: the ranking, GPU idle, copies, NCCL, NVTX, and the next ncu commands."""
    if run.tool != "nsys":
        raise UsageError(f"`triage top` reads nsys runs; run {run.id[:12]} is {run.tool}: "
                         f"`triage explain {run.id[:12]}` explains its kernels")
    kernels = _rows(run, "kernels", KERNEL_COLUMNS)
    found = kernel_time(run, kernels, k) if kernels else host_time(run)
    return TopResult(run.id, run.record.tool_version, run.record.application_argv,
                     dict(PARAMETERS), found)


def kernel_time(run: RunData, kernels: list[dict], k: int) -> KernelTime:
    """The ranking, GPU idle, copies, NCCL, NVTX, and the ncu commands for the top k."""
    memops = _rows(run, "memops", ["kind", "bytes", "start_ns", "end_ns", "device_id",
                                   "stream_id"])
    busy, copies = _by_device(kernels), _by_device(memops)
    ranked = ranking(_rows(run, "kernel_summary"), max(k, PARAMETERS["shown"]))
    nvtx = _rows(run, "nvtx_ranges", ["text", "domain", "kind", "start_ns", "end_ns",
                                      "thread_id", "depth"])
    launcher = Launcher(_rows(run, "api_calls", ["correlation_id", "start_ns", "thread_id"])
                        if nvtx else [], nvtx)
    return KernelTime(ranked, gpu_busy_and_gaps(run, busy, copies, nvtx),
                      serialised_copies(memops, busy), nccl_overlap(kernels),
                      nvtx_gpu_time(nvtx, busy),
                      tuple(filter(None, (ncu_suggestion(run, e, kernels, launcher)
                                          for e in ranked.top[:k]))))
