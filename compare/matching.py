"""Matching kernels between two runs.

Kernels are grouped by demangled name (each group holds its launches in launch order). Groups
with the same name match; repeated launches pair in order, and unequal counts are said. Groups
left over on both sides pair by order of first launch when the same number is left on each side:
that is the usual before/after where the change renamed the kernel (naive_gemm ->
sgemm_global_mem_coalesce). Anything else stays unmatched (only_a / only_b).

Names are compared by `match_key`: tools differ in the spaces they put in demangled names
(`f(const float*, int)` vs `f(const float *, int)`), which must not make one kernel two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

Launch = tuple[int, int]  # (report_index, kernel_index)
T = TypeVar("T")
_PUNCTUATION_SPACE = re.compile(r"\s*([*&,<>()\[\]])\s*")


def match_key(name: str) -> str:
    """A demangled name without the spaces around punctuation, for matching only (the real
    name is what is shown)."""
    return _PUNCTUATION_SPACE.sub(r"\1", name.strip())


def pair_leftovers(left_a: list[T], left_b: list[T], first: Callable[[T], SupportsRichComparison]
                   ) -> tuple[list[tuple[T, T]], list[T], list[T]]:
    """Leftovers of name matching: paired by order of first launch when both sides have the
    same number (a renamed kernel), else all unpaired. Returns (pairs, only_a, only_b)."""
    if left_a and len(left_a) == len(left_b):
        return list(zip(sorted(left_a, key=first), sorted(left_b, key=first), strict=True)), [], []
    return [], left_a, left_b


@dataclass
class KernelGroup:
    """All launches of one kernel name in one run, in launch order."""

    name: str
    short_name: str | None
    launches: list[Launch] = field(default_factory=list)
    durations: list[float | None] = field(default_factory=list)


@dataclass
class Match:
    """A kernel as compared: one group from each side, or one side only."""

    a: KernelGroup | None
    b: KernelGroup | None
    matched_by: str | None  # "name", "launch_order", or None when unmatched

    @property
    def kind(self) -> str:
        if self.a and self.b:
            return "matched"
        return "only_a" if self.a else "only_b"

    @property
    def group(self) -> KernelGroup:
        """A's group, else B's: a match always has one."""
        group = self.a or self.b
        assert group is not None
        return group

    @property
    def name(self) -> str:
        return self.group.name

    def pairs(self) -> list[tuple[Launch, Launch]]:
        """Launches paired in order; the longer side's extra launches stay unpaired."""
        if not (self.a and self.b):
            return []
        return list(zip(self.a.launches, self.b.launches, strict=False))


def group_kernels(rows: list[dict[str, Any]]) -> list[KernelGroup]:
    """Group kernel rows (report_index, kernel_index, name, short_name, duration_ns)."""
    groups: dict[str, KernelGroup] = {}
    for row in sorted(rows, key=lambda r: (r["report_index"], r["kernel_index"])):
        name = row["name"] or row.get("short_name") or "(unnamed)"
        group = groups.setdefault(match_key(name), KernelGroup(name, row.get("short_name")))
        group.launches.append((row["report_index"], row["kernel_index"]))
        group.durations.append(row.get("duration_ns"))
    return list(groups.values())


def match_kernels(groups_a: list[KernelGroup], groups_b: list[KernelGroup]) -> list[Match]:
    """Match by name, then pair the leftovers by launch order when their counts agree."""
    by_key_a = {match_key(g.name): g for g in groups_a}  # group_kernels made keys unique
    by_key_b = {match_key(g.name): g for g in groups_b}
    matches = [Match(g, by_key_b[key], "name") for key, g in by_key_a.items() if key in by_key_b]
    pairs, only_a, only_b = pair_leftovers(
        [g for key, g in by_key_a.items() if key not in by_key_b],
        [g for key, g in by_key_b.items() if key not in by_key_a], lambda g: g.launches[0])
    matches += [Match(a, b, "launch_order") for a, b in pairs]
    matches += [Match(a, None, None) for a in only_a] + [Match(None, b, None) for b in only_b]
    return sorted(matches, key=lambda m: (m.a is None, m.group.launches[0]))
