"""Plain-text rendering for the terminal: aligned tables, short ids, human units.

Kept apart from the library so that compute code returns data and only the CLI formats it.
"""

from __future__ import annotations

import csv
import io
import json
import math


def short_id(run_id: str | None, length: int = 12) -> str:
    return (run_id or "")[:length]


def fmt_ns(value) -> str:
    """Nanoseconds in the unit a person reads best: 812 ns, 3.40 us, 12.1 ms, 2.03 s."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    value = float(value)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}" if abs(value / scale) < 100 else \
                f"{value / scale:.1f} {unit}"
    return f"{value:.0f} ns"


def fmt_pct(value, signed: bool = True) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 10000:  # keeps columns aligned: a 300x change reads as ">+9999%"
        return (">+" if value > 0 else "<-") + "9999%" if signed else ">9999%"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def fmt_value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            return "-"
        if abs(value) >= 1e6:
            return _si(value)
        if value == int(value):
            return f"{int(value):,}"
        if abs(value) >= 1000:  # 27,204 beside 30,730, not 2.72e+04
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def _si(value: float) -> str:
    """1234567 -> '1.235M': large counters stay readable in a narrow column."""
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


_ESCAPES = {**{code: f"\\x{code:02x}" for code in (*range(32), 0x7F)},
            ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}


def printable(text: str) -> str:
    """Control characters escaped (a tab or newline in a file name), so a row stays one line."""
    return text if text.isprintable() else text.translate(_ESCAPES)


def truncate(text: str | None, width: int) -> str:
    text = printable("" if text is None else str(text))
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def table(rows: list[list], headers: list[str], max_widths: dict[int, int] | None = None,
          align_right: set[int] = frozenset()) -> str:
    """An aligned text table; columns listed in max_widths are truncated to fit."""
    max_widths = max_widths or {}
    cells = [[truncate(c, max_widths.get(i, 200)) for i, c in enumerate(row)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        parts = [v.rjust(w) if i in align_right else v.ljust(w)
                 for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def finite(data):
    """The same data with NaN and infinities as null: JSON has no such numbers."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def to_json(data) -> str:
    """Indented JSON for people; long lists (ls of 10,000 runs) compact, one item per line,
    because the indenting encoder is pure Python and ten times slower. Always valid JSON."""
    data = finite(data)
    if isinstance(data, list) and len(data) > 100:
        items = (json.dumps(item, default=str, ensure_ascii=False, allow_nan=False)
                 for item in data)
        return "[\n" + ",\n".join(items) + "\n]"
    return json.dumps(data, indent=2, default=str, ensure_ascii=False, allow_nan=False)


def to_csv(columns: list[str], rows: list[tuple]) -> str:
    """CSV; list and struct values (a run's labels) as JSON, which other tools can parse."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_csv_value(v) for v in row] for row in rows)
    return out.getvalue()


def _csv_value(value):
    if isinstance(value, (list, dict)):
        return json.dumps(finite(value), default=str, ensure_ascii=False)
    return value
