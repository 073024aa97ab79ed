"""The manifest and table schemas are the single source of truth: everything written obeys them."""

from __future__ import annotations

import json

import jsonschema
import pyarrow.parquet as pq
import pytest

from helpers import corpus_file
from triage.archive.manifest import manifest_schema
from triage.archive.store import Store
from triage.archive.tables import arrow_schema


@pytest.fixture
def archived_store(triage, store_dir):
    for name in ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
                 "evozone96__matrixMul__profile.nsight-cuprof-report",
                 "AlpriElse__cs599k__silu-2025-04-19-v1_nosections.ncu-rep"):
        triage("archive", corpus_file(name))
    return Store.open(store_dir)


def test_every_manifest_validates(archived_store):
    validator = jsonschema.Draft202012Validator(manifest_schema())
    ids = archived_store.run_ids()
    assert len(ids) == 3
    for run_id in ids:
        validator.validate(json.loads(archived_store.run_path(run_id).read_bytes()))


def test_every_table_has_its_declared_schema(archived_store):
    for run_id in archived_store.run_ids():
        manifest = archived_store.read_manifest(run_id)
        for name, ref in manifest["tables"].items():
            stored = pq.read_schema(archived_store.object_path(ref["sha256"]))
            assert stored.remove_metadata() == arrow_schema(name), name
            assert pq.read_metadata(archived_store.object_path(ref["sha256"])).num_rows == \
                ref["rows"]


def test_schema_rejects_a_broken_manifest(archived_store):
    manifest = archived_store.read_manifest(archived_store.run_ids()[0])
    manifest["reports"][0]["sha256"] = "not-a-hash"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, manifest_schema())
