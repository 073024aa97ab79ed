"""`triage explain`: why an ncu-profiled kernel is slow, read in a fixed order.

nsys decides which kernel to look at (`triage top`); ncu decides why, always in this order, so
that a cause is never named before the evidence that rules the others out:

1. throughput: compute vs memory, each as a share of peak (SpeedOfLight), the bound as ncu's
   own SOLBottleneck rule names it (`explain_sol`);
2. memory efficiency: busy is not useful - memory busy with little compute means few operations
   per byte, or sectors fetched but only partly used (MemoryWorkloadAnalysis);
3. occupancy: theoretical vs achieved, and the likely cause of the gap (waves, limiter, imbalance);
4. scheduler: stalls matter only when issue slots sit idle; then the top stall reasons;
5. conclusion: one label from three paths (memory-bound, latency-bound, synchronisation and
   serialisation; compute-bound when SM pipes are the limit), what to inspect next, the usual fix.

Every finding cites the metric values it rests on. A step whose metrics are missing says "not
collected" and names the `--section` that collects them; nothing is guessed. A kernel whose
launches carry no metric values at all (the profiler collected nothing) says "no data" in every
step instead: a missing section would not be the cause. A kernel's launches are read together
only where they behave alike (one launch configuration, one SOLBottleneck outcome, each launch
classified on its own: `explain_launches`); otherwise each group is explained apart. What each
step reads (metric names differ across ncu versions) and every number a judgement uses are data,
in `explain_tables`; this module is the steps that read them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from triage.compare.explain_launches import (MESSAGES, LaunchData, launch_config, launch_number,
                                             numeric, read_launches, rule_messages,
                                             split_by_behaviour)
from triage.compare.explain_result import (CONCLUDED, NO_DATA, NOT_COLLECTED, Cite,
                                           ExplainResult, Finding, KernelExplained, LaunchGroup,
                                           Missing, NcuRule, Step)
from triage.compare.explain_sol import (BALANCED, FROM_REPORT, FROM_THRESHOLDS, HIGH,
                                        HIGH_COMPUTE, HIGH_MEMORY, LATENCY, RULE_ID, SMALL_GRID,
                                        SolVerdict, decide, rule_verdict, stored_verdict)
from triage.compare.explain_tables import (CONCLUSION_RULES, FLOP_METRICS, LIMITERS, METRICS,
                                           NS_PER_UNIT, STALL_METRICS, STALLS, THRESHOLDS, UNITS,
                                           limit)
from triage.compare.launch_stats import Group, GroupStats, NcuTables, RawValues
from triage.compare.matching import Launch, group_kernels
from triage.compare.rundata import RunData
from triage.base.errors import TriageError, UsageError


def finding(text: str, cites: Sequence[Cite | None], tag: str | None = None) -> Finding:
    """A statement and the values it rests on (those there are); the tag lets the conclusion
    quote it."""
    return Finding(text, tuple(c for c in cites if c), tag)


STALL_PREFIX = "smsp__"  # of every naming of stall reasons in STALL_METRICS
_STALL_PATTERNS = [(re.compile(pattern), measure) for pattern, _section, measure in STALL_METRICS]
assert all(pattern.startswith("^" + STALL_PREFIX) for pattern, _s, _m in STALL_METRICS)


NOT_READ = (None, None)  # a metric's (value, unit) where the kernel has none


class Values:
    """One kernel's metrics (mean over its launches), looked up through METRICS' fallbacks."""

    def __init__(self, raw: dict[str, tuple], sections: set[str]):
        self.raw, self.sections = raw, sections
        self._found: dict[str, Cite | None] = {}

    def cite(self, name: str) -> Cite | None:
        value, unit = self.raw.get(name, NOT_READ)
        if numeric(value):
            return Cite(name, value, unit or "")
        return None

    def get(self, key: str) -> Cite | None:
        """The first of the key's namings with a number, kept: the steps ask for the same keys
        again (sm_pct and mem_pct five times), at hundreds of kernels."""
        if key not in self._found:
            self._found[key] = next(filter(None, map(self.cite, METRICS[key].names)), None)
        return self._found[key]

    def text(self, name: str) -> str | None:
        value = self.raw.get(name, (None, None))[0]
        return value if isinstance(value, str) else None

    def stalls(self) -> tuple[list[tuple[str, Cite]], str | None]:
        """(reason, cite) pairs from the first naming that has any, and what they measure."""
        for named, measure in _stall_names(tuple(self.raw)):
            cited = [(reason, c) for reason, name in named if (c := self.cite(name))]
            if cited:
                return cited, measure
        return [], None


@functools.lru_cache(maxsize=8)
def _stall_names(names: tuple[str, ...]) -> list[tuple[list[tuple[str, str]], str]]:
    """Per naming of stall reasons (STALL_METRICS' order), its (reason, metric name) pairs
    among these names, sorted by name, with what they measure: worked out once per set of
    names (every kernel of a run has the same), not per kernel over its ~300 metrics."""
    stalls = sorted(n for n in names if n.startswith(STALL_PREFIX))
    return [([(m.group(1), name) for name in stalls if (m := pattern.match(name))], measure)
            for pattern, measure in _STALL_PATTERNS]


def duration_ns(raw: dict[str, tuple]) -> float | None:
    """One launch's (or a mean's) duration in ns through METRICS' fallbacks: ncu 2019 reports
    name it gpu__time_duration, later ones gpu__time_duration.sum. None when it is not there or
    its unit is not a time unit we know (unknown, never a guess)."""
    found = Values(raw, set()).get("duration")
    if found is None:
        return None
    scale = NS_PER_UNIT.get(found.unit)
    return found.value * scale if scale else None


def missing(keys: list[str], values: Values, section: str | None = None) -> Missing:
    """What a step could not read: the metric names tried and the --section to add."""
    section = section or METRICS[keys[0]].section
    names = [n for k in keys for n in METRICS[k].names]
    present = section in values.sections
    why = (f"section {section} is in the report but lacks these metrics (named differently by "
           "this ncu version)" if present else f"not collected: add --section {section}")
    return Missing(section, tuple(names), present, why)


def step(number: int, key: str, title: str, findings: list[Finding], gaps: list[Missing],
         facts: dict) -> Step:
    return Step(number, key, title, CONCLUDED if findings else NOT_COLLECTED, tuple(findings),
                tuple(gaps), facts)


def _levels(pairs) -> str:
    return ", ".join(f"{label} {c.value:.1f}%" for label, c in pairs if c)


# -- step 1: throughput ------------------------------------------------------------------------


def top_contributor(values: Values, metric: str) -> Cite | None:
    """The breakdown metric with the highest value behind a SpeedOfLight throughput (the first
    of equals; only it is cited: a breakdown lists dozens)."""
    listed = values.text(f"breakdown:{metric}")
    numbers = [(value, name) for name in (listed or "").split(",")
               if numeric(value := values.raw.get(name, NOT_READ)[0])]
    top = max(numbers, key=lambda number: number[0], default=None)
    return values.cite(top[1]) if top else None


def unit_of(name: str) -> tuple[str, str | None]:
    """The unit a breakdown metric measures, and the memory level its traffic goes to."""
    return next(row[1:] for row in UNITS if name.startswith(row[0]))


def sol_verdict(raw: RawValues, rules: Sequence[NcuRule] = ()) -> SolVerdict | None:
    """ncu's SOLBottleneck outcome for one launch (or a group's means): the result the report
    stores for it, else the rule's thresholds applied to its throughputs (`explain_sol`);
    None when neither. Read as bare numbers: every launch of a run is classified."""
    sm, mem = launch_number(raw, "sm_pct"), launch_number(raw, "mem_pct")
    computed = rule_verdict(sm, mem, launch_number(raw, "waves")) \
        if sm is not None and mem is not None else None
    return decide(stored_verdict((r.rule_id, r.title, r.message) for r in rules), computed)


SOL_TEXT: dict[str | tuple[str, str | None], str] = {
    SMALL_GRID: "compute and memory both below {busy:.0f}% of peak with under one wave per SM: "
                "neither is the limit, the grid does not fill the GPU (latency)",
    LATENCY: "compute and memory both below {busy:.0f}% of peak: neither is the limit, the "
             "kernel does not keep the GPU busy (latency)",
    HIGH_COMPUTE: "compute is the limit, {bal:.0f} points or more above memory: the busiest "
                  "unit is the {unit}",
    HIGH_MEMORY: "memory is the limit, {bal:.0f} points or more above compute: the busiest unit "
                 "is the {unit}",
    BALANCED: "compute and memory within {bal:.0f} points of each other: both limit",
    (HIGH, "compute"): "compute is the limit, at {near:.0f}% of peak or more and not below "
                       "memory: the busiest unit is the {unit}",
    (HIGH, "memory"): "memory is the limit, at {near:.0f}% of peak or more and above compute: "
                      "the busiest unit is the {unit}",
}
SOURCE_TEXT = {FROM_REPORT: "stored in the report",
               FROM_THRESHOLDS: "by its thresholds"}


def sol_text(verdict: SolVerdict, unit: str | None) -> str:
    text = SOL_TEXT.get(verdict.outcome) or SOL_TEXT[(verdict.outcome, verdict.bound)]
    return text.format(busy=limit("busy_pct"), bal=limit("balanced_pp"),
                       near=limit("near_peak_pct"), unit=unit or "-") + \
        f" (ncu {RULE_ID}: {verdict.outcome}, {SOURCE_TEXT[verdict.source]})"


def busiest_unit(values: Values, bound: str) -> Cite | None:
    """The busiest unit on the limiting side (ncu's split: the SM breakdown is compute, the
    memory breakdown memory); the busiest of both where neither side limits."""
    sides = {"compute": ("sm_pct",), "memory": ("mem_pct",)}.get(bound, ("sm_pct", "mem_pct"))
    tops = [top_contributor(values, METRICS[key].names[0]) for key in sides]
    return max(filter(None, tops), key=lambda c: c.value, default=None)


def step_throughput(values: Values, verdict: SolVerdict | None) -> Step:
    sm, mem = values.get("sm_pct"), values.get("mem_pct")
    if not (sm and mem and verdict and verdict.bound):
        return step(1, "throughput", "Compute vs memory throughput", [],
                    [missing(["sm_pct", "mem_pct"], values)], {})
    top = busiest_unit(values, verdict.bound)
    unit, level = unit_of(top.name) if top else (None, None)
    closer = "memory is closer to peak" if mem.value > sm.value else \
        "compute is closer to peak" if sm.value > mem.value else "equally close to peak"
    findings = [finding(f"{closer}: memory {mem.value:.1f}% vs compute {sm.value:.1f}% "
                        "of peak", [sm, mem]),
                finding(sol_text(verdict, unit), [sm, mem, top], "sol")]
    levels = [values.get(k) for k in ("dram_pct", "l2_pct", "l1_pct")]
    if any(levels):
        findings.append(finding("memory levels: "
                                + _levels(zip(("DRAM", "L2", "L1"), levels, strict=True)), levels))
    if verdict.near_peak:
        findings.append(finding(f"near peak (>= {limit('near_peak_pct'):.0f}%): only less work "
                                f"on the {unit or 'busiest unit'} helps", [top or sm]))
    return step(1, "throughput", "Compute vs memory throughput", findings, [],
                {"bound": verdict.bound, "near_peak": verdict.near_peak, "unit": unit,
                 "level": level, "sol_rule": verdict.outcome, "sol_source": verdict.source})


# -- step 2: memory efficiency -----------------------------------------------------------------


def arithmetic_intensity(values: Values) -> tuple[float, list[Cite]] | None:
    """FP32+FP64 FLOP per DRAM byte, counted as ncu's roofline counts them."""
    flops = [(c, weight) for name, weight in FLOP_METRICS if (c := values.cite(name))]
    hz, bps = values.get("smsp_hz"), values.get("dram_bytes_per_s")
    if not (hz and bps and bps.value > 0 and len(flops) == len(FLOP_METRICS)):
        return None
    per_cycle = sum(c.value * w for c, w in flops)
    return per_cycle * hz.value / bps.value, [c for c, _w in flops if c.value] + [hz, bps]


