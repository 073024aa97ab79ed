"""Plain-text rendering for the terminal: aligned tables, short ids, human units.

Kept apart from the library so that compute code returns data and only the CLI formats it.
"""

from __future__ import annotations

import csv
import difflib
import functools
import io
import json
import math
from decimal import Decimal
import os
import shutil
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triage.archive.model import Environment
    from triage.compare.matching import PairEvidence
    from triage.compare.result import (DiffResult, DriftItem, FailedTry, FiredRule, KernelDiff,
                                       MetricDiff, SectionDiff)


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


def fmt_value(value, digits: int = 4) -> str:
    """A value in a narrow column: `digits` significant digits (more where integral)."""
    if not _is_number(value):
        return "-" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "-" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if abs(value) >= 1e15:  # past T: 1e+300, not 1e+288T
        return f"{value:.{digits}g}"
    if abs(value) >= 1e6:
        return _si(value, digits)
    if value == int(value):
        return f"{int(value):,}"
    if abs(value) >= 1000:  # 27,204 beside 30,730, not 2.72e+04
        return f"{value:,.{digits - 4}f}"
    return f"{value:.{digits}g}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fmt_values_apart(rows: Iterable[Sequence]) -> list[list[str]]:
    """Rows of cells as fmt_value shows them, with as many significant digits as it takes for
    no two different numbers to look alike (the min, avg and max of a kernel's launches are not
    all `33.33M` when they differ): `query` shows data, and data must tell values apart, so a
    NaN reads NaN there, not `-` like NULL."""
    rows = [list(row) for row in rows]
    numbers = {v for row in rows for v in row if _is_number(v) and not math.isnan(v)}
    digits = next((d for d in range(4, 17)
                   if len({fmt_value(v, d) for v in numbers}) == len(numbers)), 17)
    return [["NaN" if isinstance(v, float) and math.isnan(v) else fmt_value(v, digits)
             for v in row] for row in rows]


