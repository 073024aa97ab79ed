"""Wording of `triage archive`, `capture`, `ls` and `label`: one line a run, the listing as a
table as wide as the terminal, a label and where it points."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage.views import text as textview

if TYPE_CHECKING:
    from triage.archive.listing import RunList
    from triage.archive.model import ArchiveBatch, ArchiveResult

# the columns `triage ls` reads for its text table (--json and --csv read every column)
LS_TEXT_COLUMNS = ("id", "archived", "tool", "tool_version", "gpu", "kernels", "report_names")


def archive_line(result: ArchiveResult) -> str:
    """One archived run as `triage archive` and `capture` list it."""
    record = result.record
    state = "new" if result.new else "repaired" if result.repaired else "already archived"
    version = record.tool_version or "version unknown"
    kernels = f"{record.kernels} kernel" + ("" if record.kernels == 1 else "s")
    line = (f"{textview.short_id(record.id)}  {record.tool} {version}  "
            f"{record.gpu_name or 'GPU unknown'}  {kernels}  "
            f"{textview.printable(', '.join(r.name for r in record.reports))}  ({state})")
    return line + "".join(f"\n    note: {n}" for n in record.notices)


def archive_lines(results: list[ArchiveResult]) -> str:
    return "\n".join(map(archive_line, results))


def refusal_lines(batch: ArchiveBatch, given: int) -> str:
    """Each report an archive set aside, one line each (its message escaped: a file name may
    hold a newline), and the count of what was done."""
    lines = [f"triage: refused: {textview.printable(r.message)}" for r in batch.refused]
    archived = len(batch.results)
    lines.append(f"triage: archived {archived} of {given} report{'' if given == 1 else 's'}; "
                 f"{len(batch.refused)} refused (named above)")
    return "\n".join(lines)


def interrupted_line(filed: tuple[str, ...] | None) -> str:
    """Ctrl-C's one line: for an archive, which runs it filed before (each whole: a run is
    visible only once complete), or that it filed none."""
    if filed is None:
        return "interrupted (SIGINT)"
    if not filed:
        return "interrupted (SIGINT); nothing was filed"
    runs = ", ".join(textview.short_id(run_id) for run_id in filed)
    return (f"interrupted (SIGINT) after filing run {runs}; archive the same report(s) again "
            "to file the rest (`already archived` for those filed)")


def ls_text(found: RunList, width: int | None = None) -> str:
    """The listing as a table `width` wide (the terminal's: `textview.fit_width`), each value
    whole where `width` is None; and what it left out."""
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
    headers = ["id", "archived", "tool", "version", "gpu", "kernels", "labels", "reports"]
    give_way = [(4, 20), (3, 0), (7, 16), (6, 10), (4, 12), (7, 0), (6, 0), (4, 0)]
    text = textview.table(body, headers, align_right={5}) if width is None else \
        textview.fitted_table(body, headers, width, give_way=give_way, align_right={5})
    if found.matched > len(rows):
        text += (f"\n{found.matched - len(rows):,} older not shown (the newest {len(rows)} of "
                 f"{found.matched:,}); add -n all to list every one")
    return text


def label_target(pointer: str | None) -> str:
    """What a label file holds, as the listing shows it: a short run id, or what is wrong."""
    return textview.printable(textview.short_id(pointer)) or "unreadable"


def label_list(labels: dict[str, str]) -> str:
    if not labels:
        return "no labels yet; `triage label NAME [RUN]` points one at a run"
    return "\n".join(f"{n} -> {label_target(r)}" for n, r in sorted(labels.items()))


def label_moved(name: str, run_id: str, was: str | None) -> str:
    """`rc1 -> 1a2b...`, and where the label pointed before when it moved."""
    return f"{name} -> {textview.short_id(run_id)}" + (
        f" (was {label_target(was)})" if was not in (None, run_id) else "")


def acceptance_line(accepted) -> str:
    """`triage accept`: which run was accepted, by whom, and why."""
    named = f"{textview.printable(accepted.label)} -> " if accepted.label else ""
    return (f"accepted {named}{textview.short_id(accepted.run_id)} by "
            f"{textview.printable(accepted.who)} at {accepted.time}: "
            f"{textview.printable(accepted.reason)}")


def label_history(moves: list) -> str:
    """`triage label --history NAME`: when, by which writer, to which run (newest last)."""
    return "\n".join(f"{m.time}  {m.writer}  " + (label_target(m.run_id) if m.run_id else "deleted")
                     for m in moves)
