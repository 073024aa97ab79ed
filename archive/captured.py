"""Archiving a `triage capture`: the store side of running a profiler.

`capture/session.py` runs the profiler and says what happened; this module checks what only the
store can (the label, --from, a writable store) before anything runs, keeps ncu's listings and
the dirty tree's patch (redacted) as blobs, and archives the reports found, or the attempt when
there were none. Here rather than in `capture`, so that readers and runners never import the
archive.

The patch is stored when `git diff HEAD` is at most PATCH_LIMIT bytes: 8 MB holds any edit of
source by hand many times over (a generated or data file is what grows past it), limits what
one capture adds to the store beyond its reports, and bounds the time the line-by-line
redaction takes (about 0.8 s per MB here). Over the limit,
`patch` is null and `patch_note` says the size and the limit.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from triage.archive import lease
from triage.archive.ingest import ReportInput, RunRequest, archive_run, record_attempt
from triage.archive.labels import check_label, series_label
from triage.archive.model import ArchiveResult, RunRecord
from triage.archive.store import Store
from triage.capture import redact, session
from triage.capture.git_patch import redact_patch
from triage.capture.git_state import GitSnapshot
from triage.capture.outputs import OUTPUT_OPTION
from triage.capture.profiler_args import ParsedCommand
from triage.capture.progress import ProgressEvent
from triage.capture.session import CaptureRequest, Captured, CapturedNcuListing
from triage.base.errors import CaptureFailed, PatchNotStored, UsageError
from triage.base.timeutil import utc_now
from triage.base.units import fmt_bytes

COUNTER = re.compile(r"%[npi]")  # a name that differs on every run: nothing to overwrite
PATCH_LIMIT = 8_000_000  # bytes of `git diff HEAD` stored with a capture (see the docstring)


class OutputSink(Protocol):
    """Where one capture's profiler output and elapsed-time ticks go (a terminal's progress
    line): called with each event, closed when that capture ends."""

    def __call__(self, event: ProgressEvent) -> None: ...

    def close(self) -> None: ...


def check_series(label: str | None, count: int) -> None:
    """A series of captures needs a label to number its runs by (before anything is written)."""
    if count > 1 and not label:
        raise UsageError("--repeat N needs --label NAME: the runs are labelled NAME/1 .. NAME/N")


def check_overwrite(parsed: ParsedCommand, count: int) -> None:
    """Repeats that write one fixed report name need the profiler told to overwrite it: without
    that, nsys keeps the first report and writes the others to $TMPDIR, ncu refuses."""
    pattern = parsed.last(OUTPUT_OPTION[parsed.tool]) if parsed.tool else None
    if count < 2 or not pattern or COUNTER.search(pattern):
        return  # nsys's default name is numbered; ncu without -o writes nothing
    if parsed.tool == "nsys" and (parsed.last("--force-overwrite") or "").lower() != "true":
        raise UsageError(f"--repeat {count} writes {pattern} every time: add "
                         "--force-overwrite true to the nsys options (or put %p in -o)")
    if parsed.tool == "ncu" and not parsed.has("--force-overwrite"):
        raise UsageError(f"--repeat {count} writes {pattern} every time: add -f to the ncu "
                         "options (or put %i in -o)")


def capture_series(request: CaptureRequest, count: int, new_output: Callable[[], OutputSink],
                   on_warning: Callable[[str], None],
                   tick_after: float = 1.0) -> list[ArchiveResult]:
    """`triage capture --repeat N`: the same capture N times, run i labelled LABEL/i and all of
    them grouped under LABEL, so that `triage diff 'LABEL/*' ...` measures their noise. A
    failed try is recorded outside the group (no LABEL/i label, no group; its capture block's
    `series` says LABEL/i, which diff and history list beside the group) and the series goes
    on; at the end CaptureFailed names every failed try beside the runs that are the group.
    An interrupted try ends the series: the user asked it to stop."""
    check_series(request.label, count)
    if count > 1:
        check_overwrite(session.plan(request).parsed, count)
    results: list[ArchiveResult] = []
    tries: list[int] = []  # the try each result is
    failures: list[tuple[int, CaptureFailed]] = []
    for i in range(1, count + 1):
        one = request if count == 1 else replace(
            request, label=series_label(request.label, i, count),
            group=request.group or request.label, series=request.label)
        sink = new_output()
        try:
            results.append(capture(one, sink, on_warning, tick_after))
            tries.append(i)
        except CaptureFailed as failed:
            if count == 1:
                raise
            failures.append((i, failed))
            if failed.exit_code != CaptureFailed.exit_code:  # interrupted: stop here
                break
        finally:
            sink.close()
    if failures:
        members = list(zip(tries, results, strict=True))
        raise _series_failure(request.label, count, failures, members)
    return results


def _series_failure(label: str | None, count: int, failures: list[tuple[int, CaptureFailed]],
                    results: list[tuple[int, ArchiveResult]]) -> CaptureFailed:
    """One error naming each failed try (with its own message) and the runs of the group; its
    exit code is the last failure's (an interrupted try's signal code)."""
    members = ", ".join(f"{label}/{i} {r.id[:12]}" for i, r in results)
    tries = "; ".join(f"try {i} of {count} failed and is not in the group {label!r}: {failed}"
                      for i, failed in failures)
    error = CaptureFailed(f"{tries}; the group holds {len(results)} run(s)"
                          f"{': ' + members if members else ''}")
    error.exit_code = failures[-1][1].exit_code
    return error


def capture(request: CaptureRequest, on_output: Callable[[ProgressEvent], None],
            on_warning: Callable[[str], None], tick_after: float = 1.0) -> ArchiveResult:
    """Run and record one capture; raise CaptureFailed (after recording) if no report came.
    `on_output` gets the profiler's output and elapsed-time ticks (capture/progress.py)."""
    planned = session.plan(request)  # a usage error before the store is created
    if request.label:
        check_label(request.label)
    store = Store.open(request.store, create=True)
    store.check_writable()
    from_run = resolve_from(store, request.from_run)
    if request.investigation is None and from_run:
        request = replace(request, investigation=investigation_of(store, from_run))
    ready = session.prepare(request, planned, on_warning)
    ncu_lists = _stored_listings(store, ready.listings)
    importing = _import_archive_beside(planned.tool)
    try:
        captured = session.run(request, ready, on_output, tick_after)
    finally:
        importing.join()  # before the archive, whose ncu reader forks: no thread left running
    tried = None
    if captured.failed and request.series:  # a failed try is no sample of the group
        tried, request = request.label, replace(request, label=None, group=None)
    result = _archive(store, request, captured, ncu_lists, from_run, tried)
    for warning in after_run_warnings(captured, result.record):
        on_warning(warning)
        store.annotations.annotate(result.id, utc_now(precise=True), f"warning: {warning}")
    if captured.failed:
        raise CaptureFailed(f"{ready.tool} {captured.outcome.status}; its report was archived "
                            f"as run {result.id[:12]} (`triage show {result.id[:12]}`)")
    return result


