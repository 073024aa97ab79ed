"""Finding runs: RUN references (id, prefix, label, `latest`), labels and typed records
(listings: listing.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triage.archive import catalog, catalogview
from triage.archive.acceptances import Acceptance
from triage.archive.labels import LabelMove, check_label, is_label_name, looks_like_run
from triage.archive.store import Store
from triage.base.hashing import SHA256_RE
from triage.base.errors import AmbiguousRun, LabelNotFound, RunNotFound, StoreError, UsageError

if TYPE_CHECKING:  # imported by `load_record`: `ls` and `latest` need no model
    from triage.archive.model import RunRecord

MIN_PREFIX = 4


def resolve(store: Store, ref: str) -> str:
    """A full run id for a full id, `latest`, a label, or a unique id prefix; an old (format 1)
    id or prefix resolves to the run's id now through the store's aliases."""
    if SHA256_RE.match(ref) and store.runs.has(ref):
        return ref
    if SHA256_RE.match(ref) and ref in (aliased := store.runs.aliases(ref)):
        return aliased[ref]
    if ref == "latest":
        newest = next(catalog.open_view(store, ["id"]).newest(catalogview.KEY_COLUMNS, 1), [])
        if not newest:
            raise RunNotFound("no runs yet; `triage archive REPORT` adds one")
        return newest[0]["id"]
    labels = store.labels.all()
    if ref in labels:
        if store.runs.has(labels[ref]):
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
        # runs/ only on a miss: a run the catalog holds no row of (indexed in part) is found
        matches = catalog.open_view(store, ["id"]).prefixed(lowered) or \
            store.runs.ids(prefix=lowered) or sorted(set(store.runs.aliases(lowered).values()))
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


INVESTIGATION = "inv:"  # a diff side `inv:NAME`: no label, id or report path holds a colon


def investigation_side(ref: str) -> str | None:
    """The investigation a diff side's part names (`inv:NAME`), else None."""
    return ref[len(INVESTIGATION):] if ref.startswith(INVESTIGATION) else None


def investigation_runs(store: Store, name: str, tool: str) -> list[str]:
    """The runs of one tool in an investigation (`--investigation`), oldest archive first: one
    catalog scan of three columns, filtered in Arrow (100,000 rows), no manifest opened."""
    import pyarrow.compute as pc

    catalog.require_current(store, f"{INVESTIGATION}{name}")
    table = catalog.scan_unordered(store, ["id", "tool", "investigation"]).table
    found = table.filter(pc.and_(pc.equal(table["investigation"], name),
                                 pc.equal(table["tool"], tool)))
    rows = zip(found["archived"].to_pylist(), found["id"].to_pylist(), strict=True)
    return [run_id for _archived, run_id in sorted(rows)]


def side_parts(side: str) -> list[str]:
    """The RUNs of a diff side: one RUN, or RUN,RUN,... (a side of several runs)."""
    parts = [part.strip() for part in side.split(",")]
    if "" in parts:
        raise UsageError(f"{side!r}: an empty run in a comma-separated list")
    return parts


@dataclass(frozen=True)
class ReportRun:
    """A report file named where a RUN goes, and the run that stands for it: `new` when it was
    archived just now, else the run archived before from the same bytes."""

    path: str
    run_id: str
    new: bool


