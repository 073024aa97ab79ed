"""`triage explain` names the bound as ncu's SOLBottleneck rule does (issue 34, item 4).

The rule's thresholds are checked on the cases the issue found (ties near peak, the balanced
band, 80.6 against 84.6) and on every message ncu stored in the corpus.
"""

from __future__ import annotations

import pytest

from triage.archive.ingest import archive_files
from triage.archive.store import Store
from triage.compare.explain_sol import (BALANCED, FROM_REPORT, FROM_THRESHOLDS, HIGH,
                                        HIGH_COMPUTE, HIGH_MEMORY, LATENCY, SMALL_GRID,
                                        SolVerdict, decide, rule_verdict, stored_verdict)
from triage.compare.rundata import RunData



@pytest.mark.parametrize("sm, mem, waves, outcome, bound", [
    (87.0, 87.0, 10, HIGH, "compute"),        # a tie near peak is compute (sm >= mem)
    (98.0, 98.0, 10, HIGH, "compute"),
    (83.13, 83.13, 46.55, HIGH, "compute"),   # naive SGEMM: the LSU pipe is an SM pipe
    (80.6, 84.6, 10, HIGH, "memory"),         # near peak, memory higher: not "balanced"
    (84.6, 80.6, 10, HIGH, "compute"),
    (64.75, 64.75, 10, BALANCED, "balanced"),  # a tie in the band: balanced, not memory
    (70.0, 60.01, 10, BALANCED, "balanced"),  # 9.99 points apart
    (70.0, 60.0, 10, HIGH_COMPUTE, "compute"),  # 10 points apart: the higher side
    (60.0, 79.99, 10, HIGH_MEMORY, "memory"),
    (59.99, 59.99, 10, LATENCY, "latency"),
    (59.99, 10.0, 0.99, SMALL_GRID, "latency"),
    (30.0, 20.0, None, LATENCY, "latency"),   # waves not collected: no Small Grid
])
def test_the_rules_thresholds(sm, mem, waves, outcome, bound):
    verdict = rule_verdict(sm, mem, waves)
    assert (verdict.outcome, verdict.bound, verdict.source) == (outcome, bound, FROM_THRESHOLDS)
    assert verdict.near_peak == (outcome == HIGH)


def test_every_stored_message_of_the_corpus_is_read(corpus, tmp_path):
    """Every SOLBottleneck message ncu stored in a corpus report (ncu 2019 to 2026, with and
    without titles) reads as an outcome; near peak, the message names the side from 2021 on."""
    reports = sorted(p for p in (corpus / "ncu").iterdir() if p.is_file())
    results = archive_files(tmp_path / "store", [str(p) for p in reports])
    store = Store.open(tmp_path / "store")
    seen = set()
    for result in results:
        rules = RunData(store, result.id).table(
            "rules", ["rule_id", "message_type", "title", "message"])
        for row in (rules.to_pylist() if rules is not None else []):
            if row["rule_id"] != "SOLBottleneck" or row["message_type"] == "error":
                continue
            verdict = stored_verdict([(row["rule_id"], row["title"], row["message"])])
            assert verdict is not None and verdict.bound, row
            assert verdict.source == FROM_REPORT
            seen.add(verdict.outcome)
    assert seen == {SMALL_GRID, LATENCY, HIGH_COMPUTE, HIGH}


def test_a_2019_near_peak_message_names_no_side():
    """ncu 2019's High Throughput message names no section: the side is the later rule's."""
    message = ("The kernel is utilizing greater than 80.0% of the available compute or memory "
               "performance of the device. To further improve performance, work will likely "
               "need to be shifted from the most utilized to another unit.")
    stored = stored_verdict([("SOLBottleneck", None, message)])
    assert stored == SolVerdict(HIGH, None, FROM_REPORT)
    assert decide(stored, rule_verdict(81, 90, 4)) == SolVerdict(HIGH, "memory", FROM_REPORT)
    assert decide(None, rule_verdict(81, 90, 4)) == SolVerdict(HIGH, "memory", FROM_THRESHOLDS)
    assert decide(stored_verdict([("Occupancy", None, message)]), None) is None
