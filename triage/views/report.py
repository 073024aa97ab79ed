"""`triage report A B [C ...]`: a before/after review in HTML or GitHub Markdown.

Everything shown comes from the diff results (`diff_runs`, whose `to_json()` is `diff --json`),
one per step when several runs form a series (each against the first). The only numbers added
here are arithmetic over those results (shares of kernel time, chart coordinates), so a report
never disagrees with the diff it was made from. Charts need metrics that a diff lists only with
`--all` (an unchanged metric still has a value worth drawing), so `triage report` asks for every
metric and the templates hide the unchanged ones unless asked to show them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import jinja2
from markupsafe import Markup, escape

from triage.base.version import __version__
from triage.views import svgcharts
from triage.compare.drift import worst_verdict
from triage.archive.model import CaptureInfo, RunRecord
from triage.compare.result import (KERNEL_LAUNCHES, KERNEL_RENAMED, NO_SIDE, SECTION_ONLY_A,
                                   SECTION_ONLY_B, DiffOptions, DiffResult, DriftItem,
                                   KernelDiff, MetricDiff, SectionDiff)
from triage.base.errors import UsageError
from triage.views.text import (NCU_CAVEAT, clip_middle, default_phrase, distinct_names,
                               drift_entries, drift_sides, drift_why, field_with_default, fmt_ns,
                               fmt_pct, fmt_value, kernel_notes, metric_title, one_side_text,
                               short_id)
from triage.compare.noise import Noise
from triage.views.text import cuda_text, fmt_noise, fmt_spread, gate_lines, printable, rule_failure
from triage.views.text import aggregate_words, failed_tries_words, side_runs_title
from triage.base.units import fmt_bytes

if TYPE_CHECKING:
    from triage.archive.store import Store

GITHUB_COMMENT_LIMIT = 65_536
# Markdown detail levels tried in turn until the comment fits: None means "all".
MD_LEVELS = ({"kernels": None, "rows": None}, {"kernels": 20, "rows": 40},
             {"kernels": 5, "rows": 15}, {"kernels": 0, "rows": 10})


# -- reading the diff ------------------------------------------------------------------------


def legend_name(run: RunRecord, labels: tuple[str, ...] | None = None) -> str:
    """How a run is called in the report's legends and headers: its label (`labels`: in the
    order to prefer, the one the user typed first), else report file, else id."""
    labels = run.labels if labels is None else labels
    if labels:
        return labels[0]
    return run.reports[0].name if run.reports else short_id(run.id)


def side_name(diff: DiffResult, side: str) -> str:
    """How a side is called in titles, legends and headers: '5 runs: before/1..before/5' for
    a side of several runs, else its run's name (`legend_name`)."""
    run = diff.run_a if side == "a" else diff.run_b
    return side_runs_title(diff, side) or legend_name(run, diff.named_labels(side))


def side_ids(diff: DiffResult, side: str) -> str:
    """The short id of a side's run, or of its first run and how many more."""
    ids = diff.runs_of[0 if side == "a" else 1]
    return short_id(ids[0]) + (f" +{len(ids) - 1} runs" if len(ids) > 1 else "")


def provenance_name(diff: DiffResult, side: str) -> str:
    """A provenance column's header: the run whose record it shows (a side of several runs:
    its first, said so)."""
    index = 0 if side == "a" else 1
    run = (diff.run_a, diff.run_b)[index]
    first = legend_name(run, diff.named_labels(side))
    count = len(diff.runs_of[index])
    if count > 1:
        names = diff.side_names[index]
        return f"{names[0] if names else first} (first of {count} runs)"
    return first


def series_runs(diffs: list[DiffResult]) -> list[RunRecord]:
    """Every run in the report: the common A, then each B."""
    return [diffs[0].run_a] + [d.run_b for d in diffs]