def reports_as_runs(store_path, refs: Sequence[str], sides: bool = False,
                    nsys: str | None = None) -> tuple[list[str], tuple[ReportRun, ...]]:
    """`refs` (RUNs, or with `sides` diff sides: RUN,RUN,...) with each report path in them
    replaced by its run's id, so that `triage diff a.ncu-rep b.ncu-rep` works as a first try.
    A report archived before is found by its hash (no write: the store may be read-only); the
    others are archived, all validated before any is (`archive_files`). What was done is
    returned, for the caller to say."""
    split = [side_parts(ref) if sides and not os.path.isfile(ref) else [ref] for ref in refs]
    words = [word for parts in split for word in parts]
    labels = _labels_if_any(store_path) if any(map(os.path.isfile, words)) else {}
    paths = list(dict.fromkeys(word for word in words if _is_report(word, labels)))
    if not paths:
        return list(refs), ()
    from triage.archive.ingest import archive_files, archived_run

    before = {path: archived_run(store_path, path) for path in paths}
    missing = [path for path in paths if before[path] is None]
    made = dict(zip(missing, archive_files(store_path, missing, nsys=nsys) if missing else [],
                    strict=True))
    found = {path: ReportRun(path, made[path].id, made[path].new) if path in made
             else ReportRun(path, str(before[path]), False) for path in paths}
    return ([",".join(found[p].run_id if p in found else p for p in parts) for parts in split],
            tuple(found.values()))


def _is_report(word: str, labels: dict[str, str]) -> bool:
    """A RUN word that names a file, not a run: `latest`, an id prefix, a label or `inv:NAME`
    of that name is the run(s), whatever files the working directory holds."""
    return not looks_like_run(word) and word not in labels and \
        investigation_side(word) is None and os.path.isfile(word)


def _labels_if_any(store_path) -> dict[str, str]:
    """The store's labels; none where there is no store yet (archiving the report makes it)."""
    try:
        return Store.open(store_path).labels.all()
    except StoreError:
        return {}


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
    same thing. Two words that both name runs give no label: that is said, not "invalid label"
    of the second."""
    if second is not None and looks_like_run(first) and looks_like_run(second):
        raise UsageError(f"{first!r} and {second!r} both name runs (an id prefix or `latest`); "
                         f"a label needs a NAME that is neither: triage label NAME {second}")
    if second is not None and looks_like_run(first):
        return second, first, True
    return first, "latest" if second is None else second, False


def point_label(store: Store, name: str, ref: str) -> LabelChange:
    """Point label `name` at the run `ref` names (a bad name is refused before any lookup)."""
    check_label(name)
    run_id = resolve(store, ref)
    return LabelChange(name, run_id, store.labels.point(name, run_id, checked=True))


def accept(store: Store, ref: str, reason: str, who: str) -> Acceptance:
    """Record the run `ref` names as an intended step (`triage accept`); the label it was named
    by is kept with it. A failed capture holds nothing to judge against, so it is refused."""
    run_id = resolve(store, ref)
    if store.runs.read_manifest(run_id).get("source") == "capture-failed":
        raise UsageError(f"run {run_id[:12]} is a capture that produced no report; accept the "
                         "run whose numbers are the new baseline")
    label = ref if is_label_name(ref) and store.pointer(f"labels/{ref}") == run_id else None
    return store.acceptances.add(run_id, reason, who, label)


def label_moves(store: Store, name: str) -> list[LabelMove]:
    """Every move of label `name`, oldest first (LabelNotFound when it never had one)."""
    moves = store.labels.history(name)
    if not moves:
        raise LabelNotFound(f"label {name!r} has no history; `triage label` lists labels")
    return moves


def delete_label(store: Store, name: str) -> LabelChange:
    """Delete label `name` (LabelNotFound when there is none)."""
    return LabelChange(name, None, store.labels.remove(name, checked=True))


def labels_by_run(store: Store) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, run_id in sorted(store.labels.all().items()):
        out.setdefault(run_id, []).append(name)
    return out


def load_record(store: Store, ref: str) -> RunRecord:
    """The typed record of one run: its manifest plus id, labels, archive time, notes, and
    where it came from when another store sent it."""
    from dataclasses import replace

    from triage.archive.model import RunRecord

    run_id = resolve(store, ref)
    arrival = store.annotations.arrival(run_id)
    record = RunRecord.from_manifest(run_id, store.runs.read_manifest(run_id),
                                     store.annotations.read(run_id),
                                     tuple(labels_by_run(store).get(run_id, [])))
    return replace(record, arrived=f"{arrival.how} from {arrival.source}" if arrival else None)
