"""Terminal rendering of `triage env`: the pre-capture checklist, then the facts behind it."""

from __future__ import annotations

from typing import Any

MARKS = {True: "ok  ", False: "FAIL", None: "?   "}


def _value(fact: Any) -> str:
    if isinstance(fact, dict) and "value" in fact:
        return str(fact["value"]) if fact["value"] is not None else f"unknown ({fact['reason']})"
    return str(fact)


def render_env(report: dict[str, Any]) -> str:
    """The checklist, then host, GPU, scheduler and tool facts as `collect_machine_facts` and
    `environment_check` shape them (every section is always there; a fact's value may be
    None, with its reason)."""
    lines = ["checklist:"]
    for item in report["checklist"]:
        detail = f"  ({item['detail']})" if item.get("detail") else ""
        lines.append(f"  [{MARKS[item['ok']]}] {item['check']}{detail}")
    machine = report["machine"]
    lines += ["", "host:"] + [f"  {k:<18} {_value(v)}" for k, v in machine["host"].items()]
    gpu = machine["gpu"]
    lines += ["", "gpu:", f"  {'driver':<18} {_value(gpu.get('driver_version'))}",
              f"  {'cuda (driver)':<18} {_value(gpu.get('cuda_driver_version'))}"]
    for entry in gpu["gpus"]["value"] or []:
        lines.append(f"  {entry.get('name')}: SM {entry.get('sm_clock_mhz')}/"
                     f"{entry.get('max_sm_clock_mhz')} MHz, persistence "
                     f"{entry.get('persistence_mode')}, MIG {entry.get('mig_mode')}")
    scheduler = machine["scheduler"]
    if scheduler["scheduler"] or scheduler["variables"]:
        lines += ["", "scheduler:"] + [f"  {k}={v}" for k, v in scheduler["variables"].items()]
    tools = report["tools"]
    lines += ["", "tools:"] + [f"  {name:<6} {t['path'] or '-'}  {t['version'] or t['missing']}"
                               for name, t in tools.items()]
    return "\n".join(lines)
