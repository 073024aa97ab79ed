"""Terminal rendering of `triage show`: what was captured, how, and where each fact came from."""

from __future__ import annotations


def _line(label: str, value) -> str:
    return f"  {label:<16} {value if value not in (None, '', []) else '-'}"


def _gpu_text(gpu: dict) -> str:
    extras = [f"cc {gpu['compute_capability']}" if gpu.get("compute_capability") else None,
              f"{gpu['sm_count']} SMs" if gpu.get("sm_count") else None,
              f"max SM {gpu['max_sm_clock_khz'] / 1000:.0f} MHz"
              if gpu.get("max_sm_clock_khz") else None]
    extra = ", ".join(e for e in extras if e)
    return f"{gpu.get('name') or 'unknown'}" + (f" ({extra})" if extra else "")


def _settings_lines(record: dict) -> list[str]:
    settings, sources = record.get("settings") or {}, record.get("settings_source") or {}
    lines = []
    for name, value in settings.items():
        if isinstance(value, list):
            value = ", ".join(value) if value else "(none)"
        source = sources.get(name)
        lines.append(_line(name, f"{value if value is not None else '-'}"
                                 + (f"   [{source}]" if source else "")))
    return lines


def _clock_line(record: dict) -> str | None:
    clock = (record.get("evidence") or {}).get("clock") or {}
    if not clock:
        return None
    parts = []
    if clock.get("results_with_status"):
        parts.append(f"{clock['executed_locked']}/{clock['results_with_status']} results ran "
                     "with locked clocks")
    if clock.get("measured_sm_clock_hz"):
        parts.append(f"measured SM clock {clock['measured_sm_clock_hz'] / 1e6:.0f} MHz")
    if clock.get("measured_to_max"):
        parts.append(f"{clock['measured_to_max'] * 100:.0f}% of max")
    return _line("clock evidence", "; ".join(parts)) if parts else None


def render_show(record: dict) -> str:
    env = record.get("environment") or {}
    host = env.get("host") or {}
    lines = [
        f"run {record['id']}",
        _line("tool", f"{record.get('tool')} {record.get('tool_version') or '(version unknown)'}"),
        _line("captured", record.get("created")),
        _line("archived", (record.get("archived") or "")[:19].replace("T", " ")),
        _line("labels", ", ".join(record.get("labels") or [])),
        _line("source", record.get("source")),
        _line("command", record.get("command")),
        _line("driver", env.get("driver_version")),
        _line("CUDA", env.get("cuda_version")),
        _line("host", " / ".join(p for p in (host.get("name"), host.get("os")) if p)),
    ]
    lines += [_line("GPU", _gpu_text(g)) for g in env.get("gpus") or []] or [_line("GPU", None)]
    lines.append(_line("kernels", record.get("kernels")))
    lines.append("settings")
    lines += _settings_lines(record)
    clock = _clock_line(record)
    if clock:
        lines.append(clock)
    lines.append("reports")
    for report in record.get("reports") or []:
        lines.append(f"  {report['name']}  {report['format']}  {report['bytes']:,} bytes  "
                     f"sha256 {report['sha256'][:16]}")
    for notice in record.get("notices") or []:
        lines.append(f"note: {notice}")
    for note in record.get("notes") or []:
        lines.append(f"note ({note['time'][:10]}): {note['text']}")
    if record.get("capture"):
        lines += _capture_lines(record["capture"])
    return "\n".join(lines)


def _git_text(git: dict | None) -> str | None:
    if not git:
        return None
    if not git.get("repository"):
        return git.get("reason")
    state = "dirty" if git.get("dirty") else "clean"
    untracked = f", {git['untracked_count']} untracked" if git.get("untracked_count") else ""
    return (f"{(git.get('commit') or '?')[:12]} on {git.get('branch') or 'detached HEAD'} "
            f"({state}{untracked}) in {git['repository']}")


def _capture_lines(capture: dict) -> list[str]:
    lists = capture.get("ncu_lists") or {}
    lines = ["capture",
             _line("argv", " ".join(capture.get("argv") or [])),
             _line("cwd", capture.get("cwd")),
             _line("exit code", capture.get("exit_code")),
             _line("ran", f"{capture.get('started')} for {capture.get('seconds')} s"),
             _line("git", _git_text(capture.get("git")))]
    if lists:
        lines.append(_line("ncu knew", f"{(lists.get('sections') or {}).get('count')} sections, "
                                       f"{(lists.get('sets') or {}).get('count')} sets"))
    for key, label in (("from_run", "follows run"), ("group", "group"), ("rank", "rank")):
        if capture.get(key) is not None:
            lines.append(_line(label, capture[key]))
    lines += [f"warning: {w}" for w in capture.get("warnings") or []]
    return lines

