"""`diff --json` obeys schemas/diff.schema.json on every corpus before/after family.

Families are MANIFEST.csv's `pair_group`s; each later file of a family is diffed against its
first. `.nsys-rep` files newer than the installed nsys cannot be exported here, so their
families use the `.sqlite` exports beside them (a family left with one file is diffed against
itself); the CSV family holds no report triage reads.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from helpers import CORPUS, checked_schema, corpus_manifest, require_tool
from triage.archive.ingest import archive_files

NEW_NSYS = ("nsys 2023", "nsys 2024", "nsys 2025", "nsys 2026")
LONG_GEMM = "naive_gemm(const float *, const float *, float *, int, int, int, float, float)"


def families() -> dict[str, list[str]]:
    """pair_group -> the family's files this machine can archive, in MANIFEST order."""
    groups: dict[str, list[str]] = {}
    for row in corpus_manifest():
        name = row["file"]
        if not row["pair_group"] or row["kind"] == "csv" or (
                row["kind"] == "nsys-rep" and row["tool_version"].startswith(NEW_NSYS)):
            continue
        groups.setdefault(row["pair_group"], []).append(name)
    return groups


@pytest.fixture(scope="module")
def schema() -> dict:
    return checked_schema("diff.schema.json")


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """Every family archived into one store: (store, family -> run ids)."""
    if any(f.endswith(".qdrep") for files in families().values() for f in files):
        require_tool("nsys")
    store = tmp_path_factory.mktemp("schema") / "store"
    ids = {family: [r.id for r in archive_files(store, [str(CORPUS / f) for f in files])]
           for family, files in families().items()}
    return store, ids


def diff_json(triage, store: Path, a: str, b: str, *args: str) -> dict:
    return json.loads(triage("diff", a, b, "--json", *args, "--store", store).stdout)


def test_every_family_diff_obeys_the_schema(triage, schema, family_runs):
    store, ids = family_runs
    assert len(ids) >= 14, sorted(ids)
    validator = jsonschema.Draft202012Validator(schema)
    checked = 0
    for family, runs in ids.items():
        runs = runs if len(runs) > 1 else runs * 2
        for later in runs[1:]:
            for args in ((), ("--all",)):
                document = diff_json(triage, store, runs[0], later, *args)
                errors = [f"{family}: {'/'.join(map(str, e.path))}: {e.message}"
                          for e in validator.iter_errors(document)]
                assert not errors, errors[:5]
                checked += 1
    assert checked >= 2 * 17


def test_mixed_and_invalid_pairs_obey_the_schema(triage, schema, family_runs):
    store, ids = family_runs
    ncu, nsys = ids["lashi-rwoffset"][0], ids["lashi-streams"][0]
    mixed = diff_json(triage, store, ncu, nsys)
    assert mixed["tools"] == ["ncu", "nsys"] and mixed["nsys"] is None
    jsonschema.validate(mixed, schema)
    invalid = diff_json(triage, store, ids["lakshya-gemm"][0], ids["armleth-mlp"][0])
    assert invalid["verdict"] == "invalid"
    jsonschema.validate(invalid, schema)


def test_the_schema_rejects_what_format_1_wrote(triage, schema, family_runs):
    """A drift item without its reason code, or a second nsys ranking, is not a format 2
    document: the schema says so (and so can catch a producer that drifts from it)."""
    store, ids = family_runs
    document = diff_json(triage, store, *ids["0x822-async"][:2])
    old = copy.deepcopy(document)
    old["nsys"]["kernels"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(old, schema)
    document = diff_json(triage, store, *ids["shorts-reduce"][1:3])
    old = copy.deepcopy(document)
    del old["drift"][0]["code"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(old, schema)


def test_json_names_kernels_whole_and_views_clip_them(triage, family_runs):
    """Format 1 wrote drift whys with names cut to 60 characters into --json; now the JSON
    carries whole names (and a code), and only the text view clips them."""
    store, ids = family_runs
    a, b = ids["shorts-reduce"][1], ids["lakshya-gemm"][0]
    document = diff_json(triage, store, a, b)
    item = next(i for i in document["drift"] if i["field"] == "kernels.set")
    assert item["code"] == "kernels.set" and item["kernels"]["b"] == [LONG_GEMM]
    assert LONG_GEMM in item["why"] and "…" not in item["why"]
    text = triage("diff", a, b, "--store", store).stdout
    drift = " ".join(text.split("\nkernels")[0].split())
    assert LONG_GEMM not in drift and "only in B: naive_gemm(const float *, con…" in drift
