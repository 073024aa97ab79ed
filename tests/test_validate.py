"""archive/validate.py against the `jsonschema` package on real manifests, and its own limits."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from helpers import corpus_file
from triage.archive import validate
from triage.archive.store import Store

REPORTS = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
           "evozone96__matrixMul__profile.nsight-cuprof-report",
           "0x822a5b87__test-cuda__report1.sqlite")


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> list[dict]:
    """Manifests and annotations of real ncu and nsys reports, archived once for the module."""
    from click.testing import CliRunner

    from triage.cli import cli

    root = tmp_path_factory.mktemp("store")
    for name in REPORTS:
        result = CliRunner().invoke(cli, ["archive", str(corpus_file(name))],
                                    env={"TRIAGE_STORE": str(root)}, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    store = Store.open(root)
    return [(json.loads(store.runs.path(r).read_bytes()), store.annotations.read(r))
            for r in store.runs.ids()]


def leaves(node, path=()):
    """Every place in a document, as a path of keys and indexes."""
    yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for key, value in items:
        yield from leaves(value, (*path, key))


def replaced(doc, path, value):
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def agrees(doc, name: str) -> None:
    reference = jsonschema.Draft202012Validator(validate.schema(name)).is_valid(doc)
    try:
        validate.check(doc, name)
        ours = True
    except validate.SchemaMismatch:
        ours = False
    assert ours == reference, doc


def test_real_documents_pass(manifests):
    assert len(manifests) == len(REPORTS)
    for manifest, notes in manifests:
        validate.check(manifest, validate.MANIFEST)
        validate.check(notes, validate.ANNOTATIONS)


@pytest.mark.parametrize("value", ["x", 5, -1, 2.5, None, True, [], {}, [1], {"a": 1}])
def test_every_field_replaced_is_judged_as_jsonschema_judges_it(manifests, value):
    """Each place of each real manifest and annotation set to a value of another kind: the
    small validator accepts exactly what the reference implementation accepts."""
    checked = 0
    for manifest, notes in manifests:
        for doc, name in ((manifest, validate.MANIFEST), (notes, validate.ANNOTATIONS)):
            for path in leaves(doc):
                if path:
                    agrees(replaced(doc, path, value), name)
                    checked += 1
    assert checked > 300


@pytest.mark.parametrize("doc", [{"archived": "t"}, {"archived": "t", "notes": []},
                                 {"notes": [{"time": "t", "text": "x"}]}, []])
def test_annotations_as_jsonschema_judges_them(doc):
    agrees(doc, validate.ANNOTATIONS)


def test_deliberately_stricter_than_json_schema(manifests):
    """Arrow columns hold these values: 2.0 is not an integer, nor is 2**63."""
    for value in (2.0, 1 << 63):
        with pytest.raises(validate.SchemaMismatch, match="kernels: expected integer"):
            validate.check(replaced(manifests[0][0], ("kernels",), value), validate.MANIFEST)


def test_depth_is_bounded_before_parsing():
    assert validate.load_json(b'{"a":"[[[[[[","b":[[1]]}') == {"a": "[[[[[[", "b": [[1]]}
    assert validate.nesting(b"[" * 200_000) == validate.MAX_DEPTH + 1
    for data, message in ((b"[" * 200_000, "nested more than 64 levels deep"),
                          (b'{"a":Infinity}', "Infinity is not a JSON number"),
                          (b"[1e400]", "too large a number")):
        with pytest.raises(ValueError, match=message):
            validate.load_json(data)


def test_a_schema_keyword_the_validator_lacks_is_refused():
    with pytest.raises(RuntimeError, match=r"uses \['oneOf'\]"):
        validate._check_keywords({"properties": {"a": {"oneOf": []}}}, "x.schema.json")
