"""Terminal rendering of `triage env`: the pre-capture checklist, then the facts behind it."""

from __future__ import annotations

MARKS = {True: "ok  ", False: "FAIL", None: "?   "}


def _value(fact) -> str:
    if isinstance(fact, dict) and "value" in fact:
        return str(fact["value"]) if fact["value"] is not None else f"unknown ({fact['reason']})"
    return str(fact)


def render_env(report: dict) -> str:
    lines = ["checklist:"]
    for item in report["checklist"]:
        detail = f"  ({item['detail']})" if item.get("detail") else ""
        lines.append(f"  [{MARKS[item['ok']]}] {item['check']}{detail}")
    machine = report["machine"]
    host = machine.get("host") or {}
    lines += ["", "host:"] + [f"  {k:<18} {_value(v)}" for k, v in host.items()]
    gpu = machine.get("gpu") or {}
    lines += ["", "gpu:", f"  {'driver':<18} {_value(gpu.get('driver_version'))}",
              f"  {'cuda (driver)':<18} {_value(gpu.get('cuda_driver_version'))}"]
    for entry in ((gpu.get("gpus") or {}).get("value") or []):
        lines.append(f"  {entry.get('name')}: SM {entry.get('sm_clock_mhz')}/"
                     f"{entry.get('max_sm_clock_mhz')} MHz, persistence "
                     f"{entry.get('persistence_mode')}, MIG {entry.get('mig_mode')}")
    scheduler = machine.get("scheduler") or {}
    if scheduler.get("scheduler") or scheduler.get("variables"):
        lines += ["", "scheduler:"] + [f"  {k}={v}" for k, v in
                                      (scheduler.get("variables") or {}).items()]
    tools = report["tools"]
    lines += ["", "tools:"] + [f"  {name:<6} {t['path'] or '-'}  {t['version'] or t['missing']}"
                               for name, t in tools.items()]
    return "\n".join(lines)
