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
# 3: a setting may be sourced "derived" (what the report's data proves). A manifest is written
# at the lowest version that can hold it, so every run without a derived setting keeps its
# version 2 document and its id, and only a triage that knows "derived" reads the others.
IDENTITY_VERSION, DERIVED_VERSION = 2, 3
MANIFEST_VERSION = DERIVED_VERSION  # the newest this triage reads
MANIFEST_KIND = "triage.run"


def version_for(settings_source: dict) -> int:
    """The manifest version a run's document needs: 3 where a setting is derived, else 2."""
    return DERIVED_VERSION if "derived" in settings_source.values() else IDENTITY_VERSION


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
