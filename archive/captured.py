"""Archiving a `triage capture`: the store side of running a profiler.

`capture/session.py` runs the profiler and says what happened; this module checks what only the
store can (the label, --from, a writable store) before anything runs, keeps ncu's listings as
blobs, and archives the reports found, or the attempt when there were none. Here rather than in
`capture`, so that readers and runners never import the archive.
"""

from __future__ import annotations

from collections.abc import Callable

from triage.archive.ingest import ArchiveResult, ReportInput, RunRequest, archive_run, \
    record_attempt
from triage.archive.model import RunRecord
from triage.archive.store import Store, check_label
from triage.capture import session
from triage.capture.session import CaptureRequest, Captured, NcuListing
from triage.errors import CaptureFailed
from triage.timeutil import utc_now


def capture(request: CaptureRequest, on_output: Callable[[str], None],
            on_warning: Callable[[str], None]) -> ArchiveResult:
    """Run and record one capture; raise CaptureFailed (after recording) if no report came."""
    planned = session.plan(request)  # a usage error before the store is created
    if request.label:
        check_label(request.label)
    store = Store.open(request.store, create=True)
    store.check_writable()
    from_run = _resolve_from(store, request.from_run)
    ready = session.prepare(request, planned, on_warning)
    ncu_lists = _stored_listings(store, ready.listings)
    captured = session.run(request, ready, on_output)
    run = _run_request(request, captured, ncu_lists, from_run)
    if not captured.found:
        run.source = "capture-failed"
        provenance = session.attempt_provenance(ready.parsed, ready.version, ready.facts,
                                                captured.outcome, run.overrides["command"])
        result = record_attempt(store, run, provenance)
        raise CaptureFailed(f"{provenance['notices'][0]}; the attempt is recorded as run "
                            f"{result.id[:12]} (`triage show {result.id[:12]}`)")
    result = archive_run(store, run)
    for warning in after_run_warnings(captured, RunRecord.from_manifest(result.id,
                                                                        result.manifest)):
        on_warning(warning)
        store.annotate(result.id, utc_now(precise=True), f"warning: {warning}")
    code = captured.outcome.exit_code
    if code != 0:
        raise CaptureFailed(f"{ready.tool} exited {code}; its report was archived as "
                            f"run {result.id[:12]} (`triage show {result.id[:12]}`)")
    return result


def _stored_listings(store: Store, listings: list[NcuListing]) -> dict[str, dict]:
    """The listings' texts as blobs; the capture block's `ncu_lists` (empty for nsys)."""
    return {listing.key: {"blob": store.put_bytes(listing.text.encode())[0] if listing.text
                          else None,
                          "count": listing.table.num_rows, "error": listing.error}
            for listing in listings}


def _run_request(request: CaptureRequest, captured: Captured, ncu_lists: dict[str, dict],
                 from_run: str | None) -> RunRequest:
    record = captured.record(request, ncu_lists, from_run)
    return RunRequest([ReportInput(f.path, f.rank, f.process) for f in captured.found],
                      source="capture", label=request.label, note=request.note,
                      nsys=request.nsys, redact_patterns=request.redaction(), capture=record,
                      overrides={"command": " ".join(record["argv"])},
                      extra_tables={item.table_name: item.table
                                    for item in captured.ready.listings})


def after_run_warnings(captured: Captured, run: RunRecord) -> list[str]:
    """What the report shows went wrong: an NVTX capture range that never opened."""
    ranges = run.tables.get("nvtx_ranges")
    if captured.ready.parsed.last("--capture-range") == "nvtx" and not (ranges and ranges.rows):
        return ["--capture-range=nvtx but the report has no NVTX range: the range named by "
                "-p/--nvtx-capture never opened, so the capture may hold nothing useful"]
    return []


def _resolve_from(store: Store, ref: str | None) -> str | None:
    if not ref:
        return None
    from triage.archive.runs import resolve

    return resolve(store, ref)
