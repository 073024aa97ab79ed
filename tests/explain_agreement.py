"""How often `triage explain` agrees with ncu's own rule results (the rules table).

The bound (step 1) is measured per launch: for every launch whose report stores a result of
ncu's SOLBottleneck rule that names a bound, that result against (a) the rule's thresholds
applied to the launch's own values by `compare.explain_sol` (the reproduction, used where a
report stores no result) and (b) the bound `explain` gives the group of launches it belongs to.
A kernel agrees when every such launch of it does. The other steps are compared per explained
group with ncu's rule messages of the group's first launch, only where both exist (the rule ran,
the fact was concluded).

    python tests/explain_agreement.py [CORPUS_DIR]             # archives the corpus, prints
    python tests/explain_agreement.py [CORPUS_DIR] --markdown  # the table in docs/comparing.md

CORPUS_DIR defaults to $TRIAGE_CORPUS, else ../shared/corpus beside the checkout.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from helpers import CORPUS
from triage.compare.explain_sol import stored_verdict

# ncu TheoreticalOccupancy message -> explain's limiter labels
LIMITER_WORDS = (("registers", "registers"), ("shared memory", "shared memory"),
                 ("warps within each block", "warps per block (block size)"),
                 ("blocks that can fit", "blocks per SM (small blocks)"),
                 ("barriers", "barriers"))


def _rules(kernel: dict, rule_id: str, types=("optimization", "warning", "ok")) -> list[dict]:
    return [r for r in kernel["ncu_rules"] if r["rule_id"] == rule_id
            and r["message_type"] in types]


def _facts(kernel: dict) -> dict:
    return {k: v for s in kernel["steps"] for k, v in s["facts"].items()}


def _sol(kernel: dict) -> tuple | None:
    """The stored SOLBottleneck result of the group's first launch: (bound, near peak)."""
    found = stored_verdict((r["rule_id"], r["title"], r["message"]) for r in kernel["ncu_rules"])
    return (found.bound, found.near_peak) if found and found.bound else None


def _fired(rule_id: str) -> Callable[[dict], bool | None]:
    def read(kernel):
        return bool(_rules(kernel, rule_id, ("optimization", "warning"))) \
            if kernel["ncu_rules"] else None
    return read


# ncu has occupancy rules since 2021.1 ("Occupancy"; split into AchievedOccupancy and
# TheoreticalOccupancy in 2024.1): older reports have no occupancy verdict to compare with.
OCCUPANCY_RULES_SINCE = (2021, 1)


def _occupancy_rules_ran(kernel: dict) -> bool:
    version = tuple(int(p) for p in (kernel.get("tool_version") or "0.0").split(".")[:2])
    return bool(kernel["ncu_rules"]) and version >= OCCUPANCY_RULES_SINCE


def _achieved_fired(kernel: dict) -> bool | None:
    if not _occupancy_rules_ran(kernel):
        return None
    return bool(_rules(kernel, "AchievedOccupancy", ("optimization", "warning"))) or any(
        "measured achieved occupancy" in (r["message"] or "")
        for r in _rules(kernel, "Occupancy", ("optimization", "warning")))


def _theoretical_fired(kernel: dict) -> bool | None:
    if not _occupancy_rules_ran(kernel):
        return None
    return bool(_rules(kernel, "TheoreticalOccupancy", ("optimization", "warning"))) or any(
        "is limited by" in (r["message"] or "") for r in _rules(kernel, "Occupancy"))


def _limiters(kernel: dict) -> frozenset | None:
    rules = _rules(kernel, "TheoreticalOccupancy", ("optimization", "warning"))
    if not rules:
        return None
    text = rules[0]["message"] or ""
    return frozenset(label for words, label in LIMITER_WORDS if words in text) or None


def _stall_reasons(kernel: dict) -> set | None:
    reasons = set()
    for rule in _rules(kernel, "CPIStall", ("optimization", "warning")):
        title = (rule["title"] or "").lower().replace(" stalls", "").replace(" ", "_")
        if title:
            reasons.add(title)
    return reasons or None


def _sector_fired(kernel: dict) -> bool | None:
    if not kernel["ncu_rules"]:
        return None
    return any(re.search("Global (Load|Store)", r["title"] or "") for r in
               _rules(kernel, "MemoryCacheAccessPattern", ("optimization", "warning")))


