"""`triage bench -- CMD ...`: run a workload unprofiled, K warm-ups then N times, and measure it.

The number that accepts a change is the workload's own (step time, throughput, wall time), not
a profiler's: ncu replays kernels with clocks locked, nsys adds its own overhead. Each run is
timed by the wall clock around the process and its output is read for the metrics the user
named (`MetricSpec`). The process runs as `capture` runs a profiler (`session.run_profiler`:
output streamed, signals passed on, a timeout), and the run gets the same provenance: machine
facts, git state, the environment redacted (`session.capture_record`). What could not be
recorded (no nvidia-smi: no GPU, driver or clocks) is said, never guessed.

This module runs and measures; archiving the samples is `archive/bench.py`'s job.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from triage.base.errors import CaptureFailed, UsageError
from triage.base.timeutil import utc_now
from triage.capture import process_tree, session
from triage.capture.progress import OutputLine, ProgressEvent
from triage.capture.session import CaptureRequest, Outcome
from triage.schemas.tables import records_table

if TYPE_CHECKING:
    import pyarrow as pa

WALL_TIME = "wall_time"
LOWER, HIGHER = "lower", "higher"  # which direction of a metric is better
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class MetricSpec:
    """One metric the program prints: `NAME[:UNIT][:higher]=re:REGEX` (a regex whose group
    `v` is the number) or `NAME[:UNIT][:higher]=json:KEY` (KEY of a JSON object on one line).
    A run's value is the median of the values its output held (one line: that value)."""

    name: str
    source: str  # "re" or "json"
    pattern: str
    unit: str = ""
    better: str = LOWER

    @classmethod
    def parse(cls, text: str) -> MetricSpec:
        head, sep, body = text.partition("=")
        source, colon, pattern = body.partition(":")
        words = head.split(":")
        name, rest = words[0], words[1:]
        better = LOWER
        if rest and rest[-1] in (HIGHER, LOWER):
            better, rest = rest[-1], rest[:-1]
        if not sep or not colon or source not in ("re", "json") or not pattern \
                or not NAME_RE.match(name) or len(rest) > 1 or name == WALL_TIME:
            raise UsageError(f"--metric {text!r}: give NAME[:UNIT][:higher]=re:REGEX or "
                             "NAME[:UNIT][:higher]=json:KEY, e.g. "
                             "'step_ms:ms=re:step time: (?P<v>[0-9.]+) ms' or "
                             "'tokens_per_s:tok/s:higher=json:tps' (wall_time is measured "
                             "always)")
        spec = cls(name, source, pattern, rest[0] if rest else "", better)
        spec.compiled()  # a bad regex is a usage error now, not after the first run
        return spec

    def compiled(self) -> re.Pattern[str] | None:
        if self.source != "re":
            return None
        try:
            pattern = re.compile(self.pattern)
        except re.error as exc:
            raise UsageError(f"--metric {self.name}: {self.pattern!r} is not a regular "
                             f"expression: {exc}") from None
        if "v" not in pattern.groupindex:
            raise UsageError(f"--metric {self.name}: the regex needs a group named v around "
                             "the number: (?P<v>[0-9.]+)")
        return pattern

    def values_in(self, line: str, pattern: re.Pattern[str] | None) -> list[float]:
        """The numbers this metric reads in one line of output."""
        if pattern is not None:
            return [v for m in pattern.finditer(line) if (v := _number(m.group("v"))) is not None]
        text = line.strip()
        if not text.startswith("{"):
            return []
        try:
            doc = json.loads(text)
        except ValueError:
            return []
        found = _number(doc.get(self.pattern)) if isinstance(doc, dict) else None
        return [found] if found is not None else []

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "pattern": self.pattern,
                "unit": self.unit, "better": self.better}


def _number(value: object) -> float | None:
    """A finite number from a regex group or a JSON value (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class BenchSample:
    """One metric's value in one run of the workload."""

    repeat: int  # 1.. for measured runs, counting warm-ups first: -K..-1
    metric: str
    value: float
    unit: str
    better: str

    @property
    def warmup(self) -> bool:
        return self.repeat < 0


