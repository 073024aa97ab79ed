"""The `triage` command line: parse arguments, call one library function, render.

This is the only place where a TriageError becomes a message and an exit code:
0 ok, 1 error, 2 usage, 3 comparison gate (`diff --strict`), 4 regression gate
(`diff --max-slowdown`). Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import click

from triage.base.version import __version__
from triage.views import text as textview
from triage.views.progress import status_line
from triage.base.errors import TriageError, UsageError
from triage.base.units import fmt_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from triage.archive.ingest import ArchiveResult
    from triage.archive.model import RunRecord
    from triage.archive.listing import RunList
    from triage.archive.store import Store
    from triage.compare.result import DiffResult

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3


class TriageGroup(click.Group):
    """A click group that turns TriageErrors into one-line messages with their exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TriageError as exc:
            # One line whatever the message holds (a file name with a newline or an ESC).
            click.echo(f"triage: error: {textview.printable(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(EXIT_OK)


def _store_or_group_store(ctx: click.Context, _param, value):
    """`triage ls --store X` or `triage --store X ls`; else Store.open uses $TRIAGE_STORE.

    The path is not checked here: Store.open judges it, whichever gave it, so one mistake
    (a file, a foreign folder) gets one message and one exit code."""
    if value == "":
        raise click.BadParameter("an empty path (an unset variable?); give the store directory")
    return value or (ctx.find_root().params.get("store") if ctx.parent else None)


STORE_PATH = click.Path(readable=False)  # no checks: see _store_or_group_store

store_option = click.option(
    "--store", "store", type=STORE_PATH, callback=_store_or_group_store,
    help="Store directory (default: $TRIAGE_STORE, else the per-user data directory).")


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="triage")
@click.option("--store", "store", type=STORE_PATH, callback=_store_or_group_store,
              help="Store directory for any command (default: $TRIAGE_STORE, else the per-user "
              "data directory).")
def cli(store):
    """Archive Nsight Systems / Nsight Compute reports with how they were captured, and compare
    them weeks later, loudly flagging version, GPU and clock drift.

    Exit codes: 0 ok, 1 error, 2 usage, 3 comparison gate (diff --strict), 4 regression gate
    (diff --max-slowdown)."""


def main() -> None:
    """The `triage` command; click ends every command with SystemExit."""
    try:
        cli(prog_name="triage")
    except SystemExit as done:
        _exit(done.code)


def _exit(code: object) -> NoReturn:
    """Exit with `code`, skipping the interpreter's teardown when nothing is left to wait for.

    Freeing pyarrow's, NumPy's and DuckDB's module state at exit takes 0.03-0.06 s, a tenth of
    a query over 100,000 runs and more than issue 20 allows an ncu archive over a bare script.
    Nothing of triage's needs that teardown: every write is closed (and renamed into place)
    before its command returns, and triage registers no atexit handler. Python's ordinary exit
    is taken, as before, when a thread (not a daemon) is still running, the exit code is a
    message, a profiler or tracer (cProfile, coverage) would write at exit, or the output
    cannot be flushed (a closed pipe); C's stdio buffers (a native library's printf) are
    flushed as exit() would."""
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others or not (code is None or isinstance(code, int)) or sys.getprofile() is not None \
            or sys.gettrace() is not None:
        raise SystemExit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, ValueError, AttributeError, TypeError):  # ValueError: a closed stream;
        # TypeError: no C library to load by None (Windows), so no stdio of its to flush
        raise SystemExit(code) from None
    os._exit(code or 0)


def _print(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    """--json prints the data itself; otherwise `render` lays out the same data for people, so
    the two never disagree on what a command found."""
    click.echo(textview.to_json(data) if as_json else render(data))


# -- archive / ls / show / label / query -------------------------------------------------------


@cli.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=True, readable=False))
@click.option("--label", help="Point this label at the run (like a git tag).")
@click.option("--note", help="Free text kept with the run.")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS",
              help="nsys executable used to export .nsys-rep/.qdrep (default: nsys on PATH).")
@click.option("--redact", multiple=True, help="Extra regex of environment/argument names to "
              "redact (also $TRIAGE_REDACT, comma-separated).")
@click.option("--repair", is_flag=True, help="Rewrite every object of a run already archived "
              "from the report (default: only those missing or of the wrong size).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of the runs.")
@store_option
def archive(reports, label, note, nsys, redact, repair, as_json, store):
    """File existing reports (.ncu-rep, .nsight-cuprof-report, .nsys-rep, .qdrep, .sqlite).

    One run per report; archiving the same file again finds the same run and adds no bytes,
    but rewrites its objects that are missing or damaged (`triage verify` names them)."""
    from triage.archive.ingest import archive_files

    with status_line(as_json) as progress:
        results = archive_files(store, list(reports), label=label, note=note, nsys=nsys,
                                redact_patterns=tuple(redact), repair=repair, progress=progress)
    _print([_archive_json(r) for r in results], as_json,
           lambda infos: "\n".join(map(_archive_line, infos)))


def _archive_json(result: ArchiveResult) -> dict[str, Any]:
    from triage.archive.model import RunRecord

    record = RunRecord.from_manifest(result.id, result.manifest)
    return {"id": result.id, "new": result.new, "repaired": result.repaired, "tool": record.tool,
            "tool_version": record.tool_version, "gpu": record.gpu_name,
            "kernels": record.kernels, "reports": [r.name for r in record.reports],
            "notices": list(record.notices)}


