"""Stored JSON checked against its schema before anyone trusts it: manifests and annotations.

A manifest can hash to its id and still say `"kernels": "many"`; every reader of the store would
then fail on it. Import and `verify` check each document against `schemas/*.schema.json`, and the
store's readers refuse (or, for annotations, ignore) one that does not match.

The check is code here, not the `jsonschema` package (a test-only dependency): a small validator
for the subset the schemas use (type, enum, const, required, properties, items,
additionalProperties, pattern, minimum). A schema using any other keyword is refused when loaded,
so the subset cannot silently grow. Two choices are stricter than JSON Schema, because the
catalog stores these values in Arrow columns: an "integer" is a JSON integer (not 2.0, not a
boolean) that fits in 64 bits, and NaN or Infinity is not JSON at all.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from triage.archive.manifest import MANIFEST_KIND, check_version

MAX_DEPTH = 64  # triage's own documents nest 5 deep; json.loads recurses once per level
INT64 = 1 << 63
ANNOTATIONS = "annotations.schema.json"
MANIFEST = "manifest.schema.json"
_KEYWORDS = {"type", "enum", "const", "required", "properties", "items", "additionalProperties",
             "pattern", "minimum"}
_NOTES = {"$schema", "$id", "title", "description"}
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


class SchemaMismatch(ValueError):
    """A document that is JSON but not what its schema describes; the message names the field."""


def load_json(data: bytes) -> Any:
    """Parse stored JSON, refusing what would make a reader recurse without bound (200,000
    nested '[') and the NaN/Infinity that Python's json accepts but canonical JSON cannot hold.
    ValueError (or SchemaMismatch's parent) when it is not such JSON."""
    if nesting(data) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite)


def nesting(data: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (strings skipped), counted without
    parsing it; stops counting just past MAX_DEPTH."""
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub(b'""', data)):
        depth += 1 if bracket.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
    return deepest


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    """A JSON number as a float; 1e400 would become inf, which canonical JSON cannot write."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]} is too large a number")
    return value


@cache
def schema(name: str) -> dict:
    """A schema shipped in triage.schemas, refused if it uses a keyword this validator lacks."""
    doc = json.loads(resources.files("triage.schemas").joinpath(name).read_text())
    _check_keywords(doc, name)
    return doc


def _check_keywords(node: dict, where: str) -> None:
    unknown = set(node) - _KEYWORDS - _NOTES
    if unknown:
        raise RuntimeError(f"{where} uses {sorted(unknown)}, which archive/validate.py does not "
                           "check; add them there")
    for sub in _subschemas(node):
        _check_keywords(sub, where)


def _subschemas(node: dict) -> list[dict]:
    subs = list((node.get("properties") or {}).values())
    subs += [node[k] for k in ("items", "additionalProperties") if isinstance(node.get(k), dict)]
    return subs


def check_manifest(doc: Any, where: str | Path) -> None:
    """A run manifest this triage can read: NewerFormat for one from a newer triage (upgrading
    helps, so it is told apart), SchemaMismatch for anything else wrong with it."""
    if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND \
            and type(doc.get("schema_version", 0)) is int:
        check_version(doc, where)
    check(doc, MANIFEST)


def check(doc: Any, name: str) -> None:
    """Raise SchemaMismatch naming the first field of `doc` that the schema `name` refuses."""
    problem = _problem(doc, schema(name), "")
    if problem:
        raise SchemaMismatch(problem)


def _problem(value: Any, node: dict, where: str) -> str | None:
    """The first way `value` breaks `node`, as 'field.path: what is wrong', or None."""
    here = where or "the document"
    if "type" in node and not any(_is(value, t) for t in _listed(node["type"])):
        return f"{here}: expected {' or '.join(_listed(node['type']))}, got {_kind(value)}"
    if "const" in node and not _same(value, node["const"]):
        return f"{here}: must be {json.dumps(node['const'])}"
    if "enum" in node and not any(_same(value, v) for v in node["enum"]):
        return f"{here}: must be one of {', '.join(json.dumps(v) for v in node['enum'])}"
    if isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
        return f"{here}: {value[:40]!r} does not match {node['pattern']}"
    if _is(value, "number") and "minimum" in node and value < node["minimum"]:
        return f"{here}: {value} is below {node['minimum']}"
    if isinstance(value, dict):
        return _object_problem(value, node, where)
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return next((p for i, item in enumerate(value)
                     if (p := _problem(item, node["items"], f"{where}[{i}]"))), None)
    return None


def _object_problem(value: dict, node: dict, where: str) -> str | None:
    prefix = f"{where}." if where else ""
    missing = [key for key in node.get("required", ()) if key not in value]
    if missing:
        return f"{where or 'the document'}: missing {', '.join(missing)}"
    properties, extra = node.get("properties") or {}, node.get("additionalProperties", True)
    for key, item in value.items():
        sub = properties.get(key, extra)
        if sub is False:
            return f"{prefix}{key}: not a field here"
        if isinstance(sub, dict) and (problem := _problem(item, sub, f"{prefix}{key}")):
            return problem
    return None


def _listed(types: str | list[str]) -> list[str]:
    return [types] if isinstance(types, str) else list(types)


def _is(value: Any, kind: str) -> bool:
    """JSON Schema's type test, with 64-bit integers (see the module docstring)."""
    if kind == "integer":
        return type(value) is int and -INT64 <= value < INT64
    if kind == "number":
        return type(value) is float or _is(value, "integer")
    return type(value) is _TYPES[kind]


def _same(value: Any, expected: Any) -> bool:
    """Equal as JSON values: True is not 1, as it is in Python."""
    return type(value) is type(expected) and value == expected


def _kind(value: Any) -> str:
    if type(value) is int and not _is(value, "integer"):
        return "an integer beyond 64 bits"
    names = {bool: "boolean", int: "integer", float: "number", type(None): "null"}
    kind = type(value)
    return names.get(kind) or next((k for k, t in _TYPES.items() if t is kind), kind.__name__)