def sector_use(values: Values, op: str) -> tuple[float, Cite] | None:
    """Share (%) of each 32-byte sector that global loads (ld) or stores (st) use."""
    ratio, pct = values.get(f"{op}_bytes_per_sector"), values.get(f"{op}_sector_use_pct")
    if ratio:
        return ratio.value / 32 * 100, ratio
    return (pct.value, pct) if pct else None


def sectors_per_request(values: Values) -> tuple[float, list[Cite]] | None:
    direct = values.get("ld_sectors_per_request")
    if direct:
        return direct.value, [direct]
    sectors, requests = values.get("ld_sectors"), values.get("ld_requests")
    if sectors and requests and requests.value:
        return sectors.value / requests.value, [sectors, requests]
    return None


def busy_not_useful(values: Values) -> list[Finding]:
    """Memory busy while compute idles: each byte feeds little work (or is not used at all)."""
    sm, dram = values.get("sm_pct"), values.get("dram_pct") or values.get("mem_pct")
    if not (sm and dram) or dram.value < limit("busy_pct") or sm.value >= limit("compute_low_pct"):
        return []
    out = [finding(f"busy is not useful: memory at {dram.value:.1f}% of peak feeds compute at "
                   f"only {sm.value:.1f}%: few operations per byte, or bytes fetched and not "
                   "used", [dram, sm], "busy")]
    intensity = arithmetic_intensity(values)
    if intensity:
        out.append(finding(f"arithmetic intensity {intensity[0]:.2f} FLOP per DRAM byte",
                           intensity[1], "busy"))
    return out


