"""`triage ci run`: the CI kit's steps (triage/ci/kit.py), as the GitHub action and the GitLab
template call them."""

from __future__ import annotations

import os
from pathlib import Path

import click

from triage.cli.options import pass_store, store_option, warn


@click.group()
def ci() -> None:
    """Run triage in CI: capture, gate, report, remember."""


@ci.command("run")
@click.option("--capture", "capture", required=True, metavar="'WORDS'",
              help="The triage command that makes this job's run(s), e.g. 'capture --repeat 5 "
              "-- nsys profile --force-overwrite true -o app ./app'; --label is added.")
@click.option("--remote", required=True, metavar="URL",
              help="The team's store (s3://bucket/prefix or a path): the baseline comes from "
              "it and the new runs go to it.")
@click.option("--baseline", default="main", show_default=True, metavar="LABEL",
              help="The label of the baseline run on the remote.")
@click.option("--label", metavar="LABEL",
              help="This job's label (default: pr/N on a GitHub pull request, mr/N on a GitLab "
              "merge request, else the baseline label: a run on main becomes the baseline).")
@click.option("--max-slowdown", "max_slowdown", default=5.0, show_default=True,
              type=click.FloatRange(min=0), metavar="PCT", help="The gate (diff --max-slowdown).")
@click.option("--comment", type=click.Choice(["always", "on-change", "never"]),
              default="on-change", show_default=True,
              help="Keep one PR/MR comment: always; on-change (a failed or unjudged gate, or a "
              "change beyond noise; an existing comment is always kept current); never.")
@click.option("--forge", type=click.Choice(["auto", "github", "gitlab", "none"]), default="auto",
              show_default=True, help="Where the comment goes (auto: the CI this runs in).")
@click.option("--out", "out_dir", default="triage-ci", show_default=True,
              type=click.Path(file_okay=False),
              help="Folder for triage-report.{md,html}, triage-diff.json, triage-junit.xml.")
@store_option
@pass_store
def run(store, capture, remote, baseline, label, max_slowdown, comment, forge, out_dir):
    """Pull the baseline LABEL (and accepted runs) from the remote, run the capture, diff with
    the gate, write the reports (Markdown also to $GITHUB_STEP_SUMMARY), keep one PR/MR
    comment, push the new runs, then exit as `diff --max-slowdown` does: 0 passed (or no
    baseline yet), 4 slower beyond noise, 5 nothing judged; a run accepted with `triage
    accept` is judged against instead of the baseline."""
    from triage.ci.forge import forge_of
    from triage.ci.kit import CiSettings, run_ci
    from triage.compare.gate import enforce
    from triage.views.ci import render_ci

    settings = CiSettings(capture, remote, baseline, label or _default_label(baseline),
                          max_slowdown, comment, Path(out_dir))
    result = run_ci(settings, store.path, forge_of(forge),
                    os.environ.get("GITHUB_STEP_SUMMARY"))
    for message in result.warnings:
        warn(message)
    click.echo(render_ci(result))
    if result.diff is not None:
        enforce(result.diff.verdict, result.diff.gate, None)


def _default_label(baseline: str) -> str:
    """pr/N, mr/N, or the baseline's own label on a branch build."""
    from triage.ci.forge import pr_number

    number = pr_number(os.environ.get("GITHUB_EVENT_PATH"))
    if number:
        return f"pr/{number}"
    iid = os.environ.get("CI_MERGE_REQUEST_IID")
    return f"mr/{iid}" if iid else baseline
