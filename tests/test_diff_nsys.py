"""`triage diff` of nsys runs (corpus families, the project's own captures) and of mixed runs."""

from __future__ import annotations

import copy

import pytest

import shutil
import sqlite3

from helpers import corpus_file, require_tool, typed
from triage.compare.drift import DRIFT_RULES, grade
from triage.demo import demo_file


def archived(triage, *names) -> list[str]:
    return [triage.json("archive", corpus_file(n))[0]["id"] for n in names]


def test_yandong_pair_ranks_kernels_by_time_changed(triage):
    require_tool("nsys")
    a, b = archived(triage, "Yandong-Luo__parallel_diff_evolution__report3.qdrep",
                    "Yandong-Luo__parallel_diff_evolution__report7.qdrep")
    diff = triage.json("diff", a, b)
    assert diff["verdict"] == "caution"
    # 124 -> 70 launches of gemv2T...: the same caution an ncu pair gets; the renamed
    # UpdateParameter<64> is named as info
    found = [d for d in diff["drift"] if d["state"] != "unrecorded"]
    assert [(d["field"], d["severity"]) for d in found] == [
        ("kernels.launches", "caution"), ("kernels.renamed", "info")]
    assert "gemv2T_kernel_val" in found[0]["why"]
    renamed = found[1]  # whole names in --json; the text view clips them
    assert renamed["kernels"]["a"][0].startswith("void cudaprocess::UpdateParameter<64>(")
    assert renamed["kernels"]["a"][0] in renamed["why"] and "…" not in renamed["why"]
    assert "cudaprocess::UpdateParam…" in " ".join(triage("diff", a, b).stdout.split())
    ranking = diff["kernels"]  # the one ranking (format 1 repeated it as nsys.kernels)
    deltas = [abs(e["delta_total_ns"]) for e in ranking]
    assert deltas == sorted(deltas, reverse=True) and "kernels" not in diff["nsys"]
    assert ranking[0]["name"].startswith("void cudaprocess::UpdateVecParamBasedClusterData<64>")
    assert {e["match"] for e in ranking} == {"matched"}
    assert {(e["op"], e["kind"]) for e in diff["nsys"]["memops"]} >= {("memcpy", "HtoD"),
                                                                      ("memcpy", "DtoH")}
    assert diff["nsys"]["gpu"]["a"]["idle_ns"] > 0 and diff["nsys"]["api"]
    kernel = next(k for k in diff["kernels"] if k["match"] == "matched")
    assert {"duration_ns", "total_ns", "launches"} <= set(kernel["a"])


def test_yandong_renamed_kernel_pairs_by_launch_order(triage):
    """UpdateParameter<64> gained two parameters between the runs: one kernel, before/after,
    named so that the two signatures can be told apart in every format."""
    require_tool("nsys")
    a, b = archived(triage, "Yandong-Luo__parallel_diff_evolution__report3.qdrep",
                    "Yandong-Luo__parallel_diff_evolution__report7.qdrep")
    diff = triage.json("diff", a, b)
    kernel = next(k for k in diff["kernels"] if "UpdateParameter<64>" in k["name"])
    assert kernel["match"] == "matched" and kernel["matched_by"] == "launch_order"
    assert kernel["name"].endswith("<192>*)") and kernel["name_b"].endswith("<192>*, int*, float*)")
    assert kernel["launches"] == {"a": 60, "b": 33, "paired": None}
    assert (kernel["a"]["launches"], kernel["b"]["launches"]) == (60, 33)
    assert not [k for k in diff["kernels"] if k["match"] != "matched"]
    text = triage("diff", a, b).stdout
    assert "paired by launch order, a guess: void cudap…ta<192>*) -> void cudap…ta<192>*, int*" \
        in text
    markdown = triage("diff", a, b, "--format", "md").stdout
    row = next(line for line in markdown.splitlines() if line.startswith("| ") and
               "UpdateParameter" in line)
    assert "<192>*)` →" in row and "int*, float*)`" in row


def spaced_copy(source, target, name: str):
    """A real nsys export whose kernel's demangled name is written as another tool writes it."""
    shutil.copyfile(source, target)
    with sqlite3.connect(target) as db:
        db.execute("UPDATE StringIds SET value = ? WHERE id IN "
                   "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)", (name,))
    return target


def test_kernel_names_match_whatever_the_spacing(triage, tmp_path):
    original = corpus_file("0x822a5b87__test-cuda__report2.sqlite")
    tight = spaced_copy(original, tmp_path / "tight.sqlite",
                        "add_parallel(const float*, const float*, float*, int)")
    a = archived(triage, "0x822a5b87__test-cuda__report1.sqlite")[0]
    b = triage.json("archive", tight)[0]["id"]
    diff = triage.json("diff", a, b)
    kernel = diff["kernels"][0]
    assert len(diff["kernels"]) == 1 and kernel["matched_by"] == "name"
    assert kernel["name"] == "add_parallel(const float *, const float *, float *, int)"
    assert diff["verdict"] == "comparable"
    assert triage.json("diff", b, a)["kernels"][0]["name"] == \
        "add_parallel(const float*, const float*, float*, int)"


