"""Drift: what differs in how two runs were captured, and how much that matters.

The grading is one table, DRIFT_RULES, read top to bottom: a field, how to read it from a run's
record, how to compare, and the severity when the two known values differ:

- invalidates: the numbers are not comparable (different GPU, clock or cache control, replay);
- caution: comparable with care (tool, driver major or CUDA version, section set, host machine);
- info: recorded for the reader (driver patch level, host name, working directory, profiler
  options, git commit and local edits).

The workload is graded too: each command splits into the profiler's part and the application
(program and arguments, from the manifest's `application.argv` where the report or capture
recorded it, else from the command line).

A value unknown on one side gives the state "unknown": never a difference, never "same". A value
unknown on both sides gives "unrecorded", listed too; where the field would invalidate the
comparison had it differed, it caps the verdict at `caution` (unknown is never "same"). A
recorded absence (the capture saw no GPU) is a value, not unknown.
The verdict is `invalid` if anything invalidates, else `caution` if anything cautions, else
`comparable`. Per-section comparability (a section or metric on one side only) is added by the
ncu diff with severity "not_comparable" and does not change the verdict. Matched ncu kernels
whose launches carry no metric values on a side (the profiler collected nothing) are named:
`caution`, or `invalid` when no matched kernel has data on both sides (nothing to compare).

Items are typed `DriftItem`s (compare/result.py) with a reason code (a table row's field, or
`kernels.set`, `section.only_a`, ...) and whole values and kernel names; the views word and clip.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from triage.archive.model import GitState, RunRecord
from triage.capture.profiler_args import parse_command, split_command_line
from triage.compare.result import (KERNEL_LAUNCHES, KERNEL_NO_DATA, KERNEL_PAIRED,
                                   KERNEL_RENAME_RULE, KERNEL_RENAMED, KERNEL_SET,
                                   KERNEL_UNPAIRED,
                                   DriftItem, KernelDiff, Value)

INVALIDATES, CAUTION, INFO = "invalidates", "caution", "info"
NOT_COMPARABLE, UNKNOWN = "not_comparable", "unknown"
# Worst first, the one order every view lists drift in: an unknown clock or GPU can matter
# more than a known difference of host name.
SEVERITY_ORDER = (INVALIDATES, CAUTION, NOT_COMPARABLE, UNKNOWN, INFO)
VERDICT_OF = {INVALIDATES: "invalid", CAUTION: "caution"}
VERDICTS = ("comparable", "caution", "invalid")  # better to worse
UNKNOWN_WHY = "not recorded on one side: neither a difference nor the same"
UNRECORDED = "unrecorded"  # the state of a field unknown on both sides
UNRECORDED_WHY = "not recorded in either run: never the same"
UNRECORDED_CAP_WHY = ("not recorded in either run: a difference here would invalidate the "
                      "comparison, so comparable with care at best")
NO_GPU = "none"  # the capture recorded that there was no GPU: a value, not unknown
NO_REPOSITORY = "not a git repository"
# Interpreters whose first argument is the program that runs (python train.py).
_INTERPRETER = re.compile(r"^(python|pypy)[\d.]*(\.exe)?$")


def _gpu(record: RunRecord, key: str) -> Value:
    if record.gpu is None:
        return NO_GPU if record.gpu_absent else None
    return getattr(record.gpu, key)


def _env(record: RunRecord, key: str) -> Value:
    return getattr(record.environment, key)


def _host(record: RunRecord, key: str) -> Value:
    return getattr(record.environment.host, key)


def _facts(record: RunRecord, section: str) -> dict:
    """A section of the machine facts `triage capture` recorded (capture/machine.py)."""
    machine = record.capture.machine if record.capture is not None else {}
    found = machine.get(section)
    return found if isinstance(found, dict) else {}


def persistence_mode(record: RunRecord) -> Value:
    """The first GPU's persistence mode as nvidia-smi said at capture time."""
    gpus = _facts(record, "gpu").get("gpus")
    listed = gpus.get("value") if isinstance(gpus, dict) else None
    first = listed[0] if isinstance(listed, list) and listed else {}
    return first.get("persistence_mode") if isinstance(first, dict) else None