@dataclass
class BenchRequest:
    """What the user asked `triage bench` to do."""

    capture: CaptureRequest  # argv, cwd, environment, label, note, redaction, --from
    metrics: tuple[MetricSpec, ...] = ()
    repeat: int = 5  # measured runs (with --repeat auto: the most, --max-runs)
    warmup: int = 0
    auto: bool = False  # --repeat auto: stop once `decided` says so
    budget: float | None = None  # seconds all runs together may take (--budget)
    investigation: str | None = None


@dataclass
class BenchMeasured:
    """What the runs measured: the samples, each run's outcome, and how the series ended."""

    request: BenchRequest
    samples: list[BenchSample] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    stopped: str = "repeat"  # repeat | decided | max_runs | budget
    # When the series began, to the microsecond: its run's `created` and the start its record
    # keeps. A bench run has no report to tell it apart: two series of a workload that prints
    # the same numbers, run within one second, were one run to the second (`Outcome.started`).
    began: str = field(default_factory=lambda: utc_now(precise=True))

    @property
    def runs(self) -> int:
        """Measured runs (warm-ups aside)."""
        return len({s.repeat for s in self.samples if not s.warmup})

    def values(self, metric: str) -> list[float]:
        return [s.value for s in self.samples if s.metric == metric and not s.warmup]

    def outcome(self) -> Outcome:
        """The series as one outcome for the capture block: its start (`began`), the last run's
        end, the time of every run together, the last run's exit status and output tail."""
        last = self.outcomes[-1]
        return Outcome(last.exit_code, self.began, last.ended,
                       round(sum(o.seconds for o in self.outcomes), 3), last.tail,
                       last.interrupted, last.timed_out)


def plan(request: BenchRequest) -> str:
    """Check the command before anything runs; the executable it runs."""
    argv = request.capture.argv
    if not argv:
        raise UsageError("nothing to run: `triage bench -- ./train --steps 100`")
    if request.capture.shell:
        return "/bin/sh"
    found = shutil.which(argv[0], path=request.capture.environ.get("PATH"))
    if found is None and "/" in argv[0]:
        found = argv[0] if shutil.which(str(request.capture.cwd / argv[0])) else None
    if found is None:
        raise UsageError(f"{argv[0]}: no such program (not on PATH, not an executable file); "
                         "give its path, e.g. ./train")
    return found


def run_sides(requests: Sequence[BenchRequest],
              on_run: Callable[[int, int, list[BenchSample]], None],
              decided: Callable[[tuple[BenchMeasured, ...]], bool] | None = None,
              on_output: Callable[[ProgressEvent], None] | None = None
              ) -> tuple[BenchMeasured, ...]:
    """K warm-ups, then measured runs until `repeat` of them, or (--repeat auto) until
    `decided` says the comparison is decided, or the budget is spent: of one side, or of
    several at once (`bench --interleave`: the baseline and the candidate), run by run
    alternately in `side_order`, so that the machine's drift reaches every side alike. The
    series' size, warm-ups, budget and stopping rule are the first request's; `decided` looks
    after each number's runs of every side; `on_run` gets each run's side (its index in
    `requests`). A run that fails ends the series with CaptureFailed and nothing is kept: a
    sample of a failed run measures nothing."""
    measured = tuple(BenchMeasured(request) for request in requests)
    pids: list[int] = []  # the runs' processes, whose nsys agents are ended once, at the end
    try:
        return _series(requests[0], on_run, decided, on_output, measured, pids)
    finally:
        process_tree.end_agents(pids)


def side_order(position: int, sides: int) -> list[int]:
    """The sides' order at the `position`-th number of a series (warm-ups included, from 0):
    A B, then B A, then A B ... (ABBA: a drift that grows steadily reaches each side as often
    first as second, and neither always runs right after the other)."""
    order = list(range(sides))
    return order if position % 2 == 0 else order[::-1]


