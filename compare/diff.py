"""`triage diff A B`: the drift verdict first, then what changed.

Returns a typed `DiffResult` (compare/result.py); the CLI and the report templates render it,
and `DiffResult.to_json()` is the `diff --json` document. A side of several runs is read as
one: every number the median over its runs (compare/aggregate.py); drift, kernel matching and
the layout of ncu sections come from each side's first run.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.archive.model import RunRecord
from triage.archive.store import Store
from triage.compare.aggregate import median_rows
from triage.compare.drift import (INFO, INVALIDATES, UNRECORDED, drift_item, grade,
                                  kernel_set_drift, verdict)
from triage.compare.matching import match_key
from triage.compare.ncu_diff import diff_ncu, kernel_groups
from triage.compare.nsys_diff import (Row, diff_nsys, kernel_rows_of, nvtx_drift,
                                      summary_kernels)
from triage.compare.result import (MIXED_TOOLS, SAME_RUN, DiffOptions, DiffResult, DriftItem, Gate,
                                   KernelDiff, NsysDiff)
from triage.compare.gate import regression_gate
from triage.compare.repeats import failed_tries, side_runs, with_noise
from triage.compare.rundata import RunData
from triage.base.errors import TriageError, UsageError

if TYPE_CHECKING:  # bench diffs only: their modules (archive, capture) stay unloaded otherwise
    from triage.compare.accounts import Accounts
    from triage.compare.bench import BenchDiff


def _ncu_summary(run: RunData) -> list[Row]:
    """An ncu run's kernels as an nsys-style ranking: mean, total and count per name."""
    rows = []
    for group in kernel_groups(run):
        numbers = [d for d in group.durations if d is not None]
        rows.append({"name": group.name, "instances": len(group.durations),
                     "total_ns": sum(numbers) if numbers else None,
                     "avg_ns": statistics.fmean(numbers) if numbers else None,
                     "median_ns": None, "min_ns": min(numbers, default=None),
                     "max_ns": max(numbers, default=None), "share": None})
    return rows


def _summary_rows(runs: Sequence[RunData]) -> list[Row]:
    """A side's kernel ranking (the median of its runs)."""
    if runs[0].tool == "nsys":
        return kernel_rows_of(runs)
    return median_rows([_ncu_summary(run) for run in runs], lambda r: match_key(r["name"]),
                       ("instances",))


def _check_filters(opts: DiffOptions, run_a: RunData, run_b: RunData,
                   kernels: list[KernelDiff]) -> None:
    """Filters that match nothing, or do not apply, are said instead of printing an empty diff."""
    ncu = run_a.tool == run_b.tool == "ncu"
    if not ncu and (opts.sections or opts.metric):
        raise UsageError("--section and --metric filter ncu diffs; these runs are "
                         f"{run_a.tool} and {run_b.tool}")
    if opts.kernel and not kernels:
        raise TriageError(f"no kernel of either run matches --kernel {opts.kernel!r}; "
                          "`triage diff A B` lists them")
    matched = [k for k in kernels if k.match == "matched"]  # only these have sections
    if matched and opts.sections and not any(k.sections for k in matched):
        raise TriageError(f"no section named {', '.join(opts.sections)} in these runs; "
                          "`triage show RUN` lists the sections each run collected")
    if matched and opts.metric and not any(s.metrics or s.unchanged for k in matched
                                           for s in k.sections):
        raise TriageError(f"no metric the sections of either run show matches --metric "
                          f"{opts.metric!r}; `triage query \"select distinct metric_name, "
                          "metric_label from sections\"` lists them")


def _bench_pair(runs_a: Sequence[RunData], runs_b: Sequence[RunData]) -> BenchDiff | None:
    """Two sides of bench runs compared (None when neither side is one); a bench run against a
    profile is refused: the workload's numbers and a profiler's are not one measurement."""
    tools = runs_a[0].tool, runs_b[0].tool
    if "bench" not in tools:
        return None
    if tools[0] != tools[1]:
        raise UsageError(f"A is {tools[0]} and B is {tools[1]}: a bench run compares with bench "
                         "runs: `triage diff BENCH_A BENCH_B`")
    from triage.compare.bench import diff_bench  # with the bench modules, for bench runs only

    return diff_bench(runs_a, runs_b)


def _accounts(bench: BenchDiff, ref_a: str, runs_a: Sequence[RunData], ref_b: str,
              runs_b: Sequence[RunData]) -> Accounts | None:
    """What each side's profiles account for of the bench change (compare/accounts.py)."""
    from triage.compare.accounts import accounts, side_profile

    return accounts(bench, side_profile(ref_a, runs_a), side_profile(ref_b, runs_b))


