"""Wording of `triage push`, `pull`, `import` and `remote list` (the library returns data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage.archive.labels import MAX_SKEW
from triage.views import text as textview
from triage.views.runs import label_moved, label_target
from triage.base.units import fmt_bytes

if TYPE_CHECKING:
    from triage.archive.bundle import ImportResult
    from triage.archive.remotes import Remote
    from triage.archive.sync import SyncResult


def render_sync(result: SyncResult) -> str:
    """One line per run sent, one for the runs already there, the labels, and the totals."""
    short = textview.short_id
    url = textview.printable(result.url)
    where = url if result.remote == result.url else f"{result.remote} ({url})"
    verb = "pushed to" if result.direction == "push" else "pulled from"
    lines = [f"{short(run_id)}  {verb} {result.remote}" for run_id in result.runs_sent]
    if result.runs_present:
        lines.append(f"{len(result.runs_present)} run(s) there already")
    lines += [_label_line(m.name, m.now, m.was) for m in result.merges]
    lines += [f"refused a move of label {textview.printable(m.name)} by writer "
              f"{textview.printable(move.writer)} dated {textview.printable(move.time)}: more "
              f"than {MAX_SKEW.seconds // 60} minutes ahead of this clock (it would pin the "
              "label until then); fix that writer's clock and move the label again"
              for m in result.merges for move in m.refused]
    if result.objects_resumed:
        lines.append(f"resumed: {result.objects_resumed} object(s) of unfinished runs were there "
                     "already (an earlier try's), checked by name and size, not sent again")
    if result.retried:
        lines.append(f"retried: {result.retried} request(s) the S3 client gave up on were run "
                     "again (the client's own retries of each request are not counted)")
    lines.append(f"{len(result.runs_sent)} run(s) {verb} {where}: {result.objects_sent} "
                 f"object(s) sent ({fmt_bytes(result.bytes_sent)}), "
                 f"{result.objects_skipped} there already")
    return "\n".join(lines)


def _label_line(name: str, now: str | None, was: str | None) -> str:
    """`name -> run (was other)`, as `triage label` says a move: no label is moved unsaid."""
    if now is None:
        return f"{name} -> (deleted there)" + (f" (was {label_target(was)})" if was else "")
    return label_moved(name, now, was)


def render_remotes(remotes: list[Remote]) -> str:
    if not remotes:
        return "no remotes yet; `triage remote add NAME URL` adds one"
    width = max(len(r.name) for r in remotes)
    return "\n".join(f"{r.name:<{width}}  {textview.printable(r.shown)}" + "".join(
        f"  {key}={textview.printable(value)}" for key, value in r.settings().items())
        for r in remotes)


def render_import(result: ImportResult) -> str:
    """`triage import`: the runs added or there already, the labels set, the bytes added."""
    short = textview.short_id
    lines = [f"{short(run_id)}  added" for run_id in result.runs_added]
    lines += [f"{short(run_id)}  already in the store" for run_id in result.runs_present]
    lines += [label_moved(name, run_id, result.labels_was.get(name))
              for name, run_id in result.labels_set.items()]
    if result.labels_skipped:
        lines.append(f"labels not set (pass --labels): {', '.join(result.labels_skipped)}")
    lines.append(f"{result.objects_added} objects ({fmt_bytes(result.bytes_added)}) added")
    return "\n".join(lines)
