"""Static SVG charts for the review report: grouped bars and a before/after arrow plot, and
the report's charts drawn from `diff --json` kernels (durations, speed of light, occupancy, stalls).

The output is a plain SVG string with its styling inline and no scripts, fonts or links, so a
report opens from an archive years later with no network. Every label is user data (kernel names
are C++ templates, `<` and `&` included) and is escaped here, where the markup is made.
"""

from __future__ import annotations

import math
import re
from html import escape
from typing import TYPE_CHECKING, Callable, Sequence

from markupsafe import Markup

from triage.views.text import fmt_ns

if TYPE_CHECKING:
    from triage.compare.result import KernelDiff

# Run A is grey ("before"), later runs are saturated: the eye goes to what changed.
PALETTE = ("#8c959f", "#1f6feb", "#d4720b", "#1a7f37", "#8250df", "#cf222e", "#0a7b83")
FONT = "font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"
WIDTH = 760
LABEL_W = 250
VALUE_W = 84
BAR_H = 11
DETAIL_CHART_W, OVERVIEW_CHART_W = 540, 620
TOP_KERNELS = 10


def esc(text) -> str:
    """Text safe inside SVG/HTML element content and attribute values."""
    return escape("" if text is None else str(text), quote=True)


def clip(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def clip_left(text: str, width: int) -> str:
    """Keep the end: run names differ in their last characters (report_v2, report_v3)."""
    text = str(text)
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    # Inline in HTML5, so no xmlns: the report then names no URL at all.
    return (f'<svg class="chart" role="img" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'aria-label="{esc(title)}" style="{FONT};font-size:12px">'
            f"<title>{esc(title)}</title>{''.join(body)}</svg>")


def _text(x: float, y: float, text: str, full: str | None = None, anchor: str = "start",
          style: str = "") -> str:
    """A text element; `full` (the unclipped text) shows as a tooltip."""
    tip = f"<title>{esc(full)}</title>" if full and full != text else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" style="{style}">'
            f"{tip}{esc(text)}</text>")


def _legend(series: Sequence[str], y: int, colors: Sequence[int], width: int) -> tuple:
    """Swatch and name per series, wrapping to new rows; returns (parts, height used)."""
    parts, x, row = [], 0, 0
    for i, name in enumerate(series):
        shown = clip(name, 34)
        step = 24 + 7 * len(shown)
        if x and x + step > width:
            x, row = 0, row + 1
        top = y + 18 * row
        parts.append(f'<rect x="{x}" y="{top - 9}" width="10" height="10" rx="2" '
                     f'fill="{color(colors[i])}"/>')
        parts.append(_text(x + 14, top, shown, name, style="fill:#24292f"))
        x += step
    return parts, 18 * (row + 1)


def _grid(top: int, bottom: int, scale: float, ticks: Sequence[float], fmt) -> list[str]:
    parts = []
    for tick in ticks:
        x = LABEL_W + tick * scale
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" '
                     f'stroke="#d0d7de" stroke-dasharray="2,3"/>')
        parts.append(_text(x, bottom + 12, fmt(tick), anchor="middle",
                           style="fill:#57606a;font-size:10px"))
    return parts


