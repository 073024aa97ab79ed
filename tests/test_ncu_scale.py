"""ncu statistics computed where the metrics are stored (`compare/launch_stats.py`): the same
numbers as reading every metric row into Python, on every corpus pair; and `diff`, `explain`
and `report` of a large derived pair under an address-space cap that reading a run's metrics
into Python objects would exceed."""

from __future__ import annotations

import math
import resource
import subprocess
import sys
from collections import defaultdict
from dataclasses import astuple
from pathlib import Path

import pytest

from helpers import corpus_file, corpus_manifest
from ncu_derive import derive_run
from triage.archive.ingest import archive_files
from triage.archive.store import Store
from triage.compare.diff import diff_runs
from triage.compare.matching import group_kernels
from triage.compare.ncu_diff import kernel_rows
from triage.compare.noise import sample_of
from triage.compare.result import DiffOptions
from triage.compare.rundata import RunData

RELATIVE = 1e-9


def corpus_pairs() -> list[tuple[str, str]]:
    """Each ncu corpus report with the next of its pair group (MANIFEST.csv's pair_group)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for row in corpus_manifest():
        if row["kind"] == "ncu" and row["pair_group"]:
            groups[row["pair_group"]].append(row["file"])
    return [(a, b) for files in groups.values() for a, b in zip(files, files[1:], strict=False)]


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Every report of a corpus pair, archived once: (store, {file: run id})."""
    root = tmp_path_factory.mktemp("pairs") / "store"
    files = sorted({f for pair in corpus_pairs() for f in pair})
    results = archive_files(root, [str(corpus_file(f)) for f in files])
    return root, {f: r.id for f, r in zip(files, results, strict=True)}


Values = dict[tuple[int, int], dict[str, tuple]]


def python_values(run: RunData) -> Values:
    """The reference's input: every metric row of the run read into Python, per launch."""
    values: Values = {}
    for row in run.table("metrics").to_pylist():
        values.setdefault((row["report_index"], row["kernel_index"]), {})[row["name"]] = (
            row["value"] if row["value"] is not None else row["text"], row["unit"])
    return values


def python_means(values: Values, launches: list[tuple[int, int]]) -> dict[str, tuple]:
    """The reference: the mean over these launches of each metric's numbers (else the first
    launch's text), the first launch's unit (what `explain` and `diff` computed before the
    statistics moved into DuckDB)."""
    found: dict[str, list[tuple]] = defaultdict(list)
    for launch in launches:
        for name, pair in values.get(launch, {}).items():
            found[name].append(pair)
    out = {}
    for name, pairs in found.items():
        numbers = [v for v, _u in pairs if isinstance(v, float)]
        texts = [v for v, _u in pairs if isinstance(v, str)]
        out[name] = (sum(numbers) / len(numbers) if numbers else texts[0] if texts else None,
                     pairs[0][1])
    return out


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RELATIVE)
    return a == b


def assert_same_means(mine: dict[str, tuple], reference: dict[str, tuple], where: str) -> None:
    assert mine.keys() == reference.keys(), where
    wrong = {n: (mine[n], reference[n]) for n in reference
             if not (same(mine[n][0], reference[n][0]) and mine[n][1] == reference[n][1])}
    assert not wrong, f"{where}: {list(wrong.items())[:3]}"


def test_the_corpus_has_pairs_to_compare():
    assert len(corpus_pairs()) >= 8


@pytest.mark.parametrize("pair", corpus_pairs(), ids="|".join)
def test_kernel_statistics_equal_the_python_reference_on_every_corpus_pair(corpus_store, pair):
    root, runs = corpus_store
    store = Store.open(root)
    for file in pair:
        run = RunData(store, runs[file])
        values = python_values(run)
        groups = [tuple(g.launches) for g in group_kernels(kernel_rows(run))]
        stats = run.ncu.stats(groups, spread=True)
        for index, group in enumerate(groups):
            reference = python_means(values, list(group))
            assert_same_means(stats.raw(index), reference, f"{file} kernel {index}")
            for name, stat in stats.of(index).items():
                numbers = [v for v, _u in (values.get(launch, {}).get(name, (None, None))
                                           for launch in group) if isinstance(v, float)]
                expected = sample_of(numbers)
                assert (stat.sample() is None) == (expected is None), name
                if expected is not None:
                    got = stat.sample()
                    # the quartiles themselves (their difference, the IQR, of two values a few
                    # ulps apart is all rounding)
                    assert all(same(x, y) for x, y in zip(
                        [*astuple(got.spread), *got.values],
                        [*astuple(expected.spread), *expected.values], strict=True)), name