def _one_statement(words: tuple[str, ...]) -> str:
    """The SQL: one quoted argument, or the words the shell split it into, joined by spaces
    (`SQL...` in --help). Unknown options reach here as words (an SQL comment may open the
    query), so a word like `--jsn` or `-j` is a mistyped option, not SQL; `-1` and `--`
    alone are SQL."""
    mistyped = [w for w in words if _OPTION_LIKE.match(w)]
    if mistyped:
        raise UsageError(f"no such option: {mistyped[0]}; `triage query --help` lists them")
    return " ".join(words)


_OPTION_LIKE = re.compile(r"^--?[A-Za-z]\S*$")


def _archive_line(info: dict) -> str:
    """One archived run as `triage archive` lists it, from its _archive_json() record."""
    state = "new" if info["new"] else "repaired" if info["repaired"] else "already archived"
    version = info["tool_version"] or "version unknown"
    kernels = f"{info['kernels']} kernel" + ("" if info["kernels"] == 1 else "s")
    line = (f"{textview.short_id(info['id'])}  {info['tool']} {version}  "
            f"{info['gpu'] or 'GPU unknown'}  {kernels}  "
            f"{textview.printable(', '.join(info['reports']))}  ({state})")
    return line + "".join(f"\n    note: {n}" for n in info["notices"])


def _runs_named(store, refs: list[str], sides: bool = False) -> list[str]:
    """RUN arguments with a run id for each report path among them (`triage diff a.ncu-rep
    b.ncu-rep`): see _runs_and_files."""
    return _runs_and_files(store, refs, sides)[0]


def _runs_and_files(store, refs: list[str],
                    sides: bool = False) -> tuple[list[str], list[str | None]]:
    """RUN arguments with a run id for each report path among them, and the file name each
    argument (its first run, for a side) was given as, for headers to name it by. The report is
    found by its hash or archived now, and that is said in one line on stderr, so that stdout
    (--json) holds only what the command prints."""
    from triage.archive.runs import reports_as_runs, side_parts

    named, reports = reports_as_runs(store, refs, sides=sides, nsys=os.environ.get("TRIAGE_NSYS"))
    for report in reports:
        run = textview.short_id(report.run_id)
        click.echo(f"triage: {textview.printable(report.path)}: " + (
            f"archived as run {run}" if report.new else f"run {run} (archived before)"), err=True)
    paths = {report.path for report in reports}
    firsts = [ref if ref in paths or not sides else side_parts(ref)[0] for ref in refs]
    return named, [os.path.basename(first) if first in paths else None for first in firsts]


@cli.command(name="ls")
@click.option("-n", "count", metavar="N|all",
              help="The newest N runs, or all (default: 50 as text; every run with --json or "
              "--csv).")
@click.option("--tool", type=click.Choice(["ncu", "nsys"]), help="Only runs of this profiler.")
@click.option("--gpu", metavar="TEXT", help="Only runs whose GPU name holds TEXT, in any case.")
@click.option("--label", "label_glob", metavar="GLOB",
              help="Only runs with a label GLOB matches (rc1, 'before/*').")
