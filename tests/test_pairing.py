"""Pairing you can trust (issue 34, item 7), on real corpus reports through the CLI.

Kernels of different names left over on both sides, in equal number, pair by launch order: a
guess, shown with its evidence (place in launch order, grid, block, mean duration) and never
judged by the gate; a guess between kernels whose grids, blocks or durations differ over 100x
is not made. `--pair A=B` pairs by hand (confirmed: the gate judges it); `--no-rename-pairing`
makes no guess. --json, text, Markdown and HTML say the same.
"""

from __future__ import annotations

import html
import json
import re

from helpers import corpus_file, require_tool
from triage.views.text import fmt_pct

GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
# same repository, machine and GPU as GEMM, another program: matmul_tiled on a 2x2 grid
TILED = "LakshyaSingh354__CudaCode__report.ncu-rep"
TRANSPOSE = ("2388612861__GPU-DEMO__transpose_ncu_report.ncu-rep",
             "2388612861__GPU-DEMO__transpose_ncu_report_optimized.ncu-rep")
YANDONG = ("Yandong-Luo__parallel_diff_evolution__report3.qdrep",
           "Yandong-Luo__parallel_diff_evolution__report7.qdrep")
COALESCE, NAIVE = "sgemm_global_mem_coalesce", "naive_gemm"


def archived(triage, *names: str) -> list[str]:
    return [triage.json("archive", corpus_file(n))[0]["id"] for n in names]


def views(triage, a: str, b: str, *args: str) -> tuple[str, str, str]:
    """The diff as text and Markdown (their exit code is the gate's), and the review page
    (`report` has no gate: it goes without --max-slowdown)."""
    page_args = [a for a in args if a != "--gate-ncu"]
    if "--max-slowdown" in page_args:
        at = page_args.index("--max-slowdown")
        del page_args[at:at + 2]
    return (triage("diff", a, b, *args, expect=None).stdout,
            triage("diff", a, b, "--format", "md", *args, expect=None).stdout,
            triage("report", a, b, "--format", "html", *page_args).stdout)


def plain(view: str) -> str:
    """A view's words as a reader sees them: one line, without Markdown's backslash escapes
    and HTML's entities."""
    return " ".join(html.unescape(re.sub(r"\\([\\`*_\[\]|#~])", r"\1", view)).split())


def diff_json(triage, a: str, b: str, *args: str, expect: int = 0) -> dict:
    return json.loads(triage("diff", a, b, "--json", *args, expect=expect).stdout)


def test_a_guess_carries_its_evidence_and_is_never_gated(triage):
    """naive_gemm -> sgemm_global_mem_coalesce: the one kernel left on each side, paired by
    launch order. Shown (a renamed kernel is the usual before/after), never judged."""
    naive, coalesced = archived(triage, *GEMM)
    diff = diff_json(triage, coalesced, naive, "--max-slowdown", "1", "--gate-ncu", expect=5)
    (kernel,) = diff["kernels"]
    assert kernel["matched_by"] == "launch_order" and kernel["notes"] == ["kernels.renamed"]
    pairing = kernel["pairing"]
    assert pairing["by"] == "launch_order" and not pairing["confirmed"]
    assert pairing["order"] == 1 and pairing["refused"] is None
    assert pairing["grid"] == [[32, 32, 1], [32, 32, 1]]
    assert pairing["block"] == [[1024, 1, 1], [32, 32, 1]]
    assert pairing["duration_ns"] == [kernel["a"]["duration_ns"], kernel["b"]["duration_ns"]]
    assert pairing["ratios"]["grid"] == 1 and pairing["ratios"]["block"] == 1
    assert 1 < pairing["ratios"]["duration"] < 1.1
    # +3.1% over a 1% gate, and still not judged: the gate has only a guess to go on, so it
    # judged nothing (exit 5), which is never a pass
    gate = diff["gate"]
    assert (gate["judged"], gate["passed"], gate["reason"]) == (False, False, "nothing.measured")
    assert gate["checked"] == [] and gate["failed"] == []
    assert [(u["name"].split("(")[0], u["name_b"].split("(")[0], u["reason"])
            for u in gate["unjudged"]] == [(COALESCE, NAIVE, "pairing.guess")]
    renamed = next(d for d in diff["drift"] if d["code"] == "kernels.renamed")
    assert renamed["severity"] == "info" and "not judged by the gate" in renamed["why"]
    text, markdown, page = views(triage, coalesced, naive, "--max-slowdown", "1", "--gate-ncu")
    guess = f"paired by launch order, a guess: {COALESCE} -> {NAIVE}"
    for view in (text, markdown, page):
        flat = plain(view)
        assert guess in flat and "grid 32x32x1 vs 32x32x1" in flat, view[:300]
        assert f"--pair '{COALESCE}={NAIVE}'" in flat
    for view in (text, markdown):
        flat = plain(view)
        assert "Gate did not judge 1 kernel paired by a guess (launch order): " \
            f"{COALESCE} -> {NAIVE}" in flat and "Gate failed" not in flat


