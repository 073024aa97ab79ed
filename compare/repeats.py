"""A diff side of several runs, and the measured noise of every kernel, NVTX range and API row.

A side is one RUN, a comma-separated list of them, or a label glob (`'before/*'`, quoted so
the shell leaves it alone), in natural order (`before/2` before `before/10`). With one run per
side, the samples are that run's launches; with several runs on either side, one value per run:
its median launch (from the stored summaries, robust to the preempted launch a total carries;
an ncu kernel: its mean launch, the number the ncu diff shows), and for the total GPU time each
run's total. The numbers shown for such a side are the medians over its runs
(compare/aggregate.py). Statistics: compare/noise.py.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from triage.archive.lease import side_by_side
from triage.archive.runs import investigation_runs, investigation_side, resolve, side_parts
from triage.archive.store import Store
from triage.compare.matching import match_key
from triage.compare.noise import (LAUNCHES, MAX_SAMPLES, RUNS, Sample, Spread, compare,
                                  sample_of, thin_positions)
from triage.compare.result import FailedTry, GpuChange, KernelDiff, NsysDiff, SummaryChange
from triage.compare.rundata import RunData
from triage.base.errors import RunNotFound, UsageError

Key = tuple[Hashable, ...]
GLOB = re.compile(r"[*?\[]")
# summary -> (per-launch table, key columns, per-run summary table)
LAUNCH_TABLES = {"nvtx": ("nvtx_ranges", ("domain", "text", "kind"), "nvtx_summary"),
                 "api": ("api_calls", ("api", "name"), "api_summary")}


def _natural(label: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def side_refs(store: Store, side: str) -> list[str]:
    """The run ids a side names: RUN, RUN,RUN,..., a label glob or `inv:NAME`; each run once."""
    return list(side_named(store, side))


def side_named(store: Store, side: str) -> dict[str, str]:
    """The runs a side names, each once, in order: id -> the name it was given by (the label
    a glob matched, else the RUN as typed)."""
    named: dict[str, str] = {}
    for ref in side_parts(side):
        if (investigation := investigation_side(ref)) is not None:
            for run_id in bench_runs_of(store, investigation):
                named.setdefault(run_id, run_id)  # shown by its short id
        elif GLOB.search(ref):
            labels = store.labels.all()
            names = sorted((n for n in labels if fnmatch.fnmatchcase(n, ref)), key=_natural)
            if not names:
                raise RunNotFound(f"no label matches {ref!r}; `triage ls` lists runs and labels")
            for name in names:
                named.setdefault(resolve(store, name), name)
        else:
            named.setdefault(resolve(store, ref), ref)
    return named


def bench_runs_of(store: Store, investigation: str) -> list[str]:
    """An investigation's bench runs (the side's measurements; its nsys runs are the profile
    compare/accounts.py reads), oldest first; refused when it has none."""
    found = investigation_runs(store, investigation, "bench")
    if not found:
        raise RunNotFound(f"investigation {investigation!r} has no bench run; `triage bench "
                          f"--investigation {investigation} -- CMD` adds one")
    return found


def failed_tries(store: Store, side: str) -> tuple[FailedTry, ...]:
    """The failed tries of a series that the side's label globs match, in natural order (none
    for a side without a glob). Only failed attempts (source capture-failed, in no group) have
    their manifest read: in a store of many captures a side costs one catalog scan."""
    globs = [ref for ref in side_parts(side) if GLOB.search(ref)]
    if not globs:
        return ()
    from triage.archive.catalog import scan_unordered
    from triage.archive.model import CaptureInfo

    rows = scan_unordered(store, ["id", "source", "capture_group"]).table.to_pylist()
    found: dict[str, FailedTry] = {}
    for row in rows:
        if row["capture_group"] is not None or row["source"] != "capture-failed":
            continue
        raw = store.runs.read_manifest(row["id"]).get("capture")
        capture = CaptureInfo.from_dict(raw) if isinstance(raw, dict) else None
        if capture is not None and capture.series and \
                any(fnmatch.fnmatchcase(capture.series, ref) for ref in globs):
            found[row["id"]] = FailedTry(row["id"], capture.series, capture.status)
    return tuple(sorted(found.values(), key=lambda t: _natural(t.name)))


def array_sample(values: pa.Array) -> Sample | None:
    """`sample_of` an Arrow column, its quantiles computed in Arrow when there are many."""
    if len(values) <= 4 * MAX_SAMPLES:
        return sample_of(values.to_pylist())
    values = values.drop_null()
    if len(values) == 0:
        return None
    q1, median, q3 = pc.quantile(values, q=[0.25, 0.5, 0.75]).to_pylist()
    bounds = pc.min_max(values)
    spread = Spread(len(values), median, float(bounds["min"].as_py()),
                    float(bounds["max"].as_py()), q1, q3)
    picks = values.take(pa.array(thin_positions(len(values)))).to_pylist()
    return Sample(spread, tuple(float(v) for v in picks))


def _grouped_samples(batches: Iterable[pa.RecordBatch], keys: Sequence[str], value: str,
                     key_of: Callable[[Key], Key] = lambda k: k) -> dict[Key, Sample | None]:
    """Per key (as `key_of` makes it), a Sample of `value` over the rows of a table read a
    batch at a time: only the values are kept, never the table whole (a diff of a 3M- against
    a 10M-call run held 715 MB reading the two whole, 310 MB this way)."""
    lists: dict[Key, list[pa.Array]] = {}  # per key, its values in launch order
    for batch in batches:
        for key, values in _batch_groups(pa.Table.from_batches([batch]), keys, value):
            lists.setdefault(key, []).append(values)
    parts: dict[Key, list[pa.Array]] = {}  # merged by `key_of` in order of first appearance
    for key, arrays in lists.items():
        parts.setdefault(key_of(key), []).extend(arrays)
    return {key: array_sample(pa.concat_arrays(arrays)) for key, arrays in parts.items()}


def _batch_groups(table: pa.Table, keys: Sequence[str], value: str
                  ) -> list[tuple[Key, pa.Array]]:
    """(key, its values in row order) for each key of one batch, in order of first row."""
    if table.num_rows == 0:
        return []
    # grouped by dictionary indices (strings read as dictionaries: 8x faster on 1M rows),
    # in one thread so that each list keeps the launch order
    table = table.unify_dictionaries().combine_chunks()
    codes = pa.table({**{k: _codes(table.column(k)) for k in keys}, value: table.column(value)})
    grouped = codes.group_by(list(keys), use_threads=False).aggregate([(value, "list")])
    lists = grouped.column(f"{value}_list").combine_chunks()
    columns = [_decoded(table.column(k), grouped.column(k)) for k in keys]
    return [(key, lists[i].values) for i, key in enumerate(zip(*columns, strict=True))]


def _codes(column: pa.ChunkedArray) -> pa.Array:
    """A dictionary column's indices (a plain column as it is)."""
    chunk = column.chunk(0) if column.num_chunks else pa.array([], column.type)
    return chunk.indices if pa.types.is_dictionary(column.type) else chunk


