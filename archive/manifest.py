"""The run manifest: its version, and the migration/refusal rule for versions other than ours.

The JSON Schema in `schemas/manifest.schema.json` describes the document; ingest writes it and the
tests validate every manifest they produce against it.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from triage.base.errors import NewerFormat, StoreError

# 2: the run id hashes the run's identity, not the file's bytes (run_manifests.manifest_file);
# 3: a setting may be sourced "derived" (what the report's data proves); 4: the identity is the
# reports' bytes and the capture's facts alone, not what triage read from them
# (run_manifests.REPORT_IDENTITY): every manifest is written at version 4, and `triage migrate`
# gives each run of version 1-3 its version 4 id.
IDENTITY_VERSION, DERIVED_VERSION, REPORT_IDENTITY_VERSION = 2, 3, 4
MANIFEST_VERSION = REPORT_IDENTITY_VERSION  # the newest this triage reads, and what it writes
MANIFEST_KIND = "triage.run"


def manifest_schema() -> dict:
    """The JSON Schema of the manifest (single source of truth, shipped as package data)."""
    text = resources.files("triage.schemas").joinpath("manifest.schema.json").read_text()
    return json.loads(text)


def check_version(manifest: dict, where: Path | str) -> None:
    """Refuse manifests from a newer triage (version 1 manifests read as they are)."""
    if manifest.get("kind") != MANIFEST_KIND:
        raise StoreError(f"{where} is not a triage run manifest; `triage verify` checks the store")
    version = manifest.get("schema_version", 0)
    if version > MANIFEST_VERSION:
        raise NewerFormat(f"{where} was written by a newer triage (manifest version {version}, "
                          f"this triage reads {MANIFEST_VERSION}); upgrade triage")
