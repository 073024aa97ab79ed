"""Archiving reports: validate, extract tables, store blobs, write the manifest, index.

Order matters for "visible only when complete": every input is validated before the store is
touched; tables and blobs are written as objects; then annotations; then the manifest (the run
becomes visible); then the dedup key and the catalog segment (both re-derivable); then labels.
A failure before the manifest leaves only unreferenced objects, which `triage gc` removes.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from triage import __version__
from triage.archive import catalog
from triage.archive.atomic import hash_file
from triage.archive.manifest import MANIFEST_KIND, MANIFEST_VERSION
from triage.archive.store import Staged, Store, canonical_json, check_label
from triage.archive.summaries import SUMMARIES, compute_summaries
from triage.archive.tables import TableSet, tables_for_tool, tables_version
from triage.capture import redact
from triage.capture.formats import PreparedReport, detect_format, prepare_report
from triage.errors import TriageError, UsageError
from triage.timeutil import utc_now


@dataclass
class ReportInput:
    """One report file to put in a run, with what is known about who wrote it."""

    path: Path
    rank: int | None = None
    process: dict | None = None


@dataclass
class RunRequest:
    """Everything needed to archive one run."""

    inputs: list[ReportInput]
    source: str = "archive"
    label: str | None = None
    note: str | None = None
    nsys: str | None = None
    redact_patterns: tuple[str, ...] = ()
    capture: dict | None = None
    overrides: dict = field(default_factory=dict)
    # Tables that come with the request rather than from a report (a capture's ncu listings).
    extra_tables: dict[str, list[tuple]] = field(default_factory=dict)


@dataclass
class ArchiveResult:
    """The outcome of archiving one run."""

    id: str
    new: bool
    manifest: dict


def archive_files(store_path, paths: list[str], label: str | None = None,
                  note: str | None = None, nsys: str | None = None,
                  redact_patterns: tuple[str, ...] = ()) -> list[ArchiveResult]:
    """`triage archive REPORT...`: one run per report; every file is validated first."""
    if label and len(paths) > 1:
        raise UsageError("--label names one run; archive one report at a time to label it")
    if label:
        check_label(label)
    patterns = redact.user_patterns(redact_patterns)
    requests = [RunRequest([ReportInput(Path(p))], label=label, note=note, nsys=nsys,
                           redact_patterns=patterns) for p in paths]
    for request in requests:
        check_readable(request.inputs[0].path)
    found = [_exported_before(store_path, request) for request in requests]
    prepared: list[list[PreparedReport]] = []
    try:
        # Every report is validated before the store is opened (or created): a bad input,
        # even the last of several, leaves the store untouched.
        for request, (run_id, digest) in zip(requests, found):
            prepared.append([] if run_id else [prepare_report(i.path, nsys=request.nsys,
                                                              sha256=digest)
                                               for i in request.inputs])
        store = Store.open(store_path, create=True)
        store.check_writable()
        return [_finish(store, run_id, store.read_manifest(run_id), r, new=False) if run_id
                else archive_run(store, r, p)
                for r, p, (run_id, _digest) in zip(requests, prepared, found, strict=True)]
    finally:
        for items in prepared:
            for item in items:
                item.close()


def _exported_before(store_path, request: RunRequest) -> tuple[str | None, str | None]:
    """(run id, sha256) of a .nsys-rep/.qdrep archived before, found by the file's hash alone.

    Reading one means running `nsys export` (minutes for a large capture, and an nsys that may
    be missing here); a report already in the store is the same bytes, validated then. The hash
    is passed on, so a new report is not hashed twice.
    """
    path = request.inputs[0].path
    try:
        if len(request.inputs) != 1 or detect_format(path) not in ("nsys-rep", "qdrep"):
            return None, None
        store = Store.open(store_path)
        digest = hash_file(path)[0]
        return store.lookup_key(dedup_key("nsys", [digest], request)), digest
    except (OSError, TriageError):  # no store yet, or a problem the real attempt will report
        return None, None


def check_readable(path: Path) -> None:
    """One-line errors for inputs that are not readable files."""
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. a folder on the way without search (x) permission
        raise TriageError(f"{path}: {exc.strerror.lower()}; check the permissions of the file "
                          "and of the folders above it") from None
    if not exists:
        raise TriageError(f"{path}: no such file")
    if path.is_dir():
        raise TriageError(f"{path}: is a directory; pass the report files inside it")
    if not path.is_file():  # reading a FIFO or a device would block or never end
        raise TriageError(f"{path}: not a regular file (a pipe or device); pass a report file")
    if not os.access(path, os.R_OK):
        raise TriageError(f"{path}: permission denied; check the file's permissions")


def dedup_key(tool: str, digests: list[str], request: RunRequest) -> str:
    """Same reports + same table schema + same redaction = same run, whatever triage version."""
    doc = {"tool": tool, "tables": tables_version(), "reports": digests,
           "redact": sorted(request.redact_patterns), "source": request.source}
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def dedup_key_of(manifest: dict) -> str | None:
    """The dedup key of an archived run, rebuilt from its manifest (an imported run gets the key
    `archive` would look for); None for what archive never keys (captures, failed attempts) or
    would not find (tables of another schema version). User redaction patterns are in the
    manifest when there were any (a run archived with them before the manifest recorded them
    keys as if without)."""
    reports = manifest.get("reports") or []
    if manifest.get("capture") is not None or not reports \
            or manifest.get("tables_schema_version") != tables_version():
        return None
    request = RunRequest([], source=manifest.get("source") or "archive",
                         redact_patterns=tuple(manifest.get("redact_patterns") or ()))
    return dedup_key(manifest["tool"], [r["sha256"] for r in reports], request)


def archive_run(store: Store, request: RunRequest,
                prepared: list[PreparedReport] | None = None) -> ArchiveResult:
    """Archive the reports of one request as one run (or find the run that has them)."""
    if prepared is None:
        prepared = [prepare_report(i.path, nsys=request.nsys) for i in request.inputs]
    try:
        tools = {p.tool for p in prepared}
        if len(tools) > 1:
            raise UsageError("one run holds reports of one tool; archive ncu and nsys separately")
        digests = [p.sha256 for p in prepared]
        key = dedup_key(prepared[0].tool, digests, request) if request.capture is None else None
        existing = store.lookup_key(key) if key else None
        if existing:
            return _finish(store, existing, store.read_manifest(existing), request, new=False)
        manifest = _build(store, request, prepared, digests)
        run_id = store.write_manifest(manifest)
        if key:
            store.record_key(key, run_id)
        return _finish(store, run_id, manifest, request, new=True)
    finally:
        for item in prepared:
            item.close()


def _finish(store: Store, run_id: str, manifest: dict, request: RunRequest,
            new: bool) -> ArchiveResult:
    annotations = store.annotate(run_id, utc_now(precise=True), request.note)
    if new or request.note:
        catalog.add_rows(store, [catalog.catalog_row(store, run_id, manifest, annotations)])
    if request.label:
        store.set_label(request.label, run_id)
    return ArchiveResult(run_id, new, manifest)


def _build(store: Store, request: RunRequest, prepared: list[PreparedReport],
           digests: list[str]) -> dict:
    """Extract every report into one table set, store the blobs, assemble the manifest.

    The raw reports are copied into the store on a worker thread while they are read (copying
    and hashing release the GIL), and become visible only once every table is written.
    """
    tables = TableSet(store)
    failed = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as copier:
        copies = [copier.submit(store.stage_file, p.path, failed) for p in prepared]
        try:
            tool = prepared[0].tool
            for name in tables_for_tool(tool):
                tables.writer(name)
            provenances = [p.write_tables(tables, index) for index, p in enumerate(prepared)]
            compute_summaries(tables, [n for n in tables_for_tool(tool) if n in SUMMARIES])
            table_refs = _finish_tables(tables, request)
            staged = [copy.result() for copy in copies]
            reports = [_store_blob(store, p, s, d, i, prov) for p, s, d, i, prov
                       in zip(prepared, staged, digests, request.inputs, provenances)]
        except BaseException:
            failed.set()
            _discard_copies(store, copies)
            raise
        finally:
            tables.discard()
    return _manifest(request, provenances, reports, table_refs)


def _discard_copies(store: Store, copies: list[Future]) -> None:
    """Remove the temp copies of a run that failed (those still being made stop at their
    next chunk and remove themselves)."""
    for copy in copies:
        if not copy.cancel() and copy.exception() is None:
            store.discard(copy.result())


def _finish_tables(tables: TableSet, request: RunRequest) -> dict:
    for name, rows in request.extra_tables.items():
        tables.writer(name).extend(rows)
    return tables.finish()


def record_attempt(store: Store, request: RunRequest, provenance: dict) -> ArchiveResult:
    """A capture that produced no report still becomes a run: the attempt is not lost."""
    tables = TableSet(store)
    try:
        table_refs = _finish_tables(tables, request)
    finally:
        tables.discard()
    manifest = _manifest(request, [provenance], [], table_refs)
    return _finish(store, store.write_manifest(manifest), manifest, request, new=True)


def _store_blob(store: Store, prepared: PreparedReport, staged: Staged, digest: str,
                given: ReportInput, provenance: dict) -> dict:
    if staged.sha256 != digest:
        raise TriageError(f"{prepared.path}: the file changed while it was being archived; "
                          "archive it again once it is complete")
    sha, size = store.publish(staged)
    return {
        "name": prepared.path.name, "sha256": sha, "bytes": size, "format": prepared.format,
        "tool_version": provenance.get("tool_version"), "created": provenance.get("created"),
        "host": ((provenance.get("environment") or {}).get("host") or {}).get("name"),
        "rank": given.rank, "process": given.process, "export": provenance.get("export"),
    }


def _manifest(request: RunRequest, provenances: list[dict], reports: list[dict],
              table_refs: dict) -> dict:
    first = provenances[0]
    extra = redact.extra_patterns(request.redact_patterns)
    manifest = {
        "kind": MANIFEST_KIND,
        "schema_version": MANIFEST_VERSION,
        "tables_schema_version": tables_version(),
        "source": request.source,
        "tool": first["tool"],
        "tool_version": first.get("tool_version"),
        "created": first.get("created"),
        "command": redact.redact_command_line(first.get("command"), extra),
        "environment": _redacted_environment(first.get("environment") or {}, extra),
        "application": _redacted_application(first.get("application"), extra),
        "settings": first.get("settings") or {},
        "settings_source": first.get("settings_source") or {},
        "evidence": first.get("evidence") or {},
        "versions": first.get("versions") or {},
        "reports": reports,
        "tables": table_refs,
        "kernels": table_refs.get("kernels", {}).get("rows", 0),
        "notices": sorted({n for p in provenances for n in p.get("notices", [])}),
        "extractor": {"triage": __version__, **_library_versions(first["tool"])},
        "capture": request.capture,
    }
    if request.redact_patterns:  # only then: runs without user patterns keep their ids
        manifest["redact_patterns"] = sorted(request.redact_patterns)
    manifest.update(request.overrides)
    return json.loads(canonical_json(manifest))


def _redacted_environment(environment: dict, extra) -> dict:
    out = dict(environment)
    if out.get("variables"):
        out["variables"] = redact.redact_mapping(out["variables"], extra)
    return out


def _redacted_application(application: dict | None, extra) -> dict | None:
    if not application or not application.get("argv"):
        return application
    return {**application, "argv": redact.redact_argv(application["argv"], extra)}


@lru_cache(maxsize=None)
def _library_versions(tool: str) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    names = {"ncu": ["ncu-report", "pyarrow"], "nsys": ["pyarrow", "duckdb"]}[tool]
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out
