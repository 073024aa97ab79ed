"""Terminal rendering of `triage versions`: what the store's runs span, and which pairs of ncu
versions the metric map covers. Values recorded by reports are printed escaped."""

from __future__ import annotations

from collections.abc import Sequence

from triage.compare.versions import Count, VersionPair, VersionsResult
from triage.views.text import printable

NOT_RECORDED = "not recorded"


def _value(value: str | None) -> str:
    return printable(value) if value is not None else NOT_RECORDED


def _counts(counts: Sequence[Count]) -> str:
    return ", ".join(f"{_value(c.value)} ({c.runs})" for c in counts) or "-"


def _pair_name(pair: VersionPair) -> str:
    return f"ncu {_value(pair.a)} -> {_value(pair.b)}"


def _pair_lines(pairs: Sequence[VersionPair]) -> list[str]:
    """Pairs with renames, one line each with their renames; pairs the map did not see, one
    line each; covered pairs without a rename, counted."""
    lines = []
    for pair in pairs:
        if pair.covered and pair.renames:
            labels = ", ".join(e.label for e in pair.renames)  # both names: --json
            lines.append(f"  {_pair_name(pair)}: {len(pair.renames)} metric(s) paired across "
                         f"a rename: {labels}")
    for pair in pairs:
        if not pair.covered:
            unseen = " and ".join(_value(v) for v, s in zip((pair.a, pair.b), pair.seen,
                                                            strict=True) if not s)
            lines.append(f"  {_pair_name(pair)}: NOT COVERED: the map has no evidence of ncu "
                         f"{unseen}; a metric renamed there reads as on one side only")
    quiet = sum(p.covered and not p.renames for p in pairs)
    if quiet:
        lines.append(f"  {quiet} pair(s) covered with no rename between them: a metric on one "
                     "side only was not collected, or its label changed too")
    return lines or ["  none: fewer than two ncu versions in this store"]


def render_versions(result: VersionsResult) -> str:
    tools = ", ".join(f"{tool} {sum(c.runs for c in counts)}" for tool, counts in result.tools)
    lines = [f"{result.runs} run(s){': ' + tools if tools else ''}"]
    lines += [f"  {tool} versions: {_counts(counts)}" for tool, counts in result.tools]
    lines += [f"  drivers: {_counts(result.drivers)}", f"  CUDA: {_counts(result.cuda)}",
              f"  GPUs: {_counts(result.gpus)}", "",
              "ncu version pairs (metric renames from compare/data/metric_map.json):"]
    lines += _pair_lines(result.pairs)
    lines += ["", "Across versions, always:",
              "  nsys export tables are read by base name across _V2/_V3 suffixes",
              *(f"  kernels paired across a library's rename: {printable(r)}"
                for r in result.kernel_rules),
              "Never comparable: ncu against nsys (two instruments), different GPU models."]
    lines += [f"warning: {printable(p)}" for p in result.problems]
    return "\n".join(lines)
