"""The `triage` command line: parse arguments, call one library function, render.

This is the only place where a TriageError becomes a message and an exit code:
0 ok, 1 error, 2 usage, 3 comparison gate (`diff --strict`). Any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations

import sys

import click

from triage import __version__, textview
from triage.errors import TriageError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3


class TriageGroup(click.Group):
    """A click group that turns TriageErrors into one-line messages with their exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TriageError as exc:
            click.echo(f"triage: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(EXIT_OK)


store_option = click.option(
    "--store", "store", envvar="TRIAGE_STORE", type=click.Path(file_okay=False),
    help="Store directory (default: $TRIAGE_STORE, else the per-user data directory).")


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="triage")
def cli():
    """Archive Nsight Systems / Nsight Compute reports with how they were captured, and compare
    them weeks later, loudly flagging version, GPU and clock drift.

    Exit codes: 0 ok, 1 error, 2 usage, 3 comparison gate (diff --strict)."""


def main() -> None:
    cli(prog_name="triage")


# -- archive / ls / show / label / query -------------------------------------------------------


@cli.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--label", help="Point this label at the run (like a git tag).")
@click.option("--note", help="Free text kept with the run.")
@click.option("--nsys", "nsys", envvar="TRIAGE_NSYS",
              help="nsys executable used to export .nsys-rep/.qdrep (default: nsys on PATH).")
@click.option("--redact", multiple=True, help="Extra regex of environment/argument names to "
              "redact (also $TRIAGE_REDACT, comma-separated).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of the runs.")
@store_option
def archive(reports, label, note, nsys, redact, as_json, store):
    """File existing reports (.ncu-rep, .nsight-cuprof-report, .nsys-rep, .qdrep, .sqlite).

    One run per report; archiving the same file again finds the same run and adds no bytes."""
    from triage.archive.ingest import archive_files

    results = archive_files(store, list(reports), label=label, note=note, nsys=nsys,
                            redact_patterns=tuple(redact))
    if as_json:
        click.echo(textview.to_json([_archive_json(r) for r in results]))
        return
    for result in results:
        click.echo(_archive_line(result))


def _archive_json(result) -> dict:
    manifest = result.manifest
    gpus = (manifest.get("environment") or {}).get("gpus") or []
    return {"id": result.id, "new": result.new, "tool": manifest["tool"],
            "tool_version": manifest.get("tool_version"),
            "gpu": gpus[0].get("name") if gpus else None, "kernels": manifest.get("kernels"),
            "reports": [r["name"] for r in manifest.get("reports", [])],
            "notices": manifest.get("notices", [])}


def _archive_line(result) -> str:
    info = _archive_json(result)
    state = "new" if result.new else "already archived"
    version = info["tool_version"] or "version unknown"
    line = (f"{textview.short_id(result.id)}  {info['tool']} {version}  "
            f"{info['gpu'] or 'GPU unknown'}  {info['kernels']} kernels  "
            f"{', '.join(info['reports'])}  ({state})")
    return line + "".join(f"\n    note: {n}" for n in info["notices"])


@cli.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@store_option
def ls_command(as_json, store):
    """List runs, oldest first."""
    from triage.archive.runs import list_runs
    from triage.archive.store import Store

    rows = list_runs(Store.open(store))
    if as_json:
        click.echo(textview.to_json(rows))
        return
    if not rows:
        click.echo("no runs yet; `triage archive REPORT` adds one")
        return
    body = [[textview.short_id(r["id"]), (r["archived"] or "")[:16].replace("T", " "), r["tool"],
             r["tool_version"] or "-", r["gpu"] or "-", str(r["kernels"]),
             ",".join(r["labels"]), r["report_names"]] for r in rows]
    click.echo(textview.table(body, ["id", "archived", "tool", "version", "gpu", "kernels",
                                     "labels", "reports"],
                              max_widths={4: 28, 7: 40}, align_right={5}))


@cli.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the full record as JSON.")
@store_option
def show(run, as_json, store):
    """Show one run: versions, GPU, command, settings and where each came from."""
    from triage.archive.runs import show as show_run
    from triage.archive.store import Store

    record = show_run(Store.open(store), run)
    if as_json:
        click.echo(textview.to_json(record))
        return
    from triage.showview import render_show

    click.echo(render_show(record))


@cli.command()
@click.argument("run")
@click.argument("name")
@store_option
def label(run, name, store):
    """Point label NAME at RUN (moves it if it pointed elsewhere)."""
    from triage.archive.runs import resolve
    from triage.archive.store import Store

    st = Store.open(store)
    run_id = resolve(st, run)
    st.set_label(name, run_id)
    click.echo(f"{name} -> {textview.short_id(run_id)}")


@cli.command()
@click.argument("sql")
@click.option("--run", "runs", multiple=True, help="Limit per-run views to these runs.")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@store_option
def query(sql, runs, as_json, as_csv, store):
    """Run SQL over the views runs, kernel_summary, kernels, metrics, sections, rules,
    api_calls, memops, nvtx_ranges, osrt_calls, api_summary, memop_summary, nvtx_summary,
    gpu_gaps (each per-run view has a run_id column)."""
    from triage.archive.query import run_query
    from triage.archive.store import Store

    result = run_query(Store.open(store), sql, list(runs) or None)
    rows = result.to_pylist()
    if as_json:
        click.echo(textview.to_json(rows))
    elif as_csv:
        click.echo(textview.to_csv(result.column_names, [tuple(r.values()) for r in rows]),
                   nl=False)
    else:
        body = [[textview.fmt_value(v) for v in r.values()] for r in rows]
        click.echo(textview.table(body, result.column_names,
                                  max_widths={i: 60 for i in range(result.num_columns)}))