def test_abdel_rmse_pair_needs_a_newer_nsys(triage, store_dir):
    require_tool("nsys")
    result = triage("archive", corpus_file("Abdelrahman912__gpu-profiling__rmse_v1.nsys-rep"),
                    expect=1)
    assert "written by nsys 2024.2.3" in result.stderr and ".sqlite" in result.stderr
    assert not store_dir.exists()


def test_test_cuda_exports_are_comparable(triage):
    a, b = archived(triage, "0x822a5b87__test-cuda__report1.sqlite",
                    "0x822a5b87__test-cuda__report2.sqlite")
    diff = triage.json("diff", a, b)
    # exports carry no command or git state: listed as not recorded, never as the same
    assert diff["verdict"] == "comparable"
    assert {(d["state"], d["severity"]) for d in diff["drift"]} == {("unrecorded", "unknown")}
    assert {"command", "git.commit"} <= {d["field"] for d in diff["drift"]}
    kernel = diff["kernels"][0]
    assert kernel["name"].startswith("add_parallel") and kernel["a"]["launches"] == 4


def test_own_captures_show_the_deliberate_change(triage):
    before = triage.json("archive", demo_file("before.sqlite"))[0]["id"]
    after = triage.json("archive", demo_file("after.sqlite"))[0]["id"]
    diff = triage.json("diff", before, after)
    nvtx = {e["text"]: e for e in diff["nsys"]["nvtx"]}
    for name in ("forward", "backward", "step"):
        assert nvtx[name]["delta_pct"] < -20, name  # 300 -> 200 us per forward, 600 -> 400 back
    markdown = triage("diff", before, after, "--format", "md").stdout
    assert "comparable" in markdown.lower()


def test_ncu_against_nsys_is_two_instruments_and_invalid(triage):
    """ncu durations come from a replayed, clock-locked, cache-flushed execution and nsys
    durations from the real one: shown side by side for reference, never comparable, never
    judged by the gate."""
    ncu, nsys = archived(triage, "Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
                         "Lashi0812__CudaProgramming__streamSimple.sqlite")
    diff = triage.json("diff", ncu, nsys)
    assert diff["tools"] == ["ncu", "nsys"]
    assert diff["verdict"] == "invalid"
    tool = next(d for d in diff["drift"] if d["field"] == "tool")
    assert (tool["a"], tool["b"], tool["severity"]) == ("ncu", "nsys", "invalidates")
    assert "different instruments" in tool["why"] and "not the same measurement" in tool["why"]
    assert diff["kernels"]  # the names and launches are still there to read
    gated = triage.json("diff", ncu, nsys, "--max-slowdown", "5")
    assert gated["gate"]["judged"] is False and gated["gate"]["reason"] == "verdict.invalid"
    text = triage("diff", ncu, nsys).stdout
    assert "VERDICT: INVALID" in text and "different instruments" in " ".join(text.split())
    assert "gpu.name" not in {d["field"] for d in diff["drift"]}  # both RTX 4090
    assert all(k["sections"] == [] for k in diff["kernels"])


NSYS_ONLY_RULES = [r for r in DRIFT_RULES
                   if r.field in ("settings.trace", "environment.working_directory")]


@pytest.mark.parametrize("rule", NSYS_ONLY_RULES, ids=lambda r: r.field)
def test_grading_of_nsys_fields_on_real_records(triage, rule):
    run = archived(triage, "0x822a5b87__test-cuda__report1.sqlite")[0]
    record_a = triage.json("show", run)
    record_b = copy.deepcopy(record_a)
    if rule.field == "settings.trace":
        record_b["settings"]["trace"] = "cuda"
    else:
        record_b["environment"]["working_directory"] = "/elsewhere"
    item = next(i for i in grade(typed(record_a), typed(record_b)) if i.field == rule.field)
    assert item.severity == rule.severity and item.a != item.b


def test_kernel_filter_narrows_nsys_and_mixed_diffs_not_their_verdict(triage):
    ncu, nsys = archived(triage, "Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
                         "Lashi0812__CudaProgramming__streamSimple.sqlite")
    full = triage.json("diff", ncu, nsys)
    shown = triage.json("diff", ncu, nsys, "--kernel", "^kernel_1")
    assert [k["name"] for k in shown["kernels"]] == ["kernel_1()"]
    assert shown["drift"] == full["drift"] and shown["verdict"] == full["verdict"] == "invalid"
    a, b = archived(triage, "0x822a5b87__test-cuda__report1.sqlite",
                    "0x822a5b87__test-cuda__report2.sqlite")
    assert len(triage.json("diff", a, b, "--kernel", "add_parallel")["kernels"]) == 1
    assert "no kernel of either run matches --kernel 'nomatch'" in triage(
        "diff", a, b, "--kernel", "nomatch", expect=1).stderr
