"""Archiving a `triage bench`: the store side of measuring a workload unprofiled.

`capture/bench.py` runs the workload and reads its metrics; this module checks what only the
store can (the label, --from, a writable store) before anything runs, and archives the series as
one run of tool `bench` with its `bench_samples` table and the provenance a capture gets (the
machine, the git state with its patch stored as a blob, the environment redacted). A bench has no
report: its run is written as a capture without one is (`ingest.record_attempt`), from the
samples' table alone, so push/pull, export, verify and gc treat it as any other run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from triage.archive import lease
from triage.archive.captured import resolve_from, investigation_of, stored_git
from triage.archive.ingest import RunRequest, record_attempt
from triage.archive.labels import check_label
from triage.archive.model import ArchiveResult, RunRecord
from triage.base.records import mapping_of
from triage.archive.store import Store
from triage.base.version import __version__
from triage.capture import bench as measure
from triage.capture import session
from triage.capture.bench import BenchMeasured, BenchRequest, BenchSample, MetricSpec
from triage.capture.session import CaptureRequest
from triage.capture.git_state import GitSnapshot


@dataclass(frozen=True)
class BenchRun:
    """A bench archived: its run, what was measured, and what the machine could not tell."""

    result: ArchiveResult
    measured: BenchMeasured
    not_recorded: tuple[str, ...]

    def to_json(self) -> dict:
        """The run as `archive --json` gives it, how the series ended, each metric's median."""
        import statistics

        request, measured = self.measured.request, self.measured
        metrics: dict[str, dict[str, object]] = {
            s.metric: {"unit": s.unit, "better": s.better} for s in measured.samples}
        for name, metric in metrics.items():
            values = measured.values(name)
            metric.update(n=len(values), median=statistics.median(values))
        return {"run": self.result.to_json(), "runs": measured.runs,
                "warmup": request.warmup, "stopped": measured.stopped,
                "investigation": request.investigation, "metrics": metrics,
                "not_recorded": list(self.not_recorded)}


def bench(request: BenchRequest, on_run: Callable[[int, list[BenchSample]], None],
          on_warning: Callable[[str], None],
          decided: Callable[[BenchMeasured], bool] | None = None) -> BenchRun:
    """Run the workload as asked and archive it as one `bench` run; nothing is written when a
    run fails (CaptureFailed says which and why)."""
    return bench_sides((request,), lambda _side, number, samples: on_run(number, samples),
                       on_warning,
                       None if decided is None else lambda measured: decided(measured[0]))[0]


def bench_sides(requests: Sequence[BenchRequest],
                on_run: Callable[[int, int, list[BenchSample]], None],
                on_warning: Callable[[str], None],
                decided: Callable[[tuple[BenchMeasured, ...]], bool] | None = None
                ) -> tuple[BenchRun, ...]:
    """`bench` of several sides run alternately (`bench --interleave`, capture/bench.py's
    `run_sides`), each archived as its own run once every side's series ended, the first side
    first; each later side records the first side's run as `interleaved_with`, which is how
    `diff` knows their runs were measured in pairs. A failed run of any side archives nothing.
    A kill between two sides' archives leaves the first side's run whole and no later one: a
    bench run (of the baseline's command, a rerun of it) that no candidate names, as a rerun
    by `triage rerun` would be."""
    from triage.capture.git_state import git_snapshot
    from triage.capture.machine import collect_machine_facts

    executables = [measure.plan(request) for request in requests]  # usage errors first
    for request in requests:
        if request.capture.label:
            check_label(request.capture.label)
    store = Store.open(requests[0].capture.store, create=True)
    store.check_writable()
    facts = []
    for request in requests:
        cap = request.capture
        cap.from_run = resolve_from(store, cap.from_run)
        if request.investigation is None and cap.from_run:
            request.investigation = investigation_of(store, cap.from_run)
        facts.append(collect_machine_facts(cap.argv, cap.environ))
    missing = tuple(measure.not_recorded(facts[0]))  # one machine: said once
    for line in missing:
        on_warning(line)
    measured = measure.run_sides(requests, on_run, decided)
    runs: list[BenchRun] = []
    for side, fact, executable in zip(measured, facts, executables, strict=True):
        first = runs[0].result.id if runs else None
        result = _archive(store, side, fact, git_snapshot(side.request.capture.cwd),
                          executable, missing, first)
        runs.append(BenchRun(result, side, missing))
    return tuple(runs)


@lease.holding("bench")
def _archive(store: Store, measured: BenchMeasured, facts: dict, git: GitSnapshot,
             executable: str, missing: tuple[str, ...],
             interleaved_with: str | None = None) -> ArchiveResult:
    """The series as one run: its samples' table and manifest, the patch blob under the same
    lease (referenced by nothing until the manifest lands)."""
    request, cap = measured.request, measured.request.capture
    outcome = measured.outcome()
    extra: dict[str, object] = {"tool": "bench", "tool_version": __version__, "machine": facts,
             "git": stored_git(store, git, cap.redaction()), "warnings": [],
             "from_run": cap.from_run, "investigation": request.investigation,
             "bench": {"repeat": measured.runs, "warmup": request.warmup,
                       "auto": request.auto, "stopped": measured.stopped,
                       "metrics": [spec.to_json() for spec in request.metrics],
                       **({"interleaved_with": interleaved_with} if interleaved_with else {})}}
    record = session.capture_record(cap, executable, "", outcome, extra)
    command = " ".join(record["argv"])
    provenance = {"tool": "bench", "tool_version": __version__, "created": outcome.started,
                  "command": command, "environment": session.environment_of(facts),
                  "application": {"argv": list(record["argv"])}, "settings": {},
                  "settings_source": {}, "evidence": {}, "notices": list(missing)}
    run = RunRequest([], source="bench", label=cap.label, note=cap.note,
                     redact_patterns=cap.redaction(), capture=record,
                     overrides={"command": command},
                     extra_tables={"bench_samples": measure.samples_table(measured.samples)})
    return record_attempt(store, run, provenance)


def recorded_series(original: RunRecord, capture: CaptureRequest) -> BenchRequest:
    """A bench run's recorded series (its metrics, runs and warm-ups) as a request to run it
    again as `capture` describes (where, with which environment, rerun_of the original)."""
    recorded = mapping_of(mapping_of(original.manifest.get("capture")).get("bench"))
    metrics = tuple(MetricSpec(str(m["name"]), str(m["source"]), str(m["pattern"]),
                               str(m.get("unit") or ""), str(m.get("better") or "lower"))
                    for m in recorded.get("metrics") or [] if isinstance(m, dict))
    return BenchRequest(capture, metrics, repeat=int(recorded.get("repeat") or 5),
                        warmup=int(recorded.get("warmup") or 0))


def rerun_bench(original: RunRecord, capture: CaptureRequest,
                on_warning: Callable[[str], None]) -> ArchiveResult:
    """`triage rerun` of a bench run: its recorded series again."""
    return bench(recorded_series(original, capture), lambda _number, _samples: None,
                 on_warning).result