def test_pair_confirms_and_the_gate_judges(triage):
    naive, coalesced = archived(triage, *GEMM)
    pair = ("--pair", f"{COALESCE}={NAIVE}")
    diff = diff_json(triage, coalesced, naive, "--max-slowdown", "1", "--gate-ncu", *pair,
                     expect=4)
    (kernel,) = diff["kernels"]
    assert kernel["matched_by"] == "pair" and kernel["notes"] == ["kernels.paired"]
    assert kernel["pairing"]["confirmed"] and kernel["pairing"]["order"] is None
    assert diff["options"]["pairs"] == [{"a": COALESCE, "b": NAIVE}]
    assert [c["name"].split("(")[0] for c in diff["gate"]["failed"]] == [COALESCE]
    assert diff["gate"]["unjudged"] == []
    assert {d["code"] for d in diff["drift"]} >= {"kernels.paired"}
    assert "kernels.renamed" not in {d["code"] for d in diff["drift"]}
    text, markdown, page = views(triage, coalesced, naive, "--max-slowdown", "1", "--gate-ncu",
                                 *pair)
    for view in (text, markdown, page):
        flat = plain(view)
        assert f"paired by --pair: {COALESCE} -> {NAIVE}" in flat
        assert fmt_pct(kernel["delta_pct"]) in flat
        assert (f"Gate failed: kernel {COALESCE}" in flat) == (view is not page)
    # a whole name works as well as a short one
    whole = triage.json("diff", coalesced, naive, "--pair",
                        f"{kernel['name']}={kernel['name_b']}")
    assert whole["kernels"][0]["matched_by"] == "pair"


def test_no_rename_pairing_makes_no_guess(triage):
    naive, coalesced = archived(triage, *GEMM)
    diff = triage.json("diff", naive, coalesced, "--no-rename-pairing")
    assert sorted(k["match"] for k in diff["kernels"]) == ["only_a", "only_b"]
    assert all(k["pairing"] is None and k["matched_by"] is None for k in diff["kernels"])
    assert diff["options"]["rename_pairing"] is False
    assert next(d for d in diff["drift"] if d["code"] == "kernels.set")["severity"] == "caution"
    text, markdown, page = views(triage, naive, coalesced, "--no-rename-pairing")
    for view in (text, markdown, page):
        assert "paired by" not in view and "kernels.set" in view


def test_unlike_kernels_are_never_paired_by_launch_order(triage):
    """matmul_tiled (2x2 blocks of 2x2 threads, 2.5 us) and naive_gemm (32x32 blocks of 32x32,
    4.79 ms), one left on each side of two programs of one machine: launch order would pair them
    and show >+9999%; the grids differ 256x, so they stay apart and the gate has nothing to
    fail on. --pair still pairs them when the user says so."""
    tiled, naive = archived(triage, TILED, GEMM[0])
    diff = diff_json(triage, tiled, naive, "--max-slowdown", "5", "--gate-ncu", expect=5)
    assert diff["verdict"] == "caution" and diff["gate"]["reason"] == "nothing.measured"
    kernels = {k["match"]: k for k in diff["kernels"]}
    assert set(kernels) == {"only_a", "only_b"}
    refused = kernels["only_a"]["pairing"]
    assert refused["by"] == "launch_order" and refused["refused"] == "pairing.grid"
    assert refused["grid"] == [[2, 2, 1], [32, 32, 1]] and refused["ratios"]["grid"] == 256
    assert refused["ratios"]["duration"] > 1000
    assert kernels["only_a"]["notes"] == ["kernels.unpaired"]
    assert diff["gate"]["failed"] == [] and diff["gate"]["unjudged"] == []
    unpaired = next(d for d in diff["drift"] if d["code"] == "kernels.unpaired")
    assert unpaired["kernels"]["a"][0].startswith("matmul_tiled(")
    assert unpaired["kernels"]["b"][0].startswith("naive_gemm(")
    text, markdown, page = views(triage, tiled, naive, "--max-slowdown", "5", "--gate-ncu")
    for view in (text, markdown, page):
        flat = plain(view)
        assert "too unlike to be one kernel renamed (grids 256x, blocks 256x" in flat
        assert ">+9999%" not in flat
    forced = triage.json("diff", tiled, naive, "--pair", "matmul_tiled=naive_gemm")
    (kernel,) = forced["kernels"]
    assert kernel["matched_by"] == "pair" and kernel["pairing"]["ratios"]["grid"] == 256


