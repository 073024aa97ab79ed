"""How many ncu metric rows say "one side only" across profiler versions, without and with the
metric map (compare/data/metric_map.json): the table in docs/comparing.md.

No before/after family of the corpus crosses an ncu version (each pair_group of MANIFEST.csv is
one version), so the cross-version pairs are made: every ncu report of the corpus is archived,
each version is represented by its report whose sections show the most metrics, and each
version's report is diffed (`triage diff --all --json`, first kernel against first kernel,
`--pair`) against the next version's, and, for the total, against every other version's. A row
is "one side only" when its status is only_a or only_b in a section both runs collected; "before"
is the same diff with the map emptied.

    TRIAGE_CORPUS=../shared/corpus python benchmarks/cross_version_renames.py
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

from click.testing import CliRunner

from triage.cli import cli
from triage.compare.metric_map_build import corpus_reports
from triage.compare.renames import MetricMap, version_key

CORPUS = os.environ.get("TRIAGE_CORPUS", str(Path(__file__).resolve().parents[2] / "shared"
                                             / "corpus"))
FULLEST = ("select run_id, count(distinct section_id || '/' || metric_name) n from sections "
           "group by run_id")
FIRST = "select run_id, name from kernels where kernel_index = 0 and report_index = 0"


def run_cli(*args: str) -> object:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    return json.loads(result.stdout)


def representatives(store: str) -> dict[str, tuple[str, str, str]]:
    """ncu version -> (run id, its report's file name, its first kernel), the fullest run."""
    fullest: dict[str, tuple[int, str, str, str]] = {}
    size = {r["run_id"]: r["n"] for r in run_cli("--store", store, "query", FULLEST)}
    first = {r["run_id"]: r["name"] for r in run_cli("--store", store, "query", FIRST)}
    for run in run_cli("--store", store, "ls", "--tool", "ncu"):
        version = run["tool_version"] or "not recorded"
        if run["id"] in first and size.get(run["id"], 0) > fullest.get(version, (0,))[0]:
            fullest[version] = (size[run["id"]], run["id"], run["report_names"], first[run["id"]])
    return {v: f[1:] for v, f in sorted(fullest.items(), key=lambda i: version_key(i[0]))}


def one_side_rows(store: str, a: tuple[str, str, str], b: tuple[str, str, str]
                  ) -> tuple[int, int]:
    """(rows on one side only, rows paired across a rename) of the two runs' diff."""
    diff = run_cli("--store", store, "diff", a[0], b[0], "--all", "--pair", f"{a[2]}={b[2]}")
    assert isinstance(diff, dict)
    rows = [m for k in diff["kernels"] for s in k.get("sections") or []
            if s["reason"] not in ("section.only_a", "section.only_b") for m in s["metrics"]]
    return (sum(m["status"] in ("only_a", "only_b") for m in rows),
            sum("renamed" in m for m in rows))


def counted(store: str, pairs: list[tuple], empty_map: bool) -> list[tuple[int, int]]:
    patch = mock.patch("triage.compare.ncu_diff.metric_map", lambda: MetricMap.of(())) \
        if empty_map else contextlib.nullcontext()
    with patch:
        return [one_side_rows(store, a, b) for a, b in pairs]


def main() -> None:
    with tempfile.TemporaryDirectory() as store:
        for path in corpus_reports(CORPUS):
            CliRunner().invoke(cli, ["--store", store, "archive", path], catch_exceptions=False)
        runs = representatives(store)
        versions = list(runs)
        nextto = list(zip(versions, versions[1:], strict=False))
        every = list(itertools.combinations(versions, 2))
        pairs = [(runs[a], runs[b]) for a, b in nextto + every]
        before, after = counted(store, pairs, True), counted(store, pairs, False)
    print("| A (ncu) | B (ncu) | A report | B report | one side only, before | after | "
          "paired across a rename |")
    print("|---|---|---|---|---:|---:|---:|")
    rows = zip(nextto, pairs, before, after, strict=False)  # the first len(nextto) pairs
    for (va, vb), (ra, rb), (old, _), (new, renamed) in rows:
        print(f"| {va} | {vb} | {ra[1]} | {rb[1]} | {old} | {new} | {renamed} |")
    rest = len(nextto)
    total = (sum(b[0] for b in before[rest:]), sum(a[0] for a in after[rest:]),
             sum(a[1] for a in after[rest:]))
    print(f"| **all {len(every)} pairs of versions** | | | | {total[0]} | {total[1]} | "
          f"{total[2]} |")


if __name__ == "__main__":
    main()
