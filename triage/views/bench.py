"""Wording of `triage bench` and of the benchmark part of `diff`: each metric's median per side,
its change with the interval, and the smallest change the samples could tell from noise."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from triage.compare.paired import PAIRS
from triage.views import text as textview

if TYPE_CHECKING:
    from triage.capture.bench import BenchMeasured, BenchSample
    from triage.compare.accounts import Accounting, Accounts
    from triage.compare.bench import BenchDiff, BenchOutcome
    from triage.compare.noise import Noise
    from triage.views.text import Layout

NAME_ROOM = 40  # a kernel name's columns in the accounts sentence at 100; wider terminals more
SIDES = ("baseline", "candidate")  # bench --interleave's sides, in compare/interleave.py's order
STOPPED = {"repeat": "the runs asked for", "decided": "decided against {against}",
           "max_runs": "--max-runs reached, not decided", "budget": "--budget spent, not decided"}


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value in its own unit (seconds of wall time as ms or s)."""
    if value is None:
        return "-"
    if unit == "s" and abs(value) < 1:
        return f"{value * 1000:.4g} ms"
    return f"{value:.4g}{' ' + textview.printable(unit) if unit else ''}"


def run_line(number: int, samples: list[BenchSample], warmup: int, side: str = "") -> str:
    """One run of the series as it ends (a progress line on stderr); `side`: which side of an
    interleaved series ran it."""
    which = f"warm-up {number + warmup + 1}/{warmup}" if number < 0 else f"run {number}"
    values = "  ".join(f"{s.metric} {fmt_value(s.value, s.unit)}" for s in samples)
    return f"bench: {side + ' ' if side else ''}{which}: {values}"


def detectable_line(noise: Noise, runs: int) -> str:
    """'with 7 vs 7 runs, changes under 3.1% cannot be told from noise' (interleaved: 'with 7
    pairs')."""
    paired = noise.samples == PAIRS
    if noise.min_detectable_pct is None:
        fewest = "pairs" if paired else "a side"
        return (f"with {runs} run(s) the noise is unknown: {noise.needed} {fewest} are the "
                "fewest for an interval")
    counts = f"{runs} interleaved pairs" if paired else \
        f"{noise.a.n if noise.a else 0} vs {runs} runs"
    return (f"with {counts}, changes under {noise.min_detectable_pct:.1f}% cannot be told "
            "from noise")


def render_bench(outcome: BenchOutcome) -> str:
    """The archived run, each metric's median and spread over the measured runs, how the series
    ended, and (with --against) the change and what the samples could detect."""
    from triage.views.runs import archive_line

    run, against = outcome.run, outcome.against
    measured = run.measured
    lines = [archive_line(run.result), *_median_lines(measured)]
    if outcome.baseline is not None:
        base = outcome.baseline.result.record
        rerun_of = base.capture.rerun_of if base.capture else None
        lines.append(f"  baseline, measured alternately with it: {textview.short_id(base.id)} "
                     f"(rerun of {textview.short_id(rerun_of or '')})")
        lines += [f"  {line}" for line in _median_lines(outcome.baseline.measured)]
    stopped = STOPPED[measured.stopped].format(against=against.ref if against else "")
    lines.append(f"  stopped: {stopped}")
    noise = outcome.noise()
    if against is not None and noise is not None:
        lines.append(f"  {against.metric} against {textview.printable(against.ref)}"
                     f"{' (interleaved, pair by pair)' if against.interleaved else ''}: "
                     f"{textview.fmt_noise(noise, detectable=False)}")
        if noise.significance != "significant":
            lines.append(f"  {detectable_line(noise, measured.runs)}")
    return "\n".join(lines)


def _median_lines(measured: BenchMeasured) -> list[str]:
    """Each metric's median and range over the series' measured runs."""
    lines = []
    for name in dict.fromkeys(s.metric for s in measured.samples):
        values = measured.values(name)
        unit = next(s.unit for s in measured.samples if s.metric == name)
        lines.append(f"  {textview.printable(name)}: median "
                     f"{fmt_value(statistics.median(values), unit)} ({len(values)} runs, "
                     f"{fmt_value(min(values), unit)}..{fmt_value(max(values), unit)})")
    return lines


