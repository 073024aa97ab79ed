"""`diff --max-slowdown PCT`: the regression gate over bench metrics, matched kernels, NVTX
ranges and the total GPU time.

Bench metrics (`triage bench` runs) are judged first, each in its better direction: they are
the acceptance, a profile's times the explanation. A time fails the gate when it is slower by
more than PCT (the change of its median) and not within noise: its confidence interval lies
above 0, or its noise is unknown (too few samples: then the percentage alone decides, and the
check says `unknown`). `--kernel RE` narrows the gate
to the matching kernels. Under an `invalid` verdict nothing is judged, and neither is a kernel
compared on a guess (two names paired by launch order) until `--pair A=B` confirms it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage.base.errors import ComparisonGate, GateNotJudged, RegressionGate
from triage.compare.drift import VERDICTS
from triage.compare.noise import SIGNIFICANT, UNKNOWN, Noise
from triage.compare.result import (GATE_BENCH, GATE_GPU, GATE_INVALID, GATE_KERNEL, GATE_NCU,
                                   GATE_NOTHING, GATE_NVTX,
                                   DiffOptions, Gate, GateCheck, KernelDiff, NsysDiff,
                                   SummaryChange)

if TYPE_CHECKING:  # a bench diff is made only for bench runs: its imports stay unloaded
    from triage.compare.bench import BenchDiff


def _check(kind: str, name: str, noise: Noise, limit: float, better: str = "lower",
           unit: str | None = None) -> GateCheck:
    """Worse by more than `limit` % in the direction opposite `better`, and beyond noise (its
    interval wholly on the worse side) or with noise unknown."""
    sign = 1 if better == "lower" else -1
    worse = noise.change_pct * sign if noise.change_pct is not None else None
    beyond = noise.significance == SIGNIFICANT and noise.ci_pct is not None \
        and min(c * sign for c in noise.ci_pct) > 0
    failed = worse is not None and worse > limit and (beyond or noise.significance == UNKNOWN)
    return GateCheck(kind, name, noise.change_pct, noise.ci_pct, noise.significance, failed,
                     better, unit, noise.min_detectable_pct)


def _range_name(entry: SummaryChange) -> str:
    """A range by its text, as the NVTX table above the gate names it (its domain aside)."""
    return str(entry.key["text"])


def gate_checks(kernels: Sequence[KernelDiff], nsys: NsysDiff | None,
                opts: DiffOptions, limit: float,
                bench: BenchDiff | None = None) -> tuple[GateCheck, ...]:
    """Every item the gate judges, the acceptance first: bench metrics (each in its better
    direction); then matched kernels; without --kernel, the NVTX ranges on both sides and the
    total GPU time of nsys runs with kernel time."""
    checks = [_check(GATE_BENCH, m.name, m.noise, limit, m.better, m.unit)
              for m in (bench.metrics if bench is not None else ())]
    checks += [_check(GATE_KERNEL, k.name, k.noise, limit)
               for k in kernels if k.match == "matched" and k.noise and not k.guessed]
    if nsys is not None and opts.kernel is None:
        checks += [_check(GATE_NVTX, _range_name(e), e.noise, limit)
                   for e in nsys.nvtx if e.change == "changed" and e.noise]
        gpu = nsys.gpu
        if gpu.noise and (gpu.a.kernel_ns or gpu.b.kernel_ns):
            checks.append(_check(GATE_GPU, "total GPU time", gpu.noise, limit))
    return tuple(checks)


def regression_gate(verdict: str, kernels: Sequence[KernelDiff], nsys: NsysDiff | None,
                    opts: DiffOptions, bench: BenchDiff | None = None) -> Gate | None:
    """The gate when --max-slowdown asks for it. It judges nothing under an invalid verdict,
    nor on ncu durations alone (nsys is None for an ncu pair) unless --gate-ncu asks: ncu
    times a reshaped execution (kernels replayed, clocks locked, caches flushed), which
    explains a change but cannot accept one."""
    limit = opts.max_slowdown_pct
    if limit is None:
        return None
    if verdict == "invalid":
        return Gate(limit, opts.kernel, False, (), reason=GATE_INVALID)
    if nsys is None and bench is None and not opts.gate_ncu:
        return Gate(limit, opts.kernel, False, (), reason=GATE_NCU)
    guesses = tuple((k.name, k.name_b or k.name) for k in kernels if k.guessed)
    checks = gate_checks(kernels, nsys, opts, limit, bench)
    if not checks:
        return Gate(limit, opts.kernel, False, (), reason=GATE_NOTHING, guesses=guesses)
    return Gate(limit, opts.kernel, True, checks, guesses=guesses)


def enforce(verdict: str, gate: Gate | None, strict: str | None) -> None:
    """The exit the gates ask for, once the output is written: `--strict` first (exit 3 when
    the verdict reaches it), then `--max-slowdown` (exit 4 when a time failed; the output names
    every one, the message the first)."""
    if strict and VERDICTS.index(verdict) >= VERDICTS.index(strict):
        raise ComparisonGate(f"verdict is {verdict} (--strict={strict})")
    if gate is not None and gate.reason == GATE_NCU:
        raise GateNotJudged("the gate judged nothing: ncu durations are attribution, not "
                            "acceptance; gate on nsys or benchmark runs (--gate-ncu judges "
                            "them anyway)")
    if gate is not None and gate.reason == GATE_NOTHING:
        raise GateNotJudged("the gate judged nothing: no kernel, NVTX range or GPU time was "
                            "measured in both runs" + (
                                "; kernels paired by a guess are not judged until --pair A=B "
                                "confirms them" if gate.guesses else ""))
    if gate is not None and gate.failed:
        first, more = gate.failed[0], len(gate.failed) - 1
        worse = "is slower" if first.better == "lower" else "fell"
        raise RegressionGate(f"Gate failed: {first.name} {worse} by more than "
                             f"{gate.max_slowdown_pct:g}% beyond noise"
                             + (f", and {more} more (listed above)" if more else ""))