def step_memory(values: Values) -> Step:
    findings = busy_not_useful(values)
    uses = [(op, u) for op, u in (("loads", sector_use(values, "ld")),
                                  ("stores", sector_use(values, "st"))) if u]
    spr = sectors_per_request(values)
    partial = min(u[0] for _op, u in uses) < limit("sector_use_pct") if uses else None
    if uses:
        verdict = "partial use of each sector: uncoalesced or strided access" if partial \
            else "sectors mostly used"
        findings.append(finding("global " + " and ".join(f"{op} use {u[0]:.1f}%" for op, u in uses)
                                + f" of each 32-byte sector: {verdict}", [u[1] for _op, u in uses],
                                "sectors"))
    if spr:
        findings.append(finding(f"{spr[0]:.2f} sectors per global load request (4 when a warp's "
                                "32 4-byte loads are coalesced; more means scattered addresses)",
                                spr[1], "sectors"))
    hits = [values.get("l1_hit"), values.get("l2_hit")]
    if any(hits):
        findings.append(finding("hit rates: " + _levels(zip(("L1", "L2"), hits, strict=True)),
                                hits))
    gaps = [] if any(hits) else [missing(["l1_hit", "l2_hit"], values)]
    gaps += [] if uses or spr else [missing(["ld_bytes_per_sector", "ld_sector_use_pct",
                                             "ld_sectors_per_request"], values)]
    return step(2, "memory", "Memory efficiency (busy is not useful)", findings, gaps,
                {"partial_sectors": partial, "busy_not_useful": any(
                    f.tag == "busy" for f in findings)})