def bench_lines(bench: BenchDiff) -> list[str]:
    """The benchmark part of a diff: each metric both sides measured, B against A."""
    lines = ["", "benchmark (median over each side's measured runs; the acceptance):"]
    if any(m.noise.samples == PAIRS for m in bench.metrics):
        lines.append("  measured interleaved (bench --interleave): each change tested pair by "
                     "pair, run i of A with run i of B")
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


BASIS_WORDS = {"gpu_busy": ("GPU busy time", "gaps between kernels and host time"),
               "nvtx": ("time inside NVTX ranges", "host time outside every NVTX range")}
DISAGREE_WORDS = {
    "slower_explained_faster": "the benchmark got slower while the profile got faster",
    "faster_explained_slower": "the benchmark got faster while the profile got slower",
    "flat_explained_changed": "the benchmark is flat while the profile changed beyond its noise"}


def accounts_lines(found: Accounts, layout: Layout) -> list[str]:
    """After the benchmark: how much of each metric's change its profiles account for, kernel
    names cut where `layout` cuts (a terminal: to NAME_ROOM columns at 100, the columns more or
    fewer going to the name; whole in a pipe, where `| grep` must find them)."""
    a, b = found.profile_a, found.profile_b
    busy, rest = BASIS_WORDS[a.basis]
    lines = ["", f"what the profile accounts for (nsys {textview.short_id(a.run_id)} vs "
             f"{textview.short_id(b.run_id)}; points of the benchmark, of A's traced span "
             f"{textview.fmt_ns(a.span_ns)}):"]
    for item in found.metrics:
        lines += _accounting_lines(item, busy, rest, layout)
    return lines


def _accounting_lines(item: Accounting, busy: str, rest: str, layout: Layout) -> list[str]:
    change = f"{item.bench_pct:+.1f}" if item.bench_pct is not None else "?"
    head = (f"  {textview.printable(item.metric)} {change}% "
            f"{textview.fmt_interval(item.bench_ci_pct)}: {busy} explains "
            f"{item.explained_points:+.1f} of those {change} points")
    if item.within_noise:
        head += " (within the benchmark's noise)"
    room = max(NAME_ROOM + layout.width - textview.PIPED_WIDTH, 20)  # as diff's kernel names
    parts = "; ".join(f"{layout.fit(p.name, room)} "
                      f"{textview.fmt_pct(p.change_pct)} explains {p.points:+.1f}"
                      for p in item.parts if abs(p.points) >= 0.05)
    lines = [head] + ([f"    {parts}"] if parts else [])
    if item.unexplained_points is not None:
        sign = "+" if item.outside_delta_ns >= 0 else "-"
        lines.append(f"    {item.unexplained_points:+.1f} points unexplained ({rest}; inside "
                     f"the traced span that time changed by {sign}"
                     f"{textview.fmt_ns(abs(item.outside_delta_ns))})")
    if item.disagrees:
        lines.append(f"    !! DISAGREE: {DISAGREE_WORDS[item.disagrees]}")
    return lines


def bench_rows(bench: BenchDiff) -> list[dict]:
    """The benchmark panel of the review page (HTML and Markdown): one row per metric, worded."""
    rows = []
    for metric in bench.metrics:
        noise = metric.noise
        rows.append({
            "name": metric.name, "better": metric.better,
            "a": fmt_value(noise.a.median if noise.a else None, metric.unit),
            "b": fmt_value(noise.b.median if noise.b else None, metric.unit),
            "runs": f"{noise.a.n if noise.a else 0} vs {noise.b.n if noise.b else 0}",
            "change": textview.fmt_noise(noise),
            "worse": (metric.worse_pct or 0) > 0 and noise.significance == "significant"})
    return rows


def accounts_text(found: Accounts) -> list[str]:
    """What the profile accounts for, as the review page lists it under the benchmark (a page:
    names whole)."""
    return [line.strip() for line in accounts_lines(found, textview.Layout.of(None))
            if line.strip()]
