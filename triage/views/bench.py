"""Wording of `triage bench` and of the benchmark part of `diff`: each metric's median per side,
its change with the interval, and the smallest change the samples could tell from noise."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from triage.views import text as textview

if TYPE_CHECKING:
    from triage.capture.bench import BenchSample
    from triage.compare.bench import BenchDiff, BenchOutcome
    from triage.compare.noise import Noise

STOPPED = {"repeat": "the runs asked for", "decided": "decided against {against}",
           "max_runs": "--max-runs reached, not decided", "budget": "--budget spent, not decided"}


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value in its own unit (seconds of wall time as ms or s)."""
    if value is None:
        return "-"
    if unit == "s" and abs(value) < 1:
        return f"{value * 1000:.4g} ms"
    return f"{value:.4g}{' ' + textview.printable(unit) if unit else ''}"


def run_line(number: int, samples: list[BenchSample], warmup: int) -> str:
    """One run of the series as it ends (a progress line on stderr)."""
    which = f"warm-up {number + warmup + 1}/{warmup}" if number < 0 else f"run {number}"
    values = "  ".join(f"{s.metric} {fmt_value(s.value, s.unit)}" for s in samples)
    return f"bench: {which}: {values}"


def detectable_line(noise: Noise, runs: int) -> str:
    """'with 7 runs a side, changes under 3.1% cannot be told from noise'."""
    if noise.min_detectable_pct is None:
        return (f"with {runs} run(s) the noise is unknown: {noise.needed} a side are the fewest "
                "for an interval")
    return (f"with {noise.a.n if noise.a else 0} vs {runs} runs, changes under "
            f"{noise.min_detectable_pct:.1f}% cannot be told from noise")


def render_bench(outcome: BenchOutcome) -> str:
    """The archived run, each metric's median and spread over the measured runs, how the series
    ended, and (with --against) the change and what the samples could detect."""
    from triage.views.runs import archive_line

    run, against = outcome.run, outcome.against
    measured = run.measured
    lines = [archive_line(run.result)]
    names = dict.fromkeys(s.metric for s in measured.samples)
    for name in names:
        values = measured.values(name)
        unit = next(s.unit for s in measured.samples if s.metric == name)
        median = fmt_value(statistics.median(values), unit)
        lines.append(f"  {textview.printable(name)}: median {median}"
                     f" ({len(values)} runs, {fmt_value(min(values), unit)}.."
                     f"{fmt_value(max(values), unit)})")
    stopped = STOPPED[measured.stopped].format(against=against.ref if against else "")
    lines.append(f"  stopped: {stopped}")
    if against is not None:
        noise = against.noise(measured)
        lines.append(f"  {against.metric} against {textview.printable(against.ref)}: "
                     f"{textview.fmt_noise(noise)}")
        if noise.min_detectable_pct is None:
            lines.append(f"  {detectable_line(noise, measured.runs)}")
    return "\n".join(lines)


def bench_lines(bench: BenchDiff) -> list[str]:
    """The benchmark part of a diff: each metric both sides measured, B against A."""
    lines = ["", "benchmark (median over each side's measured runs; the acceptance):"]
    for metric in bench.metrics:
        noise = metric.noise
        medians = (fmt_value(noise.a.median if noise.a else None, metric.unit),
                   fmt_value(noise.b.median if noise.b else None, metric.unit))
        lines += [f"  {textview.printable(metric.name)} ({metric.better} is better): "
                  f"A {medians[0]}, B {medians[1]}", f"      {textview.fmt_noise(noise)}"]
    for side, names in (("A", bench.only_a), ("B", bench.only_b)):
        if names:
            lines.append(f"  only {side} measured: {textview.printable(', '.join(names))}")
    return lines
