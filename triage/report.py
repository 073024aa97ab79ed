"""`triage report A B [C ...]`: a before/after review in HTML or GitHub Markdown.

Everything shown comes from the `diff --json` documents (`diff_runs`), one per step when several
runs form a series (each against the first). The only numbers added here are arithmetic over
those documents (shares of kernel time, chart coordinates), so a report never disagrees with the
diff it was made from. Charts need metrics that a diff lists only with `--all` (an unchanged
metric still has a value worth drawing), so `triage report` asks for every metric and the
templates hide the unchanged ones unless asked to show them.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from triage import __version__, svgcharts
from triage.compare.diff import time_changed
from triage.compare.drift import clip_middle
from triage.errors import UsageError
from triage.textview import fmt_ns, fmt_pct, fmt_value, short_id

GITHUB_COMMENT_LIMIT = 65_536
FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}
# Markdown detail levels tried in turn until the comment fits: None means "all".
MD_LEVELS = ({"kernels": None, "rows": None}, {"kernels": 20, "rows": 40},
             {"kernels": 5, "rows": 15}, {"kernels": 0, "rows": 10})
SEVERITY_ORDER = ["invalidates", "caution", "not_comparable", "unknown", "info"]


# -- reading the diff ------------------------------------------------------------------------


def run_name(run: dict) -> str:
    """How a run is called in legends and headers: its label, else report file, else id."""
    if run.get("labels"):
        return run["labels"][0]
    reports = run.get("reports") or []
    return reports[0]["name"] if reports else short_id(run["id"])


def series_runs(diffs: list[dict]) -> list[dict]:
    """The provenance of every run in the report: the common A, then each B."""
    return [diffs[0]["runs"]["a"]] + [d["runs"]["b"] for d in diffs]


EMPTY_SIDE = {"duration_ns": None, "total_ns": None, "launches": None}


def headline(diff: dict) -> list[dict]:
    """Kernels ranked by total time changed, with each side's share of the kernel time."""
    totals = {side: sum((k.get(side) or {}).get("total_ns") or 0 for k in diff["kernels"])
              for side in "ab"}
    rows = []
    for rank, kernel in enumerate(sorted(diff["kernels"], key=time_changed, reverse=True), 1):
        a, b = (dict(EMPTY_SIDE, **(kernel.get(s) or {})) for s in "ab")
        share = {s: (v["total_ns"] or 0) / totals[s] if totals[s] and kernel.get(s) else None
                 for s, v in (("a", a), ("b", b))}
        # ncu's side summaries count only the launches paired for the mean; show all launches.
        launches = kernel.get("launches") or {"a": a["launches"], "b": b["launches"]}
        rows.append({"rank": rank, "kernel": kernel, "a": a, "b": b, "share": share,
                     "launches": launches,
                     "delta_total_ns": kernel.get("delta_total_ns")})
    return rows


def kernel_view(row: dict, legend: list[str], colors: list[int] | None,
                show_unchanged: bool | None) -> dict:
    """One kernel's detail: charts, sections with the metrics to show, rules by est. speedup."""
    kernel = row["kernel"]
    hide = show_unchanged is False
    sections, quiet = [], []
    for section in kernel.get("sections") or []:
        metrics = [m for m in section["metrics"] if not (hide and m["status"] == "unchanged")]
        if metrics or not section["comparable"]:
            sections.append({**section, "metrics": metrics})
        elif section["unchanged"]:
            quiet.append(section)
    rules = {side: sorted(items, key=lambda r: -(r.get("speedup_pct") or 0))
             for side, items in (kernel.get("rules") or {}).items()}
    return {**row, "sections": sections, "quiet": quiet, "rules": rules,
            "charts": svgcharts.kernel_charts(kernel, legend, colors) if colors else []}


# -- the series overview ---------------------------------------------------------------------