def headline(diff: DiffResult) -> list[dict]:
    """Kernels ranked by total time changed, with each side's share of the kernel time."""
    totals = {"a": sum(k.a.total_ns or 0 for k in diff.kernels if k.a),
              "b": sum(k.b.total_ns or 0 for k in diff.kernels if k.b)}
    rows = []
    ranked = sorted(diff.kernels, key=lambda k: k.time_changed, reverse=True)
    for rank, kernel in enumerate(ranked, 1):
        a, b = kernel.a or NO_SIDE, kernel.b or NO_SIDE
        share = {s: (v.total_ns or 0) / totals[s] if totals[s] and present else None
                 for s, v, present in (("a", a, kernel.a), ("b", b, kernel.b))}
        rows.append({"rank": rank, "kernel": kernel, "a": a, "b": b, "share": share,
                     "launches": {"a": a.launches, "b": b.launches},
                     "delta_total_ns": kernel.delta_total_ns, "notes": kernel_notes(kernel)})
    return rows


def kernel_view(row: dict, legend: list[str], colors: list[int] | None,
                show_unchanged: bool | None) -> dict:
    """One kernel's detail: charts, sections with the metrics to show, rules by est. speedup."""
    kernel = row["kernel"]
    hide = show_unchanged is False
    sections, quiet = [], []
    for section in kernel.sections:
        metrics = [m for m in section.metrics if not (hide and m.status == "unchanged")]
        if metrics or not section.comparable:
            sections.append(replace(section, metrics=tuple(metrics)))
        elif section.unchanged:
            quiet.append(section)
    rules = {side: sorted(getattr(kernel.rules, side), key=lambda r: -(r.speedup_pct or 0))
             for side in ("only_a", "only_b", "both")}
    return {**row, "sections": sections, "quiet": quiet, "rules": rules,
            "charts": svgcharts.kernel_charts(kernel, legend, colors) if colors else []}


# -- the series overview ---------------------------------------------------------------------


def series_table(diffs: list[DiffResult]) -> list[dict]:
    """One row per kernel of the series: its mean duration and SOL point in each run.

    Kernels are keyed by their name in the first run, which every step is compared against."""
    rows: dict[str, dict] = {}
    width = len(diffs) + 1
    for step, diff in enumerate(diffs, start=1):
        for kernel in diff.kernels:
            key = kernel.name if kernel.match != "only_b" else "\0" + kernel.name
            row = rows.setdefault(key, {"name": kernel.name, "durations": [None] * width,
                                        "sol": [(None, None)] * width})
            sol = svgcharts.sol_points(kernel)
            for run, side, point in ((0, kernel.a, sol[0]), (step, kernel.b, sol[1])):
                if side:
                    row["durations"][run] = side.duration_ns
                    row["sol"][run] = point
    table = [{**r, "change": [_change(r["durations"][0], v) for v in r["durations"]]}
             for r in rows.values()]
    return sorted(table, key=lambda r: -max(v or 0 for v in r["durations"]))


def _change(first, value):
    if not isinstance(first, (int, float)) or not isinstance(value, (int, float)) or not first:
        return None
    return (value - first) / first * 100.0


# -- provenance ------------------------------------------------------------------------------


def _setting(run: RunRecord, key: str) -> str | None:
    found = run.settings.get(key)
    if found is None or found.value is None:
        return None
    value = found.value
    if not run.is_recorded(key):
        return f"{NOT_RECORDED} ({default_phrase(run.tool, value)})"
    if isinstance(value, list):
        value = f"{len(value)}: " + ", ".join(map(str, value))
    return f"{value} ({found.source})" if found.source else str(value)


def _gpu(run: RunRecord) -> str | None:
    gpus = run.environment.gpus
    if not gpus:
        return None
    g = gpus[0]
    extra = ", ".join(filter(None, [g.compute_capability and f"cc {g.compute_capability}",
                                    f"{g.sm_count} SMs" if g.sm_count else None]))
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    return f"{g.name or '?'}" + (f" ({extra})" if extra else "") + more


def _clock_evidence(run: RunRecord) -> str | None:
    clock = run.clock
    if not clock.results:
        return None
    text = f"{clock.executed_locked} of {clock.results} results ran with locked clocks"
    if clock.measured_to_max is not None:
        text += f"; measured SM clock {clock.measured_to_max:.0%} of max"
    return text


