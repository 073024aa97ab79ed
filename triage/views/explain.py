"""Terminal rendering of `triage explain`: per kernel, the five steps in order, each statement
followed by the metric values it cites (name = value unit); kernel names cut to a terminal's
width, whole in a pipe."""

from __future__ import annotations

import textwrap

from triage.compare.explain_result import (NOT_COLLECTED, Cite, ExplainResult, KernelExplained,
                                           Step)
from triage.compare.explain_tables import NS_PER_UNIT
from triage.views.text import Layout, fmt_ns, fmt_value, printable, short_id


def _cite_line(cite: Cite) -> str:
    unit = f" {cite.unit}" if cite.unit else ""
    return f"         {cite.name} = {fmt_value(cite.value)}{unit}"


def _step_lines(step: Step, width: int) -> list[str]:
    head = f"  {step.step}. {step.title}"
    if step.status == NOT_COLLECTED:
        whys = "; ".join(dict.fromkeys(m.why for m in step.missing)) or "not collected"
        return [head] + textwrap.wrap(whys, width, initial_indent="       ",
                                      subsequent_indent="       ")
    lines = [head]
    for finding in step.findings:
        lines += textwrap.wrap(finding.text, width, initial_indent="     - ",
                               subsequent_indent="       ")
        lines += [_cite_line(c) for c in finding.cites]
    lines += [f"     ({m.why})" for m in step.missing]
    return lines


def _duration(kernel: KernelExplained) -> str:
    duration = kernel.duration
    if not duration:
        return "duration not collected"
    mean = "mean " if kernel.launches > 1 else ""
    scale = NS_PER_UNIT.get(duration.unit)  # ns, or usecond/msecond in some exports
    if scale is None:  # a unit we do not know: shown as recorded, not guessed
        return f"{mean}{fmt_value(duration.value)} {duration.unit}"
    return f"{mean}{fmt_ns(duration.value * scale)}"


def _launches(kernel: KernelExplained) -> str:
    """How many launches an entry covers and their configuration ("3 launches, grid 1024,
    block 256"); "group 2 of 3: 1 of 4 launches, ..." where a kernel's launches behave
    differently and are explained per group."""
    group, config = kernel.group, kernel.launch_config
    count = f"{kernel.launches} launch{'es' if kernel.launches > 1 else ''}"
    if group and group.of > 1:
        count = f"group {group.index} of {group.of}: {kernel.launches} of " \
            f"{group.kernel_launches} launches"
    shape = ", ".join(f"{what} {value:,.0f}" for what, value in
                      (("grid", config.grid_size), ("block", config.block_size))
                      if value is not None)
    return f"{count}, {shape}" if shape else count


def _kernel_lines(kernel: KernelExplained, layout: Layout) -> list[str]:
    launches = _launches(kernel)
    if kernel.no_data:
        them = "them" if kernel.launches > 1 else "it"
        return ["", layout.line(kernel.name),
                f"  {launches}, no data: the profiler collected nothing for {them}"]
    lines = ["", layout.line(kernel.name),
             f"  {launches}; {_duration(kernel)}; conclusion: {kernel.conclusion or 'none'}"]
    for step in kernel.steps:
        lines += _step_lines(step, layout.width)
    fired = [f"{r.rule_id}" + (f" ({r.title})" if r.title else "")
             for r in kernel.ncu_rules if r.message_type != "ok"]
    if fired:
        lines.append(layout.line("  ncu's own rules fired: " + ", ".join(dict.fromkeys(fired))))
    return lines


def render_explain(result: ExplainResult, layout: Layout | None = None) -> str:
    """`triage explain` as text, laid out as `layout` says (by default, for stdout as it is)."""
    layout = layout or Layout.for_stdout()
    head = (f"run {short_id(result.run)}  ncu {result.tool_version or '?'}  "
            f"{result.gpu or 'GPU unknown'}")
    lines = [head, "order: 1 throughput, 2 memory efficiency, 3 occupancy, 4 issue slots and "
             "stalls, 5 conclusion"]
    for kernel in result.kernels:
        lines += _kernel_lines(kernel, layout)
    # Kernel, NVTX and rule names come from the report: each line escaped (ESC, BEL, U+202E,
    # a newline), so none reaches the terminal as a control or fakes a line.
    return "\n".join(map(printable, lines))