@dataclass(frozen=True)
class Comparison:
    """ncu's outcome, explain's fact, and whether they agree (None on either side: skipped)."""

    name: str
    ncu: Callable[[dict], object]
    ours: Callable[[dict], object]
    agree: Callable[[object, object], bool]


COMPARISONS = [
    Comparison("SOLBottleneck bound and near peak (step 1, per group)", _sol,
               lambda k: (_facts(k).get("bound"), _facts(k).get("near_peak"))
               if "bound" in _facts(k) else None, lambda a, b: a == b),
    Comparison("IssueSlotUtilization fired vs issue slots idle (step 4)",
               _fired("IssueSlotUtilization"), lambda k: _facts(k).get("issue_idle"),
               lambda a, b: a == b),
    Comparison("AchievedOccupancy fired vs gap > 10 points (step 3)", _achieved_fired,
               lambda k: None if _facts(k).get("gap") is None else _facts(k)["gap"] > 10,
               lambda a, b: a == b),
    Comparison("TheoreticalOccupancy fired vs theoretical < 100% (step 3)", _theoretical_fired,
               lambda k: None if _facts(k).get("theoretical") is None
               else _facts(k)["theoretical"] < 100, lambda a, b: a == b),
    Comparison("TheoreticalOccupancy limiter (step 3)", _limiters,
               lambda k: frozenset(_facts(k).get("limiters") or []) or None,
               lambda a, b: a == b),
    Comparison("CPIStall reasons contain our top stall (step 4)", _stall_reasons,
               lambda k: _facts(k).get("top_stall"), lambda a, b: b in a),
    Comparison("MemoryCacheAccessPattern global access vs partial sectors (step 2)",
               _sector_fired, lambda k: _facts(k).get("partial_sectors"),
               lambda a, b: a == b),
]


def agreement(explained: list[dict]) -> dict:
    """Per comparison: compared, agreed, and the disagreeing groups; plus the overall figure."""
    out = {}
    for comparison in COMPARISONS:
        compared, agreed, misses = 0, 0, []
        for kernel in ({**k, "tool_version": result["tool_version"]}
                       for result in explained for k in result["kernels"]):
            ncu, ours = comparison.ncu(kernel), comparison.ours(kernel)
            if ncu is None or ours is None:
                continue
            compared += 1
            if comparison.agree(ncu, ours):
                agreed += 1
            else:
                misses.append((kernel["name"][:50], ncu, ours))
        out[comparison.name] = {"compared": compared, "agreed": agreed, "misses": misses}
    total = sum(v["compared"] for v in out.values())
    agreed = sum(v["agreed"] for v in out.values())
    return {"comparisons": out, "compared": total, "agreed": agreed,
            "figure": agreed / total if total else None}


# -- the bound, launch by launch ---------------------------------------------------------------


@dataclass(frozen=True)
class LaunchBound:
    """One launch whose report stores a SOLBottleneck result naming a bound."""

    report: str
    kernel: str
    stored: tuple[str, str | None]  # (outcome, bound)
    thresholds: tuple[str, str | None] | None  # the rule's thresholds on the launch's values
    explained: str | None  # the bound explain gives the launch's group

    @property
    def thresholds_agree(self) -> bool:
        return self.thresholds == self.stored

    @property
    def explain_agrees(self) -> bool:
        return self.explained == self.stored[1]


def launch_bounds(report: str, run, result: dict) -> list[LaunchBound]:
    """Every launch of `run` with a stored SOLBottleneck bound; `result` is its explain JSON."""
    from triage.compare.explain import Values
    from triage.compare.explain_launches import read_launches
    from triage.compare.explain_sol import rule_verdict

    group_of = {tuple(launch): kernel for kernel in result["kernels"]
                for launch in kernel["group"]["launch_ids"]}
    data = read_launches(run.ncu, list(group_of))
    out = []
    for launch, rules in sorted(data.rules.items()):
        stored = stored_verdict((r.rule_id, r.title, r.message) for r in rules)
        if stored is None or stored.bound is None or launch not in group_of:
            continue
        values = Values(data.values.get(launch, {}), set())
        sm, mem, waves = values.get("sm_pct"), values.get("mem_pct"), values.get("waves")
        computed = rule_verdict(sm.value, mem.value, waves.value if waves else None) \
            if sm and mem else None
        kernel = group_of[launch]
        out.append(LaunchBound(report, kernel["name"], (stored.outcome, stored.bound),
                               (computed.outcome, computed.bound) if computed else None,
                               _facts(kernel).get("bound")))
    return out


