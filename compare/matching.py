"""Matching kernels between two runs.

Kernels are grouped by demangled name (each group holds its launches in launch order). Groups
with the same name match; repeated launches pair in order, and unequal counts are said. Groups
left over on both sides pair by order of first launch when the same number is left on each side:
that is the usual before/after where the change renamed the kernel (naive_gemm ->
sgemm_global_mem_coalesce). Anything else stays unmatched (only_a / only_b).
"""

from __future__ import annotations

from dataclasses import dataclass, field

Launch = tuple[int, int]  # (report_index, kernel_index)


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
    def name(self) -> str:
        return (self.a or self.b).name

    def pairs(self) -> list[tuple[Launch, Launch]]:
        """Launches paired in order; the longer side's extra launches stay unpaired."""
        if not (self.a and self.b):
            return []
        return list(zip(self.a.launches, self.b.launches))


def group_kernels(rows: list[dict]) -> list[KernelGroup]:
    """Group kernel rows (report_index, kernel_index, name, short_name, duration_ns)."""
    groups: dict[str, KernelGroup] = {}
    for row in sorted(rows, key=lambda r: (r["report_index"], r["kernel_index"])):
        name = row["name"] or row.get("short_name") or "(unnamed)"
        group = groups.setdefault(name, KernelGroup(name, row.get("short_name")))
        group.launches.append((row["report_index"], row["kernel_index"]))
        group.durations.append(row.get("duration_ns"))
    return list(groups.values())


def match_kernels(groups_a: list[KernelGroup], groups_b: list[KernelGroup]) -> list[Match]:
    """Match by name, then pair the leftovers by launch order when their counts agree."""
    by_name_b = {g.name: g for g in groups_b}
    matches = [Match(g, by_name_b[g.name], "name") for g in groups_a if g.name in by_name_b]
    names_a = {g.name for g in groups_a}
    left_a = [g for g in groups_a if g.name not in by_name_b]
    left_b = [g for g in groups_b if g.name not in names_a]
    if left_a and len(left_a) == len(left_b):
        matches += [Match(a, b, "launch_order") for a, b in zip(left_a, left_b)]
    else:
        matches += [Match(a, None, None) for a in left_a]
        matches += [Match(None, b, None) for b in left_b]
    first = {g.name: g.launches[0] for g in groups_a + groups_b}
    return sorted(matches, key=lambda m: (m.a is None, first[(m.a or m.b).name]))
