"""`triage archive`, `ls`, `show`, `label` and `query`: filing reports and finding runs."""

from __future__ import annotations

import os
import re

from typing import TYPE_CHECKING

import click

from triage.base.errors import Interrupted, TriageError, UsageError
from triage.cli.options import (Output, echo_chunks, output_options, pass_store, runs_named,
                                store_option, warn, width_options)
from triage.views import text as textview

if TYPE_CHECKING:
    from triage.archive.model import ArchiveResult



@click.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=True, readable=False))
@click.option("--label", help="Point this label at the run (like a git tag).")
@click.option("--note", help="Free text kept with the run.")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS",
              help="nsys executable used to export .nsys-rep/.qdrep (default: nsys on PATH).")
@click.option("--redact", multiple=True, help="Extra regex of environment/argument names to "
              "redact (also $TRIAGE_REDACT, comma-separated).")
@click.option("--repair", is_flag=True, help="Rewrite every object of a run already archived "
              "from the report (default: only those missing or of the wrong size).")
@click.option("--fail-fast", is_flag=True, help="Stop at the first report refused and archive "
              "none (default: archive every readable one, name each refused, exit 1).")
@output_options("text", "json")
@store_option
@pass_store
def archive(store, reports, label, note, nsys, redact, repair, fail_fast, out):
    """File existing reports (.ncu-rep, .nsight-cuprof-report, .nsys-rep, .qdrep, .sqlite).

    One run per report; archiving the same file again finds the same run and adds no bytes,
    but rewrites its objects that are missing or damaged (`triage verify` names them). Of
    several reports, each readable one is archived and named as soon as it is filed (an
    interrupted batch has said what landed), and each refused one named on a line of its own,
    with a summary; the exit status is then 1 (--fail-fast: none is archived). One report
    refused is the error it is."""
    from triage.archive.ingest import archive_batch
    from triage.views.progress import status_line
    from triage.views.runs import archive_line, refusal_lines

    with status_line(out.json) as progress:
        def filed(result: ArchiveResult) -> None:
            """Text names each run as it is filed (an interrupted batch has said what landed);
            JSON is one document, written once the batch is done."""
            if not out.json:
                progress.say(archive_line(result))

        batch = archive_batch(store.path, list(reports), label=label, note=note, nsys=nsys,
                              redact_patterns=tuple(redact), repair=repair, progress=progress,
                              keep_going=not fail_fast and len(reports) > 1, filed=filed)
    try:
        if out.json:
            out.show(batch.results, archive_line)
    except KeyboardInterrupt:  # the runs are filed: said so, not lost in an unfinished listing
        raise Interrupted(tuple(r.record.id for r in batch.results if r.new)) from None
    if batch.refused:
        click.echo(refusal_lines(batch, len(reports)), err=True)
        raise click.exceptions.Exit(TriageError.exit_code)


@click.command(name="ls")
@click.option("-n", "count", metavar="N|all",
              help="The newest N runs, or all (default: 50 as text; every run with --json or "
              "--csv).")
@click.option("--tool", type=click.Choice(["ncu", "nsys", "bench"]),
              help="Only runs of this tool (bench: `triage bench` runs).")
@click.option("--gpu", metavar="TEXT", help="Only runs whose GPU name holds TEXT, in any case.")
@click.option("--label", "label_glob", metavar="GLOB",
              help="Only runs with a label GLOB matches (rc1, 'before/*').")
@click.option("--since", metavar="WHEN",
              help="Only runs archived since WHEN: a UTC date or time (2026-01-31, "
              "2026-01-31T12:00) or an age (90m, 12h, 7d, 2w).")
