"""Timestamps as the store writes them: UTC, ISO 8601, sortable as text."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from triage.base.errors import UsageError

DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def utc_now(precise: bool = False) -> str:
    """Now in UTC; `precise` adds microseconds (for ordering rows written close together)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if precise else "%Y-%m-%dT%H:%M:%SZ")


def sortable(time: str) -> str:
    """A utc_now time (any precision) with its fraction padded to nanoseconds, so that text
    order is time order: `...:05Z` sorts before `...:05.5Z` and `...:05.50Z` equals `...:05.5Z`."""
    head, _, frac = time.rstrip("Z").partition(".")
    return f"{head}.{frac:0<9}Z"


def from_epoch(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(text: str | None) -> tuple[bool, float]:
    """A time as a sort key: unknown (or unreadable) times last."""
    if text:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return (True, 0.0)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return (False, moment.timestamp())
    return (True, 0.0)


def capture_order(created: str | None, archived: str | None) -> tuple:
    """Capture order, the one `history`, the gate's accepted runs and the console's series
    share: when the report was made (else archived), then when it was archived; times
    compared as times (offsets and precisions differ), unknown ones last."""
    return (_seconds(created or archived), _seconds(archived))


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '1h', '2d' -> seconds."""
    match = DURATION_RE.match(str(text))
    if not match:
        raise UsageError(f"invalid duration {text!r}: use seconds or a number with s, m, h or d "
                         "(e.g. 1h, 0)")
    return float(match.group(1)) * DURATION_UNITS[match.group(2)]