def _decoded(column: pa.ChunkedArray, codes: pa.ChunkedArray) -> list[Any]:
    """Group keys back as values: a dictionary column's codes looked up in its dictionary."""
    if not pa.types.is_dictionary(column.type) or not column.num_chunks:
        return codes.to_pylist()
    words = column.chunk(0).dictionary.to_pylist()
    return [None if c is None else words[c] for c in codes.to_pylist()]


def _kernel_key(key: Key) -> Key:
    return (match_key(str(key[0])),)


def launch_kernels(run: RunData) -> dict[Key, Sample | None]:
    """Per kernel match key, the run's launch durations."""
    if run.tool == "ncu":
        from triage.compare.ncu_diff import kernel_groups

        return {(match_key(g.name),): sample_of(g.durations)
                for g in kernel_groups(run)}
    return _grouped_samples(run.batches("kernels", columns=["name", "duration_ns"],
                                        dictionary=("name",)), ("name",), "duration_ns",
                            _kernel_key)


def _summary_medians(run: RunData, table: str, keys: Sequence[str],
                     key_of: Callable[[Key], Key] = lambda k: k) -> dict[Key, float]:
    data = run.table(table, columns=[*keys, "median_ns"])
    if data is None:
        return {}
    columns = [data.column(k).to_pylist() for k in [*keys, "median_ns"]]
    return {key_of(tuple(row[:-1])): row[-1] for row in zip(*columns, strict=True)}


def run_kernel_values(run: RunData) -> dict[Key, float]:
    """Per kernel match key, the run's value a side of several runs is tested on: its median
    launch (nsys: robust to a preempted launch), or for ncu its mean launch, the number an ncu
    diff shows per run (ncu replays each launch alone, with no other work to preempt it)."""
    if run.tool == "ncu":
        from triage.compare.ncu_diff import kernel_groups

        return {(match_key(g.name),): mean for g in kernel_groups(run)
                if (mean := g.mean_ns) is not None}
    return _summary_medians(run, "kernel_summary", ("name",), _kernel_key)


def _per_run(values: Iterable[dict[Key, float]]) -> dict[Key, Sample | None]:
    """One sample per key, one value per run that has the key."""
    collected: dict[Key, list[float | None]] = {}
    for run_values in values:
        for key, number in run_values.items():
            collected.setdefault(key, []).append(number)
    return {key: sample_of(numbers) for key, numbers in collected.items()}


