"""Terminal rendering of `triage demo`: the story triage is for, on the bundled captures."""

from __future__ import annotations

from triage.demo import GATE_PCT, UPGRADED, DemoOutcome
from triage.views.diff import render_diff
from triage.views.text import gate_lines


def render_demo(outcome: DemoOutcome) -> str:
    """Archive, compare, gate, caution, review page: each with the command that does it."""
    code, strict = outcome.gate_exit_code, outcome.caution_exit_code
    head = render_diff(outcome.caution).split("\n\n", 1)[0]  # verdict and drift only
    return "\n".join([
        f"archived {len(outcome.runs)} runs of the bundled captures into a throwaway store: "
        f"before/1..5, after/1..5, {UPGRADED}",
        "",
        "1. Is after faster than before?  triage diff 'before/*' 'after/*'",
        render_diff(outcome.valid),
        "",
        f"2. The regression gate, the other way round:  triage diff 'after/*' 'before/*' "
        f"--max-slowdown {GATE_PCT:g}",
        *(gate_lines(outcome.gate.gate) if outcome.gate.gate else []),
        f"exit code: {code}" + (" (the gate failed: CI stops here)" if code else ""),
        "",
        f"3. When not to trust a comparison:  triage diff after/1 {UPGRADED}",
        f"   ({UPGRADED} is after/1's export with the nsys version it records changed by code)",
        head,
        f"with --strict=caution, exit code: {strict}",
        "",
        "4. The review page for the pull request:  triage report 'before/*' 'after/*' "
        "-o review.html",
        f"wrote {outcome.html}",
    ])