def counters_permitted(record: RunRecord) -> Value:
    """Whether the capturing user could read GPU counters: not RmProfilingAdminOnly, or root."""
    counters = _facts(record, "profiling_counters")
    admin_only = counters.get("admin_only")
    restricted = admin_only.get("value") if isinstance(admin_only, dict) else None
    if restricted is None:
        return None
    return not restricted or bool(counters.get("is_root"))


def _major(version: Value) -> str | None:
    return str(version).split(".")[0] if version else None


def clock_locked(record: RunRecord) -> bool | None:
    """Whether the kernels ran with locked clocks, from the report's own evidence first, then
    from a recorded --clock-control (never from ncu's default: that is no record)."""
    clock = record.clock
    if clock.results_with_status:
        return clock.executed_locked == clock.results_with_status
    setting = record.recorded_setting("clock_control")
    if record.tool != "ncu" or setting is None:
        return None
    return setting != "none"


def _sections(record: RunRecord) -> tuple[str, ...] | None:
    """The sections an ncu run collected, sorted: a set, which views show as + and -."""
    sections = record.recorded_setting("sections")
    return tuple(sorted(map(str, sections))) if sections is not None and record.tool == "ncu" \
        else None


@dataclass(frozen=True)
class Workload:
    """A run's command split: the profiler's part, and the application it profiled."""

    profiler: str | None = None
    program: str | None = None
    arguments: tuple[str, ...] | None = None


def workload(record: RunRecord) -> Workload:
    """The application from `application.argv` where recorded, else from the command line;
    the profiler's part is the command line less the application's words at its end."""
    words = split_command_line(record.command) if record.command else []
    parsed = parse_command(words) if words else None
    tail = parsed.application if parsed is not None and parsed.tool else []
    argv = list(record.application_argv or tail)
    profiler = " ".join(words[:len(words) - len(tail)]) if tail else record.command
    if not argv:
        return Workload(profiler)
    split = 2 if _INTERPRETER.match(re.split(r"[\\/]", argv[0])[-1]) and len(argv) > 1 \
        and not argv[1].startswith("-") else 1
    return Workload(profiler, " ".join(argv[:split]), tuple(argv[split:]))


def _git(record: RunRecord, fact: Callable[[GitState], Value]) -> Value:
    """A capture's git fact; outside a repository that is the value (a recorded absence)."""
    git = record.capture.git if record.capture is not None else None
    if git is None:
        return None
    if not git.repository:
        return NO_REPOSITORY if git.reason == NO_REPOSITORY else None
    return fact(git)


def _ncu(a: RunRecord, b: RunRecord) -> bool:
    """ncu-only fields (clock and cache control, replay, sections) apply when either run is
    ncu: a mixed pair shows the nsys side as unknown, two nsys runs do not list them."""
    return "ncu" in (a.tool, b.tool)


def _nsys(a: RunRecord, b: RunRecord) -> bool:
    return "nsys" in (a.tool, b.tool)


def _captured(a: RunRecord, b: RunRecord) -> bool:
    """Machine facts are `triage capture`'s: compared when both runs have them."""
    return a.capture is not None and b.capture is not None


def _captured_ncu(a: RunRecord, b: RunRecord) -> bool:
    return _captured(a, b) and _ncu(a, b)


@dataclass(frozen=True)
class DriftRule:
    """One row of the grading table."""

    field: str
    read: Callable[[RunRecord], object]
    severity: str
    why: str
    # Only compare when this holds for both records (e.g. driver patch: same major version).
    when: Callable[[RunRecord, RunRecord], bool] = lambda a, b: True
    # Listed when unknown on both sides (not where another row already says so).
    listed_unrecorded: bool = True
    # A field the GPU model fixes: not listed as unrecorded when both runs name the same model.
    implied_by: str | None = None
    # A profiler setting: its documented default where nothing recorded it (shown, never graded)
    assumed: Callable[[RunRecord], object] | None = None
    assumed_of: str | None = None
    # Two values that differ yet agree: one side's value is only what its data proves
    agree: Callable[[RunRecord, RunRecord], bool] = lambda a, b: False


