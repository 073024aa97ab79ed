"""Matching kernels between two runs.

Kernels are grouped by demangled name (each group holds its launches in launch order). The
user's pairs come first (`--pair A=B`: kernel A of run A is kernel B of run B, confirmed); then
groups with the same name match, and repeated launches pair in order (unequal counts are said).
Groups left over on both sides, in equal number, pair by order of first launch: that is the
usual before/after where the change renamed the kernel (naive_gemm -> sgemm_global_mem_coalesce).
Such a pairing is a guess: it carries its evidence (place in launch order, grid, block, mean
duration), is never judged by the gate, and is not made where the two kernels' grids, blocks or
durations differ by more than PAIRING_LIMIT times (`--no-rename-pairing`: never made). Anything
else stays unmatched (only_a / only_b).

Between names and guesses, kernels a library renamed pair by its rule (`compare/renames.py`,
data in `compare/data/kernel_renames.json`: NCCL's ncclKernel_* became ncclDevKernel_*): not a
guess, so the gate judges them, but said ("paired across a rename") with the rule as evidence.

Names are compared by `match_key`: tools differ in the spaces they put in demangled names
(`f(const float*, int)` vs `f(const float *, int)`), which must not make one kernel two.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Generic, TypeVar

from triage.base.errors import UsageError
from triage.compare.renames import kernel_family

Launch = tuple[int, int]  # (report_index, kernel_index)
T = TypeVar("T")
_PUNCTUATION_SPACE = re.compile(r"\s*([*&,<>()\[\]])\s*")
NAME, PAIR, LAUNCH_ORDER, RENAME_RULE = "name", "pair", "launch_order", "rename_rule"
TWO_NAMES = (PAIR, LAUNCH_ORDER, RENAME_RULE)  # how two different names come to be one kernel

# Why a launch-order guess was not made: the two kernels' grids, blocks or mean durations
# differ by more than PAIRING_LIMIT times (orders of magnitude: not one kernel renamed).
PAIRING_GRID, PAIRING_BLOCK, PAIRING_DURATION = "pairing.grid", "pairing.block", "pairing.duration"
PAIRING_LIMIT = 100.0


Dims = tuple[int, int, int]


@dataclass(frozen=True)
class PairEvidence:
    """Why two kernels of different names are compared as one, or why a guess was refused.

    `by` is "launch_order" (a guess: the kernels left unmatched by name, in equal number on
    each side, taken in order of first launch; `order` their place in that order, 1-based),
    "pair" (the user's --pair A=B: confirmed) or "rename_rule" (a library renamed the family:
    `rule` says which). `grid`/`block` are each side's first launch's
    configuration (None where the run did not record it), `duration_ns` each side's mean
    duration per launch; `refused` the reason code (pairing.grid, pairing.block,
    pairing.duration) of a guess not made because they differ by more than PAIRING_LIMIT."""

    by: str
    name_a: str
    name_b: str
    order: int | None = None
    grid: tuple[Dims | None, Dims | None] = (None, None)
    block: tuple[Dims | None, Dims | None] = (None, None)
    duration_ns: tuple[float | None, float | None] = (None, None)
    refused: str | None = None
    rule: str | None = None

    @property
    def confirmed(self) -> bool:
        return self.by == "pair"

    @property
    def ratios(self) -> dict[str, float | None]:
        """How many times the larger of each pair of numbers is the smaller: grid and block
        (threads of each), and mean duration; None where a side is unknown or 0."""
        return {"grid": _ratio(*(_threads(d) for d in self.grid)),
                "block": _ratio(*(_threads(d) for d in self.block)),
                "duration": _ratio(*self.duration_ns)}

    def refusal(self) -> str | None:
        """The first reason code of a guess too unlike to be one kernel, or None."""
        codes = {"grid": PAIRING_GRID, "block": PAIRING_BLOCK, "duration": PAIRING_DURATION}
        return next((codes[k] for k, r in self.ratios.items()
                     if r is not None and r > PAIRING_LIMIT), None)

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "confirmed": self.confirmed, "a": self.name_a, "b": self.name_b,
                "order": self.order, "grid": [list(d) if d else None for d in self.grid],
                "block": [list(d) if d else None for d in self.block],
                "duration_ns": list(self.duration_ns), "ratios": self.ratios,
                "refused": self.refused, **({"rule": self.rule} if self.rule else {})}


def _threads(dims: Dims | None) -> float | None:
    return float(dims[0] * dims[1] * dims[2]) if dims else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return max(a, b) / min(a, b)


@dataclass(frozen=True)
class FirstLaunch:
    """A kernel's first launch in a run: when (a sort key: start time, or report and launch
    index) and its launch configuration (None where the run did not record it)."""

    at: Any
    grid: Dims | None = None
    block: Dims | None = None


NO_LAUNCH = FirstLaunch(float("inf"))


def dims(row: Mapping[str, Any], prefix: str) -> Dims | None:
    """(x, y, z) of a kernel row's grid or block, None unless all three were recorded."""
    x, y, z = (row.get(f"{prefix}_{axis}") for axis in "xyz")
    return (x, y, z) if isinstance(x, int) and isinstance(y, int) and isinstance(z, int) \
        else None


