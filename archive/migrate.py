"""`triage migrate`: a store of format 1, 2 or 3 to format 4, in one step that a kill cannot
spoil; on a store of format 4, its catalog re-indexed when older rows lack a column.

Format 1 named a run by the sha256 of its manifest's bytes, so the same report archived with
other library versions was another run. Formats 2 and 3 named it by its identity less its tables
and library versions, which still held what triage read from the report and how (the nsys export
format, the tables' schema version): one report read two ways was two runs. Format 4 names it by
its reports' bytes and the facts of its making alone (run_manifests.manifest_identity, manifest
version 4). Each run gets its new id; its old id stays an alias (aliases/<old id> holds the new
one), so every id written down in notes, scripts and labels still resolves. Format 3 keeps a
run's tables at tables/<name>/run_id=<id>/<sha256>.parquet (hive style, for engines) instead of
objects/.

The steps, each one safe to repeat (a rerun after a kill finishes the job):

1. the marker says "version 4, migrating from N": an older triage refuses the store as newer,
   this triage refuses every command but `migrate`, so no one writes runs under the old rules;
2. per run of manifest version 1-3: the version 4 manifest, the alias, the annotations, notes,
   arrival record, acceptances and the dedup key under the new id;
3. dedup keys, aliases and labels pointed at the new ids (a label by a move in its history);
4. the old manifests and their annotations, notes, arrival records and acceptances removed;
5. per run: each table copied to its place under tables/ (from objects/, or from the old id's
   place); then the objects that only tables were and the old ids' tables removed, and the
   catalog (derived) rebuilt;
6. the marker says "version 4": done.

A store at format 4 whose catalog holds rows of an older catalog version (catalog.py: indexed
before a column such as `investigation` existed) gets step 5's catalog rebuild alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from triage.archive import atomic, catalog, lease, validate
from triage.archive.canonical import SEAL
from triage.archive.ingest import dedup_key_of
from triage.archive.manifest import MANIFEST_VERSION
from triage.archive.run_manifests import Part, run_parts
from triage.archive.store import (STORE_MARKER, STORE_VERSION, Store, marker_bytes,
                                  migrating_marker_bytes)
from triage.base.hashing import SHA256_RE
from triage.base.errors import CorruptObject


@dataclass(frozen=True)
class Migration:
    """What `triage migrate` did: the format it found, and the runs that got a new id."""

    from_version: int
    runs: int
    aliases: int
    nothing: bool = False  # the store was at format STORE_VERSION already, its catalog current
    reindexed: bool = False  # the catalog held rows of an older catalog version: indexed afresh


def migrate(store: Store) -> Migration:
    """Bring `store` (opened with `upgrade=True`) to format STORE_VERSION; a no-op when it is."""
    found = store.format_version()
    if found == STORE_VERSION and not store.migrating():
        if _catalog_current(store):
            return Migration(found, 0, 0, nothing=True)
        with lease.held(store, "migrate"):
            _rebuild_catalog(store)
        return Migration(found, 0, 0, reindexed=True)
    found = store.marker().get("migrating_from", found)  # a killed migration's first format
    with lease.held(store, "migrate"):
        _write(store, STORE_MARKER, migrating_marker_bytes(found))
        tried = {old: _migrate_run(store, old) for old in store.runs.ids()}
        moved = {old: new for old, new in tried.items() if new is not None}
        renamed = {**_chained(store.runs.aliases()), **moved}
        _repoint(store, "keys", renamed)
        _repoint(store, "aliases", renamed)
        _relabel(store, renamed)
        for old in moved:
            _drop_entries(store, old)
            store.files.delete(store.runs.key(old))
        _move_tables(store, renamed)
        _rebuild_catalog(store)
        _write(store, STORE_MARKER, marker_bytes())
    return Migration(found, len(moved), len(renamed))


def _migrate_run(store: Store, old: str) -> str | None:
    """The version 4 manifest of an older run, its alias, annotations (and the rest of
    `_carry_entries`) and dedup key; its new id (None: the run is version 4 already, or its
    manifest is damaged: `verify` names it, and it stays). Two old runs of one report (read two
    ways) become one run: the first one's manifest is kept, the notes of both, the other's id
    an alias of it."""
    data = store.runs.manifest_bytes(old)
    if data is None:
        return None
    manifest = validate.load_json(data)
    if manifest.get("schema_version") == MANIFEST_VERSION:
        return None
    manifest.pop(SEAL, None)
    new = store.runs.write_manifest({**manifest, "schema_version": MANIFEST_VERSION})
    _carry_entries(store, old, new)
    key = dedup_key_of(manifest)
    if key is not None:
        store.runs.record_key(key, new)
    store.runs.write_alias(old, new)
    return new


def _carry_entries(store: Store, old: str, new: str) -> None:
    """What the store keeps per run beside its manifest, under the new id too: the first
    archive time and every note (merged: two old runs of one report keep the notes of both),
    the record of its arrival from another store, and its acceptances (`triage accept`). Each
    is write-once or a merge, so a rerun after a kill writes nothing twice."""
    store.annotations.merge(new, store.annotations.read(old))
    arrival = store.annotations.arrival(old)
    if arrival is not None:
        store.annotations.arrived(new, arrival.how, arrival.source, arrival.time)
    store.acceptances.merge(replace(a, run_id=new) for a in store.acceptances.of_run(old))


def _drop_entries(store: Store, old: str) -> None:
    """The old id's annotations, notes, arrival and acceptances, once the new id holds them."""
    keys = [store.annotations.key(old), store.annotations.arrival_key(old),
            *store.files.files(store.annotations.notes_folder(old)),
            *store.files.files(store.acceptances.key(old))]
    for key in keys:
        store.files.delete(key)