def bound_table(results: dict[str, dict], bounds: list[LaunchBound]) -> list[dict]:
    """Per report with a stored bound: launches and kernels compared, and how many agree."""
    rows = []
    for report, result in sorted(results.items()):
        mine = [b for b in bounds if b.report == report]
        if not mine:
            continue
        kernels = {b.kernel for b in mine}
        rows.append({"report": report, "ncu": result["tool_version"] or "not recorded (2019 era)",
                     "launches": len(mine),
                     "thresholds": sum(b.thresholds_agree for b in mine),
                     "explain": sum(b.explain_agrees for b in mine),
                     "kernels": len(kernels),
                     "kernels_agree": sum(all(b.thresholds_agree and b.explain_agrees
                                              for b in mine if b.kernel == k) for k in kernels)})
    return rows


def markdown(rows: list[dict], results: dict[str, dict]) -> str:
    lines = ["| report | ncu | launches with a stored bound | thresholds agree | explain agrees "
             "| kernels agree |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['report']} | {r['ncu']} | {r['launches']} | {r['thresholds']} | "
              f"{r['explain']} | {r['kernels_agree']} of {r['kernels']} |" for r in rows]
    total = {key: sum(r[key] for r in rows) for key in
             ("launches", "thresholds", "explain", "kernels", "kernels_agree")}
    lines.append(f"| **all {len(rows)} reports** | | {total['launches']} | {total['thresholds']} | "
                 f"{total['explain']} | {total['kernels_agree']} of {total['kernels']} |")
    without = sorted(set(results) - {r["report"] for r in rows})
    applied = {report: n for report in sorted(results) if (n := _by_thresholds(results[report]))}
    lines += ["", f"No stored bound to compare with ({len(without)} reports: SpeedOfLight not "
              "collected, the rule failed, or no launch has values): " + ", ".join(without) + ".",
              "", "Launches whose bound explain works out from the rule's thresholds (no stored "
              "result): " + (", ".join(f"{report} ({n})" for report, n in applied.items())
                             or "none") + "."]
    return "\n".join(lines)


def _by_thresholds(result: dict) -> int:
    return sum(k["launches"] for k in result["kernels"]
               if _facts(k).get("sol_source") == "thresholds")


def explain_corpus(corpus: Path, store: Path) -> tuple[dict[str, dict], list[LaunchBound]]:
    """Every ncu report of the corpus archived into `store` and explained: explain's JSON by
    report file name, and every launch with a stored SOLBottleneck bound."""
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store
    from triage.compare.explain import explain_run
    from triage.compare.rundata import RunData

    reports = sorted(p for p in (corpus / "ncu").iterdir() if p.is_file())
    archived = archive_files(store, [str(p) for p in reports])
    opened = Store.open(store)
    results, bounds = {}, []
    for path, record in zip(reports, archived, strict=True):
        run = RunData(opened, record.id)
        results[path.name] = explain_run(run).to_json()
        bounds += launch_bounds(path.name, run, results[path.name])
    return results, bounds


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if a != "--markdown"]
    corpus = Path(args[0]) if args else CORPUS
    with tempfile.TemporaryDirectory() as tmp:
        results, bounds = explain_corpus(corpus, Path(tmp) / "store")
    rows = bound_table(results, bounds)
    if "--markdown" in argv:
        print(markdown(rows, results))
        return 0
    kernels = {(b.report, b.kernel) for b in bounds}
    agreeing = {k for k in kernels if all(b.thresholds_agree and b.explain_agrees
                                         for b in bounds if (b.report, b.kernel) == k)}
    print(f"{sum(b.thresholds_agree for b in bounds):>4} / {len(bounds):<4} launches: "
          "SOLBottleneck's thresholds applied = its stored result")
    print(f"{sum(b.explain_agrees for b in bounds):>4} / {len(bounds):<4} launches: explain's "
          "bound = SOLBottleneck's stored bound")
    print(f"{len(agreeing):>4} / {len(kernels):<4} kernels: every launch agrees")
    for b in bounds:
        if not (b.thresholds_agree and b.explain_agrees):
            print(f"            differs: {b}")
    result = agreement(list(results.values()))
    for name, v in result["comparisons"].items():
        print(f"{v['agreed']:>4} / {v['compared']:<4} {name}")
        for miss in v["misses"][:5]:
            print(f"            differs: {miss}")
    print(f"overall: {result['agreed']} / {result['compared']} = {result['figure']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
