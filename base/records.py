"""A typed result's row whose JSON is simply its fields: one `to_json` for all of them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any


class AsJson:
    """Mixed into a frozen dataclass whose `--json` form is its fields, in their order."""

    def to_json(self) -> dict[str, Any]:
        fields: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # a dataclass
        return fields