@pytest.mark.parametrize("pair", corpus_pairs(), ids="|".join)
def test_diff_values_equal_the_python_means_of_the_paired_launches(corpus_store, pair):
    root, runs = corpus_store
    store = Store.open(root)
    result = diff_runs(store, runs[pair[0]], runs[pair[1]], DiffOptions(show_all=True))
    sides = [RunData(store, runs[f]) for f in pair]
    groups = [{g.name: g for g in group_kernels(kernel_rows(run))} for run in sides]
    values = [python_values(run) for run in sides]
    compared = 0
    for kernel in result.kernels:
        if kernel.match != "matched" or not kernel.paired:
            continue
        a, b = groups[0][kernel.name], groups[1][kernel.name_b or kernel.name]
        reference = [python_means(found, group.launches[:kernel.paired])
                     for found, group in zip(values, (a, b), strict=True)]
        for section in kernel.sections:
            for metric in section.metrics:
                for value, means in ((metric.a, reference[0]), (metric.b, reference[1])):
                    assert same(value, means.get(metric.name, (None, None))[0]), metric.name
                    compared += 1
    assert compared or not any(k.match == "matched" for k in result.kernels)


CHILD = """
import sys
from triage.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="triage", standalone_mode=False)
except SystemExit as done:
    if done.code not in (None, 0, 3, 4, 5):
        raise
status = open("/proc/self/status").read()
sys.stderr.write(next(l for l in status.splitlines() if l.startswith("VmPeak")).split()[1])
"""
# The path before, under the same cap: the small diff (the same start), then every metric row
# of one large run read into Python.
ROWS = """
import sys
from triage.archive.store import Store
from triage.cli import cli
from triage.compare.rundata import RunData
store, a, b, large = sys.argv[1:]
try:
    cli.main(["--store", store, "diff", a, b, "--json"], prog_name="triage",
             standalone_mode=False)
except SystemExit:
    pass
values = {}
for row in RunData(Store.open(store), large).table("metrics").to_pylist():
    values.setdefault((row["report_index"], row["kernel_index"]), {})[row["name"]] = (
        row["value"], row["unit"])
"""


def capped(args: list[str], cap_bytes: int | None = None,
           script: str = CHILD) -> subprocess.CompletedProcess:
    def limit() -> None:
        if cap_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
    return subprocess.run([sys.executable, "-c", script, *args], preexec_fn=limit,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=300)


def test_large_runs_are_compared_without_reading_their_metrics_into_python(tmp_path):
    """A pair of runs of 900,000 metric values each (a 90 MB full-set report) within 200 MB
    more address space than the diff of a pair of one corpus report's size (here it takes 30
    MB more); under that cap, one of those runs' metric rows read into Python (the path
    before, 370 MB more here) fails."""
    report = corpus_file("spymaster2h__spyinfer__report.ncu-rep")
    store = tmp_path / "store"
    small = [derive_run(store, report, 1, side, scale=scale) for side, scale in
             (("a", 1.0), ("b", 1.1))]
    large = [derive_run(store, report, 30, side, scale=scale) for side, scale in
             (("a", 1.0), ("b", 1.1))]
    assert RunData(Store.open(store), large[1]).record.tables["metrics"].rows > 800_000
    where = ["--store", str(store)]
    baseline = capped([*where, "diff", *small, "--json"])
    assert baseline.returncode == 0, baseline.stderr
    cap = (int(baseline.stderr.strip().splitlines()[-1]) + 200 * 1024) * 1024
    rows = capped([str(store), *small, large[1]], cap, ROWS)
    assert rows.returncode != 0 and "MemoryError" in rows.stderr, rows.stderr[-2000:]
    for args in (["diff", *large, "--json"], ["explain", large[1], "--json"],
                 ["report", *large, "-o", str(tmp_path / "r.html")]):
        done = capped([*where, *args], cap)
        assert done.returncode == 0, f"{args[0]}: {done.stderr[-2000:]}"
