"""`triage versions`: what a store's runs span (profiler versions, drivers, CUDA, GPUs), which
pairs of ncu versions the metric map covers, and what stays incomparable between them.

Read from the catalog alone (one row per run), never a run's own files: a store of 100,000
runs answers as fast as `ls`. A pair of ncu versions is covered where the map saw both (its
evidence names the versions each metric name was shown in); its renames are the confirmed
entries with one name shown in one version only and the other in the other. A version the map
never saw leaves its pairs uncovered: a metric renamed there reads as "one side only".
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from triage.archive import catalog
from triage.archive.store import Store
from triage.compare.renames import (CONFIRMED, MapEntry, MetricMap, kernel_rules, metric_map,
                                    same_release, version_key)
from triage.compare.result import JsonDict

COLUMNS = ["tool", "tool_version", "driver_version", "cuda_version", "gpu"]


@dataclass(frozen=True)
class Count:
    """A value the runs record (a version, a GPU) and how many runs record it; None: not
    recorded."""

    value: str | None
    runs: int

    def to_json(self) -> JsonDict:
        return {"value": self.value, "runs": self.runs}


@dataclass(frozen=True)
class VersionPair:
    """Two ncu versions of the store: whether the map saw each, and the renames it pairs
    between them (confirmed) or only suspects (unconfirmed)."""

    a: str | None
    b: str | None
    seen: tuple[bool, bool]
    renames: tuple[MapEntry, ...]
    unconfirmed: int

    @property
    def covered(self) -> bool:
        return all(self.seen)

    def to_json(self) -> JsonDict:
        return {"a": self.a, "b": self.b, "covered": self.covered,
                "in_map": {"a": self.seen[0], "b": self.seen[1]},
                "renames": [{"section": e.section, "label": e.label, "a": e.names[0],
                             "b": e.names[1], "confirmed_by": e.confirmed_by}
                            for e in self.renames],
                "unconfirmed": self.unconfirmed}


@dataclass(frozen=True)
class VersionsResult:
    """What the store's runs span, and the ncu version pairs the metric map covers."""

    runs: int
    tools: tuple[tuple[str, tuple[Count, ...]], ...]  # tool -> its versions
    drivers: tuple[Count, ...]
    cuda: tuple[Count, ...]
    gpus: tuple[Count, ...]
    pairs: tuple[VersionPair, ...]
    kernel_rules: tuple[str, ...]
    problems: tuple[str, ...] = ()

    def to_json(self) -> JsonDict:
        return {"runs": self.runs,
                "tools": {tool: [c.to_json() for c in counts] for tool, counts in self.tools},
                "drivers": [c.to_json() for c in self.drivers],
                "cuda": [c.to_json() for c in self.cuda],
                "gpus": [c.to_json() for c in self.gpus],
                "ncu_pairs": [p.to_json() for p in self.pairs],
                "kernel_rules": list(self.kernel_rules), "problems": list(self.problems)}


def _counts(values: Iterable[str | None], key=None) -> tuple[Count, ...]:
    counted = Counter(values)
    order = sorted(counted, key=key or (lambda v: (v is None, v or "")))
    return tuple(Count(value, counted[value]) for value in order)


def _shown_in(entry: MapEntry, side: int, version: str | None) -> bool:
    return any(same_release(version, seen) for seen in entry.versions[side])


def _between(entry: MapEntry, a: str | None, b: str | None) -> bool:
    """The entry's two names are one in version a, the other in version b (either way)."""
    return any(_shown_in(entry, i, a) and not _shown_in(entry, 1 - i, a)
               and _shown_in(entry, 1 - i, b) and not _shown_in(entry, i, b) for i in (0, 1))


def version_pair(a: str | None, b: str | None, known: MetricMap) -> VersionPair:
    seen = {v for e in known.entries for side in e.versions for v in side}
    between = [e for e in known.entries if _between(e, a, b)]
    return VersionPair(a, b, (any(same_release(a, s) for s in seen),
                              any(same_release(b, s) for s in seen)),
                       tuple(e for e in between if e.status == CONFIRMED),
                       sum(e.status == "unconfirmed" for e in between))


def ncu_pairs(versions: Sequence[str | None], known: MetricMap) -> tuple[VersionPair, ...]:
    """Every two ncu versions of the store, older first."""
    ordered = sorted(set(versions), key=version_key)
    return tuple(version_pair(a, b, known) for a, b in itertools.combinations(ordered, 2))


def store_versions(store: Store) -> VersionsResult:
    """The store's runs by tool version, driver, CUDA and GPU, from the catalog, and the ncu
    version pairs the metric map covers."""
    found = catalog.scan_unordered(store, COLUMNS)
    rows = found.table.to_pylist()
    tools = sorted({r["tool"] for r in rows})
    by_tool = tuple((tool, _counts((r["tool_version"] for r in rows if r["tool"] == tool),
                                   key=version_key)) for tool in tools)
    ncu = [r["tool_version"] for r in rows if r["tool"] == "ncu"]
    return VersionsResult(
        len(rows), by_tool, _counts(r["driver_version"] for r in rows),
        _counts(r["cuda_version"] for r in rows), _counts(r["gpu"] for r in rows),
        ncu_pairs(ncu, metric_map()),
        tuple(f"{r.library}: {r.says}" for r in kernel_rules()), found.problems)
