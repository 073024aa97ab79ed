"""Diff of two nsys runs from their stored summaries: kernels, NVTX, memory operations, API, GPU
idle time. Each list is ranked by absolute time changed, new and vanished entries included.
Kernels match as in the ncu diff (`compare/matching.py`): by name up to spacing, and kernels gone
from A and new in B, in equal number, pair by order of first launch (a renamed kernel).
"""

from __future__ import annotations

from typing import Callable

from triage.compare.matching import match_key, pair_leftovers, pairing_note
from triage.compare.ncu_diff import relative_change, total_change
from triage.compare.rundata import RunData

# table -> (key columns, value columns, the time column that ranks the changes)
SUMMARY_DIFFS = {
    "kernels": ("kernel_summary", ("name",),
                ("instances", "total_ns", "avg_ns", "median_ns", "min_ns", "max_ns", "share"),
                "total_ns"),
    "nvtx": ("nvtx_summary", ("domain", "text", "kind"),
             ("instances", "total_ns", "avg_ns", "median_ns", "share"), "total_ns"),
    "memops": ("memop_summary", ("op", "kind"),
               ("count", "total_ns", "avg_ns", "total_bytes", "share"), "total_ns"),
    "api": ("api_summary", ("api", "name"), ("calls", "total_ns", "avg_ns", "median_ns", "share"),
            "total_ns"),
}


def _rows(run: RunData, table: str) -> list[dict]:
    data = run.table(table)
    return data.to_pylist() if data is not None else []


def join_summaries(rows_a: list[dict], rows_b: list[dict], keys: tuple, values: tuple,
                   time: str, key_of: Callable[[dict], tuple] | None = None) -> list[dict]:
    """Entries keyed like the summaries, with both sides, change and rank by |delta time|.
    `key_of` makes the key rows join on (the key columns themselves by default); an entry
    shows A's key columns, else B's."""
    key_of = key_of or (lambda r: tuple(r[k] for k in keys))
    index_a = {key_of(r): r for r in rows_a}
    index_b = {key_of(r): r for r in rows_b}
    entries = []
    for key in list(index_a) + [k for k in index_b if k not in index_a]:
        a, b = index_a.get(key), index_b.get(key)
        side = lambda r: {v: r[v] for v in values} if r else None  # noqa: E731
        delta = ((b or {}).get(time) or 0) - ((a or {}).get(time) or 0)
        entries.append({**{k: (a or b)[k] for k in keys}, "a": side(a), "b": side(b),
                        "change": "new" if not a else "vanished" if not b else "changed",
                        "delta_ns": delta,
                        "delta_pct": relative_change(a[time], b[time]) if a and b else None})
    return sorted(entries, key=lambda e: -abs(e["delta_ns"] or 0))


def gpu_time(run: RunData) -> dict:
    """Kernel time, idle gaps between kernels, and the largest gap."""
    gaps = run.table("gpu_gaps", columns=["gap_ns"])
    gap_values = gaps.column("gap_ns").to_pylist() if gaps is not None else []
    kernels = _rows(run, "kernel_summary")
    return {"kernel_ns": sum(r["total_ns"] or 0 for r in kernels),
            "idle_ns": sum(gap_values), "gaps": len(gap_values),
            "max_gap_ns": max(gap_values) if gap_values else 0}


def first_launches(run: RunData) -> dict[str, int]:
    """Kernel name -> start of its first launch, the order renamed kernels pair in."""
    table = run.table("kernels", columns=["name", "start_ns"])
    if table is None:
        return {}
    first = table.group_by("name").aggregate([("start_ns", "min")])
    return dict(zip(first.column("name").to_pylist(), first.column("start_ns_min").to_pylist()))


def pair_renamed(entries: list[dict], run_a: RunData, run_b: RunData) -> list[dict]:
    """Kernels gone from A and new in B, in equal number, paired by first launch: one
    before/after entry each (with `name_b`), as the ncu diff pairs them."""
    gone = [e for e in entries if e["change"] == "vanished"]
    new = [e for e in entries if e["change"] == "new"]
    if not gone or len(gone) != len(new):
        return entries
    first = {"a": first_launches(run_a), "b": first_launches(run_b)}
    pairs, _, _ = pair_leftovers(gone, new, lambda e: first["a" if e["a"] else "b"].get(
        e["name"], float("inf")))
    paired = [{"name": a["name"], "name_b": b["name"], "a": a["a"], "b": b["b"],
               "change": "changed", "matched_by": "launch_order",
               "delta_ns": total_change(a["a"], b["b"]),
               "delta_pct": relative_change(a["a"]["total_ns"], b["b"]["total_ns"])}
              for a, b in pairs]
    kept = [e for e in entries if e["change"] == "changed"] + paired
    return sorted(kept, key=lambda e: -abs(e["delta_ns"] or 0))


def diff_nsys(run_a: RunData, run_b: RunData) -> dict:
    out = {name: join_summaries(_rows(run_a, table), _rows(run_b, table), keys, values, time,
                                (lambda r: (match_key(r["name"]),)) if name == "kernels" else None)
           for name, (table, keys, values, time) in SUMMARY_DIFFS.items()}
    out["kernels"] = pair_renamed(out["kernels"], run_a, run_b)
    gpu_a, gpu_b = gpu_time(run_a), gpu_time(run_b)
    out["gpu"] = {"a": gpu_a, "b": gpu_b,
                  "idle_delta_pct": relative_change(gpu_a["idle_ns"], gpu_b["idle_ns"]),
                  "kernel_delta_pct": relative_change(gpu_a["kernel_ns"], gpu_b["kernel_ns"])}
    return out


def kernel_entries(ranking: list[dict]) -> list[dict]:
    """The nsys kernel ranking in the common `kernels` shape of `diff --json`."""
    def side(summary):
        if not summary:
            return None
        return {"duration_ns": summary["avg_ns"], "total_ns": summary["total_ns"],
                "launches": summary["instances"], "median_ns": summary["median_ns"],
                "share": summary["share"]}

    match = {"new": "only_b", "vanished": "only_a", "changed": "matched"}
    entries = []
    for e in ranking:
        a, b = side(e["a"]), side(e["b"])
        entry = {"name": e["name"], "match": match[e["change"]],
                 "matched_by": e.get("matched_by", "name") if e["change"] == "changed" else None,
                 "a": a, "b": b,
                 "delta_pct": relative_change(a["duration_ns"], b["duration_ns"])
                 if a and b else None,
                 "delta_total_ns": e["delta_ns"], "delta_total_pct": e["delta_pct"],
                 # launch counts read like the ncu diff's, so a change in them is drift
                 "launches": {"a": a["launches"] if a else None,
                              "b": b["launches"] if b else None},
                 "sections": [], "rules": {"only_a": [], "only_b": [], "both": []}, "notes": []}
        if e.get("name_b"):
            entry["name_b"] = e["name_b"]
            entry["notes"].append(pairing_note(e["name"], e["name_b"]))
        entries.append(entry)
    return entries
