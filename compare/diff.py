"""`triage diff A B`: the drift verdict first, then what changed.

Returns plain data (the `diff --json` document); the CLI and the report templates render it.
"""

from __future__ import annotations

import statistics

from triage.archive.model import RunRecord
from triage.archive.store import Store
from triage.compare.drift import CAUTION, INFO, drift_item, grade, kernel_set_drift, verdict
from triage.compare.matching import group_kernels, match_key
from triage.compare.ncu_diff import (DiffOptions, diff_ncu, kernel_rows, relative_change,
                                     total_change)
from triage.compare.nsys_diff import diff_nsys, kernel_entries
from triage.compare.rundata import RunData
from triage.errors import TriageError, UsageError

PROVENANCE_KEYS = ("id", "tool", "tool_version", "created", "archived", "labels", "source",
                   "command", "application", "environment", "settings", "settings_source",
                   "evidence", "reports", "kernels", "notices", "notes")
DIFF_FORMAT = 1


def time_changed(kernel: dict) -> float:
    """How far a diff entry's total GPU time moved, the rank every rendering sorts by; an
    unknown change ranks last rather than as a change of its whole total."""
    return abs(kernel.get("delta_total_ns") or 0)


def provenance(record: RunRecord) -> dict:
    """What a reader needs to reproduce or challenge a run's numbers."""
    stored = record.as_json()
    out = {k: stored.get(k) for k in PROVENANCE_KEYS}
    env = dict(out.get("environment") or {})
    env.pop("variables", None)
    out["environment"] = env
    capture = stored.get("capture") or {}
    out["git"] = capture.get("git")
    out["argv"] = capture.get("argv")
    out["nsys_source"] = capture.get("nsys_source")
    return out


def _mixed_kernels(run_a: RunData, run_b: RunData) -> list[dict]:
    """ncu vs nsys: only kernel names and durations are common (mean per launch)."""
    def durations(run: RunData) -> dict[str, tuple[str, dict]]:
        """match key -> (name, side summary)."""
        if run.tool == "nsys":
            rows = run.table("kernel_summary").to_pylist()
            return {match_key(r["name"]): (r["name"], {
                "duration_ns": r["avg_ns"], "total_ns": r["total_ns"],
                "launches": r["instances"]}) for r in rows}
        out = {}
        for group in group_kernels(kernel_rows(run)):
            numbers = [d for d in group.durations if d is not None]
            out[match_key(group.name)] = (group.name, {
                "duration_ns": statistics.fmean(numbers) if numbers else None,
                "total_ns": sum(numbers) if numbers else None, "launches": len(group.durations)})
        return out

    side_a, side_b = durations(run_a), durations(run_b)
    entries = []
    for key in list(side_a) + [k for k in side_b if k not in side_a]:
        name, a = side_a.get(key, (None, None))
        name_b, b = side_b.get(key, (None, None))
        kind = "matched" if a and b else "only_a" if a else "only_b"
        entries.append({"name": name or name_b, "match": kind,
                        "matched_by": "name" if a and b else None,
                        "a": a, "b": b, "sections": [], "notes": [],
                        "delta_pct": relative_change(a["duration_ns"], b["duration_ns"])
                        if a and b else None, "delta_total_ns": total_change(a, b)})
    return entries


def _check_filters(opts: DiffOptions, run_a: RunData, run_b: RunData, kernels: list) -> None:
    """Filters that match nothing, or do not apply, are said instead of printing an empty diff."""
    ncu = run_a.tool == run_b.tool == "ncu"
    if not ncu and (opts.sections or opts.metric):
        raise UsageError("--section and --metric filter ncu diffs; these runs are "
                         f"{run_a.tool} and {run_b.tool}")
    if opts.kernel and not kernels:
        raise TriageError(f"no kernel of either run matches --kernel {opts.kernel!r}; "
                          "`triage diff A B` lists them")
    matched = [k for k in kernels if k["match"] == "matched"]  # only these have sections
    if matched and opts.sections and not any(k["sections"] for k in matched):
        raise TriageError(f"no section named {', '.join(opts.sections)} in these runs; "
                          "`triage show RUN` lists the sections each run collected")
    if matched and opts.metric and not any(s["metrics"] or s["unchanged"] for k in matched
                                           for s in k["sections"]):
        raise TriageError(f"no metric the sections of either run show matches --metric "
                          f"{opts.metric!r}; `triage query \"select distinct metric_name from "
                          "sections\"` lists them")


def diff_runs(store: Store, ref_a: str, ref_b: str, opts: DiffOptions = DiffOptions()) -> dict:
    """Compare two runs: verdict, drift, kernels (and nsys summaries for nsys pairs)."""
    run_a, run_b = RunData(store, ref_a), RunData(store, ref_b)
    items = [i for i in grade(run_a.record, run_b.record)
             if i["state"] != "same" and (i["a"], i["b"]) != (None, None)]
    if run_a.id == run_b.id:  # e.g. a label and an id that name one run
        items.append(drift_item("run", run_a.id[:12], run_b.id[:12], INFO,
                                "A and B are the same run: nothing below can differ"))
    nsys = None
    if run_a.tool == run_b.tool == "ncu":
        kernels, section_drift = diff_ncu(run_a, run_b, opts)
        items += section_drift
    elif run_a.tool == run_b.tool == "nsys":
        nsys = diff_nsys(run_a, run_b)
        kernels = kernel_entries(nsys["kernels"])
    else:
        kernels = _mixed_kernels(run_a, run_b)
        items.append(drift_item("tool", run_a.tool, run_b.tool, CAUTION,
                                "different tools: only kernel names and durations are compared "
                                "(ncu replays kernels with locked clocks; nsys times them live)"))
    if nsys is not None or run_a.tool != run_b.tool:
        items += kernel_set_drift(kernels)  # of every kernel: --kernel narrows only the view
        kernels = [k for k in kernels if opts.kernel_shown(k["name"], k.get("name_b"))]
        if nsys is not None:
            nsys["kernels"] = [e for e in nsys["kernels"] if opts.kernel_shown(e["name"])]
    _check_filters(opts, run_a, run_b, kernels)
    return {"format": DIFF_FORMAT, "a": run_a.id, "b": run_b.id,
            "tools": [run_a.tool, run_b.tool], "verdict": verdict(items), "drift": items,
            "kernels": kernels, "nsys": nsys,
            "runs": {"a": provenance(run_a.record), "b": provenance(run_b.record)},
            "options": {"threshold_pct": opts.threshold_pct, "sections": list(opts.sections),
                        "kernel": opts.kernel, "metric": opts.metric, "all": opts.show_all}}