def series_table(diffs: list[dict]) -> list[dict]:
    """One row per kernel of the series: its mean duration and SOL point in each run.

    Kernels are keyed by their name in the first run, which every step is compared against."""
    rows: dict[str, dict] = {}
    width = len(diffs) + 1
    for step, diff in enumerate(diffs, start=1):
        for kernel in diff["kernels"]:
            key = kernel["name"] if kernel["match"] != "only_b" else "\0" + kernel["name"]
            row = rows.setdefault(key, {"name": kernel["name"], "durations": [None] * width,
                                        "sol": [(None, None)] * width})
            sol = svgcharts.sol_points(kernel)
            for run, side, point in ((0, "a", sol[0]), (step, "b", sol[1])):
                if kernel.get(side):
                    row["durations"][run] = kernel[side].get("duration_ns")
                    row["sol"][run] = point
    table = [{**r, "change": [_change(r["durations"][0], v) for v in r["durations"]]}
             for r in rows.values()]
    return sorted(table, key=lambda r: -max(v or 0 for v in r["durations"]))


def _change(first, value):
    if not isinstance(first, (int, float)) or not isinstance(value, (int, float)) or not first:
        return None
    return (value - first) / first * 100.0


# -- provenance ------------------------------------------------------------------------------


def _setting(run: dict, key: str) -> str | None:
    value = (run.get("settings") or {}).get(key)
    source = (run.get("settings_source") or {}).get(key)
    if value is None:
        return None
    if isinstance(value, list):
        value = f"{len(value)}: " + ", ".join(map(str, value))
    return f"{value} ({source})" if source else str(value)


def _gpu(run: dict) -> str | None:
    gpus = (run.get("environment") or {}).get("gpus") or []
    if not gpus:
        return None
    g = gpus[0]
    extra = ", ".join(filter(None, [g.get("compute_capability") and f"cc {g['compute_capability']}",
                                    g.get("sm_count") and f"{g['sm_count']} SMs"]))
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    return f"{g.get('name') or '?'}" + (f" ({extra})" if extra else "") + more


def _clock_evidence(run: dict) -> str | None:
    clock = (run.get("evidence") or {}).get("clock") or {}
    if not clock.get("results"):
        return None
    text = (f"{clock.get('executed_locked')} of {clock.get('results')} results ran with "
            "locked clocks")
    if clock.get("measured_to_max") is not None:
        text += f"; measured SM clock {clock['measured_to_max']:.0%} of max"
    return text


def _git(run: dict) -> str | None:
    """Commit, branch, local edits and untracked files (capture/git_state.py's record)."""
    git = run.get("git")
    if not isinstance(git, dict):
        return None if git is None else str(git)
    if not git.get("repository"):
        return git.get("reason") or "not a git repository"
    parts = [git.get("commit") or "no commit yet", git.get("branch") or "detached HEAD",
             "dirty (uncommitted edits)" if git.get("dirty") else "clean"]
    if git.get("untracked_count"):
        parts.append(f"{git['untracked_count']} untracked file(s)")
    remote = git.get("remote") or {}
    if remote.get("url"):
        parts.append(remote["url"])
    return ", ".join(parts)


def _env(run: dict, key: str):
    return (run.get("environment") or {}).get(key)


def _host(run: dict) -> str | None:
    host = _env(run, "host") or {}
    return " · ".join(str(host[k]) for k in ("name", "cpu", "os") if host.get(k)) or None