def _import_archive_beside(tool: str) -> threading.Thread:
    """Import what archiving the report needs (pyarrow, the table writers, summaries and
    catalog; for nsys, DuckDB and the export's reader with its connection) on a thread started
    as the profiler starts: 0.4-0.5 s that would otherwise follow the profiler. A failed import
    is left for the archive to meet again, where it is reported."""
    def run() -> None:
        with contextlib.suppress(Exception):
            import triage.archive.catalog  # noqa: F401
            import triage.archive.summaries  # noqa: F401
            import triage.archive.tables  # noqa: F401

            if tool == "nsys":
                from triage.capture.nsys import import_readers

                import_readers()

    thread = threading.Thread(target=run, name="triage-imports", daemon=True)
    thread.start()
    return thread


@lease.holding("capture")
def _archive(store: Store, request: CaptureRequest, captured: Captured,
             ncu_lists: dict[str, dict], from_run: str | None,
             tried: str | None = None) -> ArchiveResult:
    """The run, or the attempt when no report came, with its patch blob: under one lease, since
    the blob is referenced by nothing until the manifest lands and gc must not take it. `tried`:
    the label a failed try of a series would have had (LABEL/i), kept as the capture block's
    `series` (only there: an ordinary run's manifest, and so its id, is as before)."""
    git = stored_git(store, captured.git, request.redaction())
    run = _run_request(request, captured, ncu_lists, git, from_run)
    if tried:
        run.capture = {**(run.capture or {}), "series": tried}
    if captured.found:
        return archive_run(store, run)
    ready = captured.ready
    run.source = "capture-failed"
    provenance = session.attempt_provenance(ready.parsed, ready.version, ready.facts,
                                            captured, run.overrides["command"])
    result = record_attempt(store, run, provenance)
    failed = CaptureFailed(f"{provenance['notices'][0]}; the attempt is recorded as run "
                           f"{result.id[:12]} (`triage show {result.id[:12]}`)")
    if captured.outcome.interrupted:  # the shell's code for a signal: 130 for SIGINT
        failed.exit_code = 128 + signal.Signals[captured.outcome.interrupted].value
    raise failed


