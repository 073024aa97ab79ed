"""`triage history SELECTOR`: one kernel, NVTX range or ncu metric across a series of runs.

The series is the runs a diff side names (RUN, RUN,RUN,... or a label glob: compare/repeats.py),
or with `workload=True` every run of the tool and workload (program and arguments, as drift
compares them) of the one run SELECTOR names. Runs are put in capture order: the time the report
was made (`created`), then the time it was archived, then the order the selector names them.

Each run gives one sample, read from the one table it needs: the durations of the launches of
the kernels whose name matches --kernel (`kernels`; ncu: its results), of the NVTX ranges named
--nvtx (`nvtx_ranges`), or the values of the ncu metric --metric over those launches (`metrics`),
or, of `triage bench` runs, the metric --metric over its measured runs (`bench_samples`).
Its value is their median; n, min/max and the quartiles are its spread.

Each run is graded against the one before it with the drift table `diff` uses
(compare/drift.py). A field known on both sides and different, of severity `invalidates` or
`caution`, is a boundary. An invalidating boundary splits the series: steps are found within the
segments between them (compare/steps.py), never across one, since the numbers on either side of
it are not comparable. A caution boundary (profiler version, driver major, host CPU ...) is
marked, and a step found there says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from triage.archive import catalog
from triage.archive.acceptances import Acceptance
from triage.archive.model import RunRecord
from triage.archive.runs import resolve
from triage.archive.store import Store
from triage.compare import steps as step_method
from triage.compare.accepted import accepted_runs, capture_key, newest_between
from triage.compare.drift import CAUTION, INVALIDATES, UNKNOWN, VERDICT_OF, grade, workload
from triage.compare.noise import LAUNCHES, RUNS, Noise, Sample, Spread, compare, sample_of
from triage.compare.renames import metric_map
from triage.compare.repeats import array_sample, failed_tries, side_refs
from triage.compare.result import DriftItem, FailedTry, JsonDict
from triage.compare.rundata import RunData
from triage.base.errors import TriageError, UsageError

HISTORY_FORMAT = 1
KERNEL, NVTX, METRIC = "kernel", "nvtx", "metric"
ORDER = "capture_time"  # created, then archived, then the selector's order
BOUNDARY_SEVERITIES = (INVALIDATES, CAUTION)
# what a run's value is the median of: its launches, or (a bench run) its runs of the workload
VALUE_OVER = {LAUNCHES: "median over the run's launches",
              RUNS: "median over the run's measured runs of the workload"}


@dataclass(frozen=True)
class Measure:
    """What a history follows: kernels matching `kernel` (a regex), the NVTX range `nvtx`, or
    the ncu metric `metric` over the launches of the kernels matching `kernel` (all if None)."""

    kernel: str | None = None
    nvtx: str | None = None
    metric: str | None = None

    @property
    def kind(self) -> str:
        return METRIC if self.metric else NVTX if self.nvtx else KERNEL

    def describe(self) -> str:
        """What is followed, in the words of errors and titles."""
        if self.metric:
            return f"metric {self.metric!r}" + (f" of kernels matching {self.kernel!r}"
                                                if self.kernel else "")
        if self.nvtx:
            return f"NVTX range {self.nvtx!r}"
        return f"kernels matching {self.kernel!r}"

    def to_json(self) -> JsonDict:
        return {"kind": self.kind, "kernel": self.kernel, "nvtx": self.nvtx,
                "metric": self.metric}


@dataclass(frozen=True)
class HistoryPoint:
    """One run of the series: its sample's spread (None: the run has no such launch), its drift
    from the run before it (fields that differ or are known on one side only) and the change
    from the run before it, measured over both runs' launches as `diff` measures one run per
    side."""

    index: int
    run: RunRecord
    label: str | None  # the label the selector named the run by
    spread: Spread | None
    unit: str | None
    drift: tuple[DriftItem, ...]
    change: Noise | None
    read_as: str | None = None  # the metric's name in this run, where a release renamed it

    @property
    def boundary(self) -> str | None:
        """'invalid' or 'caution' where a field known in both runs differs at that severity."""
        found = [VERDICT_OF[i.severity] for i in self.drift
                 if i.state == "different" and i.severity in BOUNDARY_SEVERITIES]
        return "invalid" if "invalid" in found else found[0] if found else None

    @property
    def boundary_items(self) -> tuple[DriftItem, ...]:
        return tuple(i for i in self.drift
                     if i.state == "different" and i.severity in BOUNDARY_SEVERITIES)

    @property
    def commit(self) -> str | None:
        git = self.run.capture.git if self.run.capture is not None else None
        return git.commit if git is not None else None

    @property
    def dirty(self) -> bool | None:
        git = self.run.capture.git if self.run.capture is not None else None
        return git.dirty if git is not None else None

    def to_json(self) -> JsonDict:
        return {"index": self.index, "run": self.run.id, "label": self.label,
                "labels": list(self.run.labels), "created": self.run.created,
                "archived": self.run.archived, "tool": self.run.tool,
                "tool_version": self.run.tool_version, "gpu": self.run.gpu_name,
                "commit": self.commit, "dirty": self.dirty,
                "value": self.spread.median if self.spread else None, "unit": self.unit,
                "spread": self.spread.to_json() if self.spread else None,
                "boundary": self.boundary, "drift": [i.to_json() for i in self.drift],
                "change": self.change.to_json() if self.change else None,
                **({"read_as": self.read_as} if self.read_as else {})}


@dataclass(frozen=True)
class HistoryStep:
    """A step change: the level from run `at` on against the level before it, `noise` at the
    method's confidence (one value per run); `boundary` is the caution boundary it falls on."""

    at: int
    start: int
    end: int
    noise: Noise
    boundary: str | None
    accepted: Acceptance | None = None  # `triage accept` of a run between at-1 and at

    def to_json(self) -> JsonDict:
        return {"at": self.at, "before": [self.start, self.at], "after": [self.at, self.end],
                "change_pct": self.noise.change_pct, "ci_pct": list(self.noise.ci_pct or ()),
                "confidence": self.noise.confidence, "boundary": self.boundary,
                "noise": self.noise.to_json(),
                "accepted": self.accepted.to_json() if self.accepted else None}