def setting_rule(name: str, severity: str, why: str, tool: str,
                 when: Callable[[RunRecord, RunRecord], bool], **extra) -> DriftRule:
    """A row for a profiler setting: graded on what the runs record or prove, with the tool's
    default beside an unrecorded value for the reader."""
    return DriftRule(f"settings.{name}", lambda r: r.recorded_setting(name), severity, why,
                     when, assumed=lambda r: r.assumed_setting(name), assumed_of=tool, **extra)


def _domains(record: RunRecord) -> set[str]:
    return set(str(record.setting("trace") or "").split(",")) - {""}


def traces_agree(a: RunRecord, b: RunRecord) -> bool:
    """A trace set derived from an export's tables is what was traced *at least* (a domain with
    no events leaves no table): it agrees with the other side's set when that holds it whole."""
    derived = [r.settings["trace"].source == "derived" if "trace" in r.settings else False
               for r in (a, b)]
    if derived == [True, False]:
        return _domains(a) <= _domains(b)
    if derived == [False, True]:
        return _domains(b) <= _domains(a)
    return False


DRIFT_RULES: list[DriftRule] = [
    DriftRule("gpu.name", lambda r: _gpu(r, "name"), INVALIDATES,
              "different GPU model: the numbers come from different hardware"),
    DriftRule("gpu.sm_count", lambda r: _gpu(r, "sm_count"), INVALIDATES,
              "different SM count: throughput and occupancy scale with it",
              implied_by="gpu.name"),
    DriftRule("gpu.compute_capability", lambda r: _gpu(r, "compute_capability"), INVALIDATES,
              "different compute capability: different architecture and metrics",
              implied_by="gpu.name"),
    DriftRule("clock.locked", clock_locked, INVALIDATES,
              "one run locked the GPU clocks and the other did not: durations are not comparable",
              when=_ncu),
    setting_rule("clock_control", INVALIDATES,
                 "different --clock-control: kernel durations depend on the clock", "ncu", _ncu),
    setting_rule("cache_control", INVALIDATES,
                 "different --cache-control: flushed vs warm caches change memory metrics",
                 "ncu", _ncu),
    setting_rule("replay_mode", INVALIDATES,
                 "different --replay-mode: kernel vs application/range replay measure "
                 "differently", "ncu", _ncu),
    DriftRule("counters.permitted", counters_permitted, INVALIDATES,
              "GPU counters readable on one side only (RmProfilingAdminOnly, not root): ncu "
              "collects no metrics where they are not", when=_captured_ncu,
              listed_unrecorded=False),
    DriftRule("workload.program", lambda r: workload(r).program, CAUTION,
              "different program: the numbers may measure other work"),
    DriftRule("workload.arguments", lambda r: workload(r).arguments, CAUTION,
              "different application arguments: the workload (sizes, steps, inputs) may differ"),
    DriftRule("tool_version", lambda r: r.tool_version, CAUTION,
              "different profiler version: metric definitions and rules change across releases",
              when=lambda a, b: a.tool == b.tool),
    DriftRule("driver.major", lambda r: _major(_env(r, "driver_version")), CAUTION,
              "different driver major version: scheduling and clocks may differ"),
    DriftRule("cuda_version", lambda r: _env(r, "cuda_version"), CAUTION,
              "different CUDA version: compiler, runtime and library kernels may differ"),
    DriftRule("settings.sections", _sections, CAUTION,
              "different section set: only the sections both runs collected are compared",
              when=_ncu),
    setting_rule("trace", CAUTION, "different nsys trace domains: tracing overhead differs",
                 "nsys", _nsys, agree=traces_agree),
    DriftRule("gpu.persistence_mode", persistence_mode, CAUTION,
              "persistence mode on one side only: without it the driver starts up for each "
              "process and the first launches and clocks differ", when=_captured,
              listed_unrecorded=False),
    DriftRule("host.cpu", lambda r: _host(r, "cpu"), CAUTION,
              "different host CPU: launch overhead and host-side gaps differ"),
    DriftRule("host.os", lambda r: _host(r, "os"), CAUTION,
              "different host OS or kernel"),
    DriftRule("driver.version", lambda r: _env(r, "driver_version"), INFO,
              "different driver patch level (same major version)",
              when=lambda a, b: _major(_env(a, "driver_version")) == _major(
                  _env(b, "driver_version")), listed_unrecorded=False),  # driver.major says it
    DriftRule("host.name", lambda r: _host(r, "name"), INFO, "captured on different hosts"),
    DriftRule("environment.working_directory", lambda r: _env(r, "working_directory"), INFO,
              "different working directory"),
    DriftRule("command", lambda r: workload(r).profiler, INFO,
              "different profiler options (the application is compared as workload.*)"),
    DriftRule("git.commit", lambda r: _git(r, lambda g: g.commit or "no commit yet"), INFO,
              "different commit: a before/after usually differs in commit, that is the point; "
              "the changes between them are what the numbers measure"),
    DriftRule("git.dirty", lambda r: _git(r, lambda g: g.dirty), INFO,
              "uncommitted edits in one tree or both: the commit alone does not say what ran"),
]


