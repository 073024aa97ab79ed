"""`triage verify`, `gc` and `migrate`: keeping a store whole."""

from __future__ import annotations

import click

from triage.cli.options import (output_options, pass_store, runs_named, store_option,
                                timeout_option)


@click.command()
@click.argument("runs", nargs=-1)
@timeout_option
@output_options("text", "json")
@store_option
@pass_store
def verify(store, runs, timeout, out):
    """Re-hash every object, table and manifest the runs (default: all) reference.

    Without RUN, also report objects no run references, leftover temp files and leases, damaged
    catalog segments, keys or labels that point at no run, annotations that fail their checksum
    and a damaged store marker. Exit 1 when anything is damaged; leftovers of an interrupted
    archive are listed but are not wrong (`triage gc` removes them). A file that could not be
    read (on S3: after every retry) is `unreachable`, not damaged: exit 6 when nothing read was
    wrong, and running verify again is the fix."""
    from triage.archive.network import network_chosen
    from triage.archive.integrity import verify as verify_store
    from triage.base.errors import CorruptObject, Unreachable
    from triage.views.progress import status_line
    from triage.views.upkeep import verify_text

    named = runs_named(store, list(runs))  # before the store opens: it may make it
    with network_chosen(timeout=timeout), status_line(out.json) as progress:
        report = verify_store(store.open(), named, progress=progress)
    out.show(report, verify_text)
    unread = f"; {len(report.unreachable)} could not be read" if report.unreachable else ""
    if report.damage:
        raise CorruptObject(f"{len(report.damage)} problem(s) in the store{unread}; the list "
                            "above says which files (restore them from a bundle, or archive the "
                            "reports again with `triage archive --repair REPORT...`)")
    if report.unreachable:
        raise Unreachable(f"{len(report.unreachable)} file(s) could not be read (the network or a "
                          "permission, see the list above) and nothing read was damaged; run "
                          "`triage verify` again (nothing needs repair)")


@click.command(name="gc")
@click.option("--dry-run", is_flag=True, help="Only show what would be removed.")
@click.option("--grace", default="1h", show_default=True,
              help="Keep leftovers younger than this: seconds, or with s/m/h/d; 0 removes all "
              "that no live archive or import may need.")
@output_options("text", "json")
@store_option
@pass_store
def gc_command(store, dry_run, grace, out):
    """Remove objects no run references and stale temp files (runs are never removed).

    \b
    Safe beside archives, imports and label writes in progress, on this host or others: each
    holds a lease (leases/) from its first temp file to its last rename, and gc keeps
    everything as new as a live lease, whatever --grace says. A lease is live while its process
    runs (a stopped one counts), or for 24h when written on another host; a killed writer's
    lease is removed like other leftovers."""
    from triage.archive.integrity import gc
    from triage.base.timeutil import parse_duration
    from triage.views.upkeep import gc_text

    report = gc(store.open(), grace_seconds=parse_duration(grace), dry_run=dry_run)
    out.show(report, lambda found: gc_text(found, grace))


@click.command()
@store_option
@pass_store
def migrate(store):
    """Upgrade a store of format 1, 2 or 3 to format 4 in one step: run ids hash the reports'
    bytes and how they were captured, not how triage read them (every run gets its new id, and
    its old id keeps resolving in show, diff, labels); from 1 and 2, tables move to
    tables/<table>/run_id=<id>/ for engines to read in place. Other commands refuse an older
    store until it is migrated. On a store of format 4 whose catalog was indexed by an older
    triage (rows without the investigation or rerun_of of their runs, which `diff inv:NAME`
    needs), it re-indexes the catalog from the runs. Safe to run again, and to rerun after a
    kill: it finishes what it began. Run it when no one is writing."""
    from triage.archive.migrate import migrate as migrate_store
    from triage.archive.store import STORE_VERSION

    done = migrate_store(store.open(upgrade=True))
    if done.nothing:
        click.echo(f"store is at format {STORE_VERSION} already; nothing to do")
        return
    if done.reindexed:
        click.echo(f"store is at format {STORE_VERSION} already; re-indexed its catalog (rows "
                   "written by an older triage now hold their runs' investigation and rerun_of)")
        return
    click.echo(f"migrated store from format {done.from_version} to {STORE_VERSION}: {done.runs} "
               f"run(s) got new ids, {done.aliases} old id(s) kept as aliases")