@width_options
@output_options("text", "json", "csv")
@store_option
@pass_store
def ls_command(store, count, tool, gpu, label_glob, since, width, out):
    """List runs, newest first: the newest 50 as text, every run with --json or --csv (-n
    changes either). A run with a damaged file is listed as far as it can be, and named on
    stderr."""
    from triage.archive import listing
    from triage.views.runs import LS_TEXT_COLUMNS, ls_text

    filters = listing.RunFilter(tool, gpu, label_glob,
                                listing.parse_since(since) if since is not None else None)
    machine = out.fmt != "text"
    found = listing.list_runs(store.open(), filters,
                              listing.parse_limit(count, None if machine else listing.DEFAULT_PAGE),
                              listing.LIST_COLUMNS if machine else LS_TEXT_COLUMNS)
    if out.json:
        echo_chunks(textview.json_chunks(found.batches()), newline=True)
    elif out.fmt == "csv":
        echo_chunks(textview.csv_chunks([*listing.LIST_COLUMNS, "labels"],
                                        ([r.values() for r in b] for b in found.batches())))
    else:
        out.write(ls_text(found, width))
    for problem in found.problems:
        warn(problem)


@click.command()
@click.argument("run")
@click.option("--patch", "patch", is_flag=True,
              help="Write the dirty tree's patch the capture stored (secrets redacted): "
              "`git apply` it on a checkout of the recorded commit.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="With --patch: write it to this file.")
@output_options("text", "json")
@store_option
@pass_store
def show(store, run, patch, output, out):
    """Show one run: versions, GPU, command, settings and where each came from; with --patch,
    the source edits it ran with."""
    from triage.archive.runs import load_record

    if patch and out.json:
        raise UsageError("--patch writes the patch itself, not JSON; give one of them")
    if output and not patch:
        raise UsageError("-o FILE writes the stored patch: triage show RUN --patch -o FILE")
    run_id = runs_named(store, [run])[0]  # before the store opens: archiving may make it
    st = store.open()
    record = load_record(st, run_id)
    if patch:
        from triage.archive.captured import stored_patch

        Output("text", output).write_bytes(stored_patch(st, record))
        return
    from triage.views.show import render_show

    out.write(textview.to_json(record.as_json()) if out.json else render_show(record))


@click.command()
@click.argument("run")
@click.option("--reason", required=True, help="Why the change is intended (kept with it).")
@click.option("--by", "who", envvar="TRIAGE_USER",
              help="Who accepts it (default: $TRIAGE_USER, else $GITHUB_ACTOR or "
              "$GITLAB_USER_LOGIN in CI, else user@host).")
@output_options("text", "json")
@store_option
@pass_store
def accept(store, run, reason, who, out):
    """Accept RUN (or the run LABEL points at) as an intended step: from it on, the gate
    (`diff --max-slowdown`) judges later runs of its workload against it instead of the runs
    before it, and `history` shows the acceptance (who, when, why) at its step. Kept as a
    write-once entry beside the run, never changing labels; `push` and `pull` carry it."""
    from triage.archive import runs
    from triage.views.runs import acceptance_line

    found = runs.accept(store.open(), run, reason, who or _who())
    out.show(found, acceptance_line)


def _who() -> str:
    """The person or CI job accepting: the CI's actor where there is one, else user@host."""
    import getpass
    import socket

    actor = os.environ.get("GITHUB_ACTOR") or os.environ.get("GITLAB_USER_LOGIN")
    return actor or f"{getpass.getuser()}@{socket.gethostname()}"


@click.command()
@click.argument("name", required=False)
@click.argument("run", required=False)
@click.option("-d", "--delete", is_flag=True, help="Delete label NAME.")
@click.option("--history", is_flag=True, help="List every move of label NAME, oldest first.")
@store_option
@pass_store
def label(store, name, run, delete, history):
    """Point label NAME at RUN (default: latest), like `git tag NAME COMMIT`; a label that
    moves says where it was. `triage label -d NAME` deletes one; `triage label` lists them;
    `triage label --history NAME` lists its moves (each one kept; the newest wins).

    The old order, `triage label RUN NAME`, still works in this release (with a warning)
    where RUN is a run id, an id prefix or `latest`, which no label can be; any other two
    words are read as NAME RUN."""
    from triage.archive import runs
    from triage.archive.labels import check_label
    from triage.views import runs as view

    if history:
        if name is None or run is not None or delete:
            raise UsageError("--history lists the moves of one label: triage label --history NAME")
        click.echo(view.label_history(runs.label_moves(store.open(), name)))
    elif delete:
        if name is None or run is not None:
            raise UsageError("-d deletes one label: triage label -d NAME")
        gone = runs.delete_label(store.open(), name)
        click.echo(f"deleted label {name} (was {view.label_target(gone.was)})")
    elif name is None:
        click.echo(view.label_list(store.open().labels.all()))
    else:
        name, run, old_order = runs.label_arguments(name, run)
        check_label(name)  # before a report named as RUN is archived for it
        run = runs_named(store, [run])[0]  # before the store opens: archiving may make it
        change = runs.point_label(store.open(), name, run)
        click.echo(view.label_moved(name, change.run_id, change.was))
        if old_order:
            warn(f"`triage label RUN NAME` is deprecated; write `triage label {name} {run}` "
                 "(NAME first, like git tag)")


@click.command(context_settings={"ignore_unknown_options": True})  # SQL may open with `--`
@click.argument("sql", nargs=-1, required=True)
@click.option("--run", "runs", multiple=True, help="Limit per-run views to these runs.")
@width_options
@output_options("text", "json", "csv")
@store_option
@pass_store
def query(store, sql, runs, width, out):
    """Run SQL over the views runs, kernel_summary, kernels, metrics, sections, rules,
    api_calls, memops, nvtx_ranges, osrt_calls, api_summary, memop_summary, nvtx_summary,
    gpu_gaps (each has a run_id column; `runs` also has `id`, its old name, deprecated).

    SQL is one quoted argument or several words, joined by spaces; quote it where the shell
    would expand it (* ( ) ; < > |). A repeated column name is kept apart as `x`, `x_1` in
    every format; on a terminal, text values are cut to fit it (--no-trunc, --width)."""
    from triage.archive.query import run_query

    statement = _one_statement(sql)  # a usage error before a report path is archived
    named = runs_named(store, list(runs)) or None  # before the store opens: it may make it
    result = run_query(store.open(), statement, named)
    rows = result.to_pylist()
    if out.json:
        out.write(textview.to_json(rows))
    elif out.fmt == "csv":
        out.write(textview.to_csv(result.column_names, [tuple(r.values()) for r in rows]),
                  newline=False)
    else:
        body = textview.fmt_values_apart(r.values() for r in rows)
        out.write(query_text(body, result.column_names, None if out.path else width))


def query_text(body: list[list[str]], columns: list[str], width: int | None) -> str:
    """The result as a table: whole where nothing needs to fit; on a terminal (or --width)
    each column gives way, widest first, down to 12 characters, then the table wraps."""
    if width is None:
        return textview.table(body, columns)
    order = sorted(range(len(columns)), key=lambda i: -max([len(columns[i])] + [
        len(textview.printable(str(r[i]))) for r in body]))
    return textview.fitted_table(body, columns, width, give_way=[(i, 12) for i in order])


_OPTION_LIKE = re.compile(r"^--?[A-Za-z]\S*$")


def _one_statement(words: tuple[str, ...]) -> str:
    """The SQL: one quoted argument, or the words the shell split it into, joined by spaces
    (`SQL...` in --help). Unknown options reach here as words (an SQL comment may open the
    query), so a word like `--jsn` or `-j` is a mistyped option, not SQL; `-1` and `--`
    alone are SQL."""
    mistyped = [w for w in words if _OPTION_LIKE.match(w)]
    if mistyped:
        raise UsageError(f"no such option: {mistyped[0]}; `triage query --help` lists them")
    return " ".join(words)
