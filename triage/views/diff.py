"""Terminal rendering of `triage diff`: verdict and drift on top, then kernels, in the
terminal's width with names cut to fit, or in 100 columns with nothing cut (a pipe, a file)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence

from triage.compare.result import (NO_SIDE, DiffResult, DriftItem, KernelDiff, KernelSide,
                                   MetricDiff, NsysDiff, SummaryChange)
from triage.compare.noise import Noise
from triage.views.text import (Layout, drift_change, drift_entries, drift_why, fmt_ns, fmt_pct,
                               fmt_value, kernel_notes, metric_title, one_side_text, rename_text,
                               short_id, field_with_default, side_text)
from triage.views.text import (NCU_CAVEAT, aggregate_words, failed_tries_words, fmt_noise,
                               fmt_spread, gate_lines,
                               rule_failure, rule_heading, side_runs_title)

WIDTH = 100  # the layout's columns; a wider or narrower terminal widens or narrows the names
UNRECORDED_LABEL = "not recorded in either run:"
SEVERITY_LABEL = {"invalidates": "INVALIDATES", "caution": "caution", "info": "info",
                  "not_comparable": "section", "unknown": "unknown"}


def _run_label(diff: DiffResult, side: str) -> str:
    """'e9e4eca7a5b7 (before/1) nsys 2022.4.2.1', or for a side of several runs '5 runs:
    before/1..before/5, nsys 2022.4.2.1' (its ids on the next lines)."""
    run = diff.run_a if side == "a" else diff.run_b
    tool = f"{run.tool} {run.tool_version or '?'}"
    several = side_runs_title(diff, side)
    if several:
        ids = diff.runs_of[0 if side == "a" else 1]
        shown = ", ".join(short_id(i, 8) for i in ids[:4]) + (", ..." if len(ids) > 4 else "")
        return f"{several}, {tool} ({shown})"
    named = diff.named_labels(side)
    labels = f" ({', '.join(named)})" if named else ""
    return f"{short_id(run.id)}{labels} {tool}"


def _verdict_lines(diff: DiffResult, width: int) -> list[str]:
    return verdict_lines(diff.verdict, width)


def verdict_lines(verdict: str, width: int) -> list[str]:
    """The verdict banner (also for the verdict `rerun` predicts before running)."""
    if verdict == "invalid":
        return ["!" * width, "VERDICT: INVALID - these runs are NOT comparable "
                "(see INVALIDATES below)", "!" * width]
    if verdict == "caution":
        return ["VERDICT: CAUTION - comparable with care (see caution below)"]
    return ["VERDICT: comparable"]


def drift_lines(drift: Sequence[DriftItem], layout: Layout) -> list[str]:
    """The drift table, worst first (also the drift `rerun` predicts before running)."""
    entries = drift_entries(drift)
    if not entries:
        return ["drift: none recorded"]
    lines = ["drift:"]
    for entry in entries:
        lines += _unrecorded_lines(entry, layout.width) if isinstance(entry, list) else \
            _wrapped(f"{entry.field:<26} {_values(entry, layout)}{drift_why(entry)}",
                     entry.severity, layout.width)
    return lines


def _wrapped(text: str, severity: str, width: int) -> list[str]:
    # Wrapped, not cut: the why names what differs (the kernels only in A, ...).
    return textwrap.wrap(f"  {SEVERITY_LABEL.get(severity, severity):<11} {text}", width,
                         subsequent_indent=" " * 14, drop_whitespace=True,
                         break_on_hyphens=False)


def _unrecorded_lines(items: list[DriftItem], width: int) -> list[str]:
    """`not recorded in either run: gpu.name, driver.major`, with why it caps the verdict."""
    fields = ", ".join(field_with_default(i) for i in items)
    why = f" ({items[0].why.split(': ', 1)[-1]})" if items[0].severity != "unknown" else ""
    return _wrapped(f"{UNRECORDED_LABEL} {fields}{why}", items[0].severity, width)


def _values(item: DriftItem, layout: Layout) -> str:
    if item.a is None and item.b is None:
        return ""
    change = drift_change(item)
    if change is not None:  # the differing tokens whole, the rest shortened
        return f"{change}  "
    return f"{_v(item, 0, layout)} -> {_v(item, 1, layout)}  "


def _v(item: DriftItem, side: int, layout: Layout) -> str:
    # a difference is shown whole; a value beside an unknown one is clipped on a terminal
    text = side_text(item, side)
    return text if item.state == "different" else layout.fit(text, 28)


