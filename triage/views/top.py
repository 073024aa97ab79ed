"""Terminal rendering of `triage top`: where GPU time goes, what keeps the GPU idle, and the ncu
commands to run next, laid out for a terminal (names cut to fit) or a pipe (nothing cut);
commands are never cut: they are pasted."""

from __future__ import annotations

import re
import shlex

from triage.compare.top import function_name
from triage.compare.top_result import (NO_KERNELS, Copies, Gap, GpuIdle, HostTime, Nccl,
                                       NcuSuggestion, NvtxGpuTime, Ranking, TopResult)
from triage.views.text import Layout, fitted_table, fmt_ns, printable, short_id, table
from triage.base.units import fmt_bytes

NAME_ROOM = 40  # columns of a kernel's function name beside a gap, on a terminal


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def _ranking_lines(ranking: Ranking, layout: Layout) -> list[str]:
    rows = [[str(i + 1), fmt_ns(r.total_ns), _pct(r.share), _pct(r.cumulative),
             str(r.launches), fmt_ns(r.avg_ns), r.name]
            for i, r in enumerate(ranking.top)]
    plural = "s" if ranking.kernels != 1 else ""
    headers = ["#", "total", "share", "cum.", "launches", "mean", "kernel"]
    right = {0, 1, 2, 3, 4, 5}
    lines = [f"kernels by total GPU time ({ranking.kernels} kernel{plural}, "
             f"{fmt_ns(ranking.total_ns)}):",
             fitted_table(rows, headers, layout.width, give_way=[(6, 24)], align_right=right)
             if layout.cut else table(rows, headers, align_right=right)]
    rest = ranking.rest
    if rest.kernels:
        lines.append(f"  the other {rest.kernels} kernels add up to {_pct(rest.share)} "
                     f"({fmt_ns(rest.total_ns)})")
    if ranking.kernels > 1:
        lines.append(f"  {ranking.kernels_for_tail_pct} of {ranking.kernels} kernels make "
                     f"up {ranking.tail_pct}% of GPU time")
    return lines


def _api(name: str | None) -> str:
    """cudaMemcpy_v3020 -> cudaMemcpy: nsys appends the API version."""
    return re.sub(r"_v\d+$", "", name or "")


def _gap_lines(gap: Gap, layout: Layout) -> list[str]:
    after = f" after {layout.fit(function_name(gap.before_kernel or ''), NAME_ROOM)}" \
        if gap.before_kernel else ""
    lines = [layout.line(f"  {fmt_ns(gap.gap_ns):>9} on device {gap.device_id}{after}: "
                         f"{gap.cause}")]
    parts = [f"host in {_api(gap.api)} {fmt_ns(gap.api_ns)}" if gap.api else None,
             f"{fmt_ns(gap.outside_api_ns)} outside CUDA calls" if gap.outside_api_ns
             else None,
             f"copies {fmt_ns(gap.copy_ns)}" if gap.copy_ns else None]
    return lines + [layout.line("            " + ", ".join(p for p in parts if p))]


def _gpu_lines(gpu: GpuIdle, layout: Layout) -> list[str]:
    lines = ["", "GPU busy vs idle (kernels on any stream):"]
    lines += [f"  device {d.device_id}: busy {fmt_ns(d.busy_ns)} of "
              f"{fmt_ns(d.span_ns)}, idle {fmt_ns(d.idle_ns)} ({_pct(d.idle_share)})"
              for d in gpu.devices]
    if gpu.largest:
        lines += [f"largest of {gpu.gaps} gaps between kernels ({fmt_ns(gpu.gap_ns)} in "
                  "all): what the host did meanwhile"]
        lines += [line for g in gpu.largest for line in _gap_lines(g, layout)]
    return lines


def _copy_lines(copies: Copies) -> list[str]:
    lines = ["", "host<->device copies against kernels (serialised: no kernel ran on the "
             "device meanwhile):"]
    if not copies.kinds:
        return lines + ["  no host<->device copies traced"]
    for c in copies.kinds:
        lines.append(f"  {c.kind}: {c.serialised} of {c.count} copies serialised "
                     f"({fmt_ns(c.serialised_ns)}, {fmt_bytes(c.serialised_bytes)}); "
                     f"{fmt_ns(c.exposed_ns)} of {fmt_ns(c.total_ns)} not under a kernel")
        lines.append(f"      ({c.meaning})")
    return lines


