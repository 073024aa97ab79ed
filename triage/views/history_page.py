"""`triage history --html FILE`: the history as a page in the review report's style, with an
inline SVG trend chart (compare/history.py gives every number; triage/historyview.py the words).
Self-contained like the report: inline CSS and SVG, no scripts, no remote loads."""

from __future__ import annotations

from markupsafe import Markup

from triage.views import svgcharts
from triage.compare.history import HistoryResult
from triage.views.history import (METHOD_TEXT, SAMPLE_WORDS, boundary_lines, boundary_text,
                                  headers, point_name, rows, step_lines, title, value_of)
from triage.views.report import template_environment
from triage.views.text import fmt_pct


def trend(result: HistoryResult) -> Markup:
    """The chart: medians with IQR bars, boundaries and steps as vertical markers."""
    points = result.points
    values = [(p.spread.median, p.spread.q1, p.spread.q3) if p.spread else None for p in points]
    boundaries = [(p.index, p.boundary, boundary_text(p).split(": ", 1)[1])
                  for p in points if p.boundary]
    steps = [(s.at, fmt_pct(s.noise.change_pct)) for s in result.steps]
    unit = next((p for p in points if p.spread), points[0])
    return Markup(svgcharts.trend_chart(
        f"{result.measure.describe()}: median per run, bars from Q1 to Q3",
        [point_name(p) for p in points], values, boundaries, steps,
        lambda v: value_of(unit, v)))


def render_history_html(result: HistoryResult) -> str:
    table = rows(result)
    classes = [{"invalid": "sev-invalidates", "caution": "sev-caution"}.get(p.boundary or "", "")
               for p in result.points]
    return template_environment(False).get_template("history.html.j2").render(
        title=title(result), chart=trend(result),
        headers=headers(result), values=SAMPLE_WORDS[result.samples],
        rows=list(zip(classes, table, strict=True)), boundaries=boundary_lines(result),
        steps=step_lines(result), found=bool(result.steps),
        method=METHOD_TEXT.format(min=result.min_step_pct))
