"""`triage env`: this machine's facts and profilers, and the pre-capture checklist they answer,
without capturing anything.

The facts are the document `collect_machine_facts` makes (a capture stores the same under its
manifest's capture.machine); `MachineFacts` reads the parts the checklist and the view use once,
as typed values, and keeps the document itself for `--json`, which prints it as collected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triage.base.errors import ToolMissing
from triage.base.records import AsJson, mapping_of
from triage.capture import profilers

TOOLS = ("ncu", "nsys")


@dataclass(frozen=True)
class Fact:
    """A fact that can be unknown: its value, or None with the reason it is not known."""

    value: Any = None
    reason: str | None = None

    @classmethod
    def of(cls, node: object) -> Fact:
        """A {"value", "reason"} node of the facts (a plain value: known, no reason)."""
        if isinstance(node, dict) and "value" in node:
            return cls(node["value"], node.get("reason"))
        return cls(node)


@dataclass(frozen=True)
class GpuState:
    """One GPU as nvidia-smi lists it now (None where it reported no value)."""

    name: str | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GpuState:
        return cls(raw.get("name"), raw.get("sm_clock_mhz"), raw.get("max_sm_clock_mhz"),
                   raw.get("persistence_mode"), raw.get("mig_mode"))


@dataclass(frozen=True)
class MachineFacts:
    """The machine facts, typed where `triage env` reads them; `facts` is the document."""

    facts: Mapping[str, Any]
    host: Mapping[str, Fact]  # hostname, os, kernel, cpu, python: in the order collected
    driver_version: Fact
    cuda_driver_version: Fact
    gpus: tuple[GpuState, ...]  # none listed, or none known: `gpus_reason` says which
    gpus_reason: str | None
    counters_admin_only: Fact  # only administrators may read the GPU's performance counters
    is_root: bool
    counters_advice: str | None
    dcgm_running: Fact
    dcgm_advice: str | None
    scheduler: str | None
    scheduler_variables: Mapping[str, str]

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> MachineFacts:
        gpu, counters = mapping_of(facts.get("gpu")), mapping_of(facts.get("profiling_counters"))
        dcgm, scheduler = mapping_of(facts.get("dcgm")), mapping_of(facts.get("scheduler"))
        gpus = Fact.of(gpu.get("gpus"))
        return cls(facts, {name: Fact.of(v) for name, v in mapping_of(facts.get("host")).items()},
                   Fact.of(gpu.get("driver_version")), Fact.of(gpu.get("cuda_driver_version")),
                   tuple(GpuState.from_dict(g) for g in gpus.value or () if isinstance(g, dict)),
                   gpus.reason, Fact.of(counters.get("admin_only")),
                   bool(counters.get("is_root")), counters.get("advice"),
                   Fact.of(dcgm.get("running")), dcgm.get("advice"), scheduler.get("scheduler"),
                   mapping_of(scheduler.get("variables")))


@dataclass(frozen=True)
class ToolStatus(AsJson):
    """A profiler on this machine: where it is and its version, or why it cannot be used."""

    path: str | None
    version: str | None
    missing: str | None


@dataclass(frozen=True)
class Check(AsJson):
    """One item of the checklist: passed (True), failed (False) or not known (None)."""

    check: str
    ok: bool | None
    detail: str | None


@dataclass(frozen=True)
class EnvironmentReport:
    """`triage env`: the checklist, the machine facts and the profilers found
    (schemas/env.schema.json)."""

    machine: MachineFacts
    tools: Mapping[str, ToolStatus]  # ncu, nsys
    checklist: tuple[Check, ...]

    def to_json(self) -> dict[str, Any]:
        return {"machine": self.machine.facts,
                "tools": {name: tool.to_json() for name, tool in self.tools.items()},
                "checklist": [item.to_json() for item in self.checklist]}


def tool_status(tool: str, given: str | None) -> ToolStatus:
    """Where `tool` is (`given`, else PATH's) and its version; reported, not raised."""
    try:
        path = profilers.find_tool(tool, given)
    except ToolMissing as exc:
        return ToolStatus(None, None, str(exc))
    version, text = profilers.tool_version(tool, path)
    if version is None:
        said = (text.splitlines() or ["no output"])[0][:60]
        return ToolStatus(None, None, f"{path} did not report a {tool} version ({said}); "
                                      f"{profilers.INSTALL_HINTS[tool]}")
    return ToolStatus(path, version, None)


def checklist(machine: MachineFacts, tools: Mapping[str, ToolStatus]) -> tuple[Check, ...]:
    """The seed's pre-capture checklist: permissions, contention, versions."""
    admin_only, dcgm = machine.counters_admin_only.value, machine.dcgm_running.value
    return (
        Check("GPU visible", True if machine.gpus else None,
              ", ".join(g.name or "?" for g in machine.gpus) or machine.gpus_reason),
        Check("profiling counters usable",
              None if admin_only is None else (not admin_only or machine.is_root),
              machine.counters_admin_only.reason or machine.counters_advice),
        Check("no DCGM host engine holding counters", None if dcgm is None else not dcgm,
              machine.dcgm_advice),
        *(Check(f"{name} installed", tools[name].path is not None,
                tools[name].version or tools[name].missing) for name in TOOLS),
    )


def environment_check(nsys: str | None = None,
                      environ: Mapping[str, str] | None = None) -> EnvironmentReport:
    """`triage env`: this machine's facts and tools, without capturing anything."""
    from triage.capture.machine import collect_machine_facts

    machine = MachineFacts.from_facts(collect_machine_facts(None, environ))
    tools = {"ncu": tool_status("ncu", None), "nsys": tool_status("nsys", nsys)}
    return EnvironmentReport(machine, tools, checklist(machine, tools))