@dataclass(frozen=True)
class HistoryResult:
    """A series of runs and what they show: points in capture order, the segments between
    invalidating boundaries, and the steps found within them."""

    selector: str
    measure: Measure
    points: tuple[HistoryPoint, ...]
    segments: tuple[tuple[int, int], ...]
    steps: tuple[HistoryStep, ...]
    min_step_pct: float = step_method.MIN_STEP_PCT
    failed: tuple[FailedTry, ...] = ()  # failed tries of a series the selector's glob matches
    samples: str = LAUNCHES  # a run's values: its launches, or (bench) its runs of the workload

    def to_json(self) -> JsonDict:
        """The `history --json` document (schemas/history.schema.json)."""
        return {"format": HISTORY_FORMAT, "selector": self.selector,
                "measure": self.measure.to_json(), "order": ORDER,
                "method": {"steps": step_method.METHOD,
                           "confidence": step_method.STEP_CONFIDENCE,
                           "permutations": step_method.PERMUTATIONS,
                           "min_step_pct": self.min_step_pct,
                           "value": VALUE_OVER[self.samples],
                           "boundaries": list(BOUNDARY_SEVERITIES),
                           "split_at": INVALIDATES},
                "points": [p.to_json() for p in self.points],
                "segments": [list(s) for s in self.segments],
                "steps": [s.to_json() for s in self.steps],
                "failed": [t.to_json() for t in self.failed]}


# -- the series ----------------------------------------------------------------------------------


