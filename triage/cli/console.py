"""`triage publish` and `triage serve`: the archive in a browser (the team's console)."""

from __future__ import annotations

import click

from triage.cli.options import pass_store, store_option


@click.command()
@click.argument("directory", type=click.Path(file_okay=False))
@store_option
@pass_store
def publish(store, directory):
    """Write the store as a static site to DIRECTORY: the runs (filters and pages), each run
    (show, provenance, top kernels, labels, series), the review page of each label family
    against the one before it and of each run of a series against the run before it, each
    series' history with its steps and boundaries, and the regressions (steps that got slower)
    with an Atom feed. A series is a label family (nightly/1, nightly/2, ...) or a workload
    (the runs of one program and arguments, as `history --workload` follows them); its newest
    50 runs are followed. It opens from file:// and from any static host.

    Publishing again renders only the pages whose inputs changed (and says how many). The site
    is built beside the last one and DIRECTORY (a link) is switched to it at the end: a killed
    publish leaves the last site whole. DIRECTORY and its run/ folders are symbolic links:
    upload or copy it with a tool that follows them (`aws s3 sync DIRECTORY s3://bucket/`,
    `cp -rL`, `rsync -rL`)."""
    from triage.views.site import publish as publish_site

    done = publish_site(store.open(), directory)
    click.echo(f"published {done.path}: {done.written} page(s) written, {done.kept} unchanged"
               + (f", {done.removed} removed" if done.removed else "")
               + f"; open {done.path}/index.html")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback lets others read the store.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on.")
@store_option
@pass_store
def serve(store, host, port):
    """Serve the pages `triage publish` writes, live from the store, plus the review page of any
    two runs at /diff/A/B (runs, id prefixes, labels or label globs). Read-only: it answers GET
    and HEAD only and never writes the store. Needs the `console` extra (pip install
    'triage-gpu[console]')."""
    try:
        from triage.views.server import serve as run_server
    except ImportError as exc:
        from triage.base.errors import UsageError

        raise UsageError(f"triage serve needs {exc.name}: pip install 'triage-gpu[console]'"
                         ) from None
    store.open()  # a missing store is named before the server starts
    click.echo(f"serving the store at http://{host}:{port}/ (Ctrl-C stops)", err=True)
    run_server(store.open, host, port)
