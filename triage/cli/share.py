"""`triage export`, `import`, `remote`, `push` and `pull`: runs handed between stores."""

from __future__ import annotations

import click

from triage.cli.options import (output_options, pass_store, runs_named, store_option,
                                timeout_option)
from triage.views import text as textview


@click.command(name="export")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Bundle file: .tar, .tar.gz or .tar.zst (needs the zstandard module).")
@click.option("--labels", is_flag=True, help="Include the labels that point at these runs.")
@store_option
@pass_store
def export_command(store, runs, output, labels):
    """Write runs with their reports, tables and notes to one bundle for a colleague."""
    from triage.archive.bundle import export_runs
    from triage.base.units import fmt_bytes
    from triage.views.progress import status_line

    named = runs_named(store, list(runs))  # before the store opens: it may make it
    with status_line() as progress:
        result = export_runs(store.open(), named, output, labels=labels, progress=progress)
    click.echo(f"wrote {result.path}: {len(result.runs)} run(s), {result.objects} objects "
               f"({fmt_bytes(result.bytes)})")


@click.command(name="import")
@click.argument("bundle", type=click.Path(dir_okay=True))
@click.option("--labels", is_flag=True, help="Also set the labels the bundle carries.")
@output_options("text", "json")
@store_option
@pass_store
def import_command(store, bundle, labels, out):
    """Add the runs of a bundle from `triage export` (every hash is checked first)."""
    from triage.archive.bundle import import_bundle
    from triage.views.progress import status_line
    from triage.views.sync import render_import

    with status_line(out.json) as progress:
        result = import_bundle(store.path, bundle, labels=labels, progress=progress)
    out.show(result, render_import)


@click.group()
def remote():
    """Name the other stores this one pushes to and pulls from (kept in the store)."""


@remote.command(name="add")
@click.argument("name")
@click.argument("url")
@click.option("--endpoint", metavar="URL", help="s3:// remote: its S3-compatible server, "
              "http(s)://HOST[:PORT] (default: $AWS_ENDPOINT_URL, else AWS S3).")
@click.option("--region", help="s3:// remote: its region (default: $AWS_REGION).")
@click.option("--profile", help="s3:// remote: the profile of ~/.aws/credentials whose keys "
              "it uses (default: the AWS_* variables, AWS_PROFILE).")
@click.option("--anonymous", is_flag=True, help="s3:// remote: send no credentials (a public "
              "bucket).")
@click.option("--attempts", type=click.IntRange(1, 20), help="s3:// remote: tries of each "
              "request, with exponential backoff and jitter [default: 4].")
@click.option("--timeout", type=click.FloatRange(0.1, 600), metavar="SECONDS",
              help="s3:// remote: seconds one request may wait for an answer [default: 3].")
@click.option("--retry-time", type=click.FloatRange(0, 3600), metavar="SECONDS",
              help="s3:// remote: seconds triage keeps running again an operation the S3 "
              "client gave up on [default: 30].")
@store_option
@pass_store
def remote_add(store, name, url, endpoint, region, profile, anonymous, attempts, timeout,
               retry_time):
    """Add remote NAME: a store directory (local, or on a shared filesystem) or a store URL.

    An s3:// remote keeps its own server settings, given as options or in the URL
    (s3://bucket/prefix?endpoint=http://HOST:PORT&region=R&profile=P, or credentials=anonymous;
    attempts=N&timeout=S&retry_time=S); they win over the AWS_* variables for this remote
    ($TRIAGE_S3_ATTEMPTS, _TIMEOUT and _RETRY_TIME win over its network settings). Each is
    checked now. Keys are never kept: a URL with user:password@ is refused; they stay in the
    profile or the environment."""
    from triage.archive.remotes import add_remote

    settings = {"endpoint": endpoint, "region": region, "profile": profile,
                "credentials": "anonymous" if anonymous else None, "attempts": attempts,
                "timeout": timeout, "retry_time": retry_time}
    added = add_remote(store.open(create=True), name, url, settings)
    click.echo(f"remote {added.name} -> {textview.printable(added.shown)}")


@remote.command(name="list")
@output_options("text", "json")
@store_option
@pass_store
def remote_list(store, out):
    """List the remotes, one a line: NAME URL."""
    from triage.archive.remotes import list_remotes
    from triage.views.sync import render_remotes

    out.show(list_remotes(store.open()), render_remotes)


@remote.command(name="remove")
@click.argument("name")
@store_option
@pass_store
def remote_remove(store, name):
    """Forget remote NAME (its store is not touched)."""
    from triage.archive.remotes import remove_remote

    gone = remove_remote(store.open(), name)
    click.echo(f"removed remote {gone.name} ({textview.printable(gone.shown)})")


@click.command()
@click.argument("words", nargs=-1, metavar="[NAME] [RUN]...")
@click.option("--label", "label_glob", metavar="GLOB",
              help="The runs labels GLOB matches point at ('release/*'), with those labels.")
@timeout_option
@output_options("text", "json")
@store_option
@pass_store
def push(store, words, label_glob, timeout, out):
    """Send runs (default: all) with their notes and labels to remote NAME (default: the only
    remote, else origin). Only what the remote lacks is sent, each object checked against its
    hash on arrival; a run appears there once whole. Safe to rerun after a kill."""
    from triage.archive.remotes import push_target
    from triage.archive.sync import push as push_runs
    from triage.views.progress import status_line
    from triage.views.sync import render_sync

    from triage.archive.network import network_chosen

    st = store.open()
    target, refs = push_target(st, list(words))
    with network_chosen(timeout=timeout), status_line(out.json) as progress:
        result = push_runs(st, target, refs, label_glob, progress=progress)
    out.show(result, render_sync)


@click.command()
@click.argument("name")
@click.argument("runs", nargs=-1)
@click.option("--label", "label_glob", metavar="GLOB",
              help="The runs labels GLOB matches point at there, with those labels.")
@timeout_option
@output_options("text", "json")
@store_option
@pass_store
def pull(store, name, runs, label_glob, timeout, out):
    """Fetch runs (default: all) with their notes and labels from remote NAME (or a store's
    path or URL) into this store, which is made if need be. Incremental and checked like
    push."""
    from triage.archive.remotes import named_remote, remotes_of
    from triage.archive.sync import pull as pull_runs
    from triage.views.progress import status_line
    from triage.views.sync import render_sync

    from triage.archive.network import network_chosen

    target = named_remote(remotes_of(store.path), name)
    with network_chosen(timeout=timeout), status_line(out.json) as progress:
        result = pull_runs(store.path, target, list(runs), label_glob, progress=progress)
    out.show(result, render_sync)