def _capture_order(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Created (else archived), then archived, then the selector's order (a stable sort)."""
    return sorted(records, key=capture_key)


def workload_runs(store: Store, ref: str) -> list[RunData]:
    """Every run of the tool and workload of the run `ref` names (failed captures left out: no
    report, nothing to follow). The catalog says which runs' command lines name the program;
    only those manifests are read, to compare workloads."""
    seed = RunData(store, resolve(store, ref))
    wanted = workload(seed.record)
    if wanted.program is None:
        raise UsageError(f"run {seed.id[:12]} recorded no command or application: it names no "
                         "workload; give the runs (a label glob or RUN,RUN,...) instead")
    word = re.split(r"[\\/]", wanted.program.split()[-1])[-1]
    columns = ("id", "tool", "source", "command")
    table = catalog.scan_unordered(store, list(columns)).table
    found = []
    for run_id, tool, source, command in zip(*(table.column(c).to_pylist() for c in columns),
                                             strict=True):
        if tool != seed.tool or source == "capture-failed" or not command or word not in command:
            continue
        run = seed if run_id == seed.id else RunData(store, run_id)
        mine = workload(run.record)
        if (mine.program, mine.arguments) == (wanted.program, wanted.arguments):
            found.append(run)
    return found


def _label_named(record: RunRecord, parts: Sequence[str]) -> str | None:
    """The label a selector part names this run by (itself, or one its glob matches)."""
    import fnmatch

    for part in parts:
        for name in record.labels:
            if name == part or fnmatch.fnmatchcase(name, part):
                return name
    return None


# -- one run's sample ----------------------------------------------------------------------------


def _matching(column: pa.ChunkedArray, keep) -> pa.Array:
    """A boolean mask of a dictionary column's rows whose word `keep` accepts (each distinct
    word tested once)."""
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if not pa.types.is_dictionary(column.type):
        return pa.array([v is not None and bool(keep(v)) for v in column.to_pylist()],
                        pa.bool_())
    wanted = [i for i, word in enumerate(column.dictionary.to_pylist()) if keep(word)]
    return pc.fill_null(pc.is_in(column.indices, value_set=pa.array(wanted, column.indices.type)),
                        False)


def _kernel_sample(run: RunData, pattern: re.Pattern[str] | None) -> Sample | None:
    if run.tool == "ncu":
        from triage.compare.ncu_diff import kernel_rows

        return sample_of([r["duration_ns"] for r in kernel_rows(run)
                          if pattern is None or pattern.search(r["name"] or "")])
    table = run.table("kernels", columns=["name", "duration_ns"], dictionary=("name",))
    if table is None or table.num_rows == 0:
        return None
    if pattern is not None:
        table = table.filter(_matching(table.column("name"), pattern.search))
    return array_sample(table.column("duration_ns").combine_chunks())


def _nvtx_sample(run: RunData, text: str) -> Sample | None:
    table = run.table("nvtx_ranges", columns=["text", "duration_ns"], dictionary=("text",))
    if table is None or table.num_rows == 0:
        return None
    table = table.filter(_matching(table.column("text"), lambda word: word == text))
    return array_sample(table.column("duration_ns").combine_chunks())


def _metric_sample(run: RunData, name: str, pattern: re.Pattern[str] | None
                   ) -> tuple[Sample | None, str | None, str | None]:
    """The metric's value over the launches of the matching kernels (its spread and values in
    launch order computed where the metrics are stored), its unit, and the name read where the
    run has no value of `name` but of a name the metric map pairs with it (a profiler release
    renamed it)."""
    launches = run.kernels
    if pattern is not None:
        launches = launches.filter(_matching(launches.column("name"), pattern.search))
    wanted = sorted(zip(launches.column("report_index").to_pylist(),
                        launches.column("kernel_index").to_pylist(), strict=True))
    names = (name, *metric_map().other_names(name))
    stats = run.ncu.stats([wanted], list(names), spread=True).of(0)
    read = next((n for n in names if (stat := stats.get(n)) and stat.n), None)
    if read is None:
        return None, None, None
    return stats[read].sample(), stats[read].unit, read if read != name else None


def _bench_sample(run: RunData, name: str) -> tuple[Sample | None, str | None, str | None]:
    """A bench metric over the run's measured runs of the workload, and its unit."""
    from triage.compare.bench import side_series

    found = side_series([run]).get(name)
    return (sample_of(found.values), found.unit, None) if found is not None else (None, None, None)


def run_sample(run: RunData, measure: Measure
               ) -> tuple[Sample | None, str | None, str | None]:
    """The run's sample of the measure, its unit (durations: ns) and, for a metric the run
    names otherwise (renamed), the name read."""
    pattern = re.compile(measure.kernel) if measure.kernel else None
    if measure.metric and run.tool == "bench":
        return _bench_sample(run, measure.metric)
    if measure.metric:
        return _metric_sample(run, measure.metric, pattern)
    if measure.nvtx:
        return _nvtx_sample(run, measure.nvtx), "ns", None
    return _kernel_sample(run, pattern), "ns", None


def _check_measure(measure: Measure, records: Sequence[RunRecord]) -> None:
    if not (measure.kernel or measure.nvtx or measure.metric):
        raise UsageError("history follows one thing: give --kernel REGEX, --nvtx NAME or "
                         "--metric NAME")
    if measure.nvtx and (measure.kernel or measure.metric):
        raise UsageError("--nvtx follows an NVTX range; --kernel and --metric follow kernels: "
                         "give one of them")
    if measure.kernel:
        try:
            re.compile(measure.kernel)
        except re.error as exc:
            raise UsageError(f"--kernel {measure.kernel!r} is not a regular expression "
                             f"({exc})") from None
    tools = sorted({r.tool for r in records})
    if len(tools) > 1:
        raise UsageError(f"the series holds {' and '.join(tools)} runs; a history follows one "
                         "tool's measurements (ncu replays kernels with locked clocks, nsys "
                         "times them live)")
    others = sorted({r.tool for r in records} - {"ncu", "bench"})
    if measure.metric and others:
        raise UsageError(f"--metric follows an ncu metric or a bench metric; the series holds "
                         f"{others[0]} runs")
    if "bench" in tools and not measure.metric:
        raise UsageError("a series of bench runs is followed by one of its metrics: "
                         "--metric wall_time, or a --metric NAME it measured")
    if measure.nvtx and "ncu" in {r.tool for r in records}:
        raise UsageError("--nvtx follows an NVTX range of nsys runs; the series holds ncu runs")


# -- drift and steps -------------------------------------------------------------------------------


def _drift(previous: RunRecord | None, record: RunRecord) -> tuple[DriftItem, ...]:
    """What differs from the run before (known on both sides), or is known on one side only."""
    if previous is None:
        return ()
    return tuple(i for i in grade(previous, record)
                 if i.state == "different" or i.state == UNKNOWN)


def _segments(points: Sequence[HistoryPoint]) -> list[tuple[int, int]]:
    cuts = [p.index for p in points if p.boundary == "invalid"]
    bounds = [0, *cuts, len(points)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


def _steps(points: Sequence[HistoryPoint], segments: Sequence[tuple[int, int]],
           min_pct: float) -> list[HistoryStep]:
    """Steps within each segment, over the runs that have a value (indexes back to runs)."""
    found = []
    for lo, hi in segments:
        known = [p for p in points[lo:hi] if p.spread is not None]
        values = [p.spread.median for p in known if p.spread is not None]
        for step in step_method.detect_steps(values, min_pct):
            at = known[step.at].index
            found.append(HistoryStep(at, known[step.start].index, known[step.end - 1].index + 1,
                                     step.noise, points[at].boundary))
    return found


def _with_acceptances(store: Store, points: Sequence[HistoryPoint],
                      steps: list[HistoryStep]) -> list[HistoryStep]:
    """Each step with the acceptance of a run of the series' workload captured after the run
    before it and not after its first run (an intended step: `triage accept`)."""
    accepted = accepted_runs(store, points[-1].run) if steps else []
    if not accepted:
        return steps
    return [replace(s, accepted=found.latest) if s.at and (found := newest_between(
        accepted, points[s.at - 1].run, points[s.at].run)) else s for s in steps]


def history(store: Store, selector: str, measure: Measure, workload_of: bool = False,
            min_step_pct: float = step_method.MIN_STEP_PCT) -> HistoryResult:
    """The series SELECTOR names, each run's sample of `measure`, boundaries and steps."""
    runs = workload_runs(store, selector) if workload_of else \
        [RunData(store, run_id) for run_id in side_refs(store, selector)]
    records = _capture_order([r.record for r in runs])
    _check_measure(measure, records)
    by_id = {r.id: r for r in runs}
    samples = RUNS if records and records[0].tool == "bench" else LAUNCHES  # one tool: checked
    parts = [p.strip() for p in selector.split(",")]
    points: list[HistoryPoint] = []
    previous: tuple[RunRecord, Sample | None] | None = None
    for index, record in enumerate(records):
        sample, unit, read_as = run_sample(by_id[record.id], measure)
        change = compare(previous[1], sample, samples) if previous and previous[1] and sample \
            else None
        points.append(HistoryPoint(index, record, _label_named(record, parts),
                                   sample.spread if sample else None, unit,
                                   _drift(previous[0] if previous else None, record), change,
                                   read_as))
        previous = (record, sample)
    if not any(p.spread for p in points):
        raise TriageError(f"no run of {selector!r} has {measure.describe()}; {_listing(measure)}")
    segments = _segments(points)
    steps = _with_acceptances(store, points, _steps(points, segments, min_step_pct))
    return HistoryResult(selector, measure, tuple(points), tuple(segments), tuple(steps),
                         min_step_pct,
                         () if workload_of else failed_tries(store, selector), samples)


def _listing(measure: Measure) -> str:
    """Where the names to follow are listed."""
    if measure.metric:
        return '`triage query "select distinct name from metrics"` lists the metrics'
    return "`triage top RUN` lists a run's kernels and NVTX ranges"
