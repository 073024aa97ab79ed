"""ncu rule results as stored and shown: a rule's own text apart from ncu's failures to run it,
and a rule named by its name and section where ncu left its title empty (issue 19, item 13)."""

from __future__ import annotations

import pytest

from helpers import corpus_file
from triage.archive.store import Store
from triage.compare.ncu_diff import _fired
from triage.compare.rundata import RunData
from triage.views.text import rule_failure

FAILED = "wtzhang23__gpu-ray-tracer__report.ncu-rep"  # ncu 2021.1: rules that could not run


@pytest.fixture
def failed_run(triage, store_dir) -> RunData:
    triage("archive", corpus_file(FAILED), "--label", "rt")
    return RunData(Store(store_dir), "rt")


def test_a_rule_without_a_title_is_named_by_its_name_and_section(triage):
    for name, label in (("mlp_v1", "v1"), ("mlp_v2", "v2")):
        triage("archive", corpus_file(f"armleth__cuda-mlp-inference__{name}.ncu-rep"),
               "--label", label)
    out = triage("diff", "v1", "v2").stdout
    assert ("    rule fired only in B: Uncoalesced Global Accesses, section SourceCounters "
            "(optimization)\n") in out
    assert ("    rule fired only in B: MemoryCacheAccessPattern: L1TEX Global Load Access "
            "Pattern (optimization)\n") in out


def test_ncus_failures_to_run_a_rule_are_kept_apart_from_what_rules_said(triage, failed_run):
    rows = triage.json("query", "select message_type, message, error from rules")
    failures = [r for r in rows if r["message_type"] == "error"]
    assert len(failures) == 8 and all(r["message"] is None for r in failures)
    assert {r["error"] for r in failures} >= {
        "Rule Occupancy returned an error: Metric sm__maximum_warps_per_active_cycle_pct "
        "not found",
        "<built-in function IAction_metric_by_name> returned a result with an error set\n"
        "/root/Documents/NVIDIA Nsight Compute/2021.1.0/Sections/Occupancy.py:44"}
    said = [r for r in rows if r["message_type"] != "error"]
    assert len(said) == 4 and all(r["message"] and r["error"] is None for r in said)


def test_a_rule_that_could_not_run_shows_ncus_reason_not_ncu_reports_internals(failed_run):
    launches = [(r, k) for r, k in zip(failed_run.kernels["report_index"].to_pylist(),
                                        failed_run.kernels["kernel_index"].to_pylist(),
                                        strict=True) if k == 2]
    fired = _fired(failed_run.ncu.rows("rules", launches))
    occupancy = fired[("Occupancy", "")]
    assert occupancy.message is None
    assert rule_failure(occupancy.error) == (
        "could not run: Metric sm__maximum_warps_per_active_cycle_pct not found")
