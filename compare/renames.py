"""Names that moved between profiler releases, paired again: ncu metrics and library kernels.

One step of its own, before any aggregation: the diff asks `section_renames` which of a
section's metrics shown on one side only are one metric renamed (`compare/data/metric_map.json`,
built from ncu's own section definitions by `metric_map_build`; only confirmed entries pair, and
only within their section), and `kernel_family` which kernel names a library renamed
(`compare/data/kernel_renames.json`: NCCL's `ncclKernel_*` -> `ncclDevKernel_*` first). The rest
of the comparison then treats a pair as one metric, or one kernel, with the rename as evidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from triage.base.errors import TriageError

DATA = Path(__file__).resolve().parent / "data"
MAP_FILE = DATA / "metric_map.json"
KERNEL_RULES_FILE = DATA / "kernel_renames.json"
MAP_VERSION = 1
CONFIRMED = "confirmed"


NOT_RECORDED = "not recorded"  # how the map names the version of a report that recorded none


def version_key(version: str | None) -> tuple[int, ...]:
    """'2022.3.0' -> (2022, 3, 0); a version not recorded (ncu 2019, PerfWorks era) first."""
    parts = re.findall(r"\d+", version) if version and version[:1].isdigit() else []
    return tuple(int(p) for p in parts)


def same_release(run_version: str | None, seen: str) -> bool:
    """Whether a run's ncu version is a version the map saw: the same year.minor.patch (a
    build number aside), or none recorded on both (ncu 2019)."""
    if run_version is None:
        return seen.startswith(NOT_RECORDED)
    return version_key(run_version)[:3] == version_key(seen)[:3] and bool(version_key(seen))


@dataclass(frozen=True)
class MetricRename:
    """Two names of one metric, paired by a confirmed map entry: A's name, B's, the label and
    section ncu shows them under, how the entry was confirmed (unit or range), and the runs'
    profiler versions (None where a run recorded none)."""

    name_a: str
    name_b: str
    section: str
    label: str
    confirmed_by: str
    versions: tuple[str | None, str | None] = (None, None)

    def to_json(self) -> dict[str, Any]:
        return {"a": self.name_a, "b": self.name_b, "section": self.section,
                "label": self.label, "confirmed_by": self.confirmed_by,
                "versions": list(self.versions)}


@dataclass(frozen=True)
class MapEntry:
    """One map entry: two names of a section's label, and whether values confirmed them."""

    section: str
    label: str
    names: tuple[str, str]
    versions: tuple[tuple[str, ...], tuple[str, ...]]
    status: str
    confirmed_by: str | None
    why: str

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MapEntry:
        a, b = raw["a"], raw["b"]
        return cls(raw["section"], raw["label"], (a["name"], b["name"]),
                   (tuple(a["versions"]), tuple(b["versions"])), raw["status"],
                   raw.get("confirmed_by"), raw["why"])


@dataclass(frozen=True)
class MetricMap:
    """The map's entries, and its confirmed ones by (section, name)."""

    entries: tuple[MapEntry, ...]
    pairs: Mapping[tuple[str, str], tuple[MapEntry, ...]]

    @classmethod
    def of(cls, entries: Sequence[MapEntry]) -> MetricMap:
        pairs: dict[tuple[str, str], tuple[MapEntry, ...]] = {}
        for entry in entries:
            if entry.status == CONFIRMED:
                for name in entry.names:
                    pairs[(entry.section, name)] = (*pairs.get((entry.section, name), ()),
                                                    entry)
        return cls(tuple(entries), pairs)

    def other_names(self, name: str) -> tuple[str, ...]:
        """The names a confirmed entry pairs with `name` in any section: a metric's value is
        the same quantity whichever section shows it."""
        found = [e.names[1] if e.names[0] == name else e.names[0]
                 for (_section, n), entries in self.pairs.items() if n == name for e in entries]
        return tuple(dict.fromkeys(found))

    def section_renames(self, section: str, only_a: Sequence[str], only_b: Sequence[str],
                        versions: tuple[str | None, str | None] = (None, None)
                        ) -> dict[str, MetricRename]:
        """A's name -> the rename, for each metric a section shows on one side only whose
        other name the other side shows; each name is paired once, in A's order."""
        left_b = set(only_b)
        found: dict[str, MetricRename] = {}
        for name in only_a:
            for entry in self.pairs.get((section, name), ()):
                other = entry.names[1] if entry.names[0] == name else entry.names[0]
                if other in left_b:
                    left_b.discard(other)
                    found[name] = MetricRename(name, other, section, entry.label,
                                               entry.confirmed_by or "", versions)
                    break
        return found


def _load(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TriageError(f"{path}: the {what} cannot be read ({exc}); reinstall triage") \
            from None
    if document.get("version") != MAP_VERSION:
        raise TriageError(f"{path}: {what} version {document.get('version')} is not "
                          f"{MAP_VERSION}; reinstall triage")
    return document


@cache
def metric_map(path: Path = MAP_FILE) -> MetricMap:
    """The installed metric map."""
    document = _load(path, "metric map")
    return MetricMap.of([MapEntry.from_json(e) for e in document["entries"]])


@dataclass(frozen=True)
class KernelRule:
    """A library's renamed kernel family: names matching `pattern` are the names matching
    `pattern` after `replace`, e.g. NCCL's ncclKernel_AllReduce_RING_LL_Sum_float, which
    NCCL 2.19 named ncclDevKernel_AllReduce_RING_LL_Sum_float."""

    library: str
    old: str  # a regular expression
    new: str  # what replaces it
    says: str  # the rule as a reader says it: "ncclKernel_* to ncclDevKernel_*"
    evidence: str

    def renamed(self, name: str) -> str | None:
        """The name in the family's newer spelling; None where the rule does not apply."""
        new = re.sub(self.old, self.new, name, count=1)
        return new if new != name else None


@cache
def kernel_rules(path: Path = KERNEL_RULES_FILE) -> tuple[KernelRule, ...]:
    document = _load(path, "kernel rename rules")
    return tuple(KernelRule(r["library"], r["old"], r["new"], r["says"], r["evidence"])
                 for r in document["rules"])


def kernel_family(name: str) -> tuple[str, KernelRule] | None:
    """A kernel name in its library's newer spelling, and the rule; None where no rule
    applies (the name is already the newer one, or no library renamed it)."""
    for rule in kernel_rules():
        new = rule.renamed(name)
        if new is not None:
            return new, rule
    return None