class SideSamples:
    """The samples of one side, per kernel and per summary row, as the side's runs give them."""

    def __init__(self, runs: Sequence[RunData], several: bool):
        self.runs, self.several = runs, several
        self.kind = RUNS if several else LAUNCHES

    def kernels(self) -> dict[Key, Sample | None]:
        if self.several:
            return _per_run(run_kernel_values(r) for r in self.runs)
        return launch_kernels(self.runs[0])

    def summary(self, name: str) -> dict[Key, Sample | None]:
        table, keys, summary = LAUNCH_TABLES[name]
        if self.several:
            return _per_run(_summary_medians(r, summary, keys) for r in self.runs)
        run = self.runs[0]
        return _grouped_samples(run.batches(table, columns=[*keys, "duration_ns"],
                                            dictionary=keys), keys, "duration_ns")

    def gpu_totals(self, total: Callable[[RunData], float]) -> Sample | None:
        return sample_of([total(r) for r in self.runs])


def kernels_with_noise(kernels: Sequence[KernelDiff], a: SideSamples,
                       b: SideSamples) -> list[KernelDiff]:
    # each side read and grouped on a thread: pyarrow's work, done without the GIL
    samples_a, samples_b = side_by_side([a.kernels, b.kernels])
    out = []
    for k in kernels:
        found_a = samples_a.get((match_key(k.name),)) if k.a else None
        found_b = samples_b.get((match_key(k.name_b or k.name),)) if k.b else None
        out.append(replace(k, noise=compare(found_a, found_b, a.kind)))
    return out


def _entries_with_noise(entries: Sequence[SummaryChange], keys: Sequence[str],
                        samples_a: dict[Key, Sample | None], samples_b: dict[Key, Sample | None],
                        kind: str) -> tuple[SummaryChange, ...]:
    out = []
    for e in entries:
        key = tuple(e.key[k] for k in keys)
        noise = compare(samples_a.get(key) if e.a else None,
                        samples_b.get(key) if e.b else None, kind)
        out.append(replace(e, noise=noise))
    return tuple(out)


def nsys_with_noise(nsys: NsysDiff, a: SideSamples, b: SideSamples,
                    total: Callable[[RunData], float]) -> NsysDiff:
    """NVTX and API rows with their noise, and the noise of the total GPU time (per-run totals:
    one run per side leaves it unknown)."""
    kind = a.kind
    # side by side: a one-run pair of 1M ranges a side in 0.08-0.11 s, not 0.14-0.17 s
    (nvtx_a, api_a), (nvtx_b, api_b) = side_by_side([
        lambda: (a.summary("nvtx"), a.summary("api")),
        lambda: (b.summary("nvtx"), b.summary("api"))])
    nvtx = _entries_with_noise(nsys.nvtx, LAUNCH_TABLES["nvtx"][1], nvtx_a, nvtx_b, kind)
    api = _entries_with_noise(nsys.api, LAUNCH_TABLES["api"][1], api_a, api_b, kind)
    gpu: GpuChange = replace(nsys.gpu, noise=compare(a.gpu_totals(total), b.gpu_totals(total),
                                                     RUNS))
    return replace(nsys, nvtx=nvtx, api=api, gpu=gpu)


def side_runs(store: Store, side: str) -> tuple[list[RunData], tuple[str, ...]]:
    """The runs of one side, all by one tool (a side is one kind of measurement), and the
    name each was given by."""
    named = side_named(store, side)
    runs = [RunData(store, run_id) for run_id in named]
    tools = sorted({r.tool for r in runs})
    if len(tools) > 1:
        raise UsageError(f"{side!r} names {' and '.join(tools)} runs; the runs of a side must "
                         "come from one tool")
    return runs, tuple(_shown_name(run, named[run.id]) for run in runs)


def _shown_name(run: RunData, given: str) -> str:
    """A run as its side lists it: the name it was given by, unless that is (a prefix of) its
    id, as for a report file the CLI archived: then its report file's name, else a short id."""
    if not run.id.startswith(given.lower()):
        return given
    return run.record.reports[0].name if run.record.reports else run.id[:12]


def with_noise(runs_a: Sequence[RunData], runs_b: Sequence[RunData],
               kernels: Sequence[KernelDiff], nsys: NsysDiff | None
               ) -> tuple[list[KernelDiff], NsysDiff | None]:
    """The kernels and nsys rows with their measured noise."""
    from triage.compare.nsys_diff import gpu_time

    several = len(runs_a) > 1 or len(runs_b) > 1
    a, b = SideSamples(runs_a, several), SideSamples(runs_b, several)
    shown = kernels_with_noise(kernels, a, b)
    if nsys is None:
        return shown, None
    return shown, nsys_with_noise(nsys, a, b, lambda run: gpu_time(run).kernel_ns)