def bar_chart(title: str, series: Sequence[str], groups: Sequence[tuple[str, Sequence]],
              fmt: Callable[[float], str], max_value: float | None = None,
              ticks: Sequence[float] = (), colors: Sequence[int] | None = None,
              tick_fmt: Callable[[float], str] | None = None, width: int = WIDTH) -> str:
    """Horizontal grouped bars: one group per label, one bar per series (None: 'n/a').

    `max_value` fixes the scale (100 for percentages) so charts of different kernels compare;
    `colors` gives each series its palette index, so a run keeps its colour across charts.
    """
    colors = list(colors) if colors is not None else list(range(len(series)))
    values = [v for _l, vs in groups for v in vs if isinstance(v, (int, float))]
    top = max([max_value or 0] + values) or 1.0
    scale = (width - LABEL_W - VALUE_W) / top
    group_h = len(series) * (BAR_H + 2) + 10
    body = [_text(0, 16, clip(title, width // 7), title, style="font-weight:600;font-size:13px")]
    legend, legend_h = _legend(series, 36, colors, width)
    body += legend
    y0 = 32 + legend_h
    for g, (label, vs) in enumerate(groups):
        y = y0 + g * group_h
        body.append(_text(LABEL_W - 8, y + group_h / 2, clip(label, 38), label, anchor="end",
                          style="fill:#24292f;dominant-baseline:middle"))
        body += [_bar(colors[i], y + 4 + i * (BAR_H + 2), v, scale, fmt)
                 for i, v in enumerate(vs)]
    bottom = y0 + len(groups) * group_h
    body += _grid(y0, bottom, scale, ticks, tick_fmt or fmt)
    return _svg(width, bottom + (20 if ticks else 6), title, body)


def _bar(index: int, y: float, value, scale: float, fmt) -> str:
    if not isinstance(value, (int, float)):
        return _text(LABEL_W + 2, y + BAR_H - 1, "n/a", style="fill:#8c959f;font-size:10px")
    width = max(abs(value) * scale, 1.0)
    return (f'<rect x="{LABEL_W}" y="{y:.1f}" width="{width:.1f}" height="{BAR_H}" rx="2" '
            f'fill="{color(index)}"/>'
            + _text(LABEL_W + width + 4, y + BAR_H - 1, fmt(value),
                    style="fill:#24292f;font-size:10px"))


def arrow_plot(title: str, x_label: str, y_label: str,
               points: Sequence[tuple[str, str, Sequence]],
               colors: Sequence[int] | None = None) -> str:
    """Per item (tag, label, one (x, y) per run), its positions joined by arrows, on 0-100 % axes.

    Used for compute vs memory throughput: a kernel moving up or right uses more of the GPU.
    The short tag marks the item on the plot; the list beside it gives the label.
    """
    size, left, top = 220, 46, 28
    scale = size / 100.0
    body = [_text(0, 16, clip(title, 110), title, style="font-weight:600;font-size:13px")]
    body += _axes(left, top, size, x_label, y_label)
    for tag, _label, xys in points:
        placed = [(left + x * scale, top + size - y * scale) if None not in (x, y) else None
                  for x, y in xys]
        body += _trail(tag, placed, colors or list(range(len(placed))))
    legend_x = left + size + 30
    for n, (tag, label, _xys) in enumerate(points):
        body.append(_text(legend_x, top + 10 + n * 18, f"{tag}  {clip(label, 56)}", label,
                          style="fill:#24292f"))
    height = max(top + size + 40, top + 18 * len(points) + 10)
    longest = max([len(clip(label, 56)) + 4 for _t, label, _xys in points] + [20])
    return _svg(min(legend_x + 7 * longest, WIDTH), height, title, body)


def _axes(left: int, top: int, size: int, x_label: str, y_label: str) -> list[str]:
    parts = [f'<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="#f6f8fa" '
             f'stroke="#d0d7de"/>']
    for tick in (25, 50, 75, 100):
        offset = tick * size / 100.0
        parts.append(f'<line x1="{left + offset:.1f}" y1="{top}" x2="{left + offset:.1f}" '
                     f'y2="{top + size}" stroke="#d0d7de" stroke-dasharray="2,3"/>')
        parts.append(f'<line x1="{left}" y1="{top + size - offset:.1f}" x2="{left + size}" '
                     f'y2="{top + size - offset:.1f}" stroke="#d0d7de" stroke-dasharray="2,3"/>')
        parts.append(_text(left + offset, top + size + 13, f"{tick}%", anchor="middle",
                           style="fill:#57606a;font-size:10px"))
        parts.append(_text(left - 4, top + size - offset + 3, f"{tick}%", anchor="end",
                           style="fill:#57606a;font-size:10px"))
    parts.append(_text(left + size / 2, top + size + 30, x_label, anchor="middle",
                       style="fill:#24292f"))
    parts.append(f'<text x="12" y="{top + size / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top + size / 2:.1f})" style="fill:#24292f">'
                 f"{esc(y_label)}</text>")
    return parts


def _trail(tag: str, xys: list, colors: Sequence[int]) -> list[str]:
    """Dots for each run (in run colours) joined by lines, the item number at the last dot."""
    known = [(colors[i], p) for i, p in enumerate(xys) if p is not None]
    parts = []
    for (_i, start), (_j, end) in zip(known, known[1:], strict=False):
        parts += _arrow(start, end)
    for i, (x, y) in known:
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color(i)}" '
                     f'stroke="#fff" stroke-width="1"/>')
    if known:
        x, y = known[-1][1]
        parts.append(_text(x + 6, y - 5, tag, style="fill:#24292f;font-weight:600"))
    return parts


def _arrow(start: tuple, end: tuple) -> list[str]:
    """A line from one run's dot to the next, its head stopping at the next dot's edge."""
    (x1, y1), (x2, y2) = start, end
    length = math.hypot(x2 - x1, y2 - y1)
    if length < 9:
        return []
    ux, uy = (x2 - x1) / length, (y2 - y1) / length
    tip_x, tip_y = x2 - 5 * ux, y2 - 5 * uy
    base_x, base_y = tip_x - 6 * ux, tip_y - 6 * uy
    head = " ".join(f"{x:.1f},{y:.1f}" for x, y in (
        (tip_x, tip_y), (base_x - 3 * uy, base_y + 3 * ux), (base_x + 3 * uy, base_y - 3 * ux)))
    return [f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{base_x:.1f}" y2="{base_y:.1f}" '
            f'stroke="#57606a" stroke-width="1.3"/>',
            f'<polygon points="{head}" fill="#57606a"/>']


# -- the report's charts, from diff data -----------------------------------------------------

# Chart metrics: the first name present wins (pre-2020 ncu used the *_sol_pct names).
SOL_COMPUTE = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__sol_pct")
SOL_MEMORY = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
              "gpu__compute_memory_sol_pct")
