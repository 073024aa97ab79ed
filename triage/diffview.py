"""Terminal rendering of `triage diff`: verdict and drift on top, then kernels, in 100 columns."""

from __future__ import annotations

import textwrap

from triage.compare.diff import time_changed
from triage.textview import fmt_ns, fmt_pct, fmt_value, short_id, truncate

WIDTH = 100
SEVERITY_LABEL = {"invalidates": "INVALIDATES", "caution": "caution", "info": "info",
                  "not_comparable": "section", "unknown": "unknown"}
SEVERITY_ORDER = ["invalidates", "caution", "not_comparable", "info", "unknown"]


def _run_label(run: dict) -> str:
    labels = f" ({', '.join(run['labels'])})" if run.get("labels") else ""
    return f"{short_id(run['id'])}{labels} {run['tool']} {run.get('tool_version') or '?'}"


def _verdict_lines(diff: dict) -> list[str]:
    verdict = diff["verdict"]
    if verdict == "invalid":
        return ["!" * WIDTH, "VERDICT: INVALID - these runs are NOT comparable "
                "(see INVALIDATES below)", "!" * WIDTH]
    if verdict == "caution":
        return ["VERDICT: CAUTION - comparable with care (see caution below)"]
    return ["VERDICT: comparable"]


def _drift_lines(diff: dict) -> list[str]:
    items = sorted(diff["drift"], key=lambda i: SEVERITY_ORDER.index(i["severity"])
                   if i["severity"] in SEVERITY_ORDER else 99)
    if not items:
        return ["drift: none recorded"]
    lines = ["drift:"]
    for item in items:
        values = "" if item["a"] is None and item["b"] is None and item["severity"] != "unknown" \
            else f"{_v(item['a'])} -> {_v(item['b'])}  "
        # Wrapped, not cut: the why names what differs (the kernels only in A, ...).
        lines += textwrap.wrap(f"  {SEVERITY_LABEL.get(item['severity'], item['severity']):<11} "
                               f"{item['field']:<26} {values}{item['why']}", WIDTH,
                               subsequent_indent=" " * 14, drop_whitespace=True,
                               break_on_hyphens=False)
    return lines


def _v(value) -> str:
    return "?" if value is None else truncate(str(value), 28)


def _metric_line(metric: dict) -> str:
    unit = f" {metric['unit']}" if metric.get("unit") else ""
    values = f"{fmt_value(metric['a'])} -> {fmt_value(metric['b'])}{unit}"
    change = fmt_pct(metric["delta_pct"]) if metric["status"] == "changed" else metric["status"]
    if metric["status"] in ("only_a", "only_b"):
        change = "only in " + metric["status"][-1].upper()
    return f"      {truncate(metric['name'], 52):<52} {truncate(values, 30):>30} {change:>10}"


def _kernel_head(kernel: dict, totals: bool) -> str:
    """One kernel: mean duration per launch (ncu), or total time and launches (nsys ranking)."""
    a, b = kernel.get("a") or {}, kernel.get("b") or {}
    name = kernel["name"] + (f" -> {kernel['name_b']}" if kernel.get("name_b") else "")
    if totals:
        launches = f"{a.get('launches', '-')} -> {b.get('launches', '-')}"
        return (f"  {truncate(name, 48):<48} {fmt_ns(a.get('total_ns')):>10} -> "
                f"{fmt_ns(b.get('total_ns')):>10} {fmt_pct(kernel.get('delta_total_pct')):>8}"
                f" {truncate(launches, 14):>14}")
    return (f"  {truncate(name, 58):<58} {fmt_ns(a.get('duration_ns')):>10} -> "
            f"{fmt_ns(b.get('duration_ns')):>10} {fmt_pct(kernel.get('delta_pct')):>8}")


