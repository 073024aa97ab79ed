"""Did a rerun reproduce its original? The diff of original vs rerun read as one outcome.

- not comparable: the diff's verdict is `invalid` (the drift items that invalidate it say why);
- no: some kernel, NVTX range or the total GPU time changed beyond noise (its interval excludes
  0) by more than the diff's threshold (`--threshold`, 1 % by default: a significant 0.3 %
  shift of a spin on a loaded machine is not a failure to reproduce); the largest such change
  is named;
- unknown: nothing changed beyond noise, but some time has too few samples for an interval
  (fewer than `fewest_per_side()` runs a side: `--repeat N` on both sides);
- yes: every time compared is within noise (or below the threshold).

The times judged are those `diff --max-slowdown` judges (compare/gate.py), faster or slower.
Data only: triage/rerunview.py words it.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.compare.drift import INVALIDATES
from triage.compare.gate import gate_checks
from triage.compare.noise import SIGNIFICANT, UNKNOWN, fewest_per_side
from triage.compare.result import DiffResult, DriftItem, GateCheck

YES, NO, UNKNOWN_NOISE, NOT_COMPARABLE = "yes", "no", "unknown", "not_comparable"


@dataclass(frozen=True)
class Reproduced:
    """The outcome, with what decided it: the change named (no), the invalidating drift (not
    comparable), or how many times lacked samples (unknown)."""

    outcome: str  # YES | NO | UNKNOWN_NOISE | NOT_COMPARABLE
    change: GateCheck | None = None
    drift: tuple[DriftItem, ...] = ()
    unmeasured: int = 0
    judged: int = 0
    fewest: int = 0

    def to_json(self) -> dict:
        return {"outcome": self.outcome,
                "change": self.change.to_json() if self.change else None,
                "drift": [item.field for item in self.drift], "unmeasured": self.unmeasured,
                "judged": self.judged, "fewest_runs_per_side": self.fewest}


def reproduced(result: DiffResult) -> Reproduced:
    """The outcome of the original (A) vs rerun (B) diff."""
    if result.verdict == "invalid":
        return Reproduced(NOT_COMPARABLE, drift=tuple(i for i in result.drift
                                                      if i.severity == INVALIDATES))
    checks = gate_checks(result.kernels, result.nsys, result.options, 0.0, result.bench)
    limit = result.options.threshold_pct
    changed = [c for c in checks if c.significance == SIGNIFICANT and c.change_pct is not None
               and abs(c.change_pct) > limit]
    if changed:
        worst = max(changed, key=lambda c: abs(c.change_pct or 0.0))
        return Reproduced(NO, change=worst, judged=len(checks))
    unmeasured = sum(c.significance == UNKNOWN for c in checks)
    return Reproduced(UNKNOWN_NOISE if unmeasured else YES, unmeasured=unmeasured,
                      judged=len(checks), fewest=fewest_per_side())
