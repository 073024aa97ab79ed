"""`triage demo`: the main job on bundled captures, on any machine."""

from __future__ import annotations

import click

from triage.cli.options import output_options


@click.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway store and print its path.")
@click.option("-o", "--output", "page", type=click.Path(dir_okay=False),
              help="Write the review page here (default: review.html in a new temp folder).")
@output_options("text", "json")
def demo(keep, page, out):
    """Archive the bundled captures (5 before, 5 after) into a throwaway store and show what
    triage is for: a valid diff, the regression gate, a comparison to distrust, a review page."""
    import shutil
    import tempfile
    from pathlib import Path

    from triage.demo import run_demo
    from triage.views.demo import render_demo
    from triage.views.report import write_report

    root = Path(tempfile.mkdtemp(prefix="triage-demo-"))  # the page stays; the rest goes
    outcome = run_demo(root, lambda path, diff: write_report(path, [diff], "html"),
                       Path(page) if page else None)
    try:
        out.show(outcome, render_demo)
        if keep:
            click.echo(f"\nstore kept: triage ls --store {outcome.store}", err=True)
    finally:
        if not keep:  # what stays is the page: the folder only where the page is in it
            shutil.rmtree(root if page else outcome.store, ignore_errors=True)
            shutil.rmtree(root / "captures", ignore_errors=True)
