"""`triage bench --interleave --against RUN -- CMD`: the baseline measured again, run for run
with the candidate, so that the machine's drift reaches both alike.

Two series made minutes apart on a shared machine differ by more than the load of the moment
than by many a change worth finding (benchmarks/bench_false_positives.py: two series of one
program failed the gate 166/200 times in one sitting, 0/200 in the next). So instead of
comparing new runs with a baseline recorded earlier, the baseline run's recorded command is run
again, as `triage rerun` runs it (the same refusals, working directory and replayed
environment: compare/reproduce.py), alternately with the new command in ABBA order
(capture/bench.py `side_order`), each side with the same warm-ups. Both sides are archived as
bench runs: the baseline side as a rerun of the baseline (rerun_of, its investigation), the
candidate naming it `interleaved_with`; `diff` of the two then tests them pair by pair
(compare/paired.py), as `--repeat auto` decides here, each look at the corrected confidence.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from dataclasses import replace

from triage.archive.bench import bench_sides, recorded_series
from triage.archive.store import Store
from triage.base.errors import UsageError
from triage.capture.bench import WALL_TIME, BenchRequest, BenchSample
from triage.compare.bench import AgainstCheck, BenchOutcome, per_look_confidence
from triage.compare.paired import fewest_pairs
from triage.compare.reproduce import (HERE, ForeignRun, RerunRequest, plan, replay_request,
                                      replay_tree)

BASELINE, CANDIDATE = 0, 1  # the sides' order in a pair that starts the series


def bench_interleaved(request: BenchRequest, against: str, looks: int,
                      on_run: Callable[[int, int, list[BenchSample]], None],
                      on_warning: Callable[[str], None], yes: bool = False,
                      confirm: Callable[[ForeignRun], bool] | None = None) -> BenchOutcome:
    """Run the --against bench run's recorded command and `request`'s alternately, archive
    both, and say how the candidate compares, pair by pair. `yes`/`confirm`: as `rerun`'s,
    for a baseline that came from another store."""
    from triage.compare.repeats import side_refs

    refuse_undecidable(request.repeat, looks, request.auto)
    store = Store.open(request.capture.store)
    named = side_refs(store, against)
    if len(named) != 1:
        raise UsageError(f"--interleave measures one baseline run again: --against {against} "
                         f"names {len(named)} runs; name one (its label or id)")
    ready = plan(store, RerunRequest(named[0], store=request.capture.store, yes=yes,
                                     confirm=confirm))
    original = ready.original
    if original.tool != "bench":
        raise UsageError(f"--interleave --against {against}: run {original.id[:12]} is a "
                         f"{original.tool} run; name a bench run to measure again")
    metric = request.metrics[0].name if request.metrics else WALL_TIME
    with replay_tree(store, original, HERE, on_warning) as cwd:
        capture = replay_request(ready, cwd, store=request.capture.store)
        recorded = recorded_series(original, capture)
        if metric not in {WALL_TIME, *(m.name for m in recorded.metrics)}:
            raise UsageError(f"--against {against}: its bench run did not measure {metric}; "
                             "bench with the metrics it measured")
        baseline = replace(recorded, repeat=request.repeat, warmup=request.warmup,
                           auto=request.auto, budget=request.budget,
                           investigation=original.capture.investigation
                           if original.capture else None)
        check = AgainstCheck(against, metric, (), looks, interleaved=True)
        runs = bench_sides((baseline, request), on_run, on_warning, check.decided_pairs)
    return BenchOutcome(runs[CANDIDATE], check, baseline=runs[BASELINE])


def refuse_undecidable(pairs: int, looks: int, auto: bool) -> None:
    """Refuse, before anything runs, a series too short for the paired test ever to decide
    (it needs 8 pairs at 99%, more at each look's corrected confidence): it would run every
    pair and end "unknown". The message names the least that can decide."""
    if pairs >= fewest_pairs(per_look_confidence(looks)):
        return
    if auto:
        least = next(m for m in count(pairs) if fewest_pairs(per_look_confidence(m)) <= m)
        raise UsageError(f"--interleave --repeat auto --max-runs {pairs}: the paired test "
                         f"cannot decide within {pairs} pairs; use --max-runs {least} or more")
    least = fewest_pairs(per_look_confidence(looks))
    raise UsageError(f"--interleave --repeat {pairs}: the paired test needs at least {least} "
                     f"pairs to decide; use --repeat {least} or more")