def _si(value: float, digits: int = 4) -> str:
    """1234567 -> '1.235M': large counters stay readable in a narrow column."""
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:.{digits}g}"


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(text: str, lines: bool = False) -> str:
    """Text that shows as what it is: control characters (NUL, BEL, ESC: a terminal obeys them),
    bidirectional overrides (U+202E reverses what follows) and other invisible characters
    escaped as \\xNN / \\uNNNN, so a row stays one line and a name cannot disguise itself.
    `lines`: keep newlines and tabs (multi-line text in a page; the templates' finalize)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or (lines and ch in "\n\t")
                   else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
                              if code < 0x10000 else f"\\U{code:08x}")


def truncate(text: str | None, width: int | None) -> str:
    """The text escaped (`printable`) and, given a width, cut to it with an ellipsis."""
    text = printable("" if text is None else str(text))
    return text if width is None or len(text) <= width else text[: max(width - 1, 0)] + "…"


def table(rows: list[list], headers: list[str], max_widths: dict[int, int] | None = None,
          align_right: Collection[int] = frozenset()) -> str:
    """An aligned text table; columns listed in max_widths are truncated to fit, the others
    are whole."""
    max_widths = max_widths or {}
    cells = [[truncate(c, max_widths.get(i)) for i, c in enumerate(row)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        parts = [v.rjust(w) if i in align_right else v.ljust(w)
                 for i, (v, w) in enumerate(zip(values, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def fitted_table(rows: list[list], headers: list[str], width: int,
                 give_way: Sequence[tuple[int, int]] = (),
                 align_right: Collection[int] = frozenset()) -> str:
    """`table` no wider than `width` where it can be (a terminal wraps a longer line into
    two): each (column, narrowest) of `give_way` in turn gives up characters, down to
    `narrowest` (0: the column is left out), until the lines fit."""
    widths = [max([len(h)] + [len(printable(str(r[i]))) for r in rows])
              for i, h in enumerate(headers)]
    kept = list(range(len(headers)))

    def over() -> int:
        return sum(widths[i] for i in kept) + 2 * (len(kept) - 1) - width

    for index, narrowest in give_way:
        if over() > 0 and index in kept and narrowest == 0:
            kept.remove(index)
        elif over() > 0 and index in kept:
            room = widths[index] - max(narrowest, len(headers[index]))
            widths[index] -= max(min(over(), room), 0)
    return table([[row[i] for i in kept] for row in rows], [headers[i] for i in kept],
                 max_widths={n: widths[i] for n, i in enumerate(kept)},
                 align_right={n for n, i in enumerate(kept) if i in align_right})


def finite(data):
    """The same data with NaN and infinities as null: JSON has no such numbers. A decimal
    (DuckDB's sum of integers is a 128-bit integer, a decimal in Arrow) is a JSON number,
    not a string: an integer when it is whole."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Decimal):
        return int(data) if data.is_finite() and data == data.to_integral_value() \
            else finite(float(data))
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def to_json(data) -> str:
    """Indented JSON for people; long lists (ls of 10,000 runs) compact, one item per line,
    because the indenting encoder is pure Python and ten times slower. Always valid JSON."""
    if isinstance(data, list):
        return "".join(json_chunks([data]))
    return _json_text(data, indent=2)


LONG_LIST = 100  # items above which a JSON list is written compact, one item per line


def json_chunks(batches: Iterable[list]) -> Iterator[str]:
    """`to_json` of a list whose items come a batch at a time, written as they come once the
    list is long: `ls --json` of 100,000 runs never becomes one string."""
    batches = iter(batches)
    head: list = []
    for batch in batches:
        head.extend(batch)
        if len(head) > LONG_LIST:
            break
    else:
        yield _json_text(head, indent=2)
        return
    yield "[\n" + ",\n".join(_json_text(item) for item in head)
    for batch in batches:
        if batch:
            yield ",\n" + ",\n".join(_json_text(item) for item in batch)
    yield "\n]"


def _json_text(data, indent: int | None = None) -> str:
    if indent == 2:
        return _indented(data, 0)
    return json.dumps(finite(data), indent=indent, default=str, ensure_ascii=False,
                      allow_nan=False)


SLOW_VALUES = (dict, list, tuple, Decimal)  # values a container of scalars must not hold


def _indented(data, level: int) -> str:
    """`json.dumps(finite(data), indent=2, ...)` to the byte, several times faster: the
    standard library indents in pure Python, one call per value (a third of `diff --json` of
    500 kernels). Here Python walks only the containers that hold containers; a container of
    scalars (a metric row) is written by the C encoder in one call, its item separator
    carrying the line break and the indentation."""
    if isinstance(data, dict):
        values: Iterable = data.values()
    elif isinstance(data, (list, tuple)):
        values = data
    else:
        return _json_line(0)(finite(data))
    if not data:
        return "[]" if isinstance(data, (list, tuple)) else "{}"
    inner, outer = "\n" + "  " * (level + 1), "\n" + "  " * level
    if not any(isinstance(value, SLOW_VALUES) for value in values):
        try:
            text = _json_line(level + 1)(data)
        except ValueError:  # NaN or an infinity, rare: null, as `finite` writes it
            text = _json_line(level + 1)(finite(data))
        return text[0] + inner + text[1:-1] + outer + text[-1]
    if isinstance(data, dict):
        items = [_json_key(key) + ": " + _indented(value, level + 1)
                 for key, value in data.items()]
        return "{" + inner + ("," + inner).join(items) + outer + "}"
    items = [_indented(value, level + 1) for value in data]
    return "[" + inner + ("," + inner).join(items) + outer + "]"


@functools.cache
def _json_line(level: int) -> Callable[[object], str]:
    """The C encoder, made once (`json.dumps` makes one per call), whose items are separated
    by a line break and `level` indentations (by ", " at level 0: a scalar, a key)."""
    separator = ",\n" + "  " * level if level else ", "
    encoder = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, str, json.encoder.encode_basestring,  # type: ignore[attr-defined]
        None, ": ", separator, False, False, False)
    return lambda data: "".join(encoder(data, 0))


def _json_key(key) -> str:
    """A key as the encoder writes it: a non-string key (a number) as its JSON string."""
    if isinstance(key, str):
        return json.encoder.encode_basestring(key)  # type: ignore[attr-defined]
    return _json_line(0)({key: 0})[1:-4]