def _metric_line(metric: MetricDiff, raw_names: bool, layout: Layout) -> str:
    unit = f" {metric.unit}" if metric.unit else ""
    values = f"{fmt_value(metric.a)} -> {fmt_value(metric.b)}{unit}"
    change = fmt_pct(metric.delta_pct) if metric.status == "changed" else metric.status
    if metric.status in ("only_a", "only_b"):
        change = "only in " + metric.status[-1].upper()
    elif metric.status == "no_data":
        change = "no data"
    name = metric_title(metric, raw_names)
    return f"      {layout.fit(name, 52):<52} {layout.fit(values, 30):>30} {change:>10}"


def _kernel_head(kernel: KernelDiff, totals: bool, layout: Layout) -> str:
    """One kernel: mean duration per launch (ncu), or total time (nsys ranking), then the
    launches of each side (a mean over 1 launch or 30 is not the same evidence); columns more
    (or fewer) than 100 go to the name."""
    a, b = kernel.a or NO_SIDE, kernel.b or NO_SIDE
    name = kernel.name + (f" -> {kernel.name_b}" if kernel.name_b else "")
    launches = f"{_count(kernel.a)} -> {_count(kernel.b)}"
    room = max(48 + layout.width - WIDTH, 20)
    times, change = ((a.total_ns, b.total_ns), kernel.delta_total_pct) if totals else \
        ((a.duration_ns, b.duration_ns), kernel.delta_pct)
    return (f"  {layout.fit(name, room):<{room}} {fmt_ns(times[0]):>10} -> "
            f"{fmt_ns(times[1]):>10} {fmt_pct(change):>8} {layout.fit(launches, 14):>14}")


def _count(side: KernelSide | None) -> str:
    return "-" if side is None else str(side.launches)


def _kernel_lines(kernel: KernelDiff, detail: bool, totals: bool, layout: Layout,
                  raw_names: bool = False) -> list[str]:
    lines = [_kernel_head(kernel, totals, layout)]
    if kernel.match != "matched":
        lines.append(f"      only in {'A' if kernel.match == 'only_a' else 'B'}")
    for note in kernel_notes(kernel):  # wrapped, not cut: a pairing's evidence is the point
        lines += textwrap.wrap(f"      note: {note}", layout.width, subsequent_indent=" " * 12,
                               break_on_hyphens=False, break_long_words=False)
    lines += _noise_lines(kernel.noise)
    if detail:
        lines += _section_lines(kernel, layout, raw_names)
    return lines


def _noise_lines(noise: Noise | None, indent: str = "      ") -> list[str]:
    """The measured noise of a change: verdict, interval, and each side's spread."""
    if noise is None:
        return []
    return [f"{indent}{fmt_noise(noise)}; A {fmt_spread(noise.a)}; B {fmt_spread(noise.b)}"]


def _sides_lines(diff: DiffResult) -> list[str]:
    """For a side of several runs: what every number below is, and what drift reads; for a
    side whose series had failed tries, which."""
    failed = [f"   {side} failed: {words}" for side, tries in zip("AB", diff.failed, strict=True)
              if (words := failed_tries_words(tries))]
    words = aggregate_words(diff)
    if not words:
        return failed
    firsts = [names[0] if names else short_id(ids[0], 8)
              for ids, names in zip(diff.runs_of, diff.side_names, strict=True)]
    statistic = {("ncu", "ncu"): "mean", ("nsys", "nsys"): "median"}.get(
        diff.tools, "median (nsys) or mean (ncu)")
    return [f"   numbers: {words}; noise: over the runs (each run's {statistic} launch)",
            f"   drift: each side's first run ({firsts[0]} vs {firsts[1]})", *failed]


def _section_lines(kernel: KernelDiff, layout: Layout, raw_names: bool) -> list[str]:
    lines = []
    for section in kernel.sections:
        one_side = one_side_text(section)
        if one_side:
            lines.append(layout.line(f"    [{section.section}]: {one_side}"))
            continue
        if not section.metrics and section.comparable and not section.unchanged:
            continue
        state = "" if section.comparable else f"  NOT COMPARABLE: {section.why}"
        unchanged = f"  ({section.unchanged} unchanged)" if section.unchanged else ""
        lines.append(layout.line(f"    [{section.section}]{unchanged}{state}"))
        for metric in section.metrics:
            lines.append(_metric_line(metric, raw_names, layout))
            renamed = rename_text(metric)
            if renamed:  # wrapped, not cut: the two names are the point
                lines += textwrap.wrap(f"        paired across a rename: {renamed}",
                                       layout.width, subsequent_indent=" " * 10,
                                       break_on_hyphens=False, break_long_words=False)
    for side, rules in (("A", kernel.rules.only_a), ("B", kernel.rules.only_b)):
        for rule in rules:
            failed = f" ({rule_failure(rule.error)})" if rule.error else ""
            lines.append(layout.line(f"    rule {'failed' if rule.error else 'fired'} only in "
                                     f"{side}: {rule_heading(rule)} ({rule.message_type})"
                                     f"{failed}"))
    if kernel.conclusion:
        c = kernel.conclusion
        lines.append(f"    conclusion: {c.a or '?'} -> {c.b or '?'}")
    return lines


