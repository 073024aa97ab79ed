"""Terminal rendering of `triage env`: the pre-capture checklist, then the facts behind it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triage.capture.environment import EnvironmentReport, Fact

MARKS = {True: "ok  ", False: "FAIL", None: "?   "}


def _value(fact: Fact) -> str:
    """A fact's value, or why it is not known."""
    if fact.value is None and fact.reason is not None:
        return f"unknown ({fact.reason})"
    return str(fact.value)


def render_env(report: EnvironmentReport) -> str:
    """The checklist, then host, GPU, scheduler and tool facts (every section is always
    there; a fact's value may be unknown, with its reason)."""
    lines = ["checklist:"]
    for item in report.checklist:
        detail = f"  ({item.detail})" if item.detail else ""
        lines.append(f"  [{MARKS[item.ok]}] {item.check}{detail}")
    machine = report.machine
    lines += ["", "host:"] + [f"  {k:<18} {_value(v)}" for k, v in machine.host.items()]
    lines += ["", "gpu:", f"  {'driver':<18} {_value(machine.driver_version)}",
              f"  {'cuda (driver)':<18} {_value(machine.cuda_driver_version)}"]
    for gpu in machine.gpus:
        lines.append(f"  {gpu.name}: SM {gpu.sm_clock_mhz}/{gpu.max_sm_clock_mhz} MHz, "
                     f"persistence {gpu.persistence_mode}, MIG {gpu.mig_mode}")
    if machine.scheduler or machine.scheduler_variables:
        lines += ["", "scheduler:"] + [f"  {k}={v}"
                                       for k, v in machine.scheduler_variables.items()]
    lines += ["", "tools:"] + [f"  {name:<6} {t.path or '-'}  {t.version or t.missing}"
                               for name, t in report.tools.items()]
    return "\n".join(lines)
