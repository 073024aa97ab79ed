"""How often `triage explain` agrees with ncu's own rule results (the rules table).

Each comparison reads one ncu rule outcome and the matching explain fact for the same kernel,
only where both exist (the rule ran, the fact was concluded). ncu's rules are per launch; explain
averages the launches of a kernel name, and ncu's rules of the first launch are compared.

    python tests/explain_agreement.py [CORPUS_DIR]   # archives the corpus into a temp store
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# ncu SOLBottleneck message -> the throughput class explain's step 1 calls "bound"
SOL_CLASSES = ((r"Latency Issue|low compute throughput and memory bandwidth|too small to fill",
                "latency"),
               (r"High Compute Throughput|Compute is more heavily utilized", "compute"),
               (r"High Memory Throughput|Memory is more heavily utilized", "memory"),
               (r"Balanced Throughput|well-balanced", "balanced"),
               (r"High Throughput|greater than 80", "near_peak"))
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


def _sol(kernel: dict):
    for rule in _rules(kernel, "SOLBottleneck"):
        text = f"{rule['title'] or ''} {rule['message'] or ''}"
        for pattern, cls in SOL_CLASSES:
            if re.search(pattern, text):
                return cls
    return None


def _sol_agree(ncu: str, facts: dict) -> bool:
    return facts.get("near_peak") if ncu == "near_peak" else facts.get("bound") == ncu


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
    Comparison("SOLBottleneck class (step 1)", _sol, _facts, _sol_agree),
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
    """Per comparison: compared, agreed, and the disagreeing kernels; plus the overall figure."""
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
                misses.append((kernel["name"][:50], ncu, ours if not isinstance(ours, dict)
                               else ours.get("bound")))
        out[comparison.name] = {"compared": compared, "agreed": agreed, "misses": misses}
    total = sum(v["compared"] for v in out.values())
    agreed = sum(v["agreed"] for v in out.values())
    return {"comparisons": out, "compared": total, "agreed": agreed,
            "figure": agreed / total if total else None}


def explain_corpus(corpus: Path, store: Path) -> list[dict]:
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store
    from triage.compare.explain import explain_run
    from triage.compare.rundata import RunData

    reports = sorted(p for p in (corpus / "ncu").iterdir() if p.is_file())
    results = archive_files(store, [str(p) for p in reports])
    opened = Store.open(store)
    return [explain_run(RunData(opened, r.id)).to_json() for r in results]


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / \
        "shared" / "corpus"
    with tempfile.TemporaryDirectory() as tmp:
        result = agreement(explain_corpus(corpus, Path(tmp) / "store"))
    for name, v in result["comparisons"].items():
        print(f"{v['agreed']:>4} / {v['compared']:<4} {name}")
        for miss in v["misses"][:5]:
            print(f"            differs: {miss}")
    print(f"overall: {result['agreed']} / {result['compared']} = {result['figure']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