def _nccl_lines(nccl: Nccl) -> list[str]:
    if not nccl.traced:
        return ["", "NCCL: no NCCL kernels traced"]
    return ["", f"NCCL: {nccl.kernels} kernels, {fmt_ns(nccl.nccl_ns)}; "
            f"{fmt_ns(nccl.overlapped_ns)} overlapped with compute "
            f"({_pct(nccl.overlap_share)}), {fmt_ns(nccl.exposed_ns)} exposed"]


def _nvtx_lines(nvtx: tuple[NvtxGpuTime, ...], layout: Layout) -> list[str]:
    if not nvtx:
        return ["", "NVTX: no ranges recorded"]
    lines = ["", "NVTX ranges by kernel time inside them:"]
    for r in nvtx:
        label = (f"{r.domain}@" if r.domain else "") + (r.text or "?")
        lines.append(layout.line(f"  {fmt_ns(r.gpu_ns):>9} kernel time in {r.instances} x "
                                 f"{label} ({r.kind}): {_pct(r.gpu_share)} of "
                                 f"{fmt_ns(r.range_ns)}"))
    return lines


def _next_lines(suggestions: tuple[NcuSuggestion, ...], layout: Layout) -> list[str]:
    if not suggestions:  # -k 0: the ranking alone was asked for
        return []
    lines = ["", "next: profile one typical launch of each with ncu (paste as is):"]
    for i, s in enumerate(suggestions, 1):
        lines.append(f"  {i}. {layout.fit(s.function, 60)}: launch {s.launch} of "
                     f"{s.launches} (0-based; a typical one after the warm-up)")
        # Commands are shown escaped too: a control character in a kernel name would act on
        # the terminal (and `\\x1b` in the -k regex still matches it).
        lines.append(f"     {printable(s.command)}")
        lines.append(f"     or, archived and linked to this run: {printable(s.capture_command)}")
        if s.nvtx_command:
            lines.append(f"     inside NVTX range {printable(s.nvtx_range or '')}: "
                         f"{printable(s.nvtx_command)}")
        lines += [f"     note: {n}" for n in s.notes]
    report = shlex.split(suggestions[0].command)
    name = report[report.index("-o") + 1]
    lines.append(f"  then: triage explain latest (after capture), or triage archive "
                 f"{printable(name)}.ncu-rep && triage explain latest")
    return lines


def _host_lines(host: HostTime, layout: Layout) -> list[str]:
    """The host's hot spots, by total time, where there are no kernels to rank."""
    sections = (("NVTX ranges", [(r.total_ns, r.instances, r.text) for r in host.nvtx]),
                ("OS runtime calls", [(r.total_ns, r.calls, r.name) for r in host.osrt]),
                ("CUDA API calls", [(r.total_ns, r.calls, r.name) for r in host.api]))
    lines = []
    for title, rows in sections:
        if rows:
            lines += ["", f"{title} by total time (host side):"]
            lines += [layout.line(f"  {fmt_ns(total):>10}  {count:>8} x  {name or '?'}")
                      for total, count, name in rows]
    if not lines:
        lines = ["no NVTX ranges, OS runtime or CUDA API calls recorded either"]
    return lines


# Why a capture has no kernel rows, by whether it traced CUDA (True, False, unknown).
NO_KERNEL_WHY = {
    True: "nsys traced CUDA but recorded no GPU kernel (none ran, or a WSL2 capture without GPU "
          "activity)",
    False: "nsys did not trace CUDA (capture with --trace=cuda to see kernels)",
    None: "nsys recorded no GPU kernel (check --trace=cuda, or a WSL2 capture without GPU "
          "activity)"}


def render_top(result: TopResult, layout: Layout | None = None) -> str:
    """`triage top` as text, laid out as `layout` says (by default, for stdout as it is)."""
    layout = layout or Layout.for_stdout()
    argv = " ".join(result.application or []) or "command unknown"
    lines = [layout.line(f"run {short_id(result.run)}  nsys {result.tool_version or '?'}"
                         f"  {argv}")]
    found = result.found
    if isinstance(found, HostTime):
        lines.append(f"{NO_KERNELS}: nothing to rank; " + NO_KERNEL_WHY[found.cuda_traced])
        lines += [f"  {m.op} {m.kind}: {m.count} x, {fmt_ns(m.total_ns)}" for m in found.memops]
        return "\n".join(lines + _host_lines(found, layout))
    lines += _ranking_lines(found.ranking, layout) + _gpu_lines(found.gpu, layout)
    lines += _copy_lines(found.copies) + _nccl_lines(found.nccl)
    lines += _nvtx_lines(found.nvtx, layout) + _next_lines(found.next, layout)
    return "\n".join(lines)
