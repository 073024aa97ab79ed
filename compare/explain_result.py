"""The typed result of `triage explain`: per kernel, the five steps, each statement with the
metric values it cites.

`compare.explain` builds these once; `triage.views.explain` words them (and `diff` reads a
kernel's conclusion); `ExplainResult.to_json()` writes the `explain --json` document that
`schemas/explain.schema.json` describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triage.compare.explain_tables import ConclusionRule, Threshold

JsonDict = dict[str, Any]
CONCLUSION = "conclusion"  # the id of step 5
# a step's status: it found something; its metrics are not in the report; the kernel has none
CONCLUDED, NOT_COLLECTED, NO_DATA = "concluded", "not_collected", "no_data"


@dataclass(frozen=True)
class Cite:
    """A metric value a statement rests on: the mean over the launches of a group."""

    name: str
    value: float
    unit: str  # "" where the report gives none

    def to_json(self) -> JsonDict:
        return {"name": self.name, "value": self.value, "unit": self.unit}


@dataclass(frozen=True)
class Finding:
    """A statement and the values it rests on; `tag` lets the conclusion quote it."""

    text: str
    cites: tuple[Cite, ...]
    tag: str | None = None

    def to_json(self) -> JsonDict:
        return {"text": self.text, "cites": [c.to_json() for c in self.cites], "tag": self.tag}


@dataclass(frozen=True)
class Missing:
    """What a step could not read: the metric names (or name patterns) tried, the section that
    collects them and whether the report has that section; `why` says what to add."""

    section: str
    metrics: tuple[str, ...]
    present: bool
    why: str

    def to_json(self) -> JsonDict:
        return {"section": self.section, "metrics": list(self.metrics), "present": self.present,
                "why": self.why}


@dataclass(frozen=True)
class Step:
    """One of the five steps for a kernel. `facts` are what later steps and the conclusion
    read (bound, waves, top_stall, ...); step 5 carries the conclusion table's row that
    decided it (`rule`), None when nothing could be concluded."""

    step: int
    id: str
    title: str
    status: str  # CONCLUDED | NOT_COLLECTED | NO_DATA
    findings: tuple[Finding, ...]
    missing: tuple[Missing, ...]
    facts: Mapping[str, Any]
    rule: ConclusionRule | None = None

    @property
    def label(self) -> str | None:
        """The conclusion (memory-bound, latency-bound, ...), None where there is none."""
        return self.rule.label if self.rule is not None else None

    def to_json(self) -> JsonDict:
        out = {"step": self.step, "id": self.id, "title": self.title, "status": self.status,
               "findings": [f.to_json() for f in self.findings],
               "missing": [m.to_json() for m in self.missing], "facts": dict(self.facts)}
        if self.id != CONCLUSION:
            return out
        if self.rule is None:
            return out | {"label": None}
        rule = self.rule
        return out | {"label": rule.label, "cause": rule.cause, "inspect": rule.inspect,
                      "fix": rule.fix}


@dataclass(frozen=True)
class NcuRule:
    """One of ncu's own rule messages for the first launch of a group (ok ones too)."""

    rule_id: str
    message_type: str  # ok, optimization or warning
    title: str | None
    message: str | None

    def to_json(self) -> JsonDict:
        return {"rule_id": self.rule_id, "message_type": self.message_type, "title": self.title,
                "message": self.message}


def _count(value: float | None) -> int | float | None:
    return int(value) if value is not None and float(value).is_integer() else value


@dataclass(frozen=True)
class LaunchConfig:
    """A launch's grid and block size (None where LaunchStats was not collected)."""

    grid_size: float | None
    block_size: float | None

    def to_json(self) -> JsonDict:
        return {"grid_size": _count(self.grid_size), "block_size": _count(self.block_size)}


@dataclass(frozen=True)
class LaunchGroup:
    """Which launches of a kernel an explanation covers: group `index` of `of` (launches of
    one name that behave alike: one launch configuration and one SOLBottleneck outcome), out
    of `kernel_launches`, each launch as (report index, kernel index)."""

    index: int
    of: int
    kernel_launches: int
    launch_ids: tuple[tuple[int, int], ...]

    def to_json(self) -> JsonDict:
        return {"index": self.index, "of": self.of, "kernel_launches": self.kernel_launches,
                "launch_ids": [list(launch) for launch in self.launch_ids]}


@dataclass(frozen=True)
class KernelExplained:
    """The launches of one kernel name that behave alike (`group`), their metrics averaged,
    and the five steps for them; `no_data`: the profiler collected no metric value for any of
    them (every step says so)."""

    name: str
    short_name: str | None
    launches: int
    duration: Cite | None
    steps: tuple[Step, ...]
    no_data: bool
    ncu_rules: tuple[NcuRule, ...]
    launch_config: LaunchConfig = LaunchConfig(None, None)
    group: LaunchGroup | None = None

    @property
    def conclusion(self) -> str | None:
        return self.steps[-1].label

    def to_json(self) -> JsonDict:
        group = self.group or LaunchGroup(1, 1, self.launches, ())
        return {"name": self.name, "short_name": self.short_name, "launches": self.launches,
                "duration": self.duration.to_json() if self.duration else None,
                "conclusion": self.conclusion, "steps": [s.to_json() for s in self.steps],
                "no_data": self.no_data, "ncu_rules": [r.to_json() for r in self.ncu_rules],
                "launch_config": self.launch_config.to_json(), "group": group.to_json()}


@dataclass(frozen=True)
class ExplainResult:
    """`triage explain RUN` (schemas/explain.schema.json): every kernel (or those --kernel
    matches), one entry per group of its launches that behave alike, in launch order, and the
    cut-offs the steps judge by."""

    run: str
    tool_version: str | None
    gpu: str | None
    kernels: tuple[KernelExplained, ...]
    thresholds: Mapping[str, Threshold]

    def to_json(self) -> JsonDict:
        return {"run": self.run, "tool_version": self.tool_version, "gpu": self.gpu,
                "kernels": [k.to_json() for k in self.kernels],
                "thresholds": {key: {"value": t.value, "unit": t.unit, "why": t.why}
                               for key, t in self.thresholds.items()}}