def _state(a: Value, b: Value) -> str:
    if a is None and b is None:
        return UNRECORDED
    if a is None or b is None:
        return UNKNOWN
    return "same" if a == b else "different"


def compared(field: str, a: Value, b: Value, severity: str, why: str) -> DriftItem:
    """One field compared: its state, and the severity and why each state has. An unknown
    value is not the difference the rule explains: every format says so."""
    state = _state(a, b)
    if state == UNRECORDED:
        capped = severity == INVALIDATES
        return DriftItem(field, field, a, b, state, CAUTION if capped else UNKNOWN,
                         UNRECORDED_CAP_WHY if capped else UNRECORDED_WHY)
    return DriftItem(field, field, a, b, state, severity if state == "different" else state,
                     UNKNOWN_WHY if state == UNKNOWN else why)


def grade(record_a: RunRecord, record_b: RunRecord,
          rules: list[DriftRule] = DRIFT_RULES) -> list[DriftItem]:
    """Every rule's comparison: field, both values, state, and severity when not the same."""
    items, states = [], {}
    for rule in rules:
        if not rule.when(record_a, record_b):
            continue
        item = compared(rule.field, rule.read(record_a), rule.read(record_b), rule.severity,
                        rule.why)
        if item.state == "different" and rule.agree(record_a, record_b):
            item = replace(item, state="same", severity="same")
        if rule.assumed is not None:
            item = assumed_beside(item, rule, record_a, record_b)
        states[rule.field] = item.state
        implied = rule.implied_by is not None and states.get(rule.implied_by) == "same"
        if item.state != UNRECORDED or (rule.listed_unrecorded and not implied):
            items.append(item)
    return items


def assumed_beside(item: DriftItem, rule: DriftRule, a: RunRecord, b: RunRecord) -> DriftItem:
    """The item with each side's assumed default, where a side has only that."""
    assert rule.assumed is not None
    assumed = (rule.assumed(a), rule.assumed(b))
    if assumed == (None, None):
        return item
    return replace(item, assumed=assumed, assumed_of=rule.assumed_of)


def worst_verdict(verdicts: Iterable[str]) -> str:
    """The worst of some verdicts (a series of steps, or what each drift item implies)."""
    return max(verdicts, key=VERDICTS.index, default="comparable")


def verdict(items: Iterable[DriftItem]) -> str:
    """The worst verdict any item implies."""
    return worst_verdict(VERDICT_OF.get(item.severity, "comparable") for item in items)


def severity_rank(severity: str) -> int:
    """Where a severity sorts when drift is listed worst first, in every view."""
    return SEVERITY_ORDER.index(severity)