OCC_THEORETICAL = ("sm__maximum_warps_per_active_cycle_pct",)
OCC_ACHIEVED = ("sm__warps_active.avg.pct_of_peak_sustained_active",
                "sm__active_warps_avg_per_active_cycle_pct")
STALL_PATTERNS = (re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
                  re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"))
STALLS_SHOWN = 8


def metric_values(kernel: KernelDiff) -> dict[str, tuple]:
    """Every metric the diff lists for a kernel, by name: (A, B)."""
    return {m.name: (m.a, m.b) for s in kernel.sections for m in s.metrics}


def first_of(values: dict, names: tuple) -> tuple:
    """(A, B) numbers of the first of several names a metric has had across ncu versions."""
    for name in names:
        if name in values:
            return tuple(v if isinstance(v, (int, float)) else None for v in values[name])
    return (None, None)


def sol_points(kernel: KernelDiff) -> list[tuple]:
    """(memory %, compute %) of speed of light in A and in B; None where not collected."""
    values = metric_values(kernel)
    return list(zip(first_of(values, SOL_MEMORY), first_of(values, SOL_COMPUTE), strict=True))


def stall_reasons(values: dict) -> list[tuple[str, tuple]]:
    """Warp stall reasons (cycles per issued instruction, or PC samples), largest first."""
    for pattern in STALL_PATTERNS:
        found = [(m.group(1).replace("_", " "), v) for name, v in values.items()
                 if (m := pattern.match(name)) and not name.endswith("_not_issued")]
        if found:
            numeric = [(r, v) for r, v in found if any(isinstance(x, (int, float)) for x in v)]
            return sorted(numeric, key=lambda rv: -max(x or 0 for x in rv[1]))[:STALLS_SHOWN]
    return []


def kernel_charts(kernel: KernelDiff, legend: list[str], colors: list[int]) -> list[Markup]:
    """Throughput/occupancy and warp-stall bars for one kernel, when the diff has the numbers."""
    values = metric_values(kernel)
    groups = [(label, first_of(values, names)) for label, names in (
        ("Compute (SM) throughput", SOL_COMPUTE), ("Memory throughput", SOL_MEMORY),
        ("Theoretical occupancy", OCC_THEORETICAL), ("Achieved occupancy", OCC_ACHIEVED))]
    groups = [g for g in groups if g[1] != (None, None)]
    charts = []
    if groups:
        charts.append(bar_chart(
            "Speed of light and occupancy (% of peak)", legend, groups, lambda v: f"{v:.1f}%",
            100, (25, 50, 75, 100), colors, lambda v: f"{v:.0f}%", width=DETAIL_CHART_W))
    stalls = stall_reasons(values)
    if stalls:
        charts.append(bar_chart(
            "Warp stalls (cycles per issued instruction)", legend, stalls, lambda v: f"{v:.2f}",
            colors=colors, width=DETAIL_CHART_W))
    return [Markup(c) for c in charts]


def overview_charts(rows: list[dict], legend: list[str], colors: list[int]) -> list[Markup]:
    """Before/after durations of the top kernels, and where they sit in compute vs memory."""
    rows = rows[:TOP_KERNELS]
    if not rows:
        return []
    bars = [(short_kernel(r["kernel"].name), (r["a"].duration_ns, r["b"].duration_ns))
            for r in rows]
    charts = [bar_chart("Mean duration per launch, top kernels by time changed", legend, bars,
                        fmt_ns, colors=colors, width=OVERVIEW_CHART_W)]
    points = [(str(r["rank"]), short_kernel(r["kernel"].name), sol_points(r["kernel"]))
              for r in rows]
    charts += _sol_plot(f"Compute vs memory throughput, A to {legend[1][0]}", points, colors)
    return [Markup(c) for c in charts]


def series_charts(table: list[dict], legend: list[str]) -> list[Markup]:
    """Durations of the top kernels in every run, and their path through compute vs memory."""
    top = table[:TOP_KERNELS]
    charts = [bar_chart("Mean duration per launch across the series", legend,
                        [(short_kernel(r["name"]), r["durations"]) for r in top], fmt_ns,
                        width=OVERVIEW_CHART_W)]
    points = [(str(n), short_kernel(r["name"]), r["sol"]) for n, r in enumerate(top, 1)]
    charts += _sol_plot("Compute vs memory throughput through the series", points, None)
    return [Markup(c) for c in charts]


def _sol_plot(title: str, points: list, colors) -> list[str]:
    points = [p for p in points if any(v is not None for xy in p[2] for v in xy)]
    if not points:
        return []
    return [arrow_plot(title, "memory throughput (% of peak)",
                       "compute (SM) throughput (% of peak)", points, colors)]


def short_kernel(name: str) -> str:
    """A kernel name without its parameters: `void gemm<float, 2>(float*)` -> `gemm<float, 2>`."""
    depth = 0
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth <= 0 and i > 0:
            name = name[:i]
            break
    return name.removeprefix("void ").strip() or name


# -- a history's trend -------------------------------------------------------------------------

TREND_W, TREND_H = 960, 320
TREND_LEFT, TREND_RIGHT, TREND_TOP, TREND_BOTTOM = 78, 16, 44, 46
BOUNDARY_COLORS = {"invalid": "#cf222e", "caution": "#d4a72c"}


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values spanning low..high (1, 2 or 5 times a power of ten apart)."""
    span = high - low or abs(high) or 1.0
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def trend_chart(title: str, runs: Sequence[str], values: Sequence[tuple | None],
                boundaries: Sequence[tuple[int, str, str]], steps: Sequence[tuple[int, str]],
                fmt: Callable[[float], str]) -> str:
    """One point per run at its median with a bar over its spread (`values`: (median, low,
    high), None where the run has no value), joined within segments; a dashed vertical marker
    before each run that is a boundary ((index, 'invalid'|'caution', what differs)) and a solid
    one before each step ((index, its change)). Runs are numbered 1..N on the x axis."""
    known = [v for v in values if v is not None]
    low = min(v[1] for v in known) if known else 0.0
    high = max(v[2] for v in known) if known else 1.0
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    ticks = _nice_ticks(low - pad, high + pad)
    bottom_value, top_value = min(ticks[0], low - pad), max(ticks[-1], high + pad)
    plot_w = TREND_W - TREND_LEFT - TREND_RIGHT
    plot_h = TREND_H - TREND_TOP - TREND_BOTTOM
    gap = plot_w / max(len(runs), 1)

    def x(index: float) -> float:
        return TREND_LEFT + gap * (index + 0.5)

    def y(value: float) -> float:
        return TREND_TOP + plot_h * (1 - (value - bottom_value) / (top_value - bottom_value))

    body = [_text(0, 16, clip(title, TREND_W // 7), title, style="font-weight:600;font-size:13px"),
            f'<rect x="{TREND_LEFT}" y="{TREND_TOP}" width="{plot_w}" height="{plot_h}" '
            f'fill="none" stroke="#d0d7de"/>']
    for tick in ticks:
        body.append(f'<line x1="{TREND_LEFT}" y1="{y(tick):.1f}" x2="{TREND_LEFT + plot_w}" '
                    f'y2="{y(tick):.1f}" stroke="#eaeef2"/>')
        body.append(_text(TREND_LEFT - 6, y(tick) + 4, fmt(tick), anchor="end",
                          style="fill:#57606a;font-size:10px"))
    every = max(1, math.ceil(len(runs) / 30))  # at most 30 run numbers on the axis
    for i, name in enumerate(runs):
        if i % every == 0 or i == len(runs) - 1:
            body.append(_text(x(i), TREND_TOP + plot_h + 14, str(i + 1), name, anchor="middle",
                              style="fill:#57606a;font-size:10px"))
    body.append(_text(TREND_LEFT + plot_w / 2, TREND_H - 8, "run (capture order)",
                      anchor="middle", style="fill:#57606a;font-size:11px"))
    for index, severity, what in boundaries:
        edge = x(index - 0.5)
        body.append(f'<line class="boundary {severity}" x1="{edge:.1f}" y1="{TREND_TOP}" '
                    f'x2="{edge:.1f}" y2="{TREND_TOP + plot_h}" '
                    f'stroke="{BOUNDARY_COLORS[severity]}" stroke-width="2" '
                    f'stroke-dasharray="5,3"><title>{esc(what)}</title></line>')
        body.append(_text(edge + 3, TREND_TOP - 4, clip(what, 24), what,
                          style=f"fill:{BOUNDARY_COLORS[severity]};font-size:10px"))
    for index, change in steps:
        edge = x(index - 0.5)
        body.append(f'<g class="step"><line x1="{edge:.1f}" y1="{TREND_TOP}" x2="{edge:.1f}" '
                    f'y2="{TREND_TOP + plot_h}" stroke="#1f6feb" stroke-width="2"/>'
                    + _text(edge + 3, TREND_TOP + 12, f"step {change}",
                            style="fill:#1f6feb;font-size:11px;font-weight:600") + "</g>")
    cuts = {index for index, severity, _what in boundaries if severity == "invalid"}
    line: list[str] = []
    for i, value in enumerate(values):
        if i in cuts or value is None:
            body += _polyline(line)
            line = []
        if value is not None:
            line.append(f"{x(i):.1f},{y(value[0]):.1f}")
    body += _polyline(line)
    for i, value in enumerate(values):
        if value is None:
            continue
        median, lo, hi = value
        tip = f"{runs[i]}: {fmt(median)} ({fmt(lo)}..{fmt(hi)})"
        body.append(f'<line class="spread" x1="{x(i):.1f}" y1="{y(lo):.1f}" x2="{x(i):.1f}" '
                    f'y2="{y(hi):.1f}" stroke="#57606a" stroke-width="2"/>')
        body.append(f'<circle class="point" cx="{x(i):.1f}" cy="{y(median):.1f}" r="4" '
                    f'fill="#1f6feb"><title>{esc(tip)}</title></circle>')
    return _svg(TREND_W, TREND_H, title, body)


def _polyline(points: list[str]) -> list[str]:
    if len(points) < 2:
        return []
    return [f'<polyline points="{" ".join(points)}" fill="none" stroke="#8c959f" '
            f'stroke-width="1.5"/>']
