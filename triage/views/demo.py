"""Terminal rendering of `triage demo`: the story triage is for, on the bundled captures."""

from __future__ import annotations

from triage.compare.result import DiffResult
from triage.demo import GATE_PCT, UPGRADED, DemoOutcome
from triage.views.diff import render_diff
from triage.views.text import gate_lines


def gate_exit_code(diff: DiffResult) -> int:
    """The exit code `triage diff --max-slowdown` gives for this diff."""
    from triage.base.errors import RegressionGate

    return RegressionGate.exit_code if diff.gate and not diff.gate.passed else 0


def caution_exit_code(diff: DiffResult) -> int:
    """The exit code `triage diff --strict=caution` gives for this diff."""
    from triage.base.errors import ComparisonGate

    return ComparisonGate.exit_code if diff.verdict in ("caution", "invalid") else 0


def render_demo(outcome: DemoOutcome) -> str:
    """Archive, compare, gate, caution, review page: each with the command that does it."""
    code = gate_exit_code(outcome.gate)
    strict = caution_exit_code(outcome.caution)
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


def demo_json(outcome: DemoOutcome) -> dict:
    """`triage demo --json`: the three diffs as `diff --json` documents, the exit codes, the
    page."""
    return {"valid": outcome.valid.to_json(),
            "gate": {**outcome.gate.to_json(), "exit_code": gate_exit_code(outcome.gate)},
            "caution": {**outcome.caution.to_json(),
                        "strict_caution_exit_code": caution_exit_code(outcome.caution)},
            "html": str(outcome.html)}
