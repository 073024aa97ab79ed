"""The verdict in the hard cases (issue: right in every hard case), on real corpus reports.

A default is not a record: where a report records neither a setting nor the command line that
would have set it, the profiler's documented default is shown to the reader but graded as
unknown, so two such runs are never "known the same" on an invalidating field."""

from __future__ import annotations

import pytest


# Two ncu reports of one program that record no command line and no --cache-control or
# --replay-mode (ncu 2021.2 kept neither in these reports).
NO_COMMAND = ("bwd29__self-join-MiSTIC__nodeCalc_profile.out.ncu-rep",
              "bwd29__self-join-MiSTIC__nodeCalc_profile10.out.ncu-rep")
# An ncu report whose command line is recorded without those options: ncu's defaults applied.
WITH_COMMAND = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
                "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")


@pytest.fixture
def no_command(archived):
    return archived(*((name,) for name in NO_COMMAND))


def drift_of(triage, a: str, b: str) -> dict:
    return {item["field"]: item for item in triage.json("diff", a, b)["drift"]}


def test_a_default_nothing_recorded_is_unknown_and_caps_the_verdict(triage, no_command):
    drift = drift_of(triage, *no_command)
    for field, default in (("settings.cache_control", "all"), ("settings.replay_mode", "kernel")):
        item = drift[field]
        assert (item["a"], item["b"], item["state"], item["severity"]) == (
            None, None, "unrecorded", "caution")
        assert item["assumed"] == {"a": default, "b": default, "default_of": "ncu"}
    assert triage.json("diff", *no_command)["verdict"] != "comparable"


def test_every_format_says_what_the_default_would_be(triage, no_command):
    text = triage("diff", *no_command).stdout
    assert "settings.cache_control (ncu's default would be all)" in " ".join(text.split())
    markdown = triage("diff", *no_command, "--format", "md").stdout
    assert "ncu's default would be all" in " ".join(markdown.split())
    shown = triage("show", no_command[0]).stdout.splitlines()
    assert "  cache_control    not recorded (ncu's default would be all)" in shown
    assert "  clock_control    base   [report]" in shown


def test_a_recorded_command_line_makes_the_default_a_record(triage, archived):
    a, b = archived(*((name,) for name in WITH_COMMAND))
    drift = drift_of(triage, a, b)
    assert not any("assumed" in item for item in drift.values())
    assert "settings.cache_control" not in drift  # the same on both sides: not listed
    shown = triage("show", a).stdout
    assert "cache_control    all   [default]" in shown


# Profiled with no section: launch statistics only (grid, block, registers, occupancy limits:
# known before the kernel ran), every counter absent. Nothing was measured.
LAUNCH_ONLY = "AlpriElse__cs599k__silu-2025-04-19-v1_nosections.ncu-rep"


def test_launch_statistics_alone_are_no_data(triage, archived):
    (run,) = archived((LAUNCH_ONLY,))
    assert triage.json("show", run)["notices"] == [
        "3 of 3 results carry no metric values (the profiler collected nothing for them)"]
    diff = triage.json("diff", run, run)
    assert diff["verdict"] == "invalid"  # no matched kernel has data on both sides
    assert all(k["no_data"] == ["a", "b"] for k in diff["kernels"])
    explained = triage.json("explain", run)
    assert all(k["no_data"] and k["conclusion"] is None for k in explained["kernels"])


def test_a_gate_with_nothing_to_judge_never_passes():
    from triage.compare.gate import regression_gate
    from triage.compare.result import GATE_NOTHING, DiffOptions

    gate = regression_gate("comparable", (), None, DiffOptions(max_slowdown_pct=5,
                                                                   gate_ncu=True))
    assert gate is not None and (gate.judged, gate.passed, gate.reason) == (
        False, False, GATE_NOTHING)


def test_a_capture_and_its_own_export_agree_on_what_was_traced(triage):
    """The demo's before.sqlite is `nsys export` of before.nsys-rep: the export records no
    settings, but its tables prove which domains were traced (derived), and that agrees with
    the trace set the report records."""
    from triage.demo import demo_file

    report, export = (triage.json("archive", demo_file(f"before.{suffix}"))[0]["id"]
                      for suffix in ("nsys-rep", "sqlite"))
    shown = triage.json("show", export)
    assert (shown["settings"]["trace"], shown["settings_source"]["trace"]) == ("nvtx,osrt",
                                                                               "derived")
    assert shown["schema_version"] == 4 and triage.json("show", report)["schema_version"] == 4
    assert "  trace            nvtx,osrt   [derived]" in triage("show", export).stdout
    fields = {item["field"] for item in triage.json("diff", report, export)["drift"]}
    assert "settings.trace" not in fields


def test_a_derived_trace_set_is_what_was_traced_at_least(triage):
    """A domain with no events leaves no table: a derived set agrees with a recorded set that
    holds it whole, and differs from one that lacks a domain it proves."""
    import copy

    from helpers import typed
    from triage.compare.drift import grade
    from triage.demo import demo_file

    export = triage.json("show", triage.json("archive", demo_file("before.sqlite"))[0]["id"])
    recorded = copy.deepcopy(export)
    recorded["settings_source"]["trace"] = "report"
    for traced, state in (("cuda,nvtx,osrt", "same"), ("nvtx", "different")):
        recorded["settings"]["trace"] = traced
        item = next(i for i in grade(typed(export), typed(recorded))
                    if i.field == "settings.trace")
        assert item.state == state, traced
