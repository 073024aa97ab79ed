"""`triage bench`: run the workload unprofiled and archive what it measured."""

from __future__ import annotations

import sys

import click

from triage.cli.options import output_options, pass_store, store_option, warn

DEFAULT_MAX_RUNS = 30  # --repeat auto: the most runs a series makes without --max-runs


def _repeat(value: str) -> int | None:
    """--repeat N or auto (None)."""
    if value == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise click.BadParameter(f"{value!r}: give a number of runs >= 1, or auto")
    return count


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.option("--repeat", default="5", show_default=True, metavar="N|auto",
              help="Measured runs; auto: run until the change against --against is told from "
              "noise (at most --max-runs, within --budget).")
@click.option("--warmup", default=0, show_default=True, type=click.IntRange(min=0), metavar="K",
              help="Runs made first and kept apart (marked warm-up, never compared).")
@click.option("--metric", "metrics", multiple=True, metavar="SPEC",
              help="A number the program prints, per run: NAME[:UNIT][:higher]=re:REGEX (the "
              "group v is the number) or NAME[:UNIT][:higher]=json:KEY (a JSON line). "
              "Repeatable; wall_time is always measured.")
@click.option("--against", metavar="RUN|LABEL",
              help="The bench run(s) to compare with as runs come in (--repeat auto stops once "
              "the first --metric, else wall_time, differs beyond noise).")
@click.option("--interleave", is_flag=True,
              help="Measure the --against run again (its recorded command, as `rerun` runs it) "
              "alternately with CMD, A B B A ..., archive both and compare them pair by pair: "
              "the machine's drift reaches both sides alike.")
@click.option("--yes", is_flag=True, help="--interleave: run the --against run's command "
              "without asking when it came from another store.")
@click.option("--max-runs", default=DEFAULT_MAX_RUNS, show_default=True,
              type=click.IntRange(min=1), metavar="N", help="--repeat auto: the most runs.")
@click.option("--budget", metavar="DURATION",
              help="Stop starting runs after DURATION (90s, 30m) in all.")
@click.option("--label", help="Point this label at the new run.")
@click.option("--note", help="Free text kept with the run.")
@click.option("--investigation", metavar="NAME",
              help="The investigation this run belongs to (inherited from --from when not given).")
@click.option("--from", "from_run", metavar="RUN", help="The run (e.g. an nsys capture) this "
              "bench follows up.")
@click.option("--shell", is_flag=True, help="Run the command through /bin/sh.")
@click.option("--redact", multiple=True, help="Extra regex of names to redact.")
@click.option("--timeout", default="6h", show_default=True, metavar="DURATION",
              help="End a run (and the bench) after DURATION (0: no limit).")
@output_options("text", "json")
@store_option
@pass_store
def bench(store, command, repeat, warmup, metrics, against, interleave, yes, max_runs, budget,
          label, note, investigation, from_run, shell, redact, timeout, out):
    """Run a workload unprofiled, K warm-ups then N times, and archive its wall time and the
    metrics it prints as a run of tool `bench`, with the provenance of `capture` (command,
    environment redacted, git state and patch, GPU, driver, clocks where nvidia-smi is there).
    `triage diff` of two bench runs compares each metric in its better direction, and
    `--max-slowdown` judges them first.

    Example: triage bench --repeat 10 --metric 'step_ms:ms=re:step (?P<v>[0-9.]+) ms' -- ./train

    On a machine whose load drifts, decide against a baseline measured alongside:
    triage bench --repeat auto --against base --interleave --metric SPEC -- ./train"""
    from triage.archive.bench import bench as run_bench
    from triage.compare.bench import BenchOutcome
    from triage.base.timeutil import parse_duration
    from triage.capture.bench import BenchRequest, MetricSpec
    from triage.capture.session import CaptureRequest
    from triage.cli.capture import ask_foreign
    from triage.views.bench import SIDES, render_bench, run_line

    count = _repeat(repeat)
    specs = tuple(MetricSpec.parse(m) for m in metrics)
    if count is None and not against:
        raise click.UsageError("--repeat auto needs --against RUN|LABEL: the runs it decides on")
    if interleave and not against:
        raise click.UsageError("--interleave needs --against RUN: the bench run to measure again")
    if yes and not interleave:
        raise click.UsageError("--yes answers --interleave's question about a baseline from "
                               "another store; use it with --interleave")
    looks = max_runs if count is None else 1
    request = BenchRequest(
        CaptureRequest(list(command), store=store.path, label=label, note=note, shell=shell,
                       from_run=from_run, redact_patterns=tuple(redact),
                       timeout=parse_duration(timeout) or None),
        specs, repeat=count or max_runs, warmup=warmup, auto=count is None,
        budget=parse_duration(budget) if budget else None, investigation=investigation)
    if interleave:
        from triage.compare.interleave import bench_interleaved

        outcome = bench_interleaved(
            request, against, looks,
            lambda side, n, s: click.echo(run_line(n, s, warmup, SIDES[side]), err=True), warn,
            yes=yes, confirm=ask_foreign if sys.stdin.isatty() else None)
        out.show(outcome, render_bench)
        return
    check = None
    if against:
        from triage.compare.bench import against_check

        check = against_check(store.open(), against, specs[0].name if specs else None, looks)
    result = run_bench(request, lambda n, s: click.echo(run_line(n, s, warmup), err=True),
                       warn, check.decided if check is not None else None)
    out.show(BenchOutcome(result, check), render_bench)
