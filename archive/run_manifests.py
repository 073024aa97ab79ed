"""A store's runs: manifests at runs/<id>.json, the dedup keys (keys/<key>) and old ids
(aliases/<old id>) that point at them, and what makes a manifest's id and which files it
references.

A run's id is the sha256 of its identity (`manifest_identity`), its file sealed by the hash of
its bytes; a run is visible once its manifest exists, written only after every file it
references. (Finding runs by id prefix, label or `latest`: runs.py.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from triage.archive import validate
from triage.archive.canonical import SEAL, canonical_json, seal_of
from triage.archive.manifest import DERIVED_VERSION, IDENTITY_VERSION
from triage.archive.objects import Objects
from triage.archive.part import StorePart
from triage.archive.table_files import TABLE_NAME_RE, Tables
from triage.base.errors import CorruptObject, RunNotFound
from triage.base.hashing import SHA256_RE

# What a version 2 or 3 run's id left out: how its tables came out as bytes (Parquet writer,
# pyarrow) and which library versions wrote them (read only: `triage migrate` renames them).
NOT_IDENTITY = ("tables", "extractor", SEAL)
# What a version 4 run's id is made of: its reports' bytes (each with the rank and process a
# capture gave it) and the facts of how it was made (a capture's record, its source, the user's
# redaction patterns). Never what triage read from the reports by the path it took to read them
# (nsys's Arrow or SQLite export, the export's nsys version and schema, the tables' schema
# version, the reader's provenance): the same report is the same run whoever reads it, how.
REPORT_IDENTITY = ("kind", "tool", "source", "capture", "redact_patterns")
REPORT_FACTS = ("sha256", "rank", "process")


def manifest_identity(manifest: dict) -> dict:
    """What makes a run the run it is, by its manifest's version: from version 4 its reports'
    bytes and the facts of its making (REPORT_IDENTITY); in versions 2 and 3 everything but its
    tables' bytes and the library versions that wrote them (NOT_IDENTITY). Its tables are
    attached by their own hashes, which the seal covers."""
    if manifest.get("schema_version") in (IDENTITY_VERSION, DERIVED_VERSION):
        return {k: v for k, v in manifest.items() if k not in NOT_IDENTITY}
    identity = {k: manifest[k] for k in REPORT_IDENTITY if k in manifest}
    identity["reports"] = [{k: report.get(k) for k in REPORT_FACTS}
                           for report in manifest.get("reports") or []]
    return identity


def manifest_file(manifest: dict) -> tuple[str, bytes]:
    """A manifest's run id and the sealed bytes stored at runs/<id>.json."""
    body = {k: v for k, v in manifest.items() if k != SEAL}
    if body.get("schema_version") == 1:  # an old run: the id hashes the bytes (read only)
        data = canonical_json(body)
        return hashlib.sha256(data).hexdigest(), data
    run_id = hashlib.sha256(canonical_json(manifest_identity(body))).hexdigest()
    return run_id, canonical_json({**body, SEAL: seal_of(body)})


def manifest_id(data: bytes) -> str | None:
    """The run id a manifest file's bytes stand for; None when they are damaged: not the
    canonical JSON of a sealed manifest (a version 1 manifest: its id is its bytes' hash)."""
    try:
        doc = validate.load_json(data)
    except ValueError:  # not a manifest at all: what its bytes hash to (readers say why)
        return hashlib.sha256(data).hexdigest()
    if not isinstance(doc, dict) or doc.get("schema_version") == 1 or SEAL not in doc:
        return hashlib.sha256(data).hexdigest()
    run_id, sealed = manifest_file(doc)
    return run_id if sealed == data and doc[SEAL] == seal_of(doc) else None


def run_id_of(name: str) -> str | None:
    """The run whose manifest a file in runs/ is, from its name; None for a temp file or any
    other name."""
    return name[:-5] if name.endswith(".json") and SHA256_RE.match(name[:-5]) else None


@dataclass(frozen=True)
class Part:
    """One file a run references: its key in the store, the sha256 its bytes must hash to,
    what it is (for messages) and the size its manifest records (None: not recorded)."""

    key: str
    sha256: str
    what: str
    size: int | None


