"""`triage history` for people: a table of runs, the boundaries and the steps, as text or
GitHub Markdown (the HTML page: triage/historypage.py). Every number comes from the
HistoryResult (compare/history.py), whose `to_json()` is `history --json`."""

from __future__ import annotations

from triage.compare.history import HistoryPoint, HistoryResult, HistoryStep
from triage.compare.noise import LAUNCHES, RUNS
from triage.views.text import (Layout, accepted_line, drift_change, fmt_interval, fmt_noise,
                               fmt_ns, fmt_pct, fmt_value, failed_tries_words, printable,
                               short_id, table, to_json, value_text)

METHOD_TEXT = ("Pettitt change-point test by binary segmentation (permutation p <= 5%), each step "
               "confirmed by the Hodges-Lehmann shift between the levels with its 95% interval "
               "(one value per run) and at least {min:g}% of the level before; steps are found "
               "within segments between invalidating boundaries")


def value_of(point: HistoryPoint, value: float | None) -> str:
    if value is None:
        return "-"
    return fmt_ns(value) if point.unit == "ns" else f"{fmt_value(value)} {point.unit or ''}".strip()


def point_name(point: HistoryPoint) -> str:
    """How a history point is called in its rows and chart: the label the selector matched,
    else the run's first label, else its short id (the report's legends: report.legend_name)."""
    return point.label or (point.run.labels[0] if point.run.labels else short_id(point.run.id))


def commit_text(point: HistoryPoint) -> str:
    if point.commit is None:
        return "-"
    return point.commit[:10] + ("+dirty" if point.dirty else "")


def spread_text(point: HistoryPoint) -> str:
    spread = point.spread
    if spread is None:
        return "absent"
    if spread.n == 1:
        return "n 1"
    return (f"n {spread.n}, IQR {value_of(point, spread.iqr)}, "
            f"{value_of(point, spread.min)}..{value_of(point, spread.max)}")


def boundary_text(point: HistoryPoint) -> str:
    """'caution: tool_version' / 'INVALID: gpu.name, gpu.sm_count' / ''."""
    items = point.boundary_items
    if not items:
        return ""
    word = "INVALID" if point.boundary == "invalid" else "caution"
    return f"{word}: " + ", ".join(i.field for i in items)


def item_text(item) -> str:
    change = drift_change(item) or f"{value_text(item, item.a)} -> {value_text(item, item.b)}"
    return f"{item.field} {change} ({item.why})"


def step_text(result: HistoryResult, step: HistoryStep) -> str:
    """'step at run 5 (h/5): +14.0% [+11.0, +17.0]', with the caution boundary it falls on."""
    point = result.points[step.at]
    before = result.points[step.start:step.at]
    after = result.points[step.at:step.end]
    line = (f"step at run {step.at + 1} ({printable(point_name(point))}): "
            f"{fmt_pct(step.noise.change_pct)} {fmt_interval(step.noise.ci_pct)}"
            f"  ({len([p for p in before if p.spread])} runs before, "
            f"{len([p for p in after if p.spread])} from it on)")
    if step.boundary:
        line += f"; at a {step.boundary} boundary: {boundary_text(point).split(': ', 1)[1]}"
    if step.accepted:
        line += f"; intended: {accepted_line(step.accepted)}"
    return line


def _captured(point: HistoryPoint) -> str:
    moment = point.run.created or point.run.archived or "-"
    return moment.replace("T", " ")[:19]


def rows(result: HistoryResult) -> list[list[str]]:
    out = []
    for p in result.points:
        out.append([str(p.index + 1), short_id(p.run.id, 8), printable(point_name(p)), _captured(p),
                    commit_text(p), value_of(p, p.spread.median if p.spread else None),
                    spread_text(p), fmt_noise(p.change) if p.change else "-",
                    boundary_text(p)])
    return out


# what a run's values are, in the table's header and the page's note
SAMPLE_WORDS = {LAUNCHES: "launches", RUNS: "runs of the workload"}


