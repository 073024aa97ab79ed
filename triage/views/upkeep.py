"""Wording of `triage verify` and `triage gc`: one finding or removed file a line, then the
totals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triage.base.units import fmt_bytes

if TYPE_CHECKING:
    from triage.archive.integrity import GcReport, VerifyReport


def verify_text(report: VerifyReport) -> str:
    errors, leftovers = report.errors, report.leftovers
    lines = [f"{f.kind:<10} {f.shown_path}  {f.detail}" for f in errors + leftovers]
    lines.append(f"checked {report.runs} runs, {report.objects} objects "
                 f"({fmt_bytes(report.bytes)}): {len(errors)} problem(s), "
                 f"{len(leftovers)} leftover(s)")
    return "\n".join(lines)


def gc_text(report: GcReport, grace: str) -> str:
    """What gc removed, one file a line; `grace` as the user wrote it, not in seconds."""
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {item.kind:<7} {item.path}  {fmt_bytes(item.bytes)}"
             for item in report.removed]
    lines.append(f"{verb} {len(report.removed)} file(s), {fmt_bytes(report.bytes)}; "
                 f"kept {report.kept_recent} younger than --grace {grace}"
                 + (f", {report.kept_live} an archive in progress may need"
                    if report.kept_live else ""))
    return "\n".join(lines)