def diff_runs(store: Store, ref_a: str, ref_b: str, opts: DiffOptions | None = None,
              files: tuple[str | None, str | None] = (None, None),
              rebase: bool = True) -> DiffResult:
    """Compare two runs: verdict, drift, kernels (and nsys summaries for nsys pairs). `files`:
    the report file name a side was given as, to name it by (the CLI found its run). With
    `rebase`, the gate judges B against the newest run accepted between A and B, if any
    (compare/accepted.py)."""
    opts = opts or DiffOptions()
    (runs_a, names_a), (runs_b, names_b) = side_runs(store, ref_a), side_runs(store, ref_b)
    run_a, run_b = runs_a[0], runs_b[0]  # each side's first run: drift and detail
    # fields unknown on both sides stay: unknown is never "same"
    items: list[DriftItem] = [i for i in grade(run_a.record, run_b.record) if i.state != "same"]
    if run_a.id == run_b.id:  # e.g. a label and an id that name one run
        # a run is the same as itself even where it recorded nothing
        items = [i for i in items if i.state != UNRECORDED]
        items.append(drift_item("run", SAME_RUN, run_a.id[:12], run_b.id[:12], INFO,
                                "A and B are the same run: nothing below can differ"))
    nsys: NsysDiff | None = None
    bench = _bench_pair(runs_a, runs_b)
    explained = _accounts(bench, ref_a, runs_a, ref_b, runs_b) if bench is not None else None
    kernels: list[KernelDiff]
    if bench is not None:
        kernels = []
    elif run_a.tool == run_b.tool == "ncu":
        kernels, found = diff_ncu(runs_a, runs_b, opts)
        items += found
    else:
        if run_a.tool == run_b.tool == "nsys":
            kernels, nsys = diff_nsys(runs_a, runs_b, opts)
            items += [i for i in (nvtx_drift(run_a, run_b),) if i.state != "same"]
        else:
            # ncu vs nsys: two instruments. Kernel names and launches are common; their
            # durations are not one measurement, so the verdict is invalid (shown, not judged);
            # ncu profiles the launches it was told to, so no kernel is paired by a guess
            kernels = summary_kernels(_summary_rows(runs_a), _summary_rows(runs_b), opts)
            items.append(drift_item(
                "tool", MIXED_TOOLS, run_a.tool, run_b.tool, INVALIDATES,
                "different instruments: ncu times each kernel replayed alone, clocks locked and "
                "caches flushed; nsys times the real execution. Their durations are not the "
                "same measurement (kernel names and launches are shown for reference)"))
        # of every kernel: --kernel narrows only the view
        items += kernel_set_drift(kernels, launches=nsys is not None)
        kernels = [k for k in kernels if opts.kernel_shown(k.name, k.name_b)]
    _check_filters(opts, run_a, run_b, kernels)
    kernels, nsys = with_noise(runs_a, runs_b, kernels, nsys)
    grade_ = verdict(items)
    gate = regression_gate(grade_, kernels, nsys, opts, bench)
    if gate is not None and rebase:
        gate = _accepted_gate(store, [r.record for r in runs_a], runs_b[-1].record, ref_b,
                              opts) or gate
    return DiffResult(run_a.record, run_b.record, grade_, tuple(items), tuple(kernels), nsys,
                      opts, sides=(tuple(r.id for r in runs_a), tuple(r.id for r in runs_b)),
                      gate=gate, refs=(ref_a, ref_b), files=files, side_names=(names_a, names_b),
                      failed=(failed_tries(store, ref_a), failed_tries(store, ref_b)),
                      bench=bench, accounts=explained)


def _accepted_gate(store: Store, side_a: list[RunRecord], newest_b: RunRecord, ref_b: str,
                   opts: DiffOptions) -> Gate | None:
    """The gate judged against the newest run accepted after A's runs and not after B's
    (`triage accept`): an intended step is not failed again. None when there is none."""
    from triage.compare.accepted import accepted_runs, capture_key, newest_between

    newest_a = max(side_a, key=capture_key)
    found = newest_between(accepted_runs(store, newest_b), newest_a, newest_b)
    if found is None or found.record.id in {r.id for r in side_a}:
        return None
    gate = diff_runs(store, found.record.id, ref_b, opts, rebase=False).gate
    return replace(gate, accepted=found.latest) if gate is not None else None