SUMMARIES: tuple[tuple[str, str, Callable[[SummaryChange], str]], ...] = (
    ("NVTX ranges", "nvtx", lambda e: str(e.key["text"])),
    ("memory operations", "memops", lambda e: f"{e.key['op']} {e.key['kind']}"),
    ("API calls", "api", lambda e: str(e.key["name"])))


def _nsys_lines(nsys: NsysDiff, layout: Layout, words: str | None = None) -> list[str]:
    """GPU time and the summaries; `words` say what a side's numbers are (several runs)."""
    gpu = nsys.gpu
    lines = []
    of = f" ({words})" if words else ""  # said beside every table: a reader may start there
    if gpu.a.kernel_ns or gpu.b.kernel_ns:
        lines += ["", f"GPU time{of}:",
                  f"  kernel time {fmt_ns(gpu.a.kernel_ns)} -> "
                  f"{fmt_ns(gpu.b.kernel_ns)} ({fmt_pct(gpu.kernel_delta_pct)}); "
                  f"idle between kernels {fmt_ns(gpu.a.idle_ns)} -> "
                  f"{fmt_ns(gpu.b.idle_ns)} ({fmt_pct(gpu.idle_delta_pct)})"]
        lines += _noise_lines(gpu.noise, "  kernel time: ")
    for title, key, label in SUMMARIES:
        entries = getattr(nsys, key)[:10]
        if entries:
            lines += ["", f"{title} ({words + '; ' if words else ''}by time changed):"]
            for entry in entries:
                lines += [_summary_line(label(entry), entry, layout), *_noise_lines(entry.noise)]
    return lines


def _summary_line(label: str, entry: SummaryChange, layout: Layout) -> str:
    total_a = entry.a["total_ns"] if entry.a else None
    total_b = entry.b["total_ns"] if entry.b else None
    change = entry.change if entry.change != "changed" else fmt_pct(entry.delta_pct)
    room = max(50 + layout.width - WIDTH, 20)
    return (f"  {layout.fit(label, room):<{room}} {fmt_ns(total_a):>10} -> "
            f"{fmt_ns(total_b):>10} {change:>9}")


def render_diff(diff: DiffResult, limit: int = 20, layout: Layout | None = None,
                raw_names: bool = False) -> str:
    """The diff laid out as `layout` says (by default, for stdout as it is); metrics by their
    section labels, or by raw name with `raw_names`."""
    layout = layout or Layout.for_stdout()
    width = layout.width
    lines = [f"A: {_run_label(diff, 'a')}", f"B: {_run_label(diff, 'b')}", *_sides_lines(diff)]
    lines += _verdict_lines(diff, width)
    for line in gate_lines(diff.gate) if diff.gate else []:
        lines += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False)
    lines += drift_lines(diff.drift, layout)
    if diff.bench is not None:
        from triage.views.bench import accounts_lines, bench_lines

        lines += bench_lines(diff.bench)
        lines += accounts_lines(diff.accounts, layout) if diff.accounts else []
        return "\n".join(map(layout.line, lines))
    kernels = sorted(diff.kernels, key=lambda k: k.time_changed, reverse=True)
    if not kernels:
        lines += ["", "kernels: no kernel activity recorded in either run"]
    totals = diff.tools == ("nsys", "nsys")
    what = "total GPU time and launches" if totals else "mean duration per launch, launches"
    words = aggregate_words(diff)
    if words:
        what += f", {words}"
    if kernels:
        lines += ["", *textwrap.wrap(f"kernels ({len(kernels)}; {what}, ranked by time changed):",
                                     width, subsequent_indent="  ")]
        lines += [f"  ({NCU_CAVEAT})"] if "ncu" in diff.tools else []
    if diff.verdict == "invalid" and (kernels or diff.nsys):
        lines.append("  (every change below is NOT COMPARABLE: the verdict is invalid)")
    detail = diff.tools == ("ncu", "ncu")
    for kernel in kernels[:limit]:
        lines += _kernel_lines(kernel, detail, totals, layout, raw_names)
    if len(kernels) > limit:
        lines.append(f"  ... {len(kernels) - limit} more (use --json or --kernel REGEX)")
    if diff.nsys:
        lines += _nsys_lines(diff.nsys, layout, words)
    return "\n".join(map(layout.line, lines))