def to_csv(columns: list[str], rows: list[tuple]) -> str:
    """CSV; list and struct values (a run's labels) as JSON, which other tools can parse."""
    return "".join(csv_chunks(columns, [rows]))


def csv_chunks(columns: list[str], batches: Iterable[Iterable[Sequence]]) -> Iterator[str]:
    """CSV as `to_csv` writes it, the header and then a batch of rows at a time (`ls --csv`
    of 100,000 runs streams)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for batch in batches:
        writer.writerows([_csv_value(v) for v in row] for row in batch)
        yield out.getvalue()
        out.seek(0)
        out.truncate()
    yield out.getvalue()


def _csv_value(value):
    if isinstance(value, (list, dict)):
        return json.dumps(finite(value), default=str, ensure_ascii=False)
    return value


def clip_middle(text: str, width: int) -> str:
    """Shortened in the middle: kernel names that differ only in their tail (a changed
    parameter list) stay distinguishable, unlike names cut at the end."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def distinct_names(a: str, b: str, width: int = 30) -> tuple[str, str]:
    """Two kernel names shortened so that they still differ: the beginning, then the text from
    just before where they differ (`f<64>(int, P*)` and `f<64>(int, P*, int*)` have the same
    short name and the same first 60 characters; cut at the end they would read the same)."""
    if len(a) <= width and len(b) <= width:
        return a, b
    start = max(len(os.path.commonprefix([a, b])) - 8, 0)  # a little context before
    head = a[:min(start, width // 3)]
    elided = "…" if start > len(head) else ""
    room = max(width - len(head) - len(elided), 9)
    short_a, short_b = (head + elided + (n[start:] if len(n) - start <= room
                                         else n[start:start + room - 1] + "…") for n in (a, b))
    return short_a, short_b


PIPED_WIDTH = 100  # columns of text output that is not going to a terminal
# Drift codes whose values are sets (shown as what B added and dropped) and flags with words.
SET_VALUED = ("settings.sections", "nvtx.ranges")
# Drift codes whose values are words (commands, names) shown as the tokens that differ.
TOKEN_VALUED = ("command", "workload.arguments", "gpu.name", "host.cpu", "host.os")
FLAG_WORDS = {"git.dirty": ("clean", "dirty (uncommitted edits)")}
SAME_CLIP = 30  # a token both values share is clipped to this; differing tokens never are


def output_width() -> int:
    """The terminal's width when stdout is one (it honours $COLUMNS), else 100 columns."""
    if not sys.stdout.isatty():
        return PIPED_WIDTH
    return max(shutil.get_terminal_size((PIPED_WIDTH, 24)).columns, 60)


def fit_width(width: int | None = None, no_trunc: bool = False) -> int | None:
    """How wide a table whose values may be cut is made: `--width N` where given, else the
    terminal's width; None (nothing cut) with `--no-trunc` or when stdout is no terminal (a
    pipe, a file: `triage ls | grep 4090` must find the whole GPU name)."""
    if no_trunc:
        return None
    if width is not None:
        return width
    return output_width() if sys.stdout.isatty() else None


@dataclass(frozen=True)
class Layout:
    """How a report is laid out: `width` columns (the terminal's, 100 piped) to size its
    columns and wrap its sentences, and whether a value longer than its column is cut to fit
    (`cut`: a terminal) or printed whole (a pipe, a file, --no-trunc: `| grep` must find a
    whole kernel name)."""

    width: int = PIPED_WIDTH
    cut: bool = True

    @classmethod
    def of(cls, width: int | None) -> Layout:
        """From `fit_width`'s answer: cut to `width`, or laid out in 100 columns, uncut."""
        return cls(PIPED_WIDTH, cut=False) if width is None else cls(width)

    @classmethod
    def for_stdout(cls) -> Layout:
        """The layout of text printed to this process's stdout as it is now."""
        return cls.of(fit_width())

    def fit(self, text: str | None, room: int) -> str:
        """`text` escaped, and cut to `room` columns where this layout cuts."""
        return truncate(text, room if self.cut else None)

    def line(self, text: str | None) -> str:
        """A whole line: escaped, and cut to the width where this layout cuts."""
        return self.fit(text, self.width)



def _tokens(value: object) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return str(value).split()


def _shared(tokens: Sequence[str], first: bool, last: bool) -> list[str]:
    """A run of tokens both values share: kept short around what differs (the first and last
    token of a long run, clipped), since the reader needs the context, not all of it."""
    tokens = [clip_middle(t, SAME_CLIP) for t in tokens]
    if len(tokens) <= (2 if last and not first else 3):
        return tokens
    return [tokens[0], "…"] if last and not first else [tokens[0], "…", tokens[-1]]


def _opcodes(a: list[str], b: list[str]) -> Sequence[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def changed_tokens(a: object, b: object) -> str:
    """Two commands (or names) as one, the differing tokens whole in brackets:
    `./train 20 [2000000 → 1000000]`, `a.out [+1000000000]`, `-o [-old]`."""
    ta, tb = _tokens(a), _tokens(b)
    words: list[str] = []
    ops = _opcodes(ta, tb)
    for n, (op, i1, i2, j1, j2) in enumerate(ops):
        old, new = " ".join(ta[i1:i2]), " ".join(tb[j1:j2])
        if op == "equal":
            words += _shared(ta[i1:i2], n == 0, n == len(ops) - 1)
        else:
            words.append(f"[{old} → {new}]" if old and new else f"[-{old}]" if old
                         else f"[+{new}]")
    return " ".join(words)


def changed_sides(a: object, b: object) -> tuple[str, str]:
    """Each of two commands with the tokens both share shortened, the differing ones whole:
    the two cells of a table row."""
    ta, tb = _tokens(a), _tokens(b)
    sides: tuple[list[str], list[str]] = ([], [])
    ops = _opcodes(ta, tb)
    for n, (op, i1, i2, j1, j2) in enumerate(ops):
        if op == "equal":
            shared = _shared(ta[i1:i2], n == 0, n == len(ops) - 1)
            sides[0].extend(shared)
            sides[1].extend(shared)
        else:
            sides[0].extend(ta[i1:i2])
            sides[1].extend(tb[j1:j2])
    return " ".join(sides[0]) or "(none)", " ".join(sides[1]) or "(none)"


def set_change(a: Sequence[object], b: Sequence[object]) -> str:
    """What B added and dropped: `+NumaAffinity +PmSampling -Occupancy`."""
    old, new = set(map(str, a)), set(map(str, b))
    return " ".join([f"+{v}" for v in sorted(new - old)] + [f"-{v}" for v in sorted(old - new)])


def set_sides(a: Sequence[object], b: Sequence[object]) -> tuple[str, str]:
    """Each side's members the other lacks, and how many both have."""
    old, new = set(map(str, a)), set(map(str, b))
    both = f"{len(old & new)} in both"

    def side(only: set[str]) -> str:
        return ", ".join(sorted(only)) + f" (and {both})" if only else f"({both}, no other)"

    return side(old - new), side(new - old)


def value_text(item: DriftItem, value: object) -> str:
    """One drift value whole, as words: ? when unknown, a list joined, a flag named."""
    if value is None:
        return "?"
    if isinstance(value, bool) and item.code in FLAG_WORDS:
        return FLAG_WORDS[item.code][value]
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "(none)"
    if item.code == "git.commit" and isinstance(value, str) and len(value) == 40:
        return value[:12]  # where two commits differ, 12 hex digits differ too
    return str(value)


def default_phrase(tool: str | None, value: object) -> str:
    """`ncu's default would be all`: what stands for a setting nothing recorded."""
    shown = (" ".join(map(str, value)) or "(none)") if isinstance(value, (list, tuple)) \
        else str(value)
    return f"{tool or 'the profiler'}'s default would be {shown}"


def field_with_default(item: DriftItem) -> str:
    """A field neither run recorded, with the default that stands for it on both sides alike:
    `settings.cache_control (ncu's default would be all)`."""
    a, b = item.assumed
    return item.field + (f" ({default_phrase(item.assumed_of, a)})" if a is not None and a == b
                         else "")


def side_text(item: DriftItem, side: int) -> str:
    """One side's value of a drift item as words, its assumed default where that is all."""
    value, assumed = (item.a, item.b)[side], item.assumed[side]
    if value is None and assumed is not None:
        return f"not recorded ({default_phrase(item.assumed_of, assumed)})"
    return value_text(item, value)


def _shown_by_parts(item: DriftItem) -> bool:
    """Both values known and different, of a field shown by its parts (tokens or members)."""
    return item.state == "different" and item.a is not None and item.b is not None and \
        item.code in SET_VALUED + TOKEN_VALUED


def drift_change(item: DriftItem) -> str | None:
    """A difference as one text, never cut where the values differ (None: say `a -> b`)."""
    if not _shown_by_parts(item):
        return None
    if item.code in SET_VALUED:
        return set_change(_tokens(item.a), _tokens(item.b))
    return changed_tokens(item.a, item.b)


def drift_sides(item: DriftItem) -> tuple[str | None, str | None]:
    """A drift item's two values for table cells: what differs whole, shared parts short;
    None for an unknown value."""
    if _shown_by_parts(item):
        if item.code in SET_VALUED:
            return set_sides(_tokens(item.a), _tokens(item.b))
        return changed_sides(item.a, item.b)
    return tuple(None if (v is None and d is None) else side_text(item, i)  # type: ignore
                 for i, (v, d) in enumerate(zip((item.a, item.b), item.assumed, strict=True)))


def drift_entries(items: Sequence[DriftItem]) -> list[DriftItem | list[DriftItem]]:
    """Drift worst first, as every view lists it; the fields neither run recorded as one entry
    per severity (a list), where the first of them would be."""
    from triage.compare.drift import UNRECORDED, severity_rank  # only diffs need it

    entries: list[DriftItem | list[DriftItem]] = []
    groups: dict[str, list[DriftItem]] = {}
    for item in sorted(items, key=lambda i: severity_rank(i.severity)):
        if item.state != UNRECORDED:
            entries.append(item)
        elif item.severity in groups:
            groups[item.severity].append(item)
        else:
            entries.append(groups.setdefault(item.severity, [item]))
    return entries


def drift_why(item: DriftItem) -> str:
    """A drift item's why as the views show it: the kernels it names clipped in the middle."""
    return item.describe(lambda name: clip_middle(name, 60))


def kernel_notes(kernel: KernelDiff) -> list[str]:
    """What a reader of a kernel's numbers should know, worded (the diff gives codes)."""
    from triage.compare.result import (KERNEL_LAUNCHES, KERNEL_NO_DATA, KERNEL_PAIRED,
                                       KERNEL_RENAME_RULE, KERNEL_RENAMED, KERNEL_UNPAIRED)

    notes = []
    if kernel.name_b and KERNEL_RENAME_RULE in kernel.notes and kernel.pairing:
        notes.append(f"paired across a rename: {kernel.name} -> {kernel.name_b} "
                     f"({kernel.pairing.rule})")
    if kernel.name_b and (KERNEL_RENAMED in kernel.notes or KERNEL_PAIRED in kernel.notes):
        shorts = (kernel.short_name, kernel.short_name_b)
        distinct = bool(shorts[0] and shorts[1] and shorts[0] != shorts[1])
        labels = shorts if distinct else distinct_names(kernel.name, kernel.name_b)
        evidence = f" ({pairing_evidence(kernel.pairing)})" if kernel.pairing else ""
        confirm = f"--pair '{labels[0]}={labels[1]}'" if distinct else \
            "--pair A=B (whole names: --json)"
        if KERNEL_RENAMED in kernel.notes:
            notes.append(f"paired by launch order, a guess: {labels[0]} -> {labels[1]}"
                         f"{evidence}; not judged by the gate until confirmed with {confirm}")
        else:
            notes.append(f"paired by --pair: {labels[0]} -> {labels[1]}{evidence}")
    if KERNEL_UNPAIRED in kernel.notes and kernel.pairing:
        notes.append(unpaired_note(kernel.pairing))
    if KERNEL_LAUNCHES in kernel.notes and kernel.a and kernel.b:
        notes.append(f"launch counts differ ({kernel.a.launches} vs {kernel.b.launches}); "
                     f"compared the first {kernel.paired} of each")
    if KERNEL_NO_DATA in kernel.notes:
        sides = " and ".join(s.upper() for s in kernel.no_data)
        notes.append(f"no data in {sides}: the profiler collected nothing for these launches")
    return notes


def fmt_dims(dims: Sequence[int] | None) -> str:
    return "x".join(map(str, dims)) if dims else "?"


REFUSED_WHAT = {"pairing.grid": "grids", "pairing.block": "blocks",
                "pairing.duration": "mean durations"}


def pairing_evidence(evidence: PairEvidence) -> str:
    """What says two kernels of different names are one: 'first launch 1st of the unmatched;
    grid 256x1x1 vs 256x1x1, block 128x1x1 vs 128x1x1, mean 4.79 ms vs 4.65 ms'."""
    parts = [f"first launch #{evidence.order} of the kernels unmatched by name"] \
        if evidence.order else []
    if evidence.grid != (None, None):
        parts.append(f"grid {fmt_dims(evidence.grid[0])} vs {fmt_dims(evidence.grid[1])}")
    if evidence.block != (None, None):
        parts.append(f"block {fmt_dims(evidence.block[0])} vs {fmt_dims(evidence.block[1])}")
    parts.append(f"mean {fmt_ns(evidence.duration_ns[0])} vs {fmt_ns(evidence.duration_ns[1])}")
    return "; ".join(parts)


def unpaired_note(evidence: PairEvidence) -> str:
    """Why launch order did not pair a kernel with the other side's: the numbers that differ
    by orders of magnitude."""
    from triage.compare.matching import PAIRING_LIMIT

    apart = [f"{REFUSED_WHAT['pairing.' + what]} {ratio:,.0f}x"
             for what, ratio in evidence.ratios.items() if ratio and ratio > PAIRING_LIMIT]
    return (f"not paired with B's {clip_middle(evidence.name_b, 60)} by launch order, too unlike"
            f" to be one kernel renamed ({', '.join(apart) or evidence.refused} apart; "
            f"{pairing_evidence(evidence)}); --pair A=B pairs them")


def metric_title(metric: MetricDiff, raw_names: bool = False, renames: bool = False) -> str:
    """What a view calls a metric: the label its section shows (Duration), which is what a
    reader of ncu knows; the raw name (gpu__time_duration.sum) with --raw-names or where the
    reports give no label (and in runs archived before labels were stored). With `renames`,
    a metric the two profiler versions name differently says both names."""
    title = metric.name if raw_names or not metric.label else metric.label
    return f"{title}: {rename_text(metric)}" if renames and metric.renamed else title


def rename_text(metric: MetricDiff) -> str | None:
    """Both names of a metric paired across a rename by the metric map, each with its run's
    profiler version: "dram__throughput… (2022.3.0.0) = gpu__dram_throughput… (2025.1.0.0)";
    None for a metric named alike on both sides."""
    rename = metric.renamed
    if rename is None:
        return None
    a, b = (version or "version not recorded" for version in rename.versions)
    return f"{rename.name_a} ({a}) = {rename.name_b} ({b})"


def one_side_text(section: SectionDiff, letters: tuple[str, str] = ("A", "B")) -> str | None:
    """'only in B, 27 metrics' for a section collected by one run only: one line, where a row
    per metric would say 'only in B' 27 times; None for a section both runs collected.
    `letters` name the runs (a report's series calls the later ones C, D, ...)."""
    if section.only_in is None:
        return None
    count = section.metric_count
    letter = letters[0] if section.only_in == "a" else letters[1]
    return f"only in {letter}, {count} metric{'' if count == 1 else 's'}"


def cuda_text(env: Environment) -> str | None:
    """The CUDA version and, where it is not a running driver's, whose it is."""
    if env.cuda_version and env.cuda_version_of == "library":
        return f"{env.cuda_version} (the installed CUDA driver library's; no GPU driver loaded)"
    return env.cuda_version


def rule_heading(rule: FiredRule) -> str:
    """What a fired ncu rule is called: its id and message title; where ncu left the title
    empty (most rules), its display name and section, not the bare id (IssueSlotUtilization)."""
    if rule.title:
        return f"{rule.rule_id}: {rule.title}"
    where = f", section {rule.section_id}" if rule.section_id else ""
    return f"{rule.rule_name or rule.rule_id}{where}"


def rule_failure(error: str) -> str:
    """Why a rule could not run, in one line: ncu's reason ("Metric X not found") without its
    "Rule <name> returned an error:" preamble; ncu_report's internals are left to `query`."""
    first = error.strip().splitlines()[0] if error.strip() else error
    reason = first.split(" returned an error: ", 1)[-1]
    return f"could not run: {reason}"


# What a judged time is, before its name ("total GPU time" names itself).
GATE_KINDS = {"bench": "bench", "kernel": "kernel", "nvtx": "NVTX range", "gpu_total": ""}
SIGNIFICANCE_WORDS = {"significant": "significant", "within_noise": "within noise",
                      "unknown": "noise unknown"}


def fmt_interval(ci: tuple[float, float] | None) -> str:
    """'[+9.1, +15.2]': a confidence interval in percent."""
    return f"[{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""


def fmt_noise(noise, detectable: bool = True) -> str:
    """A change with its noise: '+12.3% [+9.1, +15.2] significant', 'noise unknown (1 vs 1;
    5 per side needed)'."""
    if noise is None:
        return "-"
    words = SIGNIFICANCE_WORDS.get(noise.significance, noise.significance)
    if noise.significance == "unknown":
        counts = f"{noise.a.n if noise.a else 0} vs {noise.b.n if noise.b else 0}"
        return f"{fmt_pct(noise.change_pct)} {words} ({counts} {noise.samples}; " \
            f"{noise.needed} per side needed)"
    return f"{fmt_pct(noise.change_pct)} {fmt_interval(noise.ci_pct)} {words}" \
        + (detectable_words(noise) if detectable else "")


def detectable_words(noise) -> str:
    """For a change within noise: the smallest change its samples could have told apart."""
    smallest = noise.min_detectable_pct
    if noise.significance != "within_noise" or smallest is None:
        return ""
    return f"; changes under {smallest:.1f}% cannot be told from noise"


def fmt_spread(spread) -> str:
    """'n 100, median 200 us, IQR 310 ns'; under 4 samples their range, 'n 1: 5.95 us' for one
    (--json has every number)."""
    if spread is None:
        return "-"
    if spread.n == 1:
        return f"n 1: {fmt_ns(spread.median)}"
    if spread.n < 4:
        return f"n {spread.n}, median {fmt_ns(spread.median)}, " \
            f"{fmt_ns(spread.min)}..{fmt_ns(spread.max)}"
    return f"n {spread.n}, median {fmt_ns(spread.median)}, IQR {fmt_ns(spread.iqr)}"


# The one line every text and Markdown view puts beside ncu durations.
NCU_CAVEAT = ("ncu durations are attribution, not acceptance: they come from a replayed execution "
              "(kernels serialized, clocks locked, caches flushed)")


def gate_lines(gate) -> list[str]:
    """The regression gate as the views open with it: one line per failed time, else one;
    after the accepted step it judged against, where there is one."""
    lines = _verdict_lines(gate)
    if gate.accepted is None:
        return lines
    return [*lines, f"Judged against the accepted step: {accepted_line(gate.accepted)}"]


def accepted_line(accepted) -> str:
    """An accepted step (`triage accept`): which run, who, when, why."""
    by = f" by {printable(accepted.who)}" if accepted.who else ""
    return (f"run {short_id(accepted.run_id)} accepted{by} on "
            f"{accepted.time[:16].replace('T', ' ')} UTC: {printable(accepted.reason)}")


def _verdict_lines(gate) -> list[str]:
    from triage.compare.result import GATE_NCU, GATE_NOTHING  # --help need not load it

    limit = f"{gate.max_slowdown_pct:g}%"
    if not gate.judged and gate.reason == GATE_NCU:
        return ["Gate not judged: ncu durations are attribution, not acceptance;",
                f"  gate on nsys or benchmark runs (--max-slowdown {limit}; --gate-ncu judges "
                "them anyway)"]
    if not gate.judged and gate.reason == GATE_NOTHING:
        return [f"Gate not judged: no kernel, NVTX range or GPU time was measured in both runs "
                f"(--max-slowdown {limit})", *([_guesses_line(gate)] if gate.guesses else [])]
    if not gate.judged:
        return [f"Gate not judged: the verdict is invalid, so no time is comparable "
                f"(--max-slowdown {limit})"]
    lines = [_guesses_line(gate)] if gate.guesses else []
    if gate.passed:
        return [f"Gate passed: {len(gate.checks)} time(s) checked, none slower than {limit} "
                "beyond noise", *lines]
    for check in gate.failed:
        lines.insert(len(lines) - bool(gate.guesses),
                     f"Gate failed: {check_words(check, limit, 40)}")
    return lines


def check_words(check, limit: str, width: int | None = None) -> str:
    """One judged time: what, its change and interval, against the gate's threshold."""
    what = f"{GATE_KINDS.get(check.kind, check.kind)} {truncate(check.name, width)}".lstrip()
    if check.significance == "unknown":
        measured = f"{fmt_pct(check.change_pct)} (noise unknown, by % alone)"
    else:
        measured = f"{fmt_pct(check.change_pct)} {fmt_interval(check.ci_pct)}"
    if check.failed:
        return f"{what} {measured} > {limit}"
    return f"{what} {measured} {SIGNIFICANCE_WORDS[check.significance]}, gate {limit}"


def _guesses_line(gate) -> str:
    """The kernels the gate left alone: compared on a guess, until --pair confirms them."""
    from triage.views.svgcharts import short_kernel

    def names(a: str, b: str) -> str:
        short = short_kernel(a), short_kernel(b)
        return " -> ".join(short if short[0] != short[1] else distinct_names(a, b, 40))

    pairs = [names(a, b) for a, b in gate.guesses[:3]]
    more = f" and {len(gate.guesses) - 3} more" if len(gate.guesses) > 3 else ""
    count = len(gate.guesses)
    return (f"Gate did not judge {count} kernel{'' if count == 1 else 's'} paired by a guess "
            f"(launch order): {'; '.join(pairs)}{more}; --pair A=B confirms a pairing")


# -- a side of several runs ------------------------------------------------------------------


def listed_runs(names: Sequence[str]) -> str:
    """'before/1, before/2' or, past three, 'before/1..before/5': which runs a side holds."""
    if len(names) > 3:
        return f"{names[0]}..{names[-1]}"
    return ", ".join(names)


def side_runs_title(diff: DiffResult, side: str) -> str | None:
    """'5 runs: before/1..before/5' for a side of several runs; None for one run (named as a
    run is)."""
    index = 0 if side == "a" else 1
    ids, names = diff.runs_of[index], diff.side_names[index]
    if len(ids) < 2:
        return None
    shown = names if len(names) == len(ids) else [short_id(i, 8) for i in ids]
    return f"{len(ids)} runs: {listed_runs(shown)}"


def _runs(count: int) -> str:
    return f"{count} run{'' if count == 1 else 's'}"


def failed_tries_words(tries: Sequence[FailedTry]) -> str | None:
    """'2 failed tries, not in the group: rep/3 (exited 1, 1a2b3c4d), ...' for the failed tries
    of a series beside a side (None when none failed)."""
    if not tries:
        return None
    listed = ", ".join(f"{printable(t.name)} ({printable(t.status or 'failed')}, "
                       f"{short_id(t.id, 8)})" for t in tries)
    count = f"{len(tries)} failed tr{'y' if len(tries) == 1 else 'ies'}"
    return f"{count} of the series, not in the group: {listed}"


def aggregate_words(diff: DiffResult) -> str | None:
    """What a side's numbers are when a side has several runs: 'median of 5 runs a side', or
    'A: median of 5 runs, B: 1 run'; None when each side is one run."""
    a, b = diff.runs_count
    if max(a, b) < 2:
        return None
    if a == b:
        return f"median of {a} runs a side"
    words = {count: f"median of {_runs(count)}" if count > 1 else _runs(count) for count in (a, b)}
    return f"A: {words[a]}, B: {words[b]}"