def stored_git(store: Store, snapshot: GitSnapshot, patterns: tuple[str, ...]) -> dict:
    """The capture block's `git`: the state as recorded, with `patch` (the stored blob) and
    `patch_note` (why there is none, where that needs saying) for a repository."""
    state, patch = snapshot.state, snapshot.patch
    if state.get("repository") is None:
        return state
    stored, note = None, None
    if patch is None:
        note = "no commits yet: there is nothing to diff against"
    elif len(patch) > PATCH_LIMIT:
        note = (f"the patch is {fmt_bytes(len(patch))} ({len(patch):,} bytes), "
                f"over the {fmt_bytes(PATCH_LIMIT)} limit for a stored patch")
    elif patch:
        stored = _stored_patch(store, patch, patterns)
    return {**state, "patch": stored, "patch_note": note}


def _stored_patch(store: Store, patch: bytes, patterns: tuple[str, ...]) -> dict:
    """The patch as a blob, redacted with the value shapes and the user's name patterns."""
    redacted = redact_patch(patch, redact.extra_patterns(patterns))
    sha, size = store.objects.put_bytes(redacted.data)
    return {"sha256": sha, "bytes": size, "redactions": redacted.redactions,
            "binary_left_out": list(redacted.binary_left_out)}


def stored_patch(store: Store, run: RunRecord) -> bytes:
    """The patch a capture stored, for `git apply` on a checkout of its commit (the tree it ran,
    but for redacted values); PatchNotStored says why a run has none."""
    git = run.capture.git if run.capture is not None else None
    if git is None:
        raise PatchNotStored(f"run {run.id[:12]} records no git state: only `triage capture` "
                             "records the source tree it ran")
    if git.patch is None:
        raise PatchNotStored(f"run {run.id[:12]} has no stored patch: {git.why_no_patch}")
    return store.objects.read(git.patch.sha256)


def _stored_listings(store: Store, listings: list[CapturedNcuListing]) -> dict[str, dict]:
    """The listings' texts as blobs; the capture block's `ncu_lists` (empty for nsys)."""
    return {listing.key: {"blob": store.objects.put_bytes(listing.text.encode())[0] if listing.text
                          else None,
                          "count": listing.table.num_rows, "error": listing.error}
            for listing in listings}


def _run_request(request: CaptureRequest, captured: Captured, ncu_lists: dict[str, dict],
                 git: dict, from_run: str | None) -> RunRequest:
    record = captured.record(request, ncu_lists, git, from_run)
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


def investigation_of(store: Store, run_id: str) -> str | None:
    """The investigation a run belongs to (`--investigation`, or inherited by `--from`)."""
    capture = store.runs.read_manifest(run_id).get("capture")
    found = capture.get("investigation") if isinstance(capture, dict) else None
    return found if isinstance(found, str) else None


def resolve_from(store: Store, ref: str | None) -> str | None:
    if not ref:
        return None
    from triage.archive.runs import resolve

    return resolve(store, ref)
