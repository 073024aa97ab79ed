"""Wording of `triage rerun`: the predicted drift before it runs, the tree it used, and the one
line that says whether the original was reproduced (the outcome is compare/rerun.py's data)."""

from __future__ import annotations

import shlex
from typing import Any

from triage.compare.reproduce import ForeignRun, Plan, RerunResult, TreeDelta
from triage.compare.rerun import NO, NOT_COMPARABLE, UNKNOWN_NOISE, YES, Reproduced
from triage.views.diff import drift_lines, verdict_lines
from triage.views.text import Layout, fmt_pct, printable, short_id


def render_plan(plan: Plan, tree: TreeDelta) -> str:
    """Before running: this machine against the run's record, and the tree against its git."""
    layout = Layout.for_stdout()
    lines = [f"rerun of {short_id(plan.original.id)} on this machine: predicted"]
    lines += verdict_lines(plan.prediction.verdict, min(layout.width, 100))
    lines += drift_lines(plan.prediction.drift, Layout(min(layout.width, 100), layout.cut))
    if plan.environment.supplied:
        lines.append("redacted when recorded, taken from this environment: "
                     + ", ".join(plan.environment.supplied))
    lines.append(tree_line(tree))
    return "\n".join(lines)


def foreign_question(foreign: ForeignRun) -> str:
    """Asked before a run from another store is rerun: what it would run, and with what."""
    lines = [f"run {short_id(foreign.run_id)} arrived by {foreign.arrival.how} from "
             f"{printable(foreign.arrival.source)}; its command is that store's choice:",
             f"  {printable(shlex.join(foreign.argv))}"]
    if foreign.supplied:
        lines.append("it would get this machine's values of " + ", ".join(foreign.supplied))
    return "\n".join([*lines, "run it?"])


def _commit(value: str | None) -> str:
    return value[:12] if value else "none"


def tree_line(tree: TreeDelta) -> str:
    """`--here`: how the current tree differs from the record; `--at-commit`: what was built."""
    if tree.mode == "at_commit":
        edits = " with its recorded patch" if tree.recorded_dirty else ""
        return f"tree: a worktree of {_commit(tree.recorded_commit)}{edits} (removed afterwards)"
    if tree.recorded_commit is None:
        return "tree: the current one (the run recorded no git state to compare it with)"
    said = []
    if tree.commit != tree.recorded_commit:
        said.append(f"commit {_commit(tree.commit)}, recorded {_commit(tree.recorded_commit)}")
    if tree.same_edits is False or tree.dirty != tree.recorded_dirty:
        said.append("uncommitted edits " + ("differ from" if tree.dirty and tree.recorded_dirty
                                            else "present, not in" if tree.dirty
                                            else "absent, present in") + " the record")
    return "tree: the current one, " + ("; ".join(said) if said
                                        else "same commit and edits as recorded")


def outcome_line(outcome: Reproduced, bench: bool = False) -> str:
    """The one line the rerun ends with (`bench`: of a bench run, judged on its metrics)."""
    if outcome.outcome == YES:
        return f"reproduced: yes — every {'bench metric' if bench else 'kernel'} within noise"
    if outcome.outcome == NO and outcome.change is not None:
        change = outcome.change
        ci = f" [{fmt_pct(change.ci_pct[0])}, {fmt_pct(change.ci_pct[1])}]" if change.ci_pct \
            else ""
        return f"reproduced: no — {change.name} {fmt_pct(change.change_pct)}{ci}"
    if outcome.outcome == NOT_COMPARABLE:
        return "not comparable: " + (", ".join(i.field for i in outcome.drift) or "invalid")
    assert outcome.outcome == UNKNOWN_NOISE
    return (f"reproduced: unknown — no change beyond noise, but {outcome.unmeasured} of "
            f"{outcome.judged} times have too few runs for an interval (--repeat "
            f"{outcome.fewest} and capture --repeat {outcome.fewest} give one)")


def render_rerun(result: RerunResult, run: str) -> str:
    """The new runs, the diff of each against the original, and whether it reproduced."""
    from triage.views.diff import render_diff

    lines = [f"{short_id(run_id)}  rerun of {short_id(run)}" for run_id in result.new_runs]
    return "\n".join([*lines, "", render_diff(result.diff),
                      outcome_line(result.outcome, result.diff.bench is not None)])


def rerun_json(result: RerunResult) -> dict[str, Any]:
    """The `--json` document (schemas/rerun.schema.json)."""
    plan, tree = result.plan, result.tree
    return {
        "rerun_of": plan.original.id,
        "predicted": {"verdict": plan.prediction.verdict,
                      "drift": [item.to_json() for item in plan.prediction.drift]},
        "tree": {"mode": tree.mode, "recorded_commit": tree.recorded_commit,
                 "commit": tree.commit, "recorded_dirty": tree.recorded_dirty,
                 "dirty": tree.dirty, "same_edits": tree.same_edits},
        "supplied_variables": list(plan.environment.supplied),
        "original_runs": list(result.original_side), "new_runs": list(result.new_runs),
        "verdict": result.diff.verdict, "reproduced": result.outcome.to_json(),
        "line": outcome_line(result.outcome, result.diff.bench is not None),
    }
