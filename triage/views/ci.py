"""`triage ci run`'s closing lines: what the job compared, posted and pushed."""

from __future__ import annotations

from triage.views.text import gate_lines, short_id


def render_ci(result) -> str:
    lines = []
    if result.diff is None:
        lines.append("no baseline on the remote yet: this run becomes it")
    else:
        ids = ",".join(short_id(run) for run in result.baseline)
        lines.append(f"baseline {ids} -> run {short_id(result.diff.run_b.id)}: verdict "
                     f"{result.diff.verdict}")
        lines += gate_lines(result.diff.gate) if result.diff.gate else []
    lines.append(f"comment: {result.comment.action}")
    lines.append(f"pushed {len(result.pushed)} run(s)")
    return "\n".join(lines)