def _kernel_lines(kernel: dict, detail: bool, totals: bool) -> list[str]:
    lines = [_kernel_head(kernel, totals)]
    if kernel["match"] != "matched":
        lines.append(f"      only in {'A' if kernel['match'] == 'only_a' else 'B'}")
    lines += [truncate(f"      note: {n}", WIDTH) for n in kernel.get("notes", [])]
    if detail:
        lines += _section_lines(kernel)
    return lines


def _section_lines(kernel: dict) -> list[str]:
    lines = []
    for section in kernel.get("sections", []):
        if not section["metrics"] and section["comparable"] and not section["unchanged"]:
            continue
        state = "" if section["comparable"] else f"  NOT COMPARABLE: {section['why']}"
        unchanged = f"  ({section['unchanged']} unchanged)" if section["unchanged"] else ""
        lines.append(truncate(f"    [{section['section']}]{unchanged}{state}", WIDTH))
        lines += [_metric_line(m) for m in section["metrics"]]
    rules = kernel.get("rules") or {}
    for side in ("only_a", "only_b"):
        for rule in rules.get(side, []):
            lines.append(truncate(f"    rule fired only in {side[-1].upper()}: {rule['rule_id']}"
                                  f" ({rule['message_type']}) {rule.get('title') or ''}".rstrip(),
                                  WIDTH))
    if kernel.get("conclusion"):
        c = kernel["conclusion"]
        lines.append(f"    conclusion: {c.get('a') or '?'} -> {c.get('b') or '?'}")
    return lines


def _nsys_lines(nsys: dict) -> list[str]:
    gpu = nsys["gpu"]
    lines = []
    if gpu["a"]["kernel_ns"] or gpu["b"]["kernel_ns"]:
        lines += ["", "GPU time:",
                  f"  kernel time {fmt_ns(gpu['a']['kernel_ns'])} -> "
                  f"{fmt_ns(gpu['b']['kernel_ns'])} ({fmt_pct(gpu['kernel_delta_pct'])}); "
                  f"idle between kernels {fmt_ns(gpu['a']['idle_ns'])} -> "
                  f"{fmt_ns(gpu['b']['idle_ns'])} ({fmt_pct(gpu['idle_delta_pct'])})"]
    for title, key, label in (("NVTX ranges", "nvtx", lambda e: e["text"]),
                              ("memory operations", "memops", lambda e: f"{e['op']} {e['kind']}"),
                              ("API calls", "api", lambda e: e["name"])):
        entries = nsys[key][:10]
        if entries:
            lines += ["", f"{title} (by time changed):"]
            lines += [_summary_line(label(e), e) for e in entries]
    return lines


def _summary_line(label: str, entry: dict) -> str:
    a, b = entry.get("a") or {}, entry.get("b") or {}
    change = entry["change"] if entry["change"] != "changed" else fmt_pct(entry["delta_pct"])
    return (f"  {truncate(label, 50):<50} {fmt_ns(a.get('total_ns')):>10} -> "
            f"{fmt_ns(b.get('total_ns')):>10} {change:>9}")


def render_diff(diff: dict, limit: int = 20) -> str:
    runs = diff["runs"]
    lines = [f"A: {_run_label(runs['a'])}", f"B: {_run_label(runs['b'])}"]
    lines += _verdict_lines(diff) + _drift_lines(diff)
    kernels = sorted(diff["kernels"], key=time_changed, reverse=True)
    if not kernels:
        lines += ["", "kernels: no kernel activity recorded in either run"]
    totals = diff["tools"] == ["nsys", "nsys"]
    what = "total GPU time and launches" if totals else "mean duration per launch"
    if kernels:
        lines += ["", f"kernels ({len(kernels)}; {what}, ranked by time changed):"]
    detail = diff["tools"] == ["ncu", "ncu"]
    for kernel in kernels[:limit]:
        lines += _kernel_lines(kernel, detail, totals)
    if len(kernels) > limit:
        lines.append(f"  ... {len(kernels) - limit} more (use --json or --kernel REGEX)")
    if diff.get("nsys"):
        lines += _nsys_lines(diff["nsys"])
    return "\n".join(truncate(line, WIDTH) for line in lines)
