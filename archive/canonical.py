"""The one byte form of the JSON documents a store holds, and the seal of those whose name does
not hash them whole (manifests, annotations): every writer and checker of a document uses these,
so that a hash taken here is the hash taken everywhere.
"""

from __future__ import annotations

import hashlib
import json

SEAL = "sha256"


def canonical_json(obj) -> bytes:
    """The one byte form of a JSON document that its hash is taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def seal_of(doc: dict) -> str:
    """The checksum a document carries that its name does not hash whole: sha256 of the rest
    of it. Annotations change (notes are added), and a manifest's name hashes only its
    identity; each write seals them, and readers and `verify` check the seal."""
    body = {k: v for k, v in doc.items() if k != SEAL}
    return hashlib.sha256(canonical_json(body)).hexdigest()