PROVENANCE_ROWS = (
    ("run id", lambda r: r.get("id")),
    ("labels", lambda r: ", ".join(r.get("labels") or []) or None),
    ("report files", lambda r: "; ".join(f"{p['name']} (sha256 {p['sha256'][:16]}…)"
                                          for p in r.get("reports") or []) or None),
    ("tool", lambda r: f"{r.get('tool')} {r.get('tool_version') or '(version unknown)'}"),
    ("profiler command", lambda r: r.get("command")),
    ("application", lambda r: " ".join((r.get("application") or {}).get("argv") or []) or None),
    ("filed by", lambda r: r.get("source") and f"triage {r['source']}"),
    ("triage command", lambda r: " ".join(map(str, r["argv"])) if r.get("argv") else None),
    ("GPU", _gpu),
    ("driver", lambda r: _env(r, "driver_version")),
    ("CUDA", lambda r: _env(r, "cuda_version")),
    ("clock control (source)", lambda r: _setting(r, "clock_control")),
    ("clock evidence", _clock_evidence),
    ("cache control (source)", lambda r: _setting(r, "cache_control")),
    ("replay mode (source)", lambda r: _setting(r, "replay_mode")),
    ("section set (source)", lambda r: _setting(r, "section_set")),
    ("nsys trace (source)", lambda r: _setting(r, "trace")),
    ("nsys export", lambda r: r.get("nsys_source") and str(r["nsys_source"])),
    ("git", _git),
    ("host", _host),
    ("captured", lambda r: r.get("created")),
    ("archived", lambda r: r.get("archived")),
    ("notes", lambda r: "; ".join(map(str, (r.get("notes") or []) + (r.get("notices") or [])))
     or None),
)


MONO_ROWS = ("run id", "profiler command", "application", "triage command", "git")
# Unknown is an answer too: a reader should see that the commit or clock was never recorded.
ALWAYS_SHOWN = ("profiler command", "git")
ALWAYS_SHOWN_NCU = ("clock control (source)", "cache control (source)")


def provenance_rows(runs: list[dict]) -> list[dict]:
    """Label, one value per run, and whether the runs differ; rows unknown everywhere dropped."""
    rows, ncu = [], any(run.get("tool") == "ncu" for run in runs)
    for label, read in PROVENANCE_ROWS:
        values = [read(run) for run in runs]
        always = label in ALWAYS_SHOWN or (label in ALWAYS_SHOWN_NCU and ncu)
        if always or any(v is not None for v in values):
            rows.append({"label": label, "cells": values, "mono": label in MONO_ROWS,
                         "differs": label != "run id" and len(set(map(str, values))) > 1})
    return rows


# -- rendering -------------------------------------------------------------------------------


def rule_text(message: str | None) -> str:
    """ncu rule messages link sections as `@section:Id:Name@`; a report shows the name."""
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


def fmt_bytes(value) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


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
    text = re.sub(r"\s*\n\s*", " ", str(text))
    text = text.replace("|", "\\|") if in_table else text
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def html_text(text) -> Markup:
    """HTML-escaped text for raw HTML inside Markdown (`<summary>`), where `\\` would show."""
    return Markup(escape(re.sub(r"\s*\n\s*", " ", str(text))))


def _environment(markdown: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("triage.templates", "."),
        autoescape=not markdown, finalize=md_escape if markdown else None,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined)
    env.filters.update(ns=fmt_ns, pct=fmt_pct, value=fmt_value, share=fmt_share,
                       short_id=short_id, short_kernel=svgcharts.short_kernel, rule_text=rule_text,
                       code=md_code, h=html_text, trend=trend,
                       number=fmt_number, bytes=fmt_bytes, change_ns=fmt_change_ns,
                       clip_middle=clip_middle)
    return env


def _context(diffs: list[dict], show_unchanged: bool | None, charts: bool) -> dict:
    if not diffs:
        raise UsageError("a report needs at least one comparison (two runs)")
    runs = series_runs(diffs)
    names = [run_name(r) for r in runs]
    letters = [run_letter(i) for i in range(len(runs))]
    steps = []
    for i, diff in enumerate(diffs):
        legend = [chart_legend("A", names[0]), chart_legend(letters[i + 1], names[i + 1])]
        colors = [0, i + 1] if charts else None
        rows = headline(diff)
        steps.append({"diff": diff, "letters": ("A", letters[i + 1]), "legend": legend,
                      "headline": rows, "drift": sorted_drift(diff["drift"]),
                      "charts": svgcharts.overview_charts(rows, legend, colors) if charts else [],
                      "details": [kernel_view(r, legend, colors, show_unchanged) for r in rows
                                  if r["kernel"].get("sections") or r["kernel"].get("notes")]})
    table = series_table(diffs) if len(diffs) > 1 else []
    legend = [chart_legend(letter, name) for letter, name in zip(letters, names)]
    return {"steps": steps, "runs": runs, "names": names, "letters": letters, "series": table,
            "series_charts": svgcharts.series_charts(table, legend) if charts and table else [],
            "verdict": worst_verdict([d["verdict"] for d in diffs]),
            "provenance": provenance_rows(runs), "version": __version__,
            "tools": sorted({r.get("tool") for r in runs} - {None}),
            "show_unchanged": show_unchanged}