def drift_item(field: str, code: str, a: Value, b: Value, severity: str, why: str,
               kernels_a: Sequence[str] = (), kernels_b: Sequence[str] = ()) -> DriftItem:
    """A drift item found by a diff rather than by the table (kernel set, sections, tools)."""
    return DriftItem(field, code, a, b, "different", severity, why, tuple(kernels_a),
                     tuple(kernels_b))


def kernel_set_drift(kernels: Sequence[KernelDiff], launches: bool = True) -> list[DriftItem]:
    """Kernels on one side only, matched kernels launched a different number of times, and
    kernels of different names compared as one: on a guess by launch order (renamed), by the
    user's --pair (paired), or not paired although launch order would (unpaired: too unlike).

    `launches=False` for ncu vs nsys: ncu profiles the launches it was told to, so counts
    differing between the tools are no sign of a different workload."""
    only_a = [k.name for k in kernels if k.match == "only_a"]
    only_b = [k.name for k in kernels if k.match == "only_b"]
    recounted = [k for k in kernels if launches and k.match == "matched" and k.a and k.b
                 and k.a.launches != k.b.launches]
    renamed = [k for k in kernels if k.guessed]
    confirmed = [k for k in kernels if k.matched_by == "pair"]
    by_rule = [k for k in kernels if k.matched_by == "rename_rule"]
    refused = [k.pairing for k in kernels if k.pairing and k.pairing.refused]
    items = []
    if only_a or only_b:
        items.append(drift_item("kernels.set", KERNEL_SET, f"{len(only_a)} only in A",
                                f"{len(only_b)} only in B", CAUTION, "different kernel set",
                                only_a, only_b))
    if recounted:
        items.append(drift_item("kernels.launches", KERNEL_LAUNCHES, None, None, CAUTION,
                                "different launch counts for", [k.name for k in recounted],
                                [k.name_b or k.name for k in recounted]))
    if renamed:  # compared as one kernel on a guess: the reader should know which
        items.append(drift_item("kernels.renamed", KERNEL_RENAMED, None, None, INFO,
                                "paired by a guess (launch order; not judged by the gate "
                                "until --pair A=B confirms it), names differ",
                                [k.name for k in renamed], [k.name_b or k.name for k in renamed]))
    if confirmed:
        items.append(drift_item("kernels.paired", KERNEL_PAIRED, None, None, INFO,
                                "paired by --pair, names differ", [k.name for k in confirmed],
                                [k.name_b or k.name for k in confirmed]))
    if by_rule:
        rules = sorted({k.pairing.rule for k in by_rule if k.pairing and k.pairing.rule})
        items.append(drift_item("kernels.rename_rule", KERNEL_RENAME_RULE, None, None, INFO,
                                f"paired across a rename ({'; '.join(rules)}), names differ",
                                [k.name for k in by_rule], [k.name_b or k.name for k in by_rule]))
    if refused:  # launch order would pair them, but they are not one kernel renamed
        items.append(drift_item("kernels.unpaired", KERNEL_UNPAIRED, None, None, INFO,
                                "not paired by launch order: launch configuration or duration "
                                "differs over 100x (--pair A=B pairs them)",
                                [e.name_a for e in refused], [e.name_b for e in refused]))
    return items


def no_data_drift(kernels: Sequence[KernelDiff]) -> list[DriftItem]:
    """Matched kernels with no data on a side (ncu collected nothing for their launches): a
    caution naming them, or invalid when no matched kernel has data on both sides."""
    matched = [k for k in kernels if k.match == "matched"]
    empty = [k for k in matched if k.no_data]
    if not empty:
        return []
    nothing = len(empty) == len(matched)
    return [drift_item("kernels.no_data", KERNEL_NO_DATA, f"{sum('a' in k.no_data for k in empty)}"
                       " without data in A", f"{sum('b' in k.no_data for k in empty)} without "
                       "data in B", INVALIDATES if nothing else CAUTION,
                       ("nothing to compare: no matched kernel has data in both runs (the "
                        "profiler collected nothing)" if nothing else
                        "no data in one run or both (the profiler collected nothing) for"),
                       [k.name for k in empty], [k.name_b or k.name for k in empty])]
