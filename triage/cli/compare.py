"""`triage diff`, `report`, `top`, `explain` and `history`: reading runs against each other."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click

from triage.base.errors import UsageError
from triage.cli.options import (Output, output_options, pass_store, runs_and_files, runs_named,
                                store_option, width_options)
from triage.views import text as textview

if TYPE_CHECKING:
    from triage.compare.result import DiffResult


class GateChoice(click.Choice):
    """--strict's optional value: a bare `--strict` before the runs takes the first run as its
    value (click's rule for optional values), so that mistake gets its own hint."""

    def fail(self, message: str, param=None, ctx=None):
        super().fail(f"{message.rstrip('.')}; a bare --strict goes after the runs (or write "
                     "--strict=invalid)", param, ctx)


def _pairs(_ctx, _param, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--pair A=B as (A, B): split at the first '=' (a kernel name seldom holds one)."""
    pairs = []
    for value in values:
        a, sep, b = value.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise click.BadParameter(f"{value!r} is not A=B (kernel A of run A, kernel B of run "
                                     "B: --pair 'naive_gemm=sgemm_coalesced')")
        pairs.append((a.strip(), b.strip()))
    return tuple(pairs)


def diff_options(command):
    """The comparison options `diff` and `report` share (both compute `diff_runs`)."""
    options = [
        click.option("--section", "sections", multiple=True,
                     help="Only this section (id or name); repeatable."),
        click.option("--kernel", help="Only kernels whose name matches this regex."),
        click.option("--metric", help="Only metrics whose raw name or label matches this "
                     "regex."),
        click.option("--all", "show_all", is_flag=True, help="Show unchanged metrics too."),
        click.option("--threshold", default=1.0, show_default=True,
                     type=click.FloatRange(min=0),
                     help="Relative change (%) below which a metric counts as unchanged."),
        click.option("--strict", type=GateChoice(["invalid", "caution"]), is_flag=False,
                     flag_value="invalid", default=None,
                     help="Exit 3 when the verdict is invalid (--strict) or caution or worse "
                     "(--strict=caution); output is written either way."),
        click.option("--raw-names", is_flag=True,
                     help="Name ncu metrics by their raw names (gpu__time_duration.sum), not the "
                     "labels their sections show (Duration); --json always has both."),
        click.option("--pair", "pairs", multiple=True, metavar="A=B", callback=_pairs,
                     help="Compare kernel A of run A with kernel B of run B (whole or short "
                     "names), confirmed: the gate judges it; repeatable."),
        click.option("--no-rename-pairing", "rename_pairing", is_flag=True, default=True,
                     flag_value=False,
                     help="Never pair kernels of different names by launch order (a guess, "
                     "shown with its evidence and never judged by the gate)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@diff_options
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="Kernels shown in text output.")
@click.option("--max-slowdown", "max_slowdown", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 4 when a matched kernel, an NVTX range or the total GPU time is slower "
              "by more than PCT % and not within noise (--kernel narrows it to kernels). ncu "
              "durations are not judged: exit 5 on an ncu pair.")
@click.option("--gate-ncu", is_flag=True,
              help="Let --max-slowdown judge ncu kernel durations all the same (they come from a "
              "replayed, clock-locked, cache-flushed execution: attribution, not acceptance).")
@click.option("--junit", "junit", type=click.Path(dir_okay=False), metavar="FILE",
              help="With --max-slowdown, also write the gate as JUnit XML to FILE (for CI test "
              "reports): one testcase per judged time, failures with change, interval and "
              "threshold.")
@width_options
@output_options("text", "json", "md", to_file=True,
                hint="HTML review pages come from `triage report A B -o FILE.html`")
@store_option
@pass_store
def diff(store, run_a, run_b, sections, kernel, metric, show_all, threshold, strict, raw_names,
         pairs, rename_pairing, limit, max_slowdown, gate_ncu, junit, width, out):
    """Compare two runs: the drift verdict first (comparable / caution / invalid), then kernels,
    section by section, and for nsys runs the kernel ranking, NVTX, memory ops and GPU idle time.
    ncu metrics go by the labels their sections show (Duration; --raw-names: by raw name); a
    section only one run collected is one line.

    A side may be several runs: RUN,RUN,... or a quoted label glob ('before/*'); every number
    is then the median over the side's runs, and each change carries the noise measured over
    the runs (one run: over its launches). inv:NAME is the bench runs of an investigation
    (--investigation), profiled by its newest nsys run. A RUN may be a report file (`triage
    diff a.ncu-rep b.ncu-rep`): its run, found by hash or archived now.

    Kernels match by name; kernels left over on both sides in equal number pair by launch
    order, a guess shown with its evidence and never judged by the gate (not made where their
    grid, block or duration differ over 100x). --pair A=B pairs by hand, confirmed.

    A run accepted with `triage accept` between A and B (same workload) is the baseline the
    gate judges B against instead, and the output names the acceptance.

    Exit codes: 0 when the diff ran (and the gate, if asked, passed); with --strict, 3 when the
    verdict is invalid; with --strict=caution, 3 when it is caution or invalid; with
    --max-slowdown PCT, 4 when a time is slower by more than PCT beyond noise, 5 when the diff
    holds only ncu durations, which the gate does not accept on without --gate-ncu, or no time
    was measured in both runs: nothing to judge (--strict is checked first; an invalid verdict
    is not judged)."""
    from triage.compare.diff import diff_runs
    from triage.compare.gate import enforce
    from triage.compare.result import DiffOptions

    if junit and max_slowdown is None:
        raise UsageError("--junit writes the gate's verdicts: give --max-slowdown PCT too")
    opts = DiffOptions(sections=tuple(sections), kernel=kernel, metric=metric,
                       show_all=show_all, threshold_pct=threshold, max_slowdown_pct=max_slowdown,
                       gate_ncu=gate_ncu, pairs=pairs, rename_pairing=rename_pairing)
    (run_a, run_b), files = runs_and_files(store, [run_a, run_b], sides=True)
    result = diff_runs(store.open(), run_a, run_b, opts, files=(files[0], files[1]))
    out.write(_rendered_diff(result, out, limit, raw_names, width))
    if junit:
        from triage.views.junit import render_junit

        Output("xml", junit).write_bytes(render_junit(result))
    enforce(result.verdict, result.gate, strict)


def _rendered_diff(result: DiffResult, out: Output, limit: int, raw_names: bool,
                   width: int | None) -> str:
    if out.json:
        return textview.to_json(result.to_json())
    if out.fmt == "md":
        from triage.views.report import render_markdown

        return render_markdown([result], raw_names=raw_names)
    from triage.views.diff import render_diff

    return render_diff(result, limit=limit, layout=textview.Layout.of(width), raw_names=raw_names)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@diff_options
@output_options("html", "md", to_file=True)
@store_option
@pass_store
def report(store, runs, sections, kernel, metric, show_all, threshold, strict, raw_names, pairs,
           rename_pairing, out):
    """Review report of RUN B against RUN A: verdict and drift, kernels by time changed, charts,
    sections and rules, provenance. With more runs (A B C ...), a series: each against A.
    html: a self-contained page with charts; md: GitHub Markdown for a PR comment.

    The numbers are those of `triage diff` with the same options. Exit codes: 0 written; with
    --strict, 3 when the worst verdict reaches the gate."""
    from triage.compare.drift import worst_verdict
    from triage.compare.gate import enforce
    from triage.compare.result import DiffOptions
    from triage.views.report import diff_series, render

    # Every metric is fetched (charts draw unchanged ones too); --all only decides the listing.
    opts = DiffOptions(sections=tuple(sections), kernel=kernel, metric=metric, show_all=True,
                       threshold_pct=threshold, pairs=pairs, rename_pairing=rename_pairing)
    refs, files = runs_and_files(store, list(runs), sides=True)
    diffs = diff_series(store.open(), refs, opts, files)
    out.write(render(diffs, out.fmt, show_unchanged=show_all, raw_names=raw_names),
              newline=False)
    enforce(worst_verdict(d.verdict for d in diffs), None, strict)


@click.command()
@click.argument("run")
@click.option("-k", "k", default=3, show_default=True, type=click.IntRange(min=0),
              help="Kernels to suggest ncu commands for.")
@width_options
@output_options("text", "json")
@store_option
@pass_store
def top(store, run, k, width, out):
    """Where an nsys run spends GPU time: kernels by total time with cumulative share, GPU idle
    gaps and what the host did meanwhile, copies serialised against kernels, NCCL overlap, NVTX
    ranges; then the ncu commands that profile one typical launch of each of the top K kernels.
    A run with no kernels shows the host's NVTX ranges, OS runtime and CUDA API calls instead."""
    from triage.compare.rundata import RunData
    from triage.compare.top import top_run
    from triage.views.top import render_top

    run = runs_named(store, [run])[0]
    out.show(top_run(RunData(store.open(), run), k=k),
             functools.partial(render_top, layout=textview.Layout.of(width)))


@click.command()
@click.argument("run")
@click.option("--kernel", help="Only kernels whose name matches this regex.")
@width_options
@output_options("text", "json")
@store_option
@pass_store
def explain(store, run, kernel, width, out):
    """Why each kernel of an ncu run is slow, in a fixed order: 1 compute vs memory throughput,
    2 memory efficiency, 3 occupancy, 4 issue slots then stalls, 5 conclusion (memory-bound,
    latency-bound, sync/serialisation-bound, compute-bound) with what to inspect and the usual
    fix. Every statement cites its metric values; missing sections are named, never guessed.
    The bound is ncu's own SOLBottleneck rule's, per launch; a kernel's launches that differ in
    grid, block or bound are explained apart."""
    from triage.compare.explain import explain_run
    from triage.compare.rundata import RunData
    from triage.views.explain import render_explain

    run = runs_named(store, [run])[0]
    out.show(explain_run(RunData(store.open(), run), kernel=kernel),
             functools.partial(render_explain, layout=textview.Layout.of(width)))


@click.command()
@click.argument("selector")
@click.option("--kernel", help="Follow the launches of the kernels whose name matches this "
              "regex (with --metric: whose metric to follow).")
@click.option("--nvtx", help="Follow the NVTX ranges of this text (nsys runs).")
@click.option("--metric", help="Follow this ncu metric (raw name, e.g. "
              "dram__throughput.avg.pct_of_peak_sustained_elapsed) over the launches; of "
              "`triage bench` runs, this bench metric (wall_time, a --metric NAME) over its runs.")
@click.option("--workload", "workload_of", is_flag=True,
              help="SELECTOR is one run: follow every run of its tool and workload (program "
              "and arguments).")
@click.option("--min-step", "min_step", default=5.0, show_default=True,
              type=click.FloatRange(min=0), metavar="PCT",
              help="Smallest step named, in % of the level before it.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the HTML page to FILE (same as --format html -o FILE).")
@width_options
@output_options("text", "json", "md", "html", to_file=True)
@store_option
@pass_store
def history(store, selector, kernel, nvtx, metric, workload_of, min_step, html_file, width,
            out):
    """One kernel, NVTX range, ncu metric or bench metric across a series of runs, one row per
    run in capture order (report creation time, then archive time): its median over the run's
    launches (a bench run: over its runs of the workload) with n, IQR and min..max, the commit,
    and the drift from the run before.

    SELECTOR is RUN, RUN,RUN,... or a quoted label glob ('nightly/*'); with --workload, one
    run whose tool and workload (program and arguments) the series shares.

    Boundaries are drift fields that differ from the run before with severity invalidates or
    caution (GPU, clock control, profiler version, driver major, ...). Steps: Pettitt's
    change-point test applied by binary segmentation (permutation p <= 5%), each step kept when
    the Hodges-Lehmann shift between the levels has a 95% interval excluding 0 and is at least
    --min-step % (one value per run); never across an invalidating boundary."""
    from triage.compare.history import Measure
    from triage.compare.history import history as history_of
    from triage.views.history import render_history_as

    if html_file:
        if out.path or out.fmt not in ("text", "html"):
            raise UsageError("--html FILE writes the page; give it alone, or --format and -o")
        out = Output("html", html_file)
    result = history_of(store.open(), selector, Measure(kernel, nvtx, metric),
                        workload_of=workload_of, min_step_pct=min_step)
    out.write(render_history_as(result, out.fmt, textview.Layout.of(width)))


@click.command()
@output_options("text", "json")
@store_option
@pass_store
def versions(store, out):
    """What this store's runs span (ncu and nsys versions, drivers, CUDA, GPUs), which pairs of
    ncu versions the metric map covers (metrics paired across a rename) and what stays
    incomparable. Reads the run catalog only."""
    from triage.compare.versions import store_versions
    from triage.views.versions import render_versions

    out.show(store_versions(store.open()), render_versions)