def _git(run: RunRecord) -> str | None:
    """Commit, branch, local edits and untracked files (capture/git_state.py's record)."""
    git = run.capture.git if run.capture else None
    if git is None:
        return None
    if not git.repository:
        return git.reason or "not a git repository"
    parts = [git.commit or "no commit yet", git.branch or "detached HEAD",
             "dirty (uncommitted edits)" if git.dirty else "clean"]
    if git.untracked_count:
        parts.append(f"{git.untracked_count} untracked file(s)")
    if git.remote_url:
        parts.append(git.remote_url)
    return ", ".join(parts)


def _host(run: RunRecord) -> str | None:
    host = run.environment.host
    return " · ".join(str(v) for v in (host.name, host.cpu, host.os) if v) or None


def _capture(run: RunRecord) -> CaptureInfo:
    return run.capture or NO_CAPTURE


NO_CAPTURE = CaptureInfo()
PROVENANCE_ROWS: tuple[tuple[str, Callable[[RunRecord], str | None]], ...] = (
    ("run id", lambda r: r.id),
    ("labels", lambda r: ", ".join(r.labels) or None),
    ("report files", lambda r: "; ".join(f"{p.name} (sha256 {p.sha256[:16]}…)"
                                          for p in r.reports) or None),
    ("tool", lambda r: f"{r.tool} {r.tool_version or '(version unknown)'}"),
    ("profiler command", lambda r: r.command),
    ("application", lambda r: " ".join(r.application_argv or ()) or None),
    ("filed by", lambda r: f"triage {r.source}"),
    ("triage command", lambda r: " ".join(_capture(r).argv) or None),
    ("GPU", _gpu),
    ("driver", lambda r: r.environment.driver_version),
    ("CUDA", lambda r: cuda_text(r.environment)),
    ("clock control (source)", lambda r: _setting(r, "clock_control")),
    ("clock evidence", _clock_evidence),
    ("cache control (source)", lambda r: _setting(r, "cache_control")),
    ("replay mode (source)", lambda r: _setting(r, "replay_mode")),
    ("section set (source)", lambda r: _setting(r, "section_set")),
    ("nsys trace (source)", lambda r: _setting(r, "trace")),
    ("nsys export", lambda r: _capture(r).nsys_source),
    ("git", _git),
    ("host", _host),
    ("captured", lambda r: r.created),
    ("archived", lambda r: r.archived),
    ("notes", lambda r: "; ".join([n.text for n in r.notes] + list(r.notices)) or None),
)


MONO_ROWS = ("run id", "profiler command", "application", "triage command", "git")
# Unknown is an answer too: a reader should see that the commit or clock was never recorded.
ALWAYS_SHOWN = ("profiler command", "git")
ALWAYS_SHOWN_NCU = ("clock control (source)", "cache control (source)")


def provenance_rows(runs: list[RunRecord]) -> list[dict]:
    """Label, one value per run, and whether the runs differ; rows unknown everywhere dropped."""
    rows, ncu = [], any(run.tool == "ncu" for run in runs)
    for label, read in PROVENANCE_ROWS:
        values = [read(run) for run in runs]
        always = label in ALWAYS_SHOWN or (label in ALWAYS_SHOWN_NCU and ncu)
        if always or any(v is not None for v in values):
            rows.append({"label": label, "cells": values, "mono": label in MONO_ROWS,
                         "differs": label != "run id" and len(set(map(str, values))) > 1})
    return rows


# -- rendering -------------------------------------------------------------------------------


def rule_text(message: str | None, error: str | None = None) -> str:
    """ncu rule messages link sections as `@section:Id:Name@`; a report shows the name. A rule
    that could not run has no message: why it could not, in one line."""
    if message is None and error:
        return rule_failure(error)
    return re.sub(r"@section:[^:@]*:([^@]*)@", r"\1", message or "")


def trend(delta_pct) -> str:
    """CSS class for a change in time: shorter is better. Other metrics have no direction."""
    if not isinstance(delta_pct, (int, float)) or abs(delta_pct) < 0.05:
        return ""
    return "better" if delta_pct < 0 else "worse"