# -- step 3: occupancy -------------------------------------------------------------------------


def limiters(values: Values) -> tuple[list[str], list[Cite | None]]:
    """The occupancy limiters allowing the fewest blocks per SM, and the values behind them."""
    limits = [(label, lim, values.get(why) if why else None)
              for key, label, why in LIMITERS if (lim := values.get(key))]
    fewest = min((lim.value for _l, lim, _w in limits), default=None)
    chosen = [item for item in limits if item[1].value == fewest]
    return [label for label, _l, _w in chosen], [c for _l, lim, w in chosen for c in (lim, w)]


def wave_findings(values: Values) -> tuple[list[Finding], dict]:
    """Wave quantisation: a grid under one wave, or a partial last wave (tail)."""
    waves, grid, sms = values.get("waves"), values.get("grid_size"), values.get("sm_count")
    if not waves:
        return [], {}
    w = waves.value
    _names, per_sm = limiters(values)
    fewest = per_sm[0] if per_sm else None
    shape = f" ({grid.value:.0f} blocks on {sms.value:.0f} SMs x {fewest.value:.0f} " \
        "blocks per SM)" if grid and sms and fewest else ""
    cites = [waves, grid, sms, fewest]
    if w < limit("small_grid_waves"):
        return [finding(f"grid too small: {w:.2f} waves{shape}, so SMs sit idle", cites,
                        "waves")], {"waves": w, "small_grid": True}
    empty = (math.ceil(w) - w) / math.ceil(w) * 100
    tail = empty >= limit("tail_pct")
    text = f"{w:.2f} waves{shape}" + (f": the partial last wave leaves {empty:.0f}% of SM "
                                      "slots empty (tail effect)" if tail else "")
    return [finding(text, cites, "waves")], {"waves": w, "small_grid": False, "tail": tail}