@click.option("--since", metavar="WHEN",
              help="Only runs archived since WHEN: a UTC date or time (2026-01-31, "
              "2026-01-31T12:00) or an age (90m, 12h, 7d, 2w).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@store_option
def ls_command(count, tool, gpu, label_glob, since, as_json, as_csv, store):
    """List runs, newest first: the newest 50 as text, every run with --json or --csv (-n
    changes either). A run with a damaged file is listed as far as it can be, and named on
    stderr."""
    from triage.archive import listing
    from triage.archive.store import Store

    if as_json and as_csv:
        raise UsageError("--json and --csv ask for two formats; give one")
    filters = listing.RunFilter(tool, gpu, label_glob,
                                listing.parse_since(since) if since is not None else None)
    machine = as_json or as_csv
    found = listing.list_runs(Store.open(store), filters,
                              listing.parse_limit(count, None if machine else listing.DEFAULT_PAGE),
                              listing.LIST_COLUMNS if machine else LS_TEXT_COLUMNS)
    if as_json:
        _echo_chunks(textview.json_chunks(found.batches()), newline=True)
    elif as_csv:
        _echo_chunks(textview.csv_chunks([*listing.LIST_COLUMNS, "labels"],
                                         ([r.values() for r in b] for b in found.batches())))
    else:
        click.echo(_ls_text(found))
    for problem in found.problems:
        click.echo(f"triage: warning: {problem}", err=True)


LS_TEXT_COLUMNS = ("id", "archived", "tool", "tool_version", "gpu", "kernels", "report_names")


def _echo_chunks(chunks: Iterator[str], newline: bool = False) -> None:
    """Output written as it is made (a listing of every run streams), and a newline after it
    where the text has none of its own (JSON; CSV rows end in one)."""
    for chunk in chunks:
        click.echo(chunk, nl=False)
    if newline:
        click.echo("")


def _ls_text(found: RunList) -> str:
    """The listing as a table as wide as the terminal, and what it left out."""
    if found.total == 0:
        return "no runs yet; `triage archive REPORT` adds one"
    if found.matched == 0:
        return f"no run matches these filters; `triage ls` lists all {found.total:,}"
    rows = found.rows()
    body = [[textview.short_id(r["id"]), (r["archived"] or "")[:16].replace("T", " "), r["tool"],
             r["tool_version"] or "-", r["gpu"] or "-", str(r["kernels"]),
             ",".join(r["labels"]), r["report_names"]] for r in rows]
    # what gives way to a narrow terminal, in turn: the GPU's name (it opens with NVIDIA),
    # the version, the reports' and labels' names; then they are left out
    text = textview.fitted_table(
        body, ["id", "archived", "tool", "version", "gpu", "kernels", "labels", "reports"],
        textview.output_width(), give_way=[(4, 20), (3, 0), (7, 16), (6, 10), (4, 12), (7, 0),
                                           (6, 0), (4, 0)], align_right={5})
    if found.matched > len(rows):
        text += (f"\n{found.matched - len(rows):,} older not shown (the newest {len(rows)} of "
                 f"{found.matched:,}); add -n all to list every one")
    return text


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the full record as JSON.")
@click.option("--patch", "patch", is_flag=True,
              help="Write the dirty tree's patch the capture stored (secrets redacted): "
              "`git apply` it on a checkout of the recorded commit.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="With --patch: write it to this file.")
@store_option
def show(run, as_json, patch, output, store):
    """Show one run: versions, GPU, command, settings and where each came from; with --patch,
    the source edits it ran with."""
    from triage.archive.runs import load_record
    from triage.archive.store import Store
    from triage.views.show import render_show

    if patch and as_json:
        raise UsageError("--patch writes the patch itself, not JSON; give one of them")
    if output and not patch:
        raise UsageError("-o FILE writes the stored patch: triage show RUN --patch -o FILE")
    run = _runs_named(store, [run])[0]
    st = Store.open(store)
    record = load_record(st, run)
    if patch:
        _write_patch(st, record, output)
        return
    click.echo(textview.to_json(record.as_json()) if as_json else render_show(record))


def _write_patch(st: Store, record: RunRecord, output: str | None) -> None:
    """The stored patch's bytes as they are (not text: a patch need not be UTF-8)."""
    from pathlib import Path

    from triage.archive.atomic import write_user_file
    from triage.archive.captured import stored_patch

    data = stored_patch(st, record)
    if output:
        write_user_file(Path(output), data)
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.buffer.write(data)


@cli.command()
@click.argument("name", required=False)
@click.argument("run", required=False)
@click.option("-d", "--delete", is_flag=True, help="Delete label NAME.")
@click.option("--history", is_flag=True, help="List every move of label NAME, oldest first.")
@store_option
def label(name, run, delete, history, store):
    """Point label NAME at RUN (default: latest), like `git tag NAME COMMIT`; a label that
    moves says where it was. `triage label -d NAME` deletes one; `triage label` lists them;
    `triage label --history NAME` lists its moves (each one kept; the newest wins).

    The old order, `triage label RUN NAME`, still works in this release (with a warning)
    where RUN is a run id, an id prefix or `latest`, which no label can be; any other two
    words are read as NAME RUN."""
    from triage.archive import runs
    from triage.archive.labels import check_label
    from triage.archive.store import Store

    if history:
        _label_history(Store.open(store), name, run, delete)
        return
    if name is None or delete:
        _label_list_or_delete(Store.open(store), name, run, delete)
        return
    name, run, old_order = runs.label_arguments(name, run)
    check_label(name)  # before a report named as RUN is archived for it
    run = _runs_named(store, [run])[0]
    change = runs.point_label(Store.open(store), name, run)
    click.echo(f"{name} -> {textview.short_id(change.run_id)}" + (
        f" (was {_label_target(change.was)})" if change.was not in (None, change.run_id)
        else ""))
    if old_order:
        click.echo(f"triage: warning: `triage label RUN NAME` is deprecated; write `triage "
                   f"label {name} {run}` (NAME first, like git tag)", err=True)


def _label_list_or_delete(st: Store, name: str | None, run: str | None, delete: bool) -> None:
    """`triage label` lists every label; `triage label -d NAME` deletes one."""
    from triage.archive.runs import delete_label

    if not delete:
        labels = sorted(st.labels.all().items())
        click.echo("\n".join(f"{n} -> {_label_target(r)}" for n, r in labels) if labels else
                   "no labels yet; `triage label NAME [RUN]` points one at a run")
        return
    if name is None or run is not None:
        raise UsageError("-d deletes one label: triage label -d NAME")
    click.echo(f"deleted label {name} (was {_label_target(delete_label(st, name).was)})")


def _label_history(st: Store, name: str | None, run: str | None, delete: bool) -> None:
    """`triage label --history NAME`: when, by which writer, to which run (newest last)."""
    if name is None or run is not None or delete:
        raise UsageError("--history lists the moves of one label: triage label --history NAME")
    from triage.base.errors import LabelNotFound

    moves = st.labels.history(name)
    if not moves:
        raise LabelNotFound(f"label {name!r} has no history; `triage label` lists labels")
    click.echo("\n".join(f"{m.time}  {m.writer}  "
                         + (_label_target(m.run_id) if m.run_id else "deleted")
                         for m in moves))


def _label_target(pointer: str | None) -> str:
    """What a label file holds, as the listing shows it: a short run id, or what is wrong."""
    return textview.printable(textview.short_id(pointer)) or "unreadable"


@cli.command(context_settings={"ignore_unknown_options": True})  # SQL may open with `--`
@click.argument("sql", nargs=-1, required=True)
@click.option("--run", "runs", multiple=True, help="Limit per-run views to these runs.")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@store_option
def query(sql, runs, as_json, as_csv, store):
    """Run SQL over the views runs, kernel_summary, kernels, metrics, sections, rules,
    api_calls, memops, nvtx_ranges, osrt_calls, api_summary, memop_summary, nvtx_summary,
    gpu_gaps (each has a run_id column; `runs` also has `id`, its old name, deprecated).

    SQL is one quoted argument or several words, joined by spaces; quote it where the shell
    would expand it (* ( ) ; < > |)."""
    from triage.archive.query import run_query
    from triage.archive.store import Store

    if as_json and as_csv:
        raise UsageError("--json and --csv ask for two formats; give one")
    statement = _one_statement(sql)  # a usage error before a report path is archived
    named = _runs_named(store, list(runs)) or None  # before the store opens: it may make it
    result = run_query(Store.open(store), statement, named)
    rows = result.to_pylist()
    if as_json:
        click.echo(textview.to_json(rows))
    elif as_csv:
        click.echo(textview.to_csv(result.column_names, [tuple(r.values()) for r in rows]),
                   nl=False)
    else:
        body = textview.fmt_values_apart(r.values() for r in rows)
        click.echo(textview.table(body, result.column_names,
                                  max_widths={i: 60 for i in range(result.num_columns)}))


# -- capture / env -----------------------------------------------------------------------------


@cli.command(context_settings={"ignore_unknown_options": True,
                               "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@click.option("--label", help="Point this label at the new run.")
@click.option("--note", help="Free text kept with the run.")
@click.option("--shell", is_flag=True, help="Run the command through /bin/sh.")
@click.option("--group", help="Tag the run as one rank of a group (srun/mpirun on every rank).")
@click.option("--from", "from_run", help="The run (e.g. an nsys run) this capture follows up.")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS", help="nsys used to export the report.")
@click.option("--redact", multiple=True, help="Extra regex of names to redact.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON at the end.")
@click.option("--repeat", default=1, type=click.IntRange(min=1), metavar="N",
              help="Run the capture N times, labelled LABEL/1 .. LABEL/N and grouped under "
              "LABEL (needs --label; the profiler must be told to overwrite its report: "
              "ncu -f, nsys --force-overwrite true). Compare with: triage diff 'LABEL/*' ...")
@store_option
def capture(command, label, note, shell, group, from_run, nsys, redact, as_json, repeat, store):
    """Run `ncu ...` or `nsys profile ...` as given and archive what it wrote, with everything
    needed to reproduce it: argv, versions, --list-sections, settings, GPUs and clocks, git state.

    Example: triage capture -- nsys profile -o step ./train.py"""
    from dataclasses import replace

    from triage.archive.captured import capture as run_capture
    from triage.capture.session import CaptureRequest
    from triage.views.progress import CaptureOutput, progress_after

    if repeat > 1 and not label:
        raise UsageError("--repeat N needs --label NAME: the runs are labelled NAME/1 .. NAME/N")
    if from_run:  # a report path: its run (archived now if need be)
        from_run = _runs_named(store, [from_run])[0]
    request = CaptureRequest(list(command), store=store, label=label, note=note, shell=shell,
                             group=group, from_run=from_run, nsys=nsys,
                             redact_patterns=tuple(redact))
    results = []
    # With --json, stdout carries only the JSON document; the profiler's output goes to stderr.
    stream = sys.stderr if as_json else sys.stdout
    for i in range(1, repeat + 1):
        one = request if repeat == 1 else replace(request, label=f"{label}/{i}",
                                                   group=group or label)
        shown = CaptureOutput(stream, stream.isatty() and not as_json,
                              os.path.basename(command[0]))
        try:
            results.append(run_capture(one, on_output=shown, tick_after=progress_after(),
                                       on_warning=lambda w: click.echo(f"triage: warning: {w}",
                                                                       err=True)))
        finally:
            shown.close()
    if repeat == 1:
        _print(_archive_json(results[0]), as_json, _archive_line)
    else:
        _print([_archive_json(r) for r in results], as_json,
               lambda infos: "\n".join(map(_archive_line, infos)))


@cli.command()
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
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON at the end.")
@store_option
def rerun(run, label, repeat, mode, build, strict, threshold, as_json, store):
    """Re-execute a run made by `triage capture` and say whether it reproduced: this machine
    graded against the record first (the drift table of `diff`), then the recorded command in
    its working directory with its recorded environment (redacted values: from this one), its
    outputs in a fresh directory; the new runs (rerun_of: RUN) diffed against the original.

    Example: triage rerun base --at-commit --repeat 5 --build make"""
    from triage.compare.reproduce import RerunRequest
    from triage.compare.reproduce import rerun as run_rerun
    from triage.views.rerun import outcome_line, render_plan, rerun_json

    from triage.views.progress import CaptureOutput

    request = RerunRequest(run, store=store, label=label, repeat=repeat, mode=mode,
                           build=build, strict=strict, threshold_pct=threshold)
    # With --json, stdout carries only the JSON document; everything else goes to stderr.
    stream = sys.stderr if as_json else sys.stdout
    shown = CaptureOutput(stream, stream.isatty() and not as_json, "rerun")
    try:
        result = run_rerun(request,
                           on_plan=lambda plan, tree: click.echo(render_plan(plan, tree),
                                                                 err=as_json),
                           on_output=shown,
                           on_warning=lambda w: click.echo(f"triage: warning: {w}", err=True))
    finally:
        shown.close()
    if as_json:
        click.echo(textview.to_json(rerun_json(result)))
        return
    from triage.views.diff import render_diff

    for run_id in result.new_runs:
        click.echo(f"{textview.short_id(run_id)}  rerun of {textview.short_id(run)}")
    click.echo("")
    click.echo(render_diff(result.diff))
    click.echo(outcome_line(result.outcome))


@cli.command(name="env")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS", help="nsys to check instead of PATH's.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
def env_command(nsys, as_json):
    """Check this machine before a capture: GPUs, clocks, counter permissions, DCGM, tools."""
    from triage.capture.session import environment_check
    from triage.views.env import render_env

    _print(environment_check(nsys=nsys), as_json, render_env)


# -- demo --------------------------------------------------------------------------------------


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway store and print its path.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the review page here (default: review.html in a new temp folder).")
@click.option("--json", "as_json", is_flag=True, help="Print the diffs as JSON.")
def demo(keep, output, as_json):
    """Archive the bundled captures (5 before, 5 after) into a throwaway store and show what
    triage is for: a valid diff, the regression gate, a comparison to distrust, a review page."""
    import shutil
    import tempfile
    from pathlib import Path

    from triage.demo import run_demo
    from triage.views.demo import demo_json, render_demo

    root = Path(tempfile.mkdtemp(prefix="triage-demo-"))  # the page stays; the rest goes
    outcome = run_demo(root, Path(output) if output else None)
    try:
        click.echo(textview.to_json(demo_json(outcome)) if as_json else render_demo(outcome))
        if keep:
            click.echo(f"\nstore kept: triage ls --store {outcome.store}", err=True)
    finally:
        if not keep:
            shutil.rmtree(outcome.store, ignore_errors=True)
            shutil.rmtree(root / "captures", ignore_errors=True)


class GateChoice(click.Choice):
    """--strict's optional value: a bare `--strict` before the runs takes the first run as its
    value (click's rule for optional values), so that mistake gets its own hint."""

    def fail(self, message: str, param=None, ctx=None):
        super().fail(f"{message.rstrip('.')}; a bare --strict goes after the runs (or write "
                     "--strict=invalid)", param, ctx)


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
    ]
    for option in reversed(options):
        command = option(command)
    return command


# A view option of `diff` and `report` (what a metric is called), not a comparison option.
raw_names_option = click.option(
    "--raw-names", is_flag=True,
    help="Name ncu metrics by their raw names (gpu__time_duration.sum), not the labels their "
    "sections show (Duration); --json always has both.")


# -- diff --------------------------------------------------------------------------------------


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@diff_options
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md"]), default=None,
              help="Output format (md: GitHub-flavoured Markdown for a PR comment).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="Kernels shown in text output.")
@click.option("--max-slowdown", "max_slowdown", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 4 when a matched kernel, an NVTX range or the total GPU time is slower "
              "by more than PCT % and not within noise (--kernel narrows it to kernels).")
@raw_names_option
@store_option
def diff(run_a, run_b, sections, kernel, metric, show_all, threshold, strict, as_json, fmt,
         output, limit, max_slowdown, raw_names, store):
    """Compare two runs: the drift verdict first (comparable / caution / invalid), then kernels,
    section by section, and for nsys runs the kernel ranking, NVTX, memory ops and GPU idle time.
    ncu metrics go by the labels their sections show (Duration; --raw-names: by raw name); a
    section only one run collected is one line.

    A side may be several runs: RUN,RUN,... or a quoted label glob ('before/*'); each change
    then carries the noise measured over the runs (one run: over its launches). A RUN may be a
    report file (`triage diff a.ncu-rep b.ncu-rep`): its run, found by hash or archived now.

    Exit codes: 0 when the diff ran; with --strict, 3 when the verdict is invalid; with
    --strict=caution, 3 when it is caution or invalid; with --max-slowdown PCT, 4 when a time
    is slower by more than PCT beyond noise (--strict is checked first; an invalid verdict is
    not judged)."""
    from triage.archive.store import Store
    from triage.compare.diff import diff_runs
    from triage.compare.result import DiffOptions

    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and --format {fmt} ask for two formats; give one")
    fmt = "json" if as_json else (fmt or _format_from_suffix(output) or "text")
    opts = DiffOptions(sections=tuple(sections), kernel=kernel, metric=metric,
                       show_all=show_all, threshold_pct=threshold, max_slowdown_pct=max_slowdown)
    (run_a, run_b), files = _runs_and_files(store, [run_a, run_b], sides=True)
    result = diff_runs(Store.open(store), run_a, run_b, opts, files=(files[0], files[1]))
    _emit(_render_diff(result, fmt, limit, to_file=output is not None, raw_names=raw_names),
          output)
    _gate(result.verdict, strict)
    _regression_gate(result)


def _format_from_suffix(output: str | None) -> str | None:
    suffix = output.rsplit(".", 1)[-1].lower() if output and "." in output else ""
    if suffix in ("html", "htm"):
        raise UsageError(f"{output}: HTML reviews come from `triage report A B -o {output}`")
    return {"json": "json", "md": "md"}.get(suffix)


def _render_diff(result: DiffResult, fmt: str, limit: int, to_file: bool = False,
                 raw_names: bool = False) -> str:
    if fmt == "json":
        return textview.to_json(result.to_json())
    if fmt == "md":
        from triage.views.report import render_markdown

        return render_markdown([result], raw_names=raw_names)
    from triage.views.diff import render_diff

    return render_diff(result, limit=limit, width=textview.PIPED_WIDTH if to_file else None,
                       raw_names=raw_names)


def _emit(text: str, output: str | None) -> None:
    if output:
        from pathlib import Path

        from triage.archive.atomic import write_user_file

        write_user_file(Path(output), (text + "\n").encode("utf-8"))
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text)


def _gate(verdict: str, strict: str | None) -> None:
    """--strict: exit 3 when the verdict reaches the gate."""
    from triage.compare.drift import VERDICTS
    from triage.base.errors import ComparisonGate

    if strict and VERDICTS.index(verdict) >= VERDICTS.index(strict):
        raise ComparisonGate(f"verdict is {verdict} (--strict={strict})")


def _regression_gate(result: DiffResult) -> None:
    """--max-slowdown: exit 4 when the gate failed (the output already says where)."""
    from triage.base.errors import RegressionGate

    if result.gate and not result.gate.passed:
        raise RegressionGate(textview.gate_lines(result.gate)[0])


# -- verify / gc / export / import -------------------------------------------------------------


@cli.command()
@click.argument("runs", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@store_option
def verify(runs, as_json, store):
    """Re-hash every object, table and manifest the runs (default: all) reference.

    Without RUN, also report objects no run references, leftover temp files and leases, damaged
    catalog segments, keys or labels that point at no run, annotations that fail their checksum
    and a damaged store marker. Exit 1 when anything is wrong; leftovers of an interrupted
    archive are listed but are not wrong (`triage gc` removes them)."""
    from triage.archive.integrity import verify as verify_store
    from triage.archive.store import Store
    from triage.base.errors import CorruptObject

    named = _runs_named(store, list(runs))  # before the store opens: it may make it
    with status_line(as_json) as progress:
        report = verify_store(Store.open(store), named, progress=progress)
    _print(report.to_dict(), as_json, _verify_text)
    if not report.ok:
        raise CorruptObject(f"{len(report.errors)} problem(s) in the store; the list above says "
                            "which files (restore them from a bundle, or archive the reports again "
                            "with `triage archive --repair REPORT...`)")


def _verify_text(report: dict) -> str:
    errors, leftovers = report["errors"], report["leftovers"]
    lines = [f"{f['kind']:<10} {f['path']}  {f['detail']}" for f in errors + leftovers]
    lines.append(f"checked {report['runs']} runs, {report['objects']} objects "
                 f"({fmt_bytes(report['bytes'])}): {len(errors)} problem(s), "
                 f"{len(leftovers)} leftover(s)")
    return "\n".join(lines)


@cli.command(name="gc")
@click.option("--dry-run", is_flag=True, help="Only show what would be removed.")
@click.option("--grace", default="1h", show_default=True,
              help="Keep leftovers younger than this: seconds, or with s/m/h/d; 0 removes all "
              "that no live archive or import may need.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@store_option
def gc_command(dry_run, grace, as_json, store):
    """Remove objects no run references and stale temp files (runs are never removed).

    \b
    Safe beside archives, imports and label writes in progress, on this host or others: each
    holds a lease (leases/) from its first temp file to its last rename, and gc keeps
    everything as new as a live lease, whatever --grace says. A lease is live while its process
    runs (a stopped one counts), or for 24h when written on another host; a killed writer's
    lease is removed like other leftovers."""
    from triage.archive.integrity import gc, parse_duration
    from triage.archive.store import Store

    report = gc(Store.open(store), grace_seconds=parse_duration(grace), dry_run=dry_run)
    _print(report.to_dict(), as_json, lambda found: _gc_text(found, grace))


@cli.command()
@store_option
def migrate(store):
    """Upgrade a store of format 1 or 2 to format 3 in one step: from 1, run ids hash what a
    run is, not its Parquet bytes (every run gets its new id, and its old id keeps resolving in
    show, diff, labels); from 2, tables move to tables/<table>/run_id=<id>/ for engines to read
    in place. Other commands refuse an older store until it is migrated. Safe to run again,
    and to rerun after a kill: it finishes what it began. Run it when no one is writing."""
    from triage.archive.migrate import migrate as migrate_store
    from triage.archive.store import STORE_VERSION, Store

    done = migrate_store(Store.open(store, upgrade=True))
    if done.nothing:
        click.echo(f"store is at format {STORE_VERSION} already; nothing to do")
        return
    click.echo(f"migrated store from format {done.from_version} to {STORE_VERSION}: {done.runs} "
               f"run(s) got new ids, {done.aliases} old id(s) kept as aliases")


def _gc_text(report: dict, grace: str) -> str:
    """What gc removed, one file a line; `grace` as the user wrote it, not in seconds."""
    verb = "would remove" if report["dry_run"] else "removed"
    lines = [f"{verb} {item['kind']:<7} {item['path']}  {fmt_bytes(item['bytes'])}"
             for item in report["removed"]]
    lines.append(f"{verb} {len(report['removed'])} file(s), {fmt_bytes(report['bytes'])}; "
                 f"kept {report['kept_recent']} younger than --grace {grace}"
                 + (f", {report['kept_live']} an archive in progress may need"
                    if report["kept_live"] else ""))
    return "\n".join(lines)


@cli.command(name="export")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Bundle file: .tar, .tar.gz or .tar.zst (needs the zstandard module).")
@click.option("--labels", is_flag=True, help="Include the labels that point at these runs.")
@store_option
def export_command(runs, output, labels, store):
    """Write runs with their reports, tables and notes to one bundle for a colleague."""
    from triage.archive.bundle import export_runs
    from triage.archive.store import Store

    named = _runs_named(store, list(runs))  # before the store opens: it may make it
    with status_line() as progress:
        result = export_runs(Store.open(store), named, output, labels=labels, progress=progress)
    click.echo(f"wrote {result.path}: {len(result.runs)} run(s), {result.objects} objects "
               f"({fmt_bytes(result.bytes)})")


@cli.command(name="import")
@click.argument("bundle", type=click.Path(dir_okay=True))
@click.option("--labels", is_flag=True, help="Also set the labels the bundle carries.")
@click.option("--json", "as_json", is_flag=True, help="Print what was added as JSON.")
@store_option
def import_command(bundle, labels, as_json, store):
    """Add the runs of a bundle from `triage export` (every hash is checked first)."""
    from dataclasses import asdict

    from triage.archive.bundle import import_bundle

    with status_line(as_json) as progress:
        result = import_bundle(store, bundle, labels=labels, progress=progress)
    _print(asdict(result), as_json, _import_text)


def _import_text(result: dict) -> str:
    short = textview.short_id
    lines = [f"{short(run_id)}  added" for run_id in result["runs_added"]]
    lines += [f"{short(run_id)}  already in the store" for run_id in result["runs_present"]]
    lines += [f"{name} -> {short(run_id)}" for name, run_id in result["labels_set"].items()]
    if result["labels_skipped"]:
        lines.append(f"labels not set (pass --labels): {', '.join(result['labels_skipped'])}")
    lines.append(f"{result['objects_added']} objects ({fmt_bytes(result['bytes_added'])}) "
                 "added")
    return "\n".join(lines)


# -- remote / push / pull ----------------------------------------------------------------------


@cli.group(cls=TriageGroup)
def remote():
    """Name the other stores this one pushes to and pulls from (kept in the store)."""


@remote.command(name="add")
@click.argument("name")
@click.argument("url")
@store_option
def remote_add(name, url, store):
    """Add remote NAME: a store directory (local, or on a shared filesystem) or a store URL."""
    from triage.archive.remotes import add_remote
    from triage.archive.store import Store

    added = add_remote(Store.open(store, create=True), name, url)
    click.echo(f"remote {added.name} -> {textview.printable(added.url)}")


@remote.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the remotes as JSON.")
@store_option
def remote_list(as_json, store):
    """List the remotes, one a line: NAME URL."""
    from dataclasses import asdict

    from triage.archive.remotes import list_remotes
    from triage.archive.store import Store
    from triage.views.sync import render_remotes

    _print([asdict(r) for r in list_remotes(Store.open(store))], as_json, render_remotes)


@remote.command(name="remove")
@click.argument("name")
@store_option
def remote_remove(name, store):
    """Forget remote NAME (its store is not touched)."""
    from triage.archive.remotes import remove_remote
    from triage.archive.store import Store

    gone = remove_remote(Store.open(store), name)
    click.echo(f"removed remote {gone.name} ({textview.printable(gone.url)})")


@cli.command()
@click.argument("words", nargs=-1, metavar="[NAME] [RUN]...")
@click.option("--label", "label_glob", metavar="GLOB",
              help="The runs labels GLOB matches point at ('release/*'), with those labels.")
@click.option("--json", "as_json", is_flag=True, help="Print a summary as JSON.")
@store_option
def push(words, label_glob, as_json, store):
    """Send runs (default: all) with their notes and labels to remote NAME (default: the only
    remote, else origin). Only what the remote lacks is sent, each object checked against its
    hash on arrival; a run appears there once whole. Safe to rerun after a kill."""
    from dataclasses import asdict

    from triage.archive.remotes import push_target
    from triage.archive.store import Store
    from triage.archive.sync import push as push_runs
    from triage.views.sync import render_sync

    st = Store.open(store)
    target, refs = push_target(st, list(words))
    with status_line(as_json) as progress:
        result = push_runs(st, target, refs, label_glob, progress=progress)
    _print(asdict(result), as_json, render_sync)


@cli.command()
@click.argument("name")
@click.argument("runs", nargs=-1)
@click.option("--label", "label_glob", metavar="GLOB",
              help="The runs labels GLOB matches point at there, with those labels.")
@click.option("--json", "as_json", is_flag=True, help="Print a summary as JSON.")
@store_option
def pull(name, runs, label_glob, as_json, store):
    """Fetch runs (default: all) with their notes and labels from remote NAME (or a store's
    path or URL) into this store, which is made if need be. Incremental and checked like
    push."""
    from dataclasses import asdict

    from triage.archive.remotes import named_remote, remotes_of
    from triage.archive.sync import pull as pull_runs
    from triage.views.sync import render_sync

    target = named_remote(remotes_of(store), name)
    with status_line(as_json) as progress:
        result = pull_runs(store, target, list(runs), label_glob, progress=progress)
    _print(asdict(result), as_json, render_sync)


# -- report ------------------------------------------------------------------------------------


@cli.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the report here; the suffix (.html, .md) picks the format. "
              "Default: standard output.")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default=None,
              help="html: self-contained page with charts; md: GitHub Markdown for a PR comment "
              "(default: from the --output suffix, else html).")
@diff_options
@raw_names_option
@store_option
def report(runs, output, fmt, sections, kernel, metric, show_all, threshold, strict, raw_names,
           store):
    """Review report of RUN B against RUN A: verdict and drift, kernels by time changed, charts,
    sections and rules, provenance. With more runs (A B C ...), a series: each against A.

    The numbers are those of `triage diff` with the same options. Exit codes: 0 written; with
    --strict, 3 when the worst verdict reaches the gate."""
    from triage.archive.store import Store
    from triage.compare.drift import worst_verdict
    from triage.compare.result import DiffOptions
    from triage.views.report import diff_series, render, report_format, write_report

    fmt = report_format(output, fmt)
    # Every metric is fetched (charts draw unchanged ones too); --all only decides the listing.
    opts = DiffOptions(sections=tuple(sections), kernel=kernel, metric=metric, show_all=True,
                       threshold_pct=threshold)
    refs, files = _runs_and_files(store, list(runs), sides=True)
    diffs = diff_series(Store.open(store), refs, opts, files)
    if output:
        write_report(output, diffs, fmt, show_unchanged=show_all, raw_names=raw_names)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(render(diffs, fmt, show_unchanged=show_all, raw_names=raw_names), nl=False)
    _gate(worst_verdict(d.verdict for d in diffs), strict)


# -- top / explain -----------------------------------------------------------------------------


@cli.command()
@click.argument("run")
@click.option("-k", "k", default=3, show_default=True, type=click.IntRange(min=0),
              help="Kernels to suggest ncu commands for.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@store_option
def top(run, k, as_json, store):
    """Where an nsys run spends GPU time: kernels by total time with cumulative share, GPU idle
    gaps and what the host did meanwhile, copies serialised against kernels, NCCL overlap, NVTX
    ranges; then the ncu commands that profile one typical launch of each of the top K kernels.
    A run with no kernels shows the host's NVTX ranges, OS runtime and CUDA API calls instead."""
    from triage.archive.store import Store
    from triage.compare.rundata import RunData
    from triage.compare.top import top_run
    from triage.views.top import render_top

    run = _runs_named(store, [run])[0]
    _print(top_run(RunData(Store.open(store), run), k=k), as_json, render_top)


@cli.command()
@click.argument("run")
@click.option("--kernel", help="Only kernels whose name matches this regex.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@store_option
def explain(run, kernel, as_json, store):
    """Why each kernel of an ncu run is slow, in a fixed order: 1 compute vs memory throughput,
    2 memory efficiency, 3 occupancy, 4 issue slots then stalls, 5 conclusion (memory-bound,
    latency-bound, sync/serialisation-bound, compute-bound) with what to inspect and the usual
    fix. Every statement cites its metric values; missing sections are named, never guessed."""
    from triage.archive.store import Store
    from triage.compare.explain import explain_run
    from triage.compare.rundata import RunData
    from triage.views.explain import render_explain

    run = _runs_named(store, [run])[0]
    _print(explain_run(RunData(Store.open(store), run), kernel=kernel), as_json, render_explain)


# -- history -----------------------------------------------------------------------------------


@cli.command()
@click.argument("selector")
@click.option("--kernel", help="Follow the launches of the kernels whose name matches this "
              "regex (with --metric: whose metric to follow).")
@click.option("--nvtx", help="Follow the NVTX ranges of this text (nsys runs).")
@click.option("--metric", help="Follow this ncu metric (raw name, e.g. "
              "dram__throughput.avg.pct_of_peak_sustained_elapsed) over the launches.")
@click.option("--workload", "workload_of", is_flag=True,
              help="SELECTOR is one run: follow every run of its tool and workload (program "
              "and arguments).")
@click.option("--min-step", "min_step", default=5.0, show_default=True,
              type=click.FloatRange(min=0), metavar="PCT",
              help="Smallest step named, in % of the level before it.")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md", "html"]), default=None,
              help="Output format (md: GitHub Markdown; html: a page with a trend chart).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write to this file (the suffix .json, .md, .html picks the format).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the HTML page to FILE (same as --format html -o FILE).")
@store_option
def history(selector, kernel, nvtx, metric, workload_of, min_step, as_json, fmt, output,
            html_file, store):
    """One kernel, NVTX range or ncu metric across a series of runs, one row per run in
    capture order (report creation time, then archive time): its median over the run's
    launches with n, IQR and min..max, the commit, and the drift from the run before.

    SELECTOR is RUN, RUN,RUN,... or a quoted label glob ('nightly/*'); with --workload, one
    run whose tool and workload (program and arguments) the series shares.

    Boundaries are drift fields that differ from the run before with severity invalidates or
    caution (GPU, clock control, profiler version, driver major, ...). Steps: Pettitt's
    change-point test applied by binary segmentation (permutation p <= 5%), each step kept when
    the Hodges-Lehmann shift between the levels has a 95% interval excluding 0 and is at least
    --min-step % (one value per run); never across an invalidating boundary."""
    from triage.archive.store import Store
    from triage.compare.history import Measure
    from triage.compare.history import history as history_of

    if html_file:
        if output or as_json or fmt not in (None, "html"):
            raise UsageError("--html FILE writes the page; give it alone, or --format and -o")
        fmt, output = "html", html_file
    if as_json and fmt not in (None, "json"):
        raise UsageError(f"--json and --format {fmt} ask for two formats; give one")
    suffix = output.rsplit(".", 1)[-1].lower() if output and "." in output else ""
    fmt = "json" if as_json else (fmt or {"json": "json", "md": "md", "html": "html",
                                          "htm": "html"}.get(suffix, "text"))
    result = history_of(Store.open(store), selector, Measure(kernel, nvtx, metric),
                        workload_of=workload_of, min_step_pct=min_step)
    if fmt == "json":
        text = textview.to_json(result.to_json())
    elif fmt == "html":
        from triage.views.history_page import render_history_html

        text = render_history_html(result)
    else:
        from triage.views.history import render_history, render_history_markdown

        text = render_history_markdown(result) if fmt == "md" else render_history(result)
    _emit(text, output)