def fmt_number(value, unit: str | None = None) -> str:
    """A metric value for a table: times in time units, counters with separators, text as is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt_value(value)
    if unit in ("ns", "nsecond"):
        return fmt_ns(value)
    if abs(value) >= 1e6:
        return fmt_value(value)
    if value == int(value) or abs(value) >= 1e3:
        return f"{value:,.0f}"
    return fmt_value(value)


def fmt_share(value) -> str:
    return "-" if value is None else f"{value:.1%}"


def fmt_change_ns(value) -> str:
    """A change in total time: signed, or 'unknown' (a side's duration unknown), never 0."""
    return "unknown" if value is None else ("+" if value > 0 else "") + fmt_ns(value)


def md_escape(text) -> str:
    """Markdown text that renders as itself: no emphasis, links, tables or raw HTML."""
    if isinstance(text, Markup):
        return text
    text = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"([\\`*_\[\]|#~])", r"\\\1", text)
    return re.sub(r"\s*\n\s*", " ", text)


def md_code(text, in_table: bool = True) -> Markup:
    """A code span with fences longer than any backtick run inside; in a GFM table cell pipes
    are escaped too (GitHub then shows them without the backslash)."""
    text = re.sub(r"\s*\n\s*", " ", printable(str(text), lines=True))
    text = text.replace("|", "\\|") if in_table else text
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def html_text(text) -> Markup:
    """HTML-escaped text for raw HTML inside Markdown (`<summary>`), where `\\` would show."""
    return Markup(escape(re.sub(r"\s*\n\s*", " ", printable(str(text), lines=True))))