def run_parts(run_id: str, manifest: dict) -> list[Part]:
    """Every file a run references, each once: its reports, the `--list-sections`/`--list-sets`
    output and working-tree patch a capture stored (objects/), and its tables (tables/).

    Reads the stored document, not a RunRecord: verify, gc and import must fail on a malformed
    reference list (KeyError, TypeError, ValueError), where RunRecord degrades it to nothing;
    and a table name or hash that is not one could name a key outside the layout."""
    capture = manifest.get("capture") or {}
    objects = [(r["sha256"], f"report {r.get('name')}", r.get("bytes"))
               for r in manifest.get("reports") or []]
    objects += [(listing["blob"], f"ncu --list-{key} output", None)
                for key, listing in sorted((capture.get("ncu_lists") or {}).items())
                if listing.get("blob") is not None]
    patch = (capture.get("git") or {}).get("patch")
    if patch is not None:
        objects.append((patch["sha256"], "patch of the working tree", patch.get("bytes")))
    parts = [Part(Objects.key(_sha(sha)), sha, what, size) for sha, what, size in objects]
    for name, table in sorted((manifest.get("tables") or {}).items()):
        if not TABLE_NAME_RE.match(name):
            raise ValueError(f"table name {name[:40]!r} is not one")
        sha = _sha(table["sha256"])
        parts.append(Part(Tables.key(run_id, name, sha), sha, f"table {name}",
                          table.get("bytes")))
    return list({part.key: part for part in parts}.values())


def _sha(value: object) -> str:
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ValueError(f"{str(value)[:40]!r} is not a sha256")
    return value


class Runs(StorePart):
    """The runs a store holds: their manifests, and the keys and aliases that point at them."""

    @staticmethod
    def key(run_id: str) -> str:
        return f"runs/{run_id}.json"


    def has(self, run_id: str) -> bool:
        return self.store.files.exists(self.key(run_id))

    def write_manifest(self, manifest: dict, replace: bool = False) -> str:
        """Write a manifest (after everything it references); return its id.

        Write-once: the first writer of a run wins, and the same run written again leaves its
        file as it is. A damaged manifest file (one that no longer stands for its id) is
        replaced, and so is one whose tables are lost when `replace` (archiving the report
        again repairs a run)."""
        run_id, data = manifest_file(manifest)
        if replace or self.manifest_bytes(run_id) is None:
            self.store.write_small(self.key(run_id), data, readonly=True)
        return run_id

    def manifest_bytes(self, run_id: str) -> bytes | None:
        """A manifest's bytes if they stand for its id; None if it is missing or damaged."""
        data = self.store.read_file(self.key(run_id))
        return data if data is not None and manifest_id(data) == run_id else None

    def read_manifest(self, run_id: str) -> dict:
        """A run's manifest, checked against its id first (a few KB to hash): an edited or
        damaged manifest must not be shown or compared as if it were the run."""
        data = self.manifest_bytes(run_id)
        if data is None:
            if not self.has(run_id):
                raise RunNotFound(f"run {run_id[:12]} not found; `triage ls` lists runs")
            raise CorruptObject(f"manifest of run {run_id[:12]} does not match its id (edited or "
                                "damaged); `triage verify` lists what is damaged, archiving "
                                "its report again repairs it")
        try:  # hash-valid is not enough: `"kernels": "many"` would fail every reader
            manifest = validate.load_json(data)
            validate.check_manifest(manifest, self.key(run_id))
            manifest.pop(SEAL, None)
        except ValueError as exc:
            raise CorruptObject(f"manifest of run {run_id[:12]} is not a valid manifest ({exc}); "
                                "`triage verify` lists what is damaged") from None
        return manifest

    def ids(self, prefix: str = "") -> list[str]:
        """Ids of all visible runs, sorted (one directory listing, no file reads); with `prefix`,
        those it begins: resolving an id prefix checks the few names that match, not 100,000."""
        ids = (run_id_of(n) for n in self.file_names() if n.startswith(prefix))
        return sorted(i for i in ids if i is not None)

    def file_names(self) -> list[str]:
        """Every name in runs/, unchecked (one listing): the catalog checks only the few names
        its rows do not account for (`run_id_of`), where `ids` checks each."""
        return self.store.files.names("runs")

    # -- dedup keys: report hashes + extractor version -> run id -----------------------------

    def lookup_key(self, key: str) -> str | None:
        """The run a dedup key points at, if that run is whole: a damaged manifest is not
        "already archived", so archiving the report again writes it afresh."""
        data = self.store.read_file(f"keys/{key}")
        if data is None:
            return None
        run_id = data.decode("utf-8", "replace").strip()
        if not SHA256_RE.match(run_id) or self.manifest_bytes(run_id) is None:
            return None
        return run_id

    def record_key(self, key: str, run_id: str) -> None:
        self.store.write_small(f"keys/{key}", (run_id + "\n").encode())

    # -- aliases: a format 1 run id -> its id now (migrate.py), write-once -------------------

    def write_alias(self, old: str, new: str) -> None:
        """Let a run's format 1 id resolve to its id now (written by `triage migrate`)."""
        self.store.write_small(f"aliases/{old}", (new + "\n").encode(), readonly=True)

    def aliases(self, prefix: str = "") -> dict[str, str]:
        """Old run id -> run id, for the old ids that begin with `prefix`."""
        out = {}
        for name in self.store.files.names("aliases"):
            if not name.startswith(prefix):
                continue
            held = self.store.pointer(f"aliases/{name}") or ""
            if SHA256_RE.match(name) and SHA256_RE.match(held):
                out[name] = held
        return out