def gap_causes(values: Values, facts: dict) -> list[Finding]:
    """Why achieved occupancy falls short of theoretical, from what the metrics can show."""
    top, avg = values.get("sm_active_max"), values.get("sm_active_avg")
    skew = (top.value - avg.value) / avg.value * 100 if top and avg and avg.value else None
    if skew is not None and skew >= limit("imbalance_pct"):
        return [finding(f"imbalance: the busiest SM is active {skew:.0f}% longer than the "
                        "average SM", [top, avg], "gap")]
    if facts.get("small_grid") or facts.get("tail"):
        return []
    return [finding("no grid-level cause in the metrics: warps of a block finish unevenly, or "
                    "scheduling overhead", [values.get("achieved_occ")], "gap")]


def step_occupancy(values: Values) -> Step:
    theo, ach = values.get("theoretical_occ"), values.get("achieved_occ")
    findings, facts = wave_findings(values)
    gaps = [] if facts else [missing(["waves"], values)]
    if theo and ach:
        gap = theo.value - ach.value
        findings.insert(0, finding(f"achieved occupancy {ach.value:.1f}% of theoretical "
                                   f"{theo.value:.1f}%: gap {gap:.1f} points", [ach, theo]))
        facts.update(gap=gap)
        if gap > limit("occupancy_gap_pp"):
            findings += gap_causes(values, facts)
    if theo and theo.value < 100:
        names, cites = limiters(values)
        findings.append(finding(f"theoretical occupancy {theo.value:.1f}% limited by "
                                f"{' and '.join(names) or 'an unreported limit'}", [theo] + cites,
                                "limiter"))
        facts["limiters"] = names
    if theo:
        facts["theoretical"] = theo.value
    gaps += [missing([key], values) for key, c in (("theoretical_occ", theo),
                                                   ("achieved_occ", ach)) if not c]
    return step(3, "occupancy", "Theoretical vs achieved occupancy", findings, gaps, facts)


# -- step 4: scheduler and stalls --------------------------------------------------------------


def issue_idle(values: Values) -> tuple[float, list[Cite | None]] | None:
    """Share (%) of cycles in which a scheduler issued nothing (no eligible warp)."""
    none_issued, issued = values.get("no_issue_pct"), values.get("issue_pct")
    if none_issued:
        return none_issued.value, [none_issued]
    return (100 - issued.value, [issued]) if issued else None


def top_stalls(values: Values) -> list[dict]:
    """The largest stall reasons, selected/not_selected left out, with their share of all."""
    stalls, measure = values.stalls()
    total = sum(c.value for _r, c in stalls)
    known = [(r, c, *STALLS.get(r, ("latency", r))) for r, c in stalls]
    ranked = sorted((s for s in known if s[2] and s[1].value > 0), key=lambda s: -s[1].value)
    return [{"reason": r, "path": path, "meaning": meaning, "measure": measure, "cite": c,
             "share": c.value / total * 100} for r, c, path, meaning in
            ranked[:int(limit("top_stalls"))]]


