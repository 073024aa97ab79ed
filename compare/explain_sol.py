"""Which of compute and memory limits one launch, decided as ncu's own SOLBottleneck rule does.

Source: the rule script ncu ships in its install, `sections/SpeedOfLight.py` (rule id
SOLBottleneck, "High-level bottleneck detection"). Its logic and numbers are the same in the 2019,
2021, 2023 and 2025 copies of that file read for this module:

    balanced_threshold 10, latency_bound_threshold 60, no_bound_threshold 80, waves_threshold 1
    compute = sm__throughput, memory = gpu__compute_memory_throughput (% of peak, elapsed)
    if compute < 80 and memory < 80:
        if compute < 60 and memory < 60:  "Small Grid" if waves per SM < 1 else "Latency Issue"
        elif |compute - memory| >= 10:    "High Compute Throughput" if compute > memory
                                          else "High Memory Throughput"
        else:                             "Balanced Throughput"
    else: "High Throughput", "start by analyzing" the Compute Workload Analysis section when
          compute >= memory (a tie is compute), else the Memory Workload Analysis section
          (2021 on; the 2019 message names neither)

The two sides are the two throughputs and nothing else: every metric of
`breakdown:sm__throughput` (the LSU and MIO pipes that issue memory instructions, the constant
cache) is on the compute side; only `breakdown:gpu__compute_memory_throughput` is memory. Where
a report stores the rule's result it is read (`stored_verdict`); otherwise the rule is applied to
the launch's values (`rule_verdict`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from triage.compare.explain_tables import limit

RULE_ID = "SOLBottleneck"
SMALL_GRID, LATENCY, HIGH_COMPUTE = "Small Grid", "Latency Issue", "High Compute Throughput"
HIGH_MEMORY, BALANCED, HIGH = "High Memory Throughput", "Balanced Throughput", "High Throughput"
# The rule's outcome (its message title since 2022) -> the bound it names; High Throughput names
# its side in the message.
BOUNDS: dict[str, str | None] = {SMALL_GRID: "latency", LATENCY: "latency",
                                 HIGH_COMPUTE: "compute", HIGH_MEMORY: "memory",
                                 BALANCED: "balanced", HIGH: None}
# Reports before 2022 store the message without a title: its words say which outcome it is.
MESSAGES = ((r"too small to fill", SMALL_GRID),
            (r"low compute throughput and memory bandwidth", LATENCY),
            (r"Compute is more heavily utilized than Memory", HIGH_COMPUTE),
            (r"Memory is more heavily utilized than Compute", HIGH_MEMORY),
            (r"Compute and Memory are well-balanced", BALANCED),
            (r"greater than [\d.]+% of the available compute or memory", HIGH))
SIDES = ((r"Compute Workload Analysis", "compute"), (r"Memory Workload Analysis", "memory"))
FROM_REPORT, FROM_THRESHOLDS = "report", "thresholds"  # where a verdict comes from


@dataclass(frozen=True)
class SolVerdict:
    """ncu's SOLBottleneck outcome for a launch: its title, the bound it names (latency,
    compute, memory, balanced; None where a stored High Throughput message names no side) and
    whether it was read from the report or worked out from the rule's thresholds."""

    outcome: str
    bound: str | None
    source: str

    @property
    def near_peak(self) -> bool:
        return self.outcome == HIGH


def rule_verdict(sm: float, mem: float, waves: float | None) -> SolVerdict:
    """The rule applied to one launch's throughputs (% of peak) and waves per SM."""
    if sm < limit("near_peak_pct") and mem < limit("near_peak_pct"):
        if sm < limit("busy_pct") and mem < limit("busy_pct"):
            small = waves is not None and waves < limit("small_grid_waves")
            return SolVerdict(SMALL_GRID if small else LATENCY, "latency", FROM_THRESHOLDS)
        if abs(sm - mem) >= limit("balanced_pp"):
            return SolVerdict(*((HIGH_COMPUTE, "compute") if sm > mem else
                                (HIGH_MEMORY, "memory")), FROM_THRESHOLDS)
        return SolVerdict(BALANCED, "balanced", FROM_THRESHOLDS)
    return SolVerdict(HIGH, "compute" if sm >= mem else "memory", FROM_THRESHOLDS)


def _outcome(title: str | None, message: str) -> str | None:
    if title in BOUNDS:
        return title
    return next((outcome for pattern, outcome in MESSAGES if re.search(pattern, message)), None)


def stored_verdict(rules: Iterable[tuple[str, str | None, str | None]]) -> SolVerdict | None:
    """The SOLBottleneck result a report stores for a launch, from its (rule id, title,
    message) rows; None where the rule did not run or failed (an error is not a result)."""
    for rule_id, title, message in rules:
        outcome = _outcome(title, message or "") if rule_id == RULE_ID else None
        if outcome is None:
            continue  # another rule, or another message of this one (NVLink scheduling)
        bound = BOUNDS[outcome]
        if outcome == HIGH:
            bound = next((side for pattern, side in SIDES if re.search(pattern, message or "")),
                         None)
        return SolVerdict(outcome, bound, FROM_REPORT)
    return None


def decide(stored: SolVerdict | None, computed: SolVerdict | None) -> SolVerdict | None:
    """The report's own result where it has one, else the thresholds'; a stored High
    Throughput that names no side (ncu 2019) takes the side by the later rule's tie-break."""
    if stored is None:
        return computed
    if stored.bound is None and computed is not None and computed.outcome == HIGH:
        return SolVerdict(HIGH, computed.bound, FROM_REPORT)
    return stored