def visible(value):
    """The templates' finalize: text shows as itself (`printable`: no raw NUL, ESC or U+202E
    reaches a page), markup made by triage is left alone."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable(value, lines=True)
    return value


def _shown(value) -> str:
    """A value as `{{ value }}` writes it before escaping: text through the finalize
    (`visible`), anything else as `str` (None as "None")."""
    return printable(value, lines=True) if isinstance(value, str) else str(value)


def _cut(text: str) -> str:
    """`text|truncate(40, true, "…", 0)`."""
    return text if len(text) <= 40 else text[:39] + "…"


def _metric_change(metric: MetricDiff) -> str:
    if metric.status in ("only_a", "only_b"):
        return "only in " + metric.status[-1].upper()
    return metric.status.replace("_", " ") if metric.status in ("no_data", "unchanged") \
        else fmt_pct(metric.delta_pct)


_METRIC_ROW = (
    '  <tr class="st-{}"><td{} title="{}">{}</td><td class="muted">{}</td>\n'
    '    <td class="{}" title="{}">{}</td>\n    <td class="{}" title="{}">{}</td>\n'
    '    <td class="num">{}</td>\n    <td class="num">{}{}{}</td></tr>\n')
_MUTED = ('<span class="muted">', "</span>")


def metric_rows(section: SectionDiff, raw_names: bool) -> Markup:
    """The rows of a section's metric table in the HTML page, byte for byte what a template
    loop wrote, written here: a report of hundreds of kernels has ~16,000 of them, and jinja
    finalizing and escaping their ~10 values one expression at a time was most of the page's
    time. Here a table's values are escaped in one call (joined by NUL, which `printable`
    never lets through)."""
    texts = []
    for metric in section.metrics:
        delta = "" if metric.delta is None else \
            ("+" if metric.delta > 0 else "") + fmt_number(metric.delta, metric.unit)
        texts += [metric.status, metric.name, metric_title(metric, raw_names, True),
                  metric.unit or "", metric.a, _cut(fmt_number(metric.a, metric.unit)),
                  metric.b, _cut(fmt_number(metric.b, metric.unit_b or metric.unit)), delta,
                  _metric_change(metric)]
    cells = str(escape("\0".join(map(_shown, texts)))).split("\0")
    rows = []
    for metric, at in zip(section.metrics, range(0, len(cells), 10), strict=True):
        status, name, title, unit, a, shown_a, b, shown_b, delta, change = cells[at:at + 10]
        muted = _MUTED if metric.status in ("no_data", "unchanged") else ("", "")
        rows.append(_METRIC_ROW.format(
            status, ' class="mono"' if title == name else "", name, title, unit,
            "text" if isinstance(metric.a, str) else "num", a, shown_a,
            "text" if isinstance(metric.b, str) else "num", b, shown_b, delta,
            muted[0], change, muted[1]))
    return Markup("".join(rows))


def template_environment(markdown: bool) -> jinja2.Environment:
    """The review pages' Jinja environment and filters (the history page and the console render
    with it too, so every page escapes and formats values alike), with triage's version as the
    global `version`. One per process: a template is compiled once (0.02-0.05 s each under
    load), not once per page or report; keyed by the version, so a changed one is seen."""
    return _environment(markdown, __version__)


@functools.cache
def _environment(markdown: bool, version: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("triage.templates", "."),
        autoescape=not markdown,
        finalize=(lambda value: md_escape(visible(value))) if markdown else visible,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined)
    env.filters.update(ns=fmt_ns, pct=fmt_pct, value=fmt_value, share=fmt_share,
                       short_id=short_id, short_kernel=svgcharts.short_kernel, rule_text=rule_text,
                       code=md_code, h=html_text, trend=trend,
                       number=fmt_number, bytes=fmt_bytes, change_ns=fmt_change_ns,
                       clip_middle=clip_middle, metric_title=metric_title,
                       one_side=one_side_text, metric_rows=metric_rows)
    env.globals["version"] = version
    return env


def _context(diffs: list[DiffResult], show_unchanged: bool | None, charts: bool,
             raw_names: bool = False) -> dict:
    if not diffs:
        raise UsageError("a report needs at least one comparison (two runs)")
    runs = series_runs(diffs)
    names = [side_name(diffs[0], "a"), *(side_name(d, "b") for d in diffs)]
    ids = [side_ids(diffs[0], "a"), *(side_ids(d, "b") for d in diffs)]
    prov_names = [provenance_name(diffs[0], "a"), *(provenance_name(d, "b") for d in diffs)]
    letters = [run_letter(i) for i in range(len(runs))]
    steps = []
    for i, diff in enumerate(diffs):
        legend = [chart_legend("A", names[0]), chart_legend(letters[i + 1], names[i + 1])]
        colors = [0, i + 1] if charts else None
        rows = headline(diff)
        steps.append({"diff": diff, "letters": ("A", letters[i + 1]), "legend": legend,
                      "headline": rows, "drift": drift_rows(diff),
                      "charts": svgcharts.overview_charts(rows, legend, colors) if colors else [],
                      "details": [kernel_view(r, legend, colors, show_unchanged) for r in rows
                                  if r["kernel"].sections or r["notes"]],
                      "gate": gate_lines(diff.gate) if diff.gate else [],
                      **_bench_panel(diff),
                      "noise": noise_rows(diff), "aggregate": aggregate_words(diff),
                      "failed": [f"{side}: {words}" for side, tries in zip("AB", diff.failed,
                                                                           strict=True)
                                 if (words := failed_tries_words(tries))]})
    table = series_table(diffs) if len(diffs) > 1 else []
    legend = [chart_legend(letter, name) for letter, name in zip(letters, names, strict=True)]
    return {"steps": steps, "runs": runs, "names": names, "ids": ids, "prov_names": prov_names,
            "letters": letters, "series": table, "aggregated": any(d.aggregated for d in diffs),
            "series_charts": svgcharts.series_charts(table, legend) if charts and table else [],
            "verdict": worst_verdict(d.verdict for d in diffs),
            "provenance": provenance_rows(runs),
            "tools": sorted({r.tool for r in runs}), "ncu_caveat": NCU_CAVEAT,
            "show_unchanged": show_unchanged, "raw_names": raw_names}


def _bench_panel(diff: DiffResult) -> dict:
    """The benchmark panel a step of bench runs opens with, and what its profiles account for."""
    from triage.views.bench import accounts_text, bench_rows

    return {"bench": bench_rows(diff.bench) if diff.bench else [],
            "accounts": accounts_text(diff.accounts) if diff.accounts else []}


def noise_rows(diff: DiffResult) -> list[dict]:
    """Matched kernels and NVTX ranges with their measured noise, worded for a table."""
    found: list[tuple[str, str, Noise]] = [
        ("kernel", k.name, k.noise) for k in
        sorted(diff.kernels, key=lambda k: k.time_changed, reverse=True)
        if k.match == "matched" and k.noise]
    if diff.nsys:
        found += [("NVTX", str(e.key["text"]), e.noise)
                  for e in diff.nsys.nvtx if e.noise and e.change == "changed"]
    return [{"what": what, "name": name, "noise": noise, "change": fmt_noise(noise),
             "a": fmt_spread(noise.a), "b": fmt_spread(noise.b)} for what, name, noise in found]


def chart_legend(letter: str, name: str) -> str:
    """'A: …gemm_naive.ncu-rep': the end of a run name is what tells runs apart."""
    return f"{letter}: {svgcharts.clip_left(name, 26)}"


NOT_RECORDED = "not recorded"


def drift_rows(diff: DiffResult) -> list[dict]:
    """Worst first (what invalidates the comparison, then cautions, sections, unknowns,
    information), each with its why as the views word it and its values with what differs
    whole; the fields neither run recorded in one row per severity. A and B always say
    something: a value, what the diff found on that side, or "not recorded" (a `?` in a
    review reads as a bug in the report, not as an unknown)."""
    rows = []
    for entry in drift_entries(diff.drift):
        if isinstance(entry, list):
            rows.append({"severity": entry[0].severity,
                         "field": ", ".join(field_with_default(i) for i in entry),
                         "a": NOT_RECORDED, "b": NOT_RECORDED, "why": entry[0].why})
            continue
        found = entry.a is None and entry.b is None and entry.state == "different"
        a, b = found_sides(entry, diff.kernels) if found else drift_sides(entry)
        rows.append({"severity": entry.severity, "field": entry.field,
                     "a": NOT_RECORDED if a is None else a,
                     "b": NOT_RECORDED if b is None else b, "why": drift_why(entry)})
    return rows


def found_sides(item: DriftItem,
                kernels: tuple[KernelDiff, ...]) -> tuple[str | None, str | None]:
    """Each side of a difference the diff found in the data rather than read from the runs'
    records (which is why the item has no values): a section collected or not and how many
    metrics it has, the names of kernels paired by launch order, differing launch counts."""
    if item.code == KERNEL_RENAMED:
        pairs = [_pair_names(a, b) for a, b in zip(item.kernels_a, item.kernels_b, strict=True)]
        return _listed_cell([p[0] for p in pairs]), _listed_cell([p[1] for p in pairs])
    if item.code == KERNEL_LAUNCHES:
        shown = {k.name: k for k in kernels}  # kernels_b holds B's names: look up by A's
        return (_listed_cell([_launches(shown.get(n), "a", n) for n in item.kernels_a]),
                _listed_cell([_launches(shown.get(n), "b", m)
                              for n, m in zip(item.kernels_a, item.kernels_b, strict=True)]))
    if item.field.startswith("section:"):
        return _section_sides(item, kernels)
    return None, None


def _pair_names(a: str, b: str) -> tuple[str, str]:
    """A renamed kernel's two names as short as they can be and still differ."""
    short_a, short_b = svgcharts.short_kernel(a), svgcharts.short_kernel(b)
    return (short_a, short_b) if short_a != short_b else distinct_names(a, b, 48)