def test_pair_in_a_family_with_different_kernel_sets(triage):
    """gpudemo-transpose: 1 kernel only in A, 3 only in B, so launch order pairs nothing; the
    user says which of B's replaced A's, and the gate judges that pair."""
    before, after = archived(triage, *TRANSPOSE)
    default = triage.json("diff", before, after)
    assert sorted(k["match"] for k in default["kernels"]) == ["matched", "only_a", "only_b",
                                                              "only_b", "only_b"]
    assert all(k["pairing"] is None for k in default["kernels"])
    pair = ("--pair", "transposeMatrixAdvanced=transposeMatrixShared")
    paired = diff_json(triage, after, before, "--max-slowdown", "1", "--gate-ncu", *pair,
                       expect=4)
    kernel = next(k for k in paired["kernels"] if k["matched_by"] == "pair")
    assert kernel["name"].startswith("transposeMatrixAdvanced(")
    assert kernel["name_b"].startswith("transposeMatrixShared(")
    assert kernel["delta_pct"] > 1
    set_item = next(d for d in paired["drift"] if d["code"] == "kernels.set")
    assert (set_item["a"], set_item["b"]) == ("2 only in A", "0 only in B")
    text, markdown, page = views(triage, after, before, "--max-slowdown", "1", "--gate-ncu",
                                 *pair)
    for view in (text, markdown, page):
        flat = plain(view)
        assert "paired by --pair: transposeMatrixAdvanced -> transposeMatrixShared" in flat
        assert fmt_pct(kernel["delta_pct"]) in flat
        assert ("Gate failed: kernel transposeMatrixAdvanced" in flat) == (view is not page)


def test_pair_errors_say_what_to_fix(triage):
    naive, coalesced = archived(triage, *GEMM)
    missing = triage("diff", naive, coalesced, "--pair", "nothing=sgemm_global_mem_coalesce",
                     expect=2)
    assert "no kernel of run A is named 'nothing' (run A has: naive_gemm)" in missing.stderr
    bare = triage("diff", naive, coalesced, "--pair", "naive_gemm", expect=2)
    assert "is not A=B" in bare.stderr
    twice = triage("diff", naive, coalesced, "--pair", f"{NAIVE}={COALESCE}", "--pair",
                   f"{NAIVE}={COALESCE}", expect=2)
    assert "already paired by another --pair" in twice.stderr
    triage("report", naive, coalesced, "--pair", "x=y", "--format", "md", expect=2)


def test_nsys_pairs_the_same_way(triage):
    """Yandong: UpdateParameter<64> gained two parameters. --pair takes the whole names that
    --json gives, or each side's function name without its parameters."""
    require_tool("nsys")
    a, b = archived(triage, *YANDONG)
    guess = next(k for k in triage.json("diff", a, b)["kernels"]
                 if k["matched_by"] == "launch_order")
    assert guess["pairing"]["grid"] == [[16, 1, 1], [16, 1, 1]]
    assert guess["pairing"]["block"] == [[128, 1, 1], [128, 1, 1]]
    confirmed = triage.json("diff", a, b, "--pair", f"{guess['name']}={guess['name_b']}")
    kernel = next(k for k in confirmed["kernels"] if k["name"] == guess["name"])
    assert kernel["matched_by"] == "pair" and kernel["pairing"]["confirmed"]
    assert kernel["a"] == guess["a"] and kernel["b"] == guess["b"]
    apart = triage.json("diff", a, b, "--no-rename-pairing")
    assert {k["match"] for k in apart["kernels"] if "UpdateParameter<64>" in k["name"]} == \
        {"only_a", "only_b"}
    function = "cudaprocess::UpdateParameter<64>"
    by_function = triage.json("diff", a, b, "--pair", f"{function}={function}")
    assert [k for k in by_function["kernels"] if k["matched_by"] == "pair"] == \
        [k for k in confirmed["kernels"] if k["matched_by"] == "pair"]
    missing = triage("diff", a, b, "--pair", f"{function}=nothing", expect=2)
    assert "no kernel of run B is named 'nothing'" in missing.stderr
