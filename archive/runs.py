"""Finding runs: RUN references (id, prefix, label, `latest`), listings and typed records."""

from __future__ import annotations

from dataclasses import dataclass

from triage.archive import catalog
from triage.archive.model import RunRecord
from triage.archive.store import SHA256_RE, Store
from triage.errors import AmbiguousRun, RunNotFound

MIN_PREFIX = 4
LIST_COLUMNS = ("id", "tool", "tool_version", "created", "archived", "source", "gpu",
                "driver_version", "cuda_version", "host", "command", "kernels", "reports",
                "report_names", "clock_control", "cache_control", "replay_mode", "capture_group",
                "notes")


def resolve(store: Store, ref: str) -> str:
    """A full run id for a full id, `latest`, a label, or a unique id prefix."""
    if SHA256_RE.match(ref) and store.has_run(ref):
        return ref
    if ref == "latest":
        ids = catalog.read_catalog(store, ["id"]).column("id").to_pylist()
        if not ids:
            raise RunNotFound("no runs yet; `triage archive REPORT` adds one")
        return ids[-1]
    labels = store.labels()
    if ref in labels:
        if store.has_run(labels[ref]):
            return labels[ref]
        if not SHA256_RE.match(labels[ref]):
            raise RunNotFound(f"label {ref!r} is damaged (it holds no run id); `triage label "
                              f"RUN {ref}` points it at a run again")
        raise RunNotFound(f"label {ref!r} points at run {labels[ref][:12]}, which is not in this "
                          "store; `triage label RUN NAME` moves it")
    return _by_prefix(store, ref)


def _by_prefix(store: Store, ref: str) -> str:
    lowered = ref.lower()
    if len(lowered) >= MIN_PREFIX and all(c in "0123456789abcdef" for c in lowered):
        matches = [i for i in store.run_ids() if i.startswith(lowered)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(m[:12] for m in matches[:5])
            raise AmbiguousRun(f"run prefix {ref!r} matches {len(matches)} runs ({shown}); "
                               "give more characters")
    if len(lowered) < MIN_PREFIX and all(c in "0123456789abcdef" for c in lowered):
        raise RunNotFound(f"run {ref!r} not found: id prefixes need {MIN_PREFIX}+ hex digits; "
                          "`triage ls` lists runs")
    raise RunNotFound(f"run {ref!r} not found (not an id, prefix, label or 'latest'); "
                      "`triage ls` lists runs")


def labels_by_run(store: Store) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, run_id in sorted(store.labels().items()):
        out.setdefault(run_id, []).append(name)
    return out


@dataclass(frozen=True)
class RunList:
    """`triage ls`: every run as a catalog row with its labels, and one line per run that is
    listed only in part, or not at all, because a file of it is damaged."""

    rows: list[dict]
    problems: tuple[str, ...]


def list_runs(store: Store) -> RunList:
    """Every run, oldest archive first, from the catalog (no manifest is opened)."""
    found = catalog.scan(store, list(LIST_COLUMNS))
    labels = labels_by_run(store)
    rows = found.table.select(list(LIST_COLUMNS)).to_pylist()
    for row in rows:
        row["labels"] = labels.get(row["id"], [])
    return RunList(rows, found.problems)


def load_record(store: Store, ref: str) -> RunRecord:
    """The typed record of one run: its manifest plus id, labels, archive time and notes."""
    run_id = resolve(store, ref)
    return RunRecord.from_manifest(run_id, store.read_manifest(run_id),
                                   store.read_annotations(run_id),
                                   tuple(labels_by_run(store).get(run_id, [])))