def _launches(kernel: KernelDiff | None, side: str, name: str) -> str:
    """'12 × gemv2T_kernel<…>': a kernel's launch count on one side (its name alone where
    --kernel left the kernel out of the diff)."""
    short = clip_middle(svgcharts.short_kernel(name), 48)
    numbers = getattr(kernel, side) if kernel else None
    return f"{numbers.launches} × {short}" if numbers and numbers.launches is not None else short


def _listed_cell(texts: list[str]) -> str:
    """Three entries say which, the count says how many (as the why lists kernels)."""
    more = f" and {len(texts) - 3} more" if len(texts) > 3 else ""
    return "; ".join(texts[:3]) + more


def _section_sides(item: DriftItem, kernels: tuple[KernelDiff, ...]) -> tuple[str, str]:
    """'collected, 27 metrics' / 'not collected', or each side's metric count where some
    metrics were collected on one side only."""
    sid = item.field.removeprefix("section:")
    section = next((s for k in kernels for s in k.sections if s.section == sid
                    and not s.comparable), None)
    if item.code in (SECTION_ONLY_A, SECTION_ONLY_B):
        collected = f"collected, {_metrics(section.metric_count)}" if section else "collected"
        return (collected, "not collected") if item.code == SECTION_ONLY_A else \
            ("not collected", collected)
    if section is None:
        return "collected", "collected"
    only = {side: sum(m.status == f"only_{side}" for m in section.metrics) for side in "ab"}
    return _metrics(section.metric_count - only["b"]), _metrics(section.metric_count - only["a"])