@lru_cache(maxsize=65536)
def match_key(name: str) -> str:
    """A demangled name without the spaces around punctuation, for matching only (the real
    name is what is shown). Cached: a run of thousands of launches repeats a few long
    template names, each asked for per launch."""
    return _PUNCTUATION_SPACE.sub(r"\1", name.strip())


@dataclass(frozen=True)
class Named:
    """A kernel of one run as matching sees it: its name, short name (`naive_gemm`) and mean
    duration per launch, and `item`, what the caller matches (a launch group, a summary row)."""

    name: str
    short_name: str | None
    duration_ns: float | None
    item: Any


@dataclass(frozen=True)
class Found(Generic[T]):
    """One kernel as matched: A's and B's (one may be None), how (name, pair, launch_order or
    None), and the evidence of a pairing of two names (or of a guess refused: then b is None)."""

    a: T | None
    b: T | None
    by: str | None
    evidence: PairEvidence | None = None


Facts = Callable[[Sequence[str]], Mapping[str, FirstLaunch]]


def match_named(named_a: Sequence[Named], named_b: Sequence[Named],
                pairs: Sequence[tuple[str, str]] = (), guess: bool = True,
                facts: tuple[Facts, Facts] | None = None) -> list[Found]:
    """The user's pairs, then names, then (with `guess`) the leftovers in equal number by order
    of first launch, each guess with its evidence and refused where its kernels are too unlike.
    `facts` reads each side's first launches of the names asked (only leftovers and pairs)."""
    facts = facts or (lambda names: {}, lambda names: {})
    left_a = {match_key(n.name): n for n in named_a}  # unique: callers group by match key
    left_b = {match_key(n.name): n for n in named_b}
    found: list[Found] = [_confirmed(a, b, facts) for a, b in _resolved(pairs, left_a, left_b)]
    for key in [k for k in left_a if k in left_b]:
        found.append(Found(left_a.pop(key).item, left_b.pop(key).item, NAME))
    found += _renamed_families(left_a, left_b, facts)
    rest_a, rest_b = list(left_a.values()), list(left_b.values())
    if guess and rest_a and len(rest_a) == len(rest_b):
        return found + _guesses(rest_a, rest_b, facts)
    return found + [Found(n.item, None, None) for n in rest_a] + \
        [Found(None, n.item, None) for n in rest_b]


def _renamed_families(left_a: dict[str, Named], left_b: dict[str, Named],
                      facts: tuple[Facts, Facts]) -> list[Found]:
    """Kernels a library renamed (NCCL's ncclKernel_* -> ncclDevKernel_*), in either
    direction, each taken out of `left_a`/`left_b`."""
    found = []
    for newer, older, a_is_older in ((left_b, left_a, True), (left_a, left_b, False)):
        for key in list(older):
            renamed = kernel_family(older[key].name)
            if renamed is None or match_key(renamed[0]) not in newer:
                continue
            old, new = older.pop(key), newer.pop(match_key(renamed[0]))
            a, b = (old, new) if a_is_older else (new, old)
            firsts = (facts[0]([a.name]).get(a.name, NO_LAUNCH),
                      facts[1]([b.name]).get(b.name, NO_LAUNCH))
            evidence = replace(_evidence(RENAME_RULE, a, b, *firsts),
                               rule=f"{renamed[1].library} renamed {renamed[1].says}")
            found.append(Found(a.item, b.item, RENAME_RULE, evidence))
    return found


def _evidence(by: str, a: Named, b: Named, first_a: FirstLaunch, first_b: FirstLaunch,
              order: int | None = None) -> PairEvidence:
    return PairEvidence(by, a.name, b.name, order, (first_a.grid, first_b.grid),
                        (first_a.block, first_b.block), (a.duration_ns, b.duration_ns))


def _confirmed(a: Named, b: Named, facts: tuple[Facts, Facts]) -> Found:
    first_a = facts[0]([a.name]).get(a.name, NO_LAUNCH)
    first_b = facts[1]([b.name]).get(b.name, NO_LAUNCH)
    return Found(a.item, b.item, PAIR, _evidence(PAIR, a, b, first_a, first_b))


def _guesses(rest_a: list[Named], rest_b: list[Named],
             facts: tuple[Facts, Facts]) -> list[Found]:
    """Leftovers paired by order of first launch; a pair whose grids, blocks or durations
    differ by more than PAIRING_LIMIT times stays apart, A's kernel holding the evidence."""
    first_a = facts[0]([n.name for n in rest_a])
    first_b = facts[1]([n.name for n in rest_b])
    ordered_a = sorted(rest_a, key=lambda n: first_a.get(n.name, NO_LAUNCH).at)
    ordered_b = sorted(rest_b, key=lambda n: first_b.get(n.name, NO_LAUNCH).at)
    found: list[Found] = []
    for order, (a, b) in enumerate(zip(ordered_a, ordered_b, strict=True), start=1):
        evidence = _evidence(LAUNCH_ORDER, a, b, first_a.get(a.name, NO_LAUNCH),
                             first_b.get(b.name, NO_LAUNCH), order)
        refused = evidence.refusal()
        if refused is None:
            found.append(Found(a.item, b.item, LAUNCH_ORDER, evidence))
        else:
            found += [Found(a.item, None, None, replace(evidence, refused=refused)),
                      Found(None, b.item, None)]
    return found