def step_scheduler(values: Values) -> Step:
    idle, stalls = issue_idle(values), top_stalls(values)
    findings, facts, gaps = [], {}, []
    if idle:
        facts["issue_idle"] = idle[0] >= limit("issue_idle_pct")
        eligible, active = values.get("eligible_warps"), values.get("active_warps")
        warps = f" ({eligible.value:.2f} eligible of {active.value:.2f} active warps per " \
            "scheduler)" if eligible and active else ""
        state = "issue slots idle: stalls matter" if facts["issue_idle"] else \
            "issue slots busy: other warps hide the stalls, they are not the limit"
        findings.append(finding(f"no instruction issued in {idle[0]:.1f}% of cycles{warps}: "
                                f"{state}", idle[1] + [eligible, active], "issue"))
    else:
        gaps.append(missing(["no_issue_pct"], values))
    if stalls and facts.get("issue_idle", True):
        facts.update(top_stall=stalls[0]["reason"], stall_path=stalls[0]["path"])
        findings += [finding(f"stall {s['reason']}: {s['share']:.0f}% of stall cycles - "
                             f"{s['meaning']}", [s["cite"]], "stall") for s in stalls]
    elif not stalls:
        gaps.append(Missing("WarpStateStats", tuple(pattern for pattern, _s, _m in STALL_METRICS),
                            "WarpStateStats" in values.sections,
                            "not collected: add --section WarpStateStats"))
    return step(4, "scheduler", "Issue slots, then stall reasons", findings, gaps, facts)


# -- step 5: conclusion ------------------------------------------------------------------------


def step_conclusion(steps: list[Step]) -> Step:
    facts = {k: v for s in steps for k, v in s.facts.items()}
    rule = next((r for r in CONCLUSION_RULES if r.when(facts)), None)
    if rule is None:
        return step(5, "conclusion", "Conclusion", [], list(steps[0].missing), {})
    by_tag: dict[str | None, Finding] = {}
    for f in (f for s in steps for f in s.findings):
        by_tag.setdefault(f.tag, f)
    evidence = [by_tag[t] for t in rule.uses if t in by_tag]
    findings = [finding(f"{rule.label} ({rule.cause}): " + "; ".join(e.text for e in evidence),
                        [c for e in evidence for c in e.cites]),
                finding(f"inspect next: {rule.inspect}", evidence[-1].cites[:1]),
                finding(f"usual fix: {rule.fix}", evidence[-1].cites[:1])]
    return replace(step(5, "conclusion", "Conclusion", findings, [], {"label": rule.label}),
                   rule=rule)


def explain_values(values: Values, verdict: SolVerdict | None = None) -> list[Step]:
    """The five steps, in order, for one group of launches' values; `verdict` is their
    SOLBottleneck outcome, worked out from the values where not given."""
    steps = [step_throughput(values, verdict or sol_verdict(values.raw)), step_memory(values),
             step_occupancy(values), step_scheduler(values)]
    return steps + [step_conclusion(steps)]


# -- reading a run -----------------------------------------------------------------------------


def without_data(steps: list[Step]) -> list[Step]:
    """The five steps of launches with no data: each says so, none concludes."""
    return [replace(s, status=NO_DATA, findings=(), missing=(), facts={}, rule=None)
            for s in steps]


def explain_group(name: str, short_name: str | None, group: LaunchGroup, data: LaunchData,
                  means: RawValues, sections: set[str], rules: list[NcuRule],
                  verdict: SolVerdict | None) -> KernelExplained:
    """The five steps for one group of launches that behave alike, from its metrics' means
    and the rule messages of its first launch."""
    launches = group.launch_ids
    values = Values(means, sections)
    no_data = not data.carries_values(launches)
    steps = explain_values(values, verdict)
    return KernelExplained(name, short_name, len(launches), values.get("duration"),
                           tuple(without_data(steps) if no_data else steps), no_data,
                           () if no_data else tuple(rules),
                           launch_config(data.values.get(launches[0], {})), group)


