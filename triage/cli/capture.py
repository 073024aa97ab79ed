"""`triage capture`, `rerun` and `env`: running a profiler and recording how it ran."""

from __future__ import annotations

import os
import sys

import click

from triage.cli.options import output_options, pass_store, runs_named, store_option, warn
from triage.views import text as textview

DEFAULT_TIMEOUT = "6h"  # ends a hung profiler; docs/capture.md states it


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.option("--label", help="Point this label at the new run.")
@click.option("--note", help="Free text kept with the run.")
@click.option("--shell", is_flag=True, help="Run the command through /bin/sh.")
@click.option("--group", help="Tag the run as one rank of a group (srun/mpirun on every rank).")
@click.option("--from", "from_run", help="The run (e.g. an nsys run) this capture follows up.")
@click.option("--investigation", metavar="NAME", help="The investigation this run belongs to "
              "(inherited from --from when not given; `triage bench` takes it too).")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS", help="nsys used to export the report.")
@click.option("--redact", multiple=True, help="Extra regex of names to redact.")
@click.option("--repeat", default=1, type=click.IntRange(min=1), metavar="N",
              help="Run the capture N times, labelled LABEL/1 .. LABEL/N and grouped under "
              "LABEL (needs --label; the profiler must be told to overwrite its report: "
              "ncu -f, nsys --force-overwrite true). A failed try stays out of the group and the "
              "series goes on. Compare with: triage diff 'LABEL/*' ...")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, metavar="DURATION",
              help="End the profiler, the processes it started and its temporary reports after "
              "DURATION (90s, 30m, 6h; 0: no limit) and record the try as timed out.")
@output_options("text", "json")
@store_option
@pass_store
def capture(store, command, label, note, shell, group, from_run, investigation, nsys, redact,
            repeat, timeout, out):
    """Run `ncu ...` or `nsys profile ...` as given and archive what it wrote, with everything
    needed to reproduce it: argv, versions, --list-sections, settings, GPUs and clocks, git state.

    Example: triage capture -- nsys profile -o step ./train.py"""
    from triage.archive.captured import capture_series, check_series
    from triage.base.timeutil import parse_duration
    from triage.capture.session import CaptureRequest
    from triage.views.progress import CaptureOutput, progress_after
    from triage.views.runs import archive_line, archive_lines

    check_series(label, repeat)  # before a report named by --from is archived
    if from_run:  # a report path: its run (archived now if need be)
        from_run = runs_named(store, [from_run])[0]
    request = CaptureRequest(list(command), store=store.path, label=label, note=note,
                             shell=shell, group=group, from_run=from_run,
                             investigation=investigation, nsys=nsys,
                             redact_patterns=tuple(redact),
                             timeout=parse_duration(timeout) or None)
    stream = out.stream()
    results = capture_series(
        request, repeat, lambda: CaptureOutput(stream, stream.isatty() and not out.json,
                                               os.path.basename(command[0])),
        on_warning=warn, tick_after=progress_after())
    out.show(results[0] if repeat == 1 else results,
             archive_line if repeat == 1 else archive_lines)


@click.command()
@click.argument("run")
@click.option("--label", help="Point this label at the new run (NAME/1 .. NAME/N with --repeat).")
@click.option("--repeat", default=1, type=click.IntRange(min=1), metavar="N",
              help="Run it N times: the rerun side's noise is measured over them.")
@click.option("--at-commit", "mode", flag_value="at_commit",
              help="Run in a temporary worktree of the recorded commit with its stored patch.")
@click.option("--here", "mode", flag_value="here", default=True,
              help="Run in the current tree (the default); say how it differs from the record.")
@click.option("--build", metavar="CMD", help="Run CMD (a shell command) in that tree first.")
@click.option("--strict", is_flag=True, help="Refuse to run when the verdict would be invalid.")
@click.option("--threshold", default=1.0, show_default=True, type=click.FloatRange(min=0),
              metavar="PCT", help="A change beyond noise smaller than PCT % still reproduces.")
@click.option("--yes", is_flag=True,
              help="Run the command of a run that came from another store without asking.")
@output_options("text", "json")
@store_option
@pass_store
def rerun(store, run, label, repeat, mode, build, strict, threshold, yes, out):
    """Re-execute a run made by `triage capture` and say whether it reproduced: this machine
    graded against the record first (the drift table of `diff`), then the recorded command in
    its working directory with its recorded environment (redacted values: from this one), its
    outputs in a fresh directory; the new runs (rerun_of: RUN) diffed against the original.

    A run that came from another store (import, pull, push) runs that store's command: it is
    shown, and run only with --yes or a yes on a terminal.

    Example: triage rerun base --at-commit --repeat 5 --build make"""
    from triage.compare.reproduce import RerunRequest
    from triage.compare.reproduce import rerun as run_rerun
    from triage.views.progress import CaptureOutput
    from triage.views.rerun import render_plan, render_rerun, rerun_json

    request = RerunRequest(run, store=store.path, label=label, repeat=repeat, mode=mode,
                           build=build, strict=strict, threshold_pct=threshold, yes=yes,
                           confirm=ask_foreign if sys.stdin.isatty() else None)
    stream = out.stream()
    shown = CaptureOutput(stream, stream.isatty() and not out.json, "rerun")
    try:
        result = run_rerun(request,
                           on_plan=lambda plan, tree: click.echo(render_plan(plan, tree),
                                                                 err=out.json),
                           on_output=shown, on_warning=warn)
    finally:
        shown.close()
    out.write(textview.to_json(rerun_json(result)) if out.json else render_rerun(result, run))


def ask_foreign(foreign) -> bool:
    """The question `rerun` asks on a terminal before it runs another store's command."""
    from triage.views.rerun import foreign_question

    return click.confirm(foreign_question(foreign), default=False, err=True)


@click.command(name="env")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS", help="nsys to check instead of PATH's.")
@output_options("text", "json")
def env_command(nsys, out):
    """Check this machine before a capture: GPUs, clocks, counter permissions, DCGM, tools."""
    from triage.capture.environment import environment_check
    from triage.views.env import render_env

    out.show(environment_check(nsys=nsys), render_env)
