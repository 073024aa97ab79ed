"""Units for people: the one byte formatter every view uses, so that `verify`, `top` and a report
print the same store or transfer size the same way."""

from __future__ import annotations

_BYTE_UNITS = ("kB", "MB", "GB", "TB", "PB")


def fmt_bytes(count: float | None) -> str:
    """A byte count in decimal units (1 kB = 1000 B, as Nsight Systems prints transfer sizes),
    three significant digits: "5 B", "1.23 MB", "800 MB"; "-" where there is none.

    The unit is chosen after rounding, so 999,999 B is "1 MB", never "1e+03 kB".
    """
    if count is None:
        return "-"
    if abs(round(count)) < 1000:
        return f"{count:.0f} B"
    value = float(count)
    for unit in _BYTE_UNITS:
        value /= 1000
        text = f"{value:.3g}"
        if abs(float(text)) < 1000:
            return f"{text} {unit}"
    return f"{text} {_BYTE_UNITS[-1]}"
