"""Terminal rendering of `triage show`: what was captured, how, and where each fact came from."""

from __future__ import annotations

from typing import Any

from triage.archive.model import CaptureInfo, ClockEvidence, GitState, Gpu, RunRecord, Setting
from triage.views.text import cuda_text, default_phrase, printable
from triage.base.units import fmt_bytes


def _line(label: str, value: Any) -> str:
    return f"  {label:<16} {value if value not in (None, '', []) else '-'}"


def _gpu_text(gpu: Gpu) -> str:
    extras = [f"cc {gpu.compute_capability}" if gpu.compute_capability else None,
              f"{gpu.sm_count} SMs" if gpu.sm_count else None,
              f"max SM {gpu.max_sm_clock_khz / 1000:.0f} MHz" if gpu.max_sm_clock_khz else None]
    extra = ", ".join(e for e in extras if e)
    return f"{gpu.name or 'unknown'}" + (f" ({extra})" if extra else "")


def _setting_line(name: str, setting: Setting, record: RunRecord) -> str:
    """A setting and where it came from; one only the tool's default stands for says so, since
    a comparison treats it as unknown."""
    value = setting.value
    if not record.is_recorded(name) and value is not None:
        return _line(name, f"not recorded ({default_phrase(record.tool, value)})")
    if isinstance(value, list):
        value = ", ".join(map(str, value)) if value else "(none)"
    return _line(name, f"{value if value is not None else '-'}"
                       + (f"   [{setting.source}]" if setting.source else ""))


def _clock_line(clock: ClockEvidence) -> str | None:
    parts = []
    if clock.results_with_status:
        parts.append(f"{clock.executed_locked}/{clock.results_with_status} results ran "
                     "with locked clocks")
    if clock.measured_sm_clock_hz:
        parts.append(f"measured SM clock {clock.measured_sm_clock_hz / 1e6:.0f} MHz")
    if clock.measured_to_max:
        parts.append(f"{clock.measured_to_max * 100:.0f}% of max")
    return _line("clock evidence", "; ".join(parts)) if parts else None


def _head_lines(record: RunRecord) -> list[str]:
    env, host = record.environment, record.environment.host
    return [
        f"run {record.id}",
        _line("tool", f"{record.tool} {record.tool_version or '(version unknown)'}"),
        _line("captured", record.created),
        _line("archived", (record.archived or "")[:19].replace("T", " ")),
        _line("labels", ", ".join(record.labels)),
        _line("source", record.source),
        *([_line("arrived", f"by {record.arrived} (foreign: `triage rerun` asks before "
                            "running its command)")] if record.arrived else []),
        _line("command", record.command),
        _line("driver", env.driver_version),
        _line("CUDA", cuda_text(env)),
        _line("host", " / ".join(p for p in (host.name, host.os) if p)),
    ]


def render_show(record: RunRecord) -> str:
    lines = _head_lines(record)
    lines += [_line("GPU", _gpu_text(g)) for g in record.environment.gpus] or [_line("GPU", None)]
    lines.append(_line("kernels", record.kernels))
    lines.append("settings")
    lines += [_setting_line(name, setting, record) for name, setting in
              record.settings.items()]
    clock = _clock_line(record.clock)
    if clock:
        lines.append(clock)
    lines.append("reports")
    lines += [f"  {r.name}  {r.format}  {r.bytes:,} bytes  sha256 {r.sha256[:16]}"
              for r in record.reports]
    lines += [f"note: {notice}" for notice in record.notices]
    lines += [f"note ({note.time[:10]}): {note.text}" for note in record.notes]
    if record.capture is not None:
        lines += _capture_lines(record.capture, record.id)
    lines += _bench_lines(record)
    # Names, notes and commands come from a report or a user: each line escaped (ESC, BEL,
    # U+202E, a newline), so none reaches the terminal as a control or fakes a line.
    return "\n".join(map(printable, lines))


def _bench_lines(record: RunRecord) -> list[str]:
    """A bench run's series: its runs and warm-ups, how it stopped, the metrics it read (the
    values: `triage query "select * from bench_samples"`)."""
    from triage.base.records import mapping_of

    capture = mapping_of(record.manifest.get("capture"))
    bench = capture.get("bench")
    if not isinstance(bench, dict):
        return []
    metrics = ["wall_time (s, lower is better)"] + [
        f"{m.get('name')} ({m.get('unit') or 'no unit'}, {m.get('better')} is better): "
        f"{m.get('source')}:{m.get('pattern')}" for m in bench.get("metrics") or []
        if isinstance(m, dict)]
    return ["bench",
            _line("runs", f"{bench.get('repeat')} (+{bench.get('warmup')} warm-up), stopped: "
                          f"{bench.get('stopped')}"),
            _line("investigation", capture.get("investigation")),
            *([_line("interleaved", f"run for run with {bench['interleaved_with']} (its "
                     "baseline: `diff` tests the two pair by pair)")]
              if bench.get("interleaved_with") else []),
            *(_line("metric", m) for m in metrics)]


def _git_text(git: GitState | None) -> str | None:
    if git is None:
        return None
    if not git.repository:
        return git.reason
    state = "dirty" if git.dirty else "clean"
    untracked = f", {git.untracked_count} untracked" if git.untracked_count else ""
    return (f"{(git.commit or '?')[:12]} on {git.branch or 'detached HEAD'} "
            f"({state}{untracked}) in {git.repository}")


def _patch_text(git: GitState | None, run_id: str) -> str | None:
    """A dirty tree's patch: stored (its size, what it lacks, how to apply it), or why not."""
    if git is None or not git.repository or git.dirty is False:
        return None
    patch = git.patch
    if patch is None:
        return f"not stored: {git.why_no_patch}"
    lacks = [f"{patch.redactions} value(s) redacted" if patch.redactions else None,
             f"{git.untracked_count} untracked file(s) not in it" if git.untracked_count
             else None,
             f"binary changes left out: {', '.join(patch.binary_left_out)}"
             if patch.binary_left_out else None]
    return (f"stored, {fmt_bytes(patch.bytes)}"
            + "".join(f"; {item}" for item in lacks if item)
            + f"; `triage show {run_id[:12]} --patch | git apply` on a checkout of "
            f"{(git.commit or '?')[:12]}")


def _capture_lines(capture: CaptureInfo, run_id: str) -> list[str]:
    lines = ["capture",
             _line("argv", " ".join(capture.argv)),
             _line("cwd", capture.cwd),
             _line("exit code", capture.exit_code) if capture.status is None
             else _line("status", capture.status),
             _line("ran", f"{capture.started} for {capture.seconds} s"),
             _line("git", _git_text(capture.git))]
    patch = _patch_text(capture.git, run_id)
    if patch:
        lines.append(_line("patch", patch))
    sections, sets = capture.ncu_sections, capture.ncu_sets
    if sections is not None or sets is not None:
        lines.append(_line("ncu knew", f"{sections.count if sections else None} sections, "
                                       f"{sets.count if sets else None} sets"))
    for value, label in ((capture.from_run, "follows run"), (capture.rerun_of, "rerun of"),
                         (capture.group, "group"),
                         (capture.rank, "rank")):
        if value is not None:
            lines.append(_line(label, value))
    lines += [f"warning: {w}" for w in capture.warnings]
    return lines
