"""Finding runs: RUN references (id, prefix, label, `latest`), labels and typed records
(listings: listing.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from triage.archive import catalog
from triage.archive.store import SHA256_RE, Store, check_label, looks_like_run
from triage.errors import AmbiguousRun, RunNotFound

if TYPE_CHECKING:  # imported by `load_record`: `ls` and `latest` need no model
    from triage.archive.model import RunRecord

MIN_PREFIX = 4


def resolve(store: Store, ref: str) -> str:
    """A full run id for a full id, `latest`, a label, or a unique id prefix."""
    if SHA256_RE.match(ref) and store.has_run(ref):
        return ref
    if ref == "latest":
        found = catalog.scan_unordered(store, ["id"]).table
        if not found.num_rows:
            raise RunNotFound("no runs yet; `triage archive REPORT` adds one")
        return found.column("id")[catalog.oldest_first(found)[-1].as_py()].as_py()
    labels = store.labels()
    if ref in labels:
        if store.has_run(labels[ref]):
            return labels[ref]
        if not SHA256_RE.match(labels[ref]):
            raise RunNotFound(f"label {ref!r} is damaged (it holds no run id); `triage label "
                              f"{ref} RUN` points it at a run again")
        raise RunNotFound(f"label {ref!r} points at run {labels[ref][:12]}, which is not in this "
                          f"store; `triage label {ref} RUN` moves it")
    return _by_prefix(store, ref)


def _by_prefix(store: Store, ref: str) -> str:
    lowered = ref.lower()
    if len(lowered) >= MIN_PREFIX and all(c in "0123456789abcdef" for c in lowered):
        matches = store.run_ids(prefix=lowered)
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


@dataclass(frozen=True)
class LabelChange:
    """What `triage label` did: the label, the run it points at now (None: deleted) and what it
    held before (None: it is new), so that no move or deletion goes unsaid."""

    name: str
    run_id: str | None
    was: str | None


def label_arguments(first: str, second: str | None) -> tuple[str, str, bool]:
    """(NAME, RUN, old order?) of `triage label FIRST [SECOND]`; RUN defaults to `latest`.

    NAME RUN, like `git tag NAME COMMIT`. The old order, RUN NAME, is read only where FIRST is
    a run id, an id prefix or `latest`: no label may be one of those, so NAME RUN cannot be
    meant. Anything else is NAME RUN whatever the store holds, so the same words always do the
    same thing."""
    if second is not None and looks_like_run(first):
        return second, first, True
    return first, "latest" if second is None else second, False


def point_label(store: Store, name: str, ref: str) -> LabelChange:
    """Point label `name` at the run `ref` names (a bad name is refused before any lookup)."""
    check_label(name)
    run_id = resolve(store, ref)
    return LabelChange(name, run_id, store.set_label(name, run_id))


def delete_label(store: Store, name: str) -> LabelChange:
    """Delete label `name` (LabelNotFound when there is none)."""
    return LabelChange(name, None, store.remove_label(name))


def labels_by_run(store: Store) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, run_id in sorted(store.labels().items()):
        out.setdefault(run_id, []).append(name)
    return out


def load_record(store: Store, ref: str) -> RunRecord:
    """The typed record of one run: its manifest plus id, labels, archive time and notes."""
    from triage.archive.model import RunRecord

    run_id = resolve(store, ref)
    return RunRecord.from_manifest(run_id, store.read_manifest(run_id),
                                   store.read_annotations(run_id),
                                   tuple(labels_by_run(store).get(run_id, [])))