def _metrics(count: int) -> str:
    return f"{count} metric{'' if count == 1 else 's'}"


def run_letter(index: int) -> str:
    """A, B, ... Z, then R27, R28: runs are named by position in the report."""
    return chr(ord("A") + index) if index < 26 else f"R{index + 1}"


def render_html(diffs: list[DiffResult], show_unchanged: bool | None = None,
                raw_names: bool = False, site=None) -> str:
    """A self-contained HTML review (inline CSS and SVG; no scripts, fonts or remote loads).

    show_unchanged: None shows the metrics each diff lists; False hides unchanged ones.
    raw_names: metrics by raw name (gpu__time_duration.sum), not their labels (Duration).
    site: the console's links (views/site.py `SiteLinks`): its navigation and run pages."""
    return template_environment(False).get_template("report.html.j2").render(
        **_context(diffs, show_unchanged, charts=True, raw_names=raw_names), site=site)


def render_markdown(diffs: list[DiffResult], show_unchanged: bool | None = None,
                    max_chars: int = GITHUB_COMMENT_LIMIT, raw_names: bool = False) -> str:
    """GitHub-flavoured Markdown for a PR comment: verdict and headline on top, details folded.

    Less detail is tried until the text fits `max_chars`; the last resort cuts it with a note."""
    template = template_environment(True).get_template("report.md.j2")
    context = _context(diffs, show_unchanged, charts=False, raw_names=raw_names)
    for limits in MD_LEVELS:
        text = template.render(**context, limits=limits)
        if len(text) <= max_chars:
            return text
    return cut_markdown(text, max_chars)


def cut_markdown(text: str, max_chars: int) -> str:
    """Cut at a line end, close any open <details>, and say so."""
    note = ("\n\n> [!NOTE]\n> Truncated to fit GitHub's comment limit; `triage report ... -o "
            "review.html` has everything.\n")
    budget = max_chars - len(note) - 40
    kept = text[:budget].rsplit("\n", 1)[0]
    unclosed = max(kept.count("<details>") - kept.count("</details>"), 0)
    return kept + "\n\n" + "</details>\n" * unclosed + note


def render(diffs: list[DiffResult], fmt: str, show_unchanged: bool | None = None,
           raw_names: bool = False) -> str:
    if fmt == "md":
        return render_markdown(diffs, show_unchanged, raw_names=raw_names)
    return render_html(diffs, show_unchanged, raw_names)


def write_report(path: str | Path, diffs: list[DiffResult], fmt: str,
                 show_unchanged: bool | None = None, raw_names: bool = False) -> Path:
    """Render and write the report atomically (a reader never sees half a file)."""
    from triage.archive.atomic import write_user_file

    text = render(diffs, fmt, show_unchanged, raw_names)
    return write_user_file(Path(path), text.encode("utf-8"))


def diff_series(store: Store, refs: list[str], opts: DiffOptions,
                files: list[str | None] | None = None) -> list[DiffResult]:
    """Each run after the first compared with the first: one `diff_runs` document per step
    (`files`: the report file name each RUN was given as, or None)."""
    from triage.compare.diff import diff_runs

    if len(refs) < 2:
        raise UsageError("a report compares at least two runs: `triage report A B [C ...]`")
    files = files or [None] * len(refs)
    return [diff_runs(store, refs[0], ref, opts, files=(files[0], file))
            for ref, file in zip(refs[1:], files[1:], strict=True)]