def _series(first: BenchRequest, on_run: Callable[[int, int, list[BenchSample]], None],
            decided: Callable[[tuple[BenchMeasured, ...]], bool] | None,
            on_output: Callable[[ProgressEvent], None] | None,
            measured: tuple[BenchMeasured, ...], pids: list[int]) -> tuple[BenchMeasured, ...]:
    """run_sides' loop: nothing in it but the runs and the stopping rule."""
    specs = [[(spec, spec.compiled()) for spec in m.request.metrics] for m in measured]
    clock = time.monotonic()
    numbers = [*range(-first.warmup, 0), *range(1, first.repeat + 1)]
    for position, number in enumerate(numbers):
        for side in side_order(position, len(measured)):
            samples = _one_run(measured[side].request, number, specs[side], measured[side],
                               on_output, pids)
            measured[side].samples += samples
            on_run(side, number, samples)
        if number < 0:
            continue
        if first.auto and decided is not None and decided(measured):
            _stopped(measured, "decided")
            break
        if first.budget is not None and number < first.repeat \
                and time.monotonic() - clock >= first.budget:
            _stopped(measured, "budget")
            break
    else:
        _stopped(measured, "max_runs" if first.auto else "repeat")
    return measured


def _stopped(measured: Sequence[BenchMeasured], how: str) -> None:
    for side in measured:
        side.stopped = how


def _one_run(request: BenchRequest, number: int,
             specs: Sequence[tuple[MetricSpec, re.Pattern[str] | None]], measured: BenchMeasured,
             on_output: Callable[[ProgressEvent], None] | None,
             pids: list[int]) -> list[BenchSample]:
    """Run the workload once; its wall time (from just before its process starts to just after
    it is reaped: no thread start, /proc scan or output handling of triage's around it) and
    metrics (CaptureFailed if it failed, or printed no value of a metric)."""
    found: dict[str, list[float]] = {spec.name: [] for spec, _ in specs}

    def read(event: ProgressEvent) -> None:
        if on_output is not None:
            on_output(event)
        if isinstance(event, OutputLine) and event.final:
            for spec, pattern in specs:
                found[spec.name] += spec.values_in(event.text, pattern)

    cap = request.capture
    outcome = session.run_profiler(cap.argv, cap.shell, cap.cwd, cap.environ, read,
                                   tick_after=3600.0, timeout=cap.timeout, agents_of=pids)
    measured.outcomes.append(outcome)
    which = f"warm-up {number + request.warmup + 1}" if number < 0 else f"run {number}"
    if outcome.ended_early or outcome.exit_code != 0:
        last = outcome.tail[-1] if outcome.tail else ""
        failed = CaptureFailed(f"{which} of the bench {outcome.status}"
                               + (f" and said {last!r}" if last else "")
                               + "; nothing was archived")
        if outcome.interrupted:
            import signal

            failed.exit_code = 128 + signal.Signals[outcome.interrupted].value
        raise failed
    samples = [BenchSample(number, WALL_TIME, outcome.wall, "s", LOWER)]
    for spec, _ in specs:
        if not found[spec.name]:
            raise CaptureFailed(f"{which}: no line of its output gave --metric {spec.name} "
                                f"({spec.source}:{spec.pattern}); nothing was archived")
        samples.append(BenchSample(number, spec.name, statistics.median(found[spec.name]),
                                   spec.unit, spec.better))
    return samples


def not_recorded(facts: dict) -> list[str]:
    """What the machine could not tell (no nvidia-smi: no GPU, driver, CUDA, clocks), each said
    once with its reason: a bench run on a machine without a GPU is still a run."""
    found = facts.get("gpu")
    gpu: dict = found if isinstance(found, dict) else {}
    reasons: dict[str, list[str]] = {}
    for key, what in (("gpus", "GPUs, clocks and persistence mode"),
                      ("driver_version", "driver version"),
                      ("cuda_driver_version", "CUDA version")):
        node = gpu.get(key)
        if isinstance(node, dict) and node.get("value") is None and node.get("reason"):
            reasons.setdefault(str(node["reason"]), []).append(what)
    return [f"not recorded: {', '.join(whats)} ({reason})" for reason, whats in reasons.items()]


def samples_table(samples: Sequence[BenchSample]) -> pa.Table:
    """The run's `bench_samples` table (schemas/tables.json)."""
    return records_table("bench_samples", [
        {"repeat": s.repeat, "warmup": s.warmup, "metric": s.metric, "value": s.value,
         "unit": s.unit, "better": s.better} for s in samples])