def chart_legend(letter: str, name: str) -> str:
    """'A: …gemm_naive.ncu-rep': the end of a run name is what tells runs apart."""
    return f"{letter}: {svgcharts.clip_left(name, 26)}"


def sorted_drift(items: list[dict]) -> list[dict]:
    """Worst first: what invalidates the comparison, then cautions, sections, information."""
    return sorted(items, key=lambda i: SEVERITY_ORDER.index(i["severity"])
                  if i["severity"] in SEVERITY_ORDER else len(SEVERITY_ORDER))


def run_letter(index: int) -> str:
    """A, B, ... Z, then R27, R28: runs are named by position in the report."""
    return chr(ord("A") + index) if index < 26 else f"R{index + 1}"


def worst_verdict(verdicts: list[str]) -> str:
    """The worst verdict of a series: one invalid step makes the report invalid."""
    order = ["comparable", "caution", "invalid"]
    return max(verdicts, key=lambda v: order.index(v) if v in order else -1)


def render_html(diffs: list[dict], show_unchanged: bool | None = None) -> str:
    """A self-contained HTML review (inline CSS and SVG; no scripts, fonts or remote loads).

    show_unchanged: None shows the metrics each diff lists; False hides unchanged ones."""
    return _environment(False).get_template("report.html.j2").render(
        **_context(diffs, show_unchanged, charts=True))


def render_markdown(diffs: list[dict], show_unchanged: bool | None = None,
                    max_chars: int = GITHUB_COMMENT_LIMIT) -> str:
    """GitHub-flavoured Markdown for a PR comment: verdict and headline on top, details folded.

    Less detail is tried until the text fits `max_chars`; the last resort cuts it with a note."""
    template = _environment(True).get_template("report.md.j2")
    context = _context(diffs, show_unchanged, charts=False)
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


def report_format(path: str | None, fmt: str | None) -> str:
    """--format wins; else the file suffix; else HTML."""
    if fmt:
        return fmt
    if path and Path(path).suffix:
        suffix = Path(path).suffix.lower()
        if suffix not in FORMATS:
            raise UsageError(f"cannot tell the report format from {path!r}: use a .html or .md "
                             "file name, or --format html|md")
        return FORMATS[suffix]
    return "html"


def render(diffs: list[dict], fmt: str, show_unchanged: bool | None = None) -> str:
    if fmt == "md":
        return render_markdown(diffs, show_unchanged)
    return render_html(diffs, show_unchanged)


def write_report(path: str | Path, diffs: list[dict], fmt: str | None = None,
                 show_unchanged: bool | None = None) -> Path:
    """Render and write the report atomically (a reader never sees half a file)."""
    from triage.archive.atomic import write_user_file

    text = render(diffs, report_format(str(path), fmt), show_unchanged)
    return write_user_file(Path(path), text.encode("utf-8"))


def diff_series(store, refs: list[str], opts) -> list[dict]:
    """Each run after the first compared with the first: one `diff_runs` document per step."""
    from triage.compare.diff import diff_runs

    if len(refs) < 2:
        raise UsageError("a report compares at least two runs: `triage report A B [C ...]`")
    return [diff_runs(store, refs[0], ref, opts) for ref in refs[1:]]