def _chained(aliases: dict[str, str]) -> dict[str, str]:
    """The aliases an earlier migration wrote, each followed to the end of its chain (a format
    1 id -> its format 2 id -> its format 4 id)."""
    out = {}
    for old, new in aliases.items():
        seen = {old}
        while new in aliases and new not in seen:
            seen.add(new)
            new = aliases[new]
        out[old] = new
    return out


def _relabel(store: Store, renamed: dict[str, str]) -> None:
    """Every label on an old id moved to the new one, as a move in its history (which is the
    label's truth: a rewritten pointer alone would fall back to the old id)."""
    for name, held in sorted(store.labels.all().items()):
        if held in renamed:
            store.labels.point(name, renamed[held])


def _move_tables(store: Store, renamed: dict[str, str]) -> None:
    """Each run's tables to tables/<name>/run_id=<id>/<sha>.parquet, from objects/<sha> (format
    1 and 2) or from their place under an old id of the run (format 3), copied as they are: a
    damaged one stays damaged, for `verify` to name at its new place. Then the objects that
    were nothing but tables and the old ids' tables go, unless a manifest is damaged (what it
    references cannot be told: they stay, and `verify` names the manifest)."""
    manifests, damaged = {}, False
    for run_id in store.runs.ids():
        try:
            manifests[run_id] = store.runs.read_manifest(run_id)
        except CorruptObject:
            damaged = True
    olds: dict[str, list[str]] = {}
    for old, new in sorted(renamed.items()):
        olds.setdefault(new, []).append(old)
    kept = {part.sha256 for run_id, manifest in manifests.items()
            for part in run_parts(run_id, {**manifest, "tables": {}})}
    tabled, left = set(), []
    for run_id, manifest in manifests.items():
        places = [run_parts(old, {"tables": manifest.get("tables")})
                  for old in olds.get(run_id, [])]
        for number, part in enumerate(run_parts(run_id, {"tables": manifest.get("tables")})):
            sources = [store.objects.key(part.sha256), *(p[number].key for p in places)]
            if store.files.exists(part.key) or _copied(store, part, sources):
                tabled.add(part.sha256)
            left += [p[number].key for p in places]
    if not damaged:
        for key in [*(store.objects.key(sha) for sha in sorted(tabled - kept)), *left]:
            store.files.delete(key)
        for folder in sorted({key.rsplit("/", 1)[0] for key in left}):
            store.files.delete_folder(folder)


def _copied(store: Store, part: Part, sources: list[str]) -> bool:
    """One table copied to its key from the first of `sources` there; False when none is
    (nothing to copy)."""
    for source in sources:
        try:
            with store.files.open(source) as stream:
                staged = store.objects.stage_stream(stream)
        except FileNotFoundError:
            continue
        store.objects.publish(staged, part.key)
        return True
    return False


def _repoint(store: Store, folder: str, renamed: dict[str, str]) -> None:
    """Point every key or label file that holds an old id at the new one."""
    for key in store.files.files(folder):
        if key.rsplit("/", 1)[-1].startswith(atomic.TMP_PREFIX):
            continue
        held = store.pointer(key) or ""
        if SHA256_RE.match(held) and held in renamed:
            _write(store, key, (renamed[held] + "\n").encode())


def _catalog_current(store: Store) -> bool:
    """No segment holds rows older than this triage's, and some segment holds rows where runs
    exist: a re-index killed between dropping the old segments and writing the new one left
    none, and running `migrate` again finishes it."""
    return not catalog.stale(store) and (bool(catalog.segments(store))
                                         or not store.runs.file_names())


def _rebuild_catalog(store: Store) -> None:
    """The catalog is derived: drop the segments (they name old ids) and index runs/ afresh."""
    for name in store.files.names("index"):
        if not name.startswith(atomic.TMP_PREFIX):
            store.files.delete(f"index/{name}")
    catalog.merge(store)  # every run indexed, in one marked segment readers trust


def _write(store: Store, key: str, data: bytes) -> None:
    try:
        store.files.write(key, data)
    except OSError as exc:
        raise store.error(exc, "migrate") from None
