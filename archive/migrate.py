"""`triage migrate`: a store of format 1 or 2 to format 3, in one step that a kill cannot spoil.

Format 1 named a run by the sha256 of its manifest's bytes, so the same report archived with
other library versions was another run. Format 2 names it by its identity (store.manifest_file).
Each run gets its new id; its old id stays an alias (aliases/<old id> holds the new one), so every
id written down in notes, scripts and labels still resolves. Format 3 keeps a run's tables at
tables/<name>/run_id=<id>/<sha256>.parquet (hive style, for engines) instead of objects/.

The steps, each one safe to repeat (a rerun after a kill finishes the job):

1. the marker says "version 3, migrating from N": an older triage refuses the store as newer,
   this triage refuses every command but `migrate`, so no one writes runs under the old rules;
2. per version 1 run: the version 2 manifest, the alias, the annotations under the new id;
3. dedup keys and labels pointed at the new ids;
4. the version 1 manifests and their annotations removed;
5. per run: each table copied from objects/ to its place under tables/; then the objects that
   only tables were removed, and the catalog (derived) rebuilt;
6. the marker says "version 3": done.
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.archive import atomic, catalog, lease, validate
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
    nothing: bool = False  # the store was at format STORE_VERSION already


def migrate(store: Store) -> Migration:
    """Bring `store` (opened with `upgrade=True`) to format STORE_VERSION; a no-op when it is."""
    found = store.format_version()
    if found == STORE_VERSION and not store.migrating():
        return Migration(found, 0, 0, nothing=True)
    found = store.marker().get("migrating_from", found)  # a killed migration's first format
    with lease.held(store, "migrate"):
        _write(store, STORE_MARKER, migrating_marker_bytes(found))
        tried = {old: _migrate_run(store, old) for old in store.runs.ids()}
        moved = {old: new for old, new in tried.items() if new is not None}
        renamed = {**store.runs.aliases(), **moved}
        _repoint(store, "keys", renamed)
        _repoint(store, "labels", renamed)
        for old in moved:
            store.files.delete(store.annotations.key(old))
            store.files.delete(store.runs.key(old))
        _move_tables(store)
        _rebuild_catalog(store)
        _write(store, STORE_MARKER, marker_bytes())
    return Migration(found, len(moved), len(renamed))


def _migrate_run(store: Store, old: str) -> str | None:
    """The version 2 manifest of a version 1 run, its alias and annotations; its new id (None:
    the run is version 2 already, or its manifest is damaged: `verify` names it, and it stays)."""
    data = store.runs.manifest_bytes(old)
    if data is None:
        return None
    manifest = validate.load_json(data)
    if manifest.get("schema_version") != 1:
        return None
    new = store.runs.write_manifest({**manifest, "schema_version": 2})
    notes = store.read_file(store.annotations.key(old))
    if notes is not None and not store.files.exists(store.annotations.key(new)):
        _write(store, store.annotations.key(new), notes)
    store.runs.write_alias(old, new)
    return new


def _move_tables(store: Store) -> None:
    """Each run's tables from objects/<sha> to tables/<name>/run_id=<id>/<sha>.parquet (copied
    as they are: a damaged one stays damaged, for `verify` to name at its new place); then the
    objects that were nothing but tables go, unless a manifest is damaged (what it references
    cannot be told: the objects stay, and `verify` names the manifest)."""
    manifests, damaged = {}, False
    for run_id in store.runs.ids():
        try:
            manifests[run_id] = store.runs.read_manifest(run_id)
        except CorruptObject:
            damaged = True
    kept = {part.sha256 for run_id, manifest in manifests.items()
            for part in run_parts(run_id, {**manifest, "tables": {}})}
    tabled = set()
    for run_id, manifest in manifests.items():
        for part in run_parts(run_id, {"tables": manifest.get("tables")}):
            if store.files.exists(part.key) or _copied(store, part):
                tabled.add(part.sha256)
    for sha in sorted(tabled - kept if not damaged else ()):
        store.files.delete(store.objects.key(sha))


def _copied(store: Store, part: Part) -> bool:
    """One table copied to its key; False when its object is not there (nothing to copy)."""
    try:
        with store.files.open(store.objects.key(part.sha256)) as stream:
            staged = store.objects.stage_stream(stream)
    except FileNotFoundError:
        return False
    store.objects.publish(staged, part.key)
    return True


def _repoint(store: Store, folder: str, renamed: dict[str, str]) -> None:
    """Point every key or label file that holds an old id at the new one."""
    for key in store.files.files(folder):
        if key.rsplit("/", 1)[-1].startswith(atomic.TMP_PREFIX):
            continue
        held = store.pointer(key) or ""
        if SHA256_RE.match(held) and held in renamed:
            _write(store, key, (renamed[held] + "\n").encode())


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
