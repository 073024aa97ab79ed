"""What typed records share: reading a stored document's parts, and rows whose JSON is simply
their fields (one `to_json` for all of them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from types import MappingProxyType
from typing import Any

EMPTY: Mapping[str, Any] = MappingProxyType({})


def mapping_of(value: object) -> Mapping[str, Any]:
    """A dict part of a stored document (a manifest, machine facts), or an empty mapping where
    it is absent, null or not a dict: readers never chain `(x or {}).get`."""
    return value if isinstance(value, dict) else EMPTY


class AsJson:
    """Mixed into a frozen dataclass whose `--json` form is its fields, in their order."""

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # a dataclass
        return fields