Split = list[tuple[Group, SolVerdict | None]]
Kernel = tuple[str, str | None, Sequence[Launch]]  # name, short name, launches


def split_kernel(launches: Sequence[Launch], data: LaunchData) -> Split:
    """One kernel's launches, each classified on its own (launch configuration, ncu's
    SOLBottleneck outcome), in groups that behave alike, each with its outcome."""
    verdicts = {launch: sol_verdict(data.values.get(launch, {}), data.rules.get(launch, ()))
                for launch in launches}

    def behaviour(launch: Launch) -> tuple:
        verdict = verdicts[launch]
        return (launch_config(data.values.get(launch, {})),
                verdict and (verdict.outcome, verdict.bound))

    return [(tuple(group), verdicts[group[0]])
            for group in split_by_behaviour(launches, behaviour)]


@dataclass(frozen=True)
class Plan:
    """What explaining some kernels reads: each launch classified (a few metrics each), each
    kernel's launches split by behaviour; `groups` those whose statistics it needs."""

    kernels: Sequence[Kernel]
    data: LaunchData
    splits: list[Split]

    @property
    def groups(self) -> list[Group]:
        return [group for split in self.splits for group, _verdict in split]


def plan(tables: NcuTables, kernels: Sequence[Kernel]) -> Plan:
    data = read_launches(tables, [launch for _n, _s, launches in kernels for launch in launches])
    return Plan(kernels, data, [split_kernel(launches, data) for _n, _s, launches in kernels])


def explain_planned(tables: NcuTables, planned: Plan, stats: GroupStats,
                    index: Mapping[Group, int]) -> Iterator[KernelExplained]:
    """Each planned group explained, a group at a time, from `stats` (where group g is
    `index[g]`)."""
    rules = rule_messages(tables.rows("rules", [group[0] for group in planned.groups], MESSAGES))
    for (name, short_name, launches), split in zip(planned.kernels, planned.splits, strict=True):
        for number, (group, verdict) in enumerate(split, 1):
            yield explain_group(name, short_name,
                                LaunchGroup(number, len(split), len(launches), group),
                                planned.data, stats.raw(index[group]),
                                stats.sections(index[group]), rules.get(group[0], []),
                                verdict)


def explain_kernels(tables: NcuTables, kernels: Sequence[Kernel]) -> Iterator[KernelExplained]:
    """Each kernel's launches explained per group that behaves alike: the launches classified
    first, then every group's statistics in one query where the metrics are stored."""
    planned = plan(tables, kernels)
    groups = planned.groups
    return explain_planned(tables, planned, tables.stats(groups),
                           {group: i for i, group in enumerate(groups)})


def explain_run(run: RunData, kernel: str | None = None) -> ExplainResult:
    """`triage explain RUN`: the five steps for each kernel, per group of its launches that
    behave alike."""
    if run.tool != "ncu":
        raise UsageError(f"`triage explain` reads ncu runs; run {run.id[:12]} is {run.tool}: "
                         f"`triage top {run.id[:12]}` suggests which kernels to profile with ncu")
    groups = group_kernels(run.kernels.to_pylist())
    if kernel:
        try:
            pattern = re.compile(kernel)
        except re.error as exc:
            raise UsageError(f"--kernel {kernel!r} is not a regular expression: {exc}") from exc
        groups = [g for g in groups if pattern.search(g.name)]
        if not groups:
            raise TriageError(f"no kernel of run {run.id[:12]} matches --kernel {kernel!r}; "
                              f"`triage show {run.id[:12]}` lists its kernels")
    kernels = explain_kernels(run.ncu, [(group.name, group.short_name, group.launches)
                                               for group in groups])
    return ExplainResult(run.id, run.record.tool_version, run.record.gpu_name, tuple(kernels),
                         THRESHOLDS)
