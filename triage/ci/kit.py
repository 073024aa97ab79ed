"""`triage ci run`: the steps of the GitHub action and the GitLab template, one script so that
a test runs them as CI does.

1. pull the baseline label (and the accepted runs, `triage accept`) from the remote store;
2. capture (or bench) into the local store under this job's label;
3. diff the baseline against it with the gate, once, rendered as Markdown, HTML, JSON, JUnit;
4. write the Markdown to $GITHUB_STEP_SUMMARY, keep one PR/MR comment (mode: always,
   on-change, never);
5. push the new runs (with their label) to the remote: a kill leaves the remote whole, as every
   push does (archive/sync.py);
6. return the gate, which the CLI turns into the job's exit code (4, 5) after all of the above.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from triage.archive.remotes import Remote, location
from triage.archive.store import Store
from triage.archive.sync import pull, push
from triage.base.errors import RunNotFound, TriageError, UsageError
from triage.ci.forge import CommentFailed, Forge, Posted
from triage.compare.diff import diff_runs
from triage.compare.result import DiffOptions, DiffResult

MODES = ("always", "on-change", "never")
FILES = {"md": "triage-report.md", "html": "triage-report.html", "json": "triage-diff.json",
         "junit": "triage-junit.xml"}


@dataclass(frozen=True)
class CiSettings:
    """What the action's inputs (or the template's variables) say."""

    capture: str  # a triage command line: `capture -- nsys profile -o app ./app`
    remote: str  # the team's store: s3://bucket/prefix or a path
    baseline: str  # the label of the baseline (main's latest run)
    label: str  # the label of this job's run(s)
    max_slowdown_pct: float
    comment: str = "on-change"
    out: Path = Path("triage-ci")


@dataclass(frozen=True)
class CiResult:
    """What the job did; `diff` is None when the remote held no baseline yet."""

    baseline: tuple[str, ...]  # its run ids; () when the remote held none
    diff: DiffResult | None
    comment: Posted
    pushed: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def run_ci(settings: CiSettings, store_path: str | None, forge: Forge | None,
           summary: str | None = None) -> CiResult:
    """Every step, in order; the gate is the caller's to enforce (after the push)."""
    if settings.comment not in MODES:
        raise UsageError(f"--comment {settings.comment!r}: use one of {', '.join(MODES)}")
    remote = Remote("ci", location(settings.remote))
    side, baseline = _pull_baseline(store_path, remote, settings.baseline)
    _capture(settings, store_path)
    store = Store.open(store_path)
    diff = None
    if baseline:
        opts = DiffOptions(max_slowdown_pct=settings.max_slowdown_pct)
        if settings.label == settings.baseline:  # a job on main moves the label: its ids
            side = ",".join(baseline)
        diff = diff_runs(store, side, _head(settings.label, store), opts)
    body = _write_reports(settings, diff)
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(body + "\n")
    posted, warnings = _comment(forge, settings.comment, diff, body)
    sent = push(store, remote, [], _head(settings.label, store))
    return CiResult(baseline, diff, posted, sent.runs_sent, warnings)


def _pull_baseline(store_path: str | None, remote: Remote,
                   label: str) -> tuple[str, tuple[str, ...]]:
    """The baseline as a diff side names it (LABEL, or the series 'LABEL/*' a `--repeat` job
    left) and its run ids, pulled with the accepted runs of the remote; ids () when the remote
    has no such label yet (the first run of a project: it becomes the baseline). The remote
    store is made if need be: this job pushes into it."""
    from triage.archive.remotes import open_remote

    source = open_remote(remote, create=True)
    for glob in (label, f"{label}/*"):
        try:
            pulled = pull(store_path, remote, [], glob)
        except RunNotFound:
            continue
        accepted = sorted({a.run_id for a in source.acceptances.all()})
        if accepted:
            pull(store_path, remote, accepted, None)
        return glob, tuple(dict.fromkeys(run for run in pulled.labels.values() if run))
    Store.open(store_path, create=True)
    return label, ()


def _capture(settings: CiSettings, store_path: str | None) -> None:
    """The capture or bench command, as `triage WORDS --label LABEL`: a process of its own,
    as a user runs it, its output in the job's log."""
    words = shlex.split(settings.capture)
    if not words:
        raise UsageError("--capture is empty: give a triage command, e.g. 'capture -- nsys "
                         "profile -o app ./app'")
    env = {**os.environ, **({"TRIAGE_STORE": store_path} if store_path else {})}
    done = subprocess.run([sys.executable, "-m", "triage", words[0], "--label", settings.label,
                           *words[1:]], env=env, check=False)
    if done.returncode != 0:
        raise TriageError(f"`triage {settings.capture}` exited {done.returncode}; its output "
                          "is above")


def _head(label: str, store: Store) -> str:
    """This job's side: the label, or its series (`LABEL/*`) after `--repeat N`."""
    return label if store.pointer(f"labels/{label}") else f"{label}/*"


def _write_reports(settings: CiSettings, diff: DiffResult | None) -> str:
    """Every report into the output folder (the action uploads it); returns the Markdown."""
    from triage.archive.atomic import write_user_file
    from triage.views import text as textview

    settings.out.mkdir(parents=True, exist_ok=True)
    if diff is None:
        body = (f"**No baseline yet:** the remote store has no run labelled "
                f"`{settings.baseline}`; this job's run was pushed as `{settings.label}`.")
        write_user_file(settings.out / FILES["md"], body.encode())
        return body
    from triage.views.junit import render_junit
    from triage.views.report import render_html, render_markdown

    body = render_markdown([diff])
    outputs = {"md": body.encode(), "html": render_html([diff]).encode(),
               "json": textview.to_json(diff.to_json()).encode(), "junit": render_junit(diff)}
    for kind, data in outputs.items():
        write_user_file(settings.out / FILES[kind], data)
    return body


def changed(diff: DiffResult | None) -> bool:
    """Worth a comment under `on-change`: no baseline, a gate that failed or judged nothing,
    or any judged time that moved beyond noise (faster too)."""
    gate = diff.gate if diff is not None else None
    if gate is None:
        return True
    return not gate.passed or any(c.significance == "significant" for c in gate.checks)


def _comment(forge: Forge | None, mode: str, diff: DiffResult | None,
             body: str) -> tuple[Posted, tuple[str, ...]]:
    """The comment per mode; a refused comment is a warning, never a lost gate or push."""
    if forge is None or mode == "never":
        return Posted("skipped"), ()
    try:
        return forge.post(body, update_only=mode == "on-change" and not changed(diff)), ()
    except CommentFailed as exc:
        return Posted("failed"), (str(exc),)