def headers(result: HistoryResult) -> list[str]:
    """The table's columns; the change says what it compares (a bench run's values are its
    runs of the workload, not kernel launches)."""
    return ["#", "run", "label", "captured", "commit", "median", "spread",
            f"vs previous ({SAMPLE_WORDS[result.samples]}, 99%)", "drift from previous"]


def step_lines(result: HistoryResult) -> list[str]:
    if not result.steps and len(result.segments) > 1:
        return [f"no step within any of the {len(result.segments)} segments (levels on either "
                "side of an invalidating boundary are not compared)"]
    if not result.steps:
        return ["no step: every run is at one level within noise"]
    return [step_text(result, s) for s in result.steps]


def boundary_lines(result: HistoryResult) -> list[str]:
    lines = []
    for p in result.points:
        for item in p.boundary_items:
            lines.append(f"run {p.index + 1} ({printable(point_name(p))}): "
                         f"{'INVALID' if item.severity == 'invalidates' else 'caution'}: "
                         f"{printable(item_text(item))}")
    return lines or ["none: every run is comparable with the one before"]


def rename_lines(result: HistoryResult) -> list[str]:
    """The runs that name the metric otherwise, read across a rename by the metric map."""
    renamed = [p for p in result.points if p.read_as]
    if not renamed:
        return []
    return ["", "Read across a rename (the metric map pairs the names):"] + [
        f"  run {p.index + 1} ({printable(point_name(p))}): "
        f"{printable(p.read_as or '')} ({p.run.tool_version or 'version not recorded'})"
        for p in renamed]


def title(result: HistoryResult) -> str:
    return (f"History of {result.measure.describe()} over {len(result.points)} runs "
            f"({printable(result.selector)}), in capture order")


def failed_line(result: HistoryResult) -> list[str]:
    words = failed_tries_words(result.failed)
    return [f"Failed: {words}"] if words else []


# On a terminal, the run's name and the drift columns are cut to these; in a pipe, never.
CUT_COLUMNS = {2: 24, 8: 40}


def render_history(result: HistoryResult, layout: Layout) -> str:
    lines = [title(result), *failed_line(result), "",
             table(rows(result), headers(result), max_widths=CUT_COLUMNS if layout.cut else None,
                   align_right={0, 5}), "",
             "Boundaries (the comparison with the run before breaks or needs care):"]
    lines += [f"  {line}" for line in boundary_lines(result)]
    lines += rename_lines(result)
    lines += ["", "Steps:"] + [f"  {line}" for line in step_lines(result)]
    lines += ["", "Method: " + METHOD_TEXT.format(min=result.min_step_pct) + "."]
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    """Renders as itself in GitHub Markdown, a table cell included (see triage/report.py)."""
    from triage.views.report import md_escape

    return md_escape(text) or " "


def render_history_markdown(result: HistoryResult) -> str:
    """GitHub Markdown: the same table, boundaries and steps."""
    names = headers(result)
    head = "| " + " | ".join(names) + " |"
    rule = "|" + "|".join("---:" if i in (0, 5) else "---" for i in range(len(names))) + "|"
    body = ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows(result)]
    failed = [f"\n{_md_cell(line)}" for line in failed_line(result)]
    lines = [f"### {_md_cell(title(result))}", *failed, "", head, rule, *body, "",
             "**Boundaries**", ""]
    lines += [f"- {_md_cell(line)}" for line in boundary_lines(result)]
    lines += ["", "**Steps**", ""] + [f"- {_md_cell(line)}" for line in step_lines(result)]
    lines += ["", f"_Method: {METHOD_TEXT.format(min=result.min_step_pct)}._"]
    return "\n".join(lines) + "\n"


def render_history_as(result: HistoryResult, fmt: str, layout: Layout) -> str:
    """The history in one of `triage history`'s formats: text (laid out as `layout` says),
    json, md or html."""
    if fmt == "json":
        return to_json(result.to_json())
    if fmt == "html":
        from triage.views.history_page import render_history_html

        return render_history_html(result)
    return render_history_markdown(result) if fmt == "md" else render_history(result, layout)