def _resolved(pairs: Sequence[tuple[str, str]], left_a: dict[str, Named],
              left_b: dict[str, Named]) -> list[tuple[Named, Named]]:
    """The user's pairs as kernels, each taken out of `left_a`/`left_b` (a kernel named by two
    pairs is an error: it is one kernel)."""
    every = (dict(left_a), dict(left_b))
    resolved = []
    for name_a, name_b in pairs:
        keys = (_named_key(name_a, every[0], "A", f"{name_a}={name_b}"),
                _named_key(name_b, every[1], "B", f"{name_a}={name_b}"))
        for key, left, side in ((keys[0], left_a, "A"), (keys[1], left_b, "B")):
            if key not in left:
                raise UsageError(f"--pair {name_a}={name_b}: kernel {key!r} of run {side} is "
                                 "already paired by another --pair")
        resolved.append((left_a.pop(keys[0]), left_b.pop(keys[1])))
    return resolved


def _function(key: str) -> str:
    """A match key's function: without parameters and return type (`ns::f<64>`)."""
    return key.split("(", 1)[0].removeprefix("void ").strip()


def _named_key(name: str, kernels: dict[str, Named], side: str, given: str) -> str:
    """The match key of the one kernel `name` means: its whole name, else its short name or
    its function without parameters (`ns::f<64>` for `void ns::f<64>(int)`)."""
    key = match_key(name)
    if key in kernels:
        return key
    short = [k for k, n in kernels.items() if n.short_name == name.strip()
             or _function(k) == key]
    if len(short) == 1:
        return short[0]
    known = ", ".join(sorted({n.short_name or n.name for n in kernels.values()})[:6])
    what = f"{len(short)} kernels of run {side} are" if short else \
        f"no kernel of run {side} is"
    raise UsageError(f"--pair {given}: {what} named {name.strip()!r} (run {side} has: "
                     f"{known or 'no kernels'}); give the whole name from `triage diff A B "
                     "--json` where short names repeat")


@dataclass
class KernelGroup:
    """All launches of one kernel name in one run, in launch order, with its first launch's
    grid and block."""

    name: str
    short_name: str | None
    launches: list[Launch] = field(default_factory=list)
    durations: list[float | None] = field(default_factory=list)
    first: FirstLaunch = NO_LAUNCH

    @property
    def mean_ns(self) -> float | None:
        known = [d for d in self.durations if d is not None]
        return sum(known) / len(known) if known else None


@dataclass
class Match:
    """A kernel as compared: one group from each side, or one side only; `evidence` for two
    names paired (or, on an only_a match, a guess refused)."""

    a: KernelGroup | None
    b: KernelGroup | None
    matched_by: str | None  # "name", "pair", "launch_order", or None when unmatched
    evidence: PairEvidence | None = None

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
    """Group kernel rows (report_index, kernel_index, name, short_name, duration_ns, and the
    grid_*/block_* of each launch where read)."""
    groups: dict[str, KernelGroup] = {}
    for row in sorted(rows, key=lambda r: (r["report_index"], r["kernel_index"])):
        name = row["name"] or row.get("short_name") or "(unnamed)"
        launch = (row["report_index"], row["kernel_index"])
        key = match_key(name)
        group = groups.get(key)
        if group is None:  # a kernel's first launch (its configuration read once, not per row)
            group = groups[key] = KernelGroup(
                name, row.get("short_name"), first=FirstLaunch(launch, dims(row, "grid"),
                                                               dims(row, "block")))
        group.launches.append(launch)
        group.durations.append(row.get("duration_ns"))
    return list(groups.values())


def match_kernels(groups_a: list[KernelGroup], groups_b: list[KernelGroup],
                  pairs: Sequence[tuple[str, str]] = (), guess: bool = True) -> list[Match]:
    """The user's pairs, then names, then the leftovers by launch order (`match_named`)."""
    def named(groups: list[KernelGroup]) -> list[Named]:
        return [Named(g.name, g.short_name, g.mean_ns, g) for g in groups]

    def facts(groups: list[KernelGroup]) -> Facts:
        return lambda names: {g.name: g.first for g in groups if g.name in names}

    found = match_named(named(groups_a), named(groups_b), pairs, guess,
                        (facts(groups_a), facts(groups_b)))
    matches = [Match(f.a, f.b, f.by, f.evidence) for f in found]
    return sorted(matches, key=lambda m: (m.a is None, m.group.launches[0]))
