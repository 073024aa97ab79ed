"""`Can I compare these?` in the hard cases: another program, other arguments, other NVTX
ranges, another commit or local edits, fields unknown in both runs, and values shown where they
differ, in text, `--json`, Markdown and HTML.

The runs are real `triage capture`s of tests/programs/nvtx_steps.c under the real nsys, in a
real git repository made here (no GPU: nvidia-smi is not installed, which the capture records),
and real corpus reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Triage
from helpers import corpus_file
from triage.archive.runs import load_record
from triage.archive.store import Store
from triage.compare.diff import diff_runs
from triage.views.diff import render_diff
from triage.views.text import Layout

NSYS_OPTIONS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none"]
GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
REDUCE = "shortstheory__cuda-experiments__reduce_report2.ncu-rep"
RWOFFSET = ("Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
            "Lashi0812__CudaProgramming__readWriteOffset_cg_setfull.ncu-rep")


def run(store: Path, *args, expect: int = 0) -> str:
    return Triage()("--store", store, *args, expect=expect).stdout


def git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def captured(tmp_path_factory, nvtx_program, nsys_exe) -> tuple[Path, dict[str, str], list]:
    """(store, name -> run id, [commit 1, commit 2]): captures of the NVTX program in a git
    repository, as a before/after would make them."""
    root = tmp_path_factory.mktemp("workload")
    store, work = root / "store", root / "work"
    work.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "t"]):
        git(work, *args)
    (work / "train.cfg").write_text("steps = 3\n")
    git(work, "add", "train.cfg")
    git(work, "commit", "-qm", "first")
    shutil.copy(nvtx_program, work / "nvtx_steps")
    shutil.copy(nvtx_program, work / "train")  # the same code under another program's name
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)

        def capture(name: str, *application: str) -> None:
            out = run(store, "capture", "--json", "--", "nsys", "profile", *NSYS_OPTIONS,
                      "-o", name, *application)
            runs[name] = json.loads(out)["id"]

        capture("base", "./nvtx_steps", "3", "100")
        capture("args", "./nvtx_steps", "3", "50")
        capture("train", "./train", "3", "100")
        capture("noranges", "./nvtx_steps", "0")
        commits = [git(work, "rev-parse", "HEAD")]
        (work / "train.cfg").write_text("steps = 3\nfast = yes\n")
        git(work, "commit", "-qam", "second")
        commits.append(git(work, "rev-parse", "HEAD"))
        (work / "train.cfg").write_text("steps = 3\nfast = no\n")  # an edit not committed
        capture("edited", "./nvtx_steps", "3", "100")
    return store, runs, commits


def item(diff: dict, field: str) -> dict:
    return next(i for i in diff["drift"] if i["field"] == field)


def words(text: str) -> str:
    return " ".join(text.split())


def row(markdown: str, field: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if f"| `{field}` |" in line)
    return [cell.strip() for cell in line.split(" | ")]


def test_another_program_is_caution(captured, tmp_path):
    store, runs, _ = captured
    diff = json.loads(run(store, "diff", runs["base"], runs["train"], "--json"))
    assert diff["verdict"] == "caution"
    program = item(diff, "workload.program")
    assert (program["code"], program["severity"]) == ("workload.program", "caution")
    assert (program["a"], program["b"]) == ("./nvtx_steps", "./train")
    assert "workload.arguments" not in {i["field"] for i in diff["drift"]}
    text = run(store, "diff", runs["base"], runs["train"])
    assert "caution     workload.program           ./nvtx_steps -> ./train  different program" \
        in text
    markdown = run(store, "diff", runs["base"], runs["train"], "--format", "md")
    assert row(markdown, "workload.program")[1:4] == [
        "`workload.program`", "`./nvtx_steps`", "`./train`"]
    run(store, "report", runs["base"], runs["train"], "-o", tmp_path / "review.html")
    html = (tmp_path / "review.html").read_text()
    assert '<tr class="sev-caution"><td class="sev">caution</td>\n    <td class="mono">' \
        'workload.program</td>\n    <td class="val">./nvtx_steps</td>' in html


def test_other_arguments_are_caution_shown_by_the_tokens_that_differ(captured):
    store, runs, _ = captured
    diff = json.loads(run(store, "diff", runs["base"], runs["args"], "--json"))
    arguments = item(diff, "workload.arguments")
    assert diff["verdict"] == "caution" and arguments["severity"] == "caution"
    assert (arguments["a"], arguments["b"]) == (["3", "100"], ["3", "50"])  # whole, as lists
    text = run(store, "diff", runs["base"], runs["args"])
    assert "workload.arguments         3 [100 → 50]  different application arguments" in text
    markdown = run(store, "diff", runs["base"], runs["args"], "--format", "md")
    assert row(markdown, "workload.arguments")[2:4] == ["`3 100`", "`3 50`"]
    # the profiler's part of the command differs only in the report name: info
    command = item(diff, "command")
    assert command["severity"] == "info" and command["b"].endswith(" -o args")
    assert "-o [base → args]" in text


def test_other_nvtx_ranges_are_caution_shown_as_a_set_difference(captured, tmp_path):
    store, runs, _ = captured
    diff = json.loads(run(store, "diff", runs["base"], runs["noranges"], "--json"))
    ranges = item(diff, "nvtx.ranges")
    assert (ranges["code"], ranges["severity"], ranges["state"]) == (
        "nvtx.ranges", "caution", "different")
    assert (ranges["a"], ranges["b"]) == (["backward", "epoch", "forward", "step"], ["epoch"])
    text = run(store, "diff", runs["base"], runs["noranges"])
    assert "nvtx.ranges                -backward -forward -step  different NVTX range set" in text
    markdown = run(store, "diff", runs["base"], runs["noranges"], "--format", "md")
    assert row(markdown, "nvtx.ranges")[2:4] == ["`backward, forward, step (and 1 in both)`",
                                                 "`(1 in both, no other)`"]
    run(store, "report", runs["base"], runs["noranges"], "-o", tmp_path / "review.html")
    assert '<td class="mono">nvtx.ranges</td>' in (tmp_path / "review.html").read_text()
    same = json.loads(run(store, "diff", runs["base"], runs["args"], "--json"))
    assert "nvtx.ranges" not in {i["field"] for i in same["drift"]}


def test_commit_and_local_edits_are_info_rows_everywhere(captured, tmp_path):
    """The same program and arguments, one commit later with an uncommitted edit; neither
    capture saw a GPU (recorded: nvidia-smi is not installed here), which is the same."""
    store, runs, commits = captured
    diff = json.loads(run(store, "diff", runs["base"], runs["edited"], "--json"))
    assert diff["verdict"] == "comparable"
    commit, dirty = item(diff, "git.commit"), item(diff, "git.dirty")
    assert (commit["a"], commit["b"], commit["severity"]) == (*commits, "info")
    assert (dirty["a"], dirty["b"], dirty["severity"]) == (False, True, "info")
    assert "that is the point" in commit["why"]
    assert not {i["field"] for i in diff["drift"]} & {"gpu.name", "workload.program",
                                                     "workload.arguments"}
    text = words(run(store, "diff", runs["base"], runs["edited"]))
    assert f"git.commit {commits[0][:12]} -> {commits[1][:12]} different commit" in text
    assert "git.dirty clean -> dirty (uncommitted edits) uncommitted edits" in text
    markdown = run(store, "diff", runs["base"], runs["edited"], "--format", "md")
    assert row(markdown, "git.commit")[2:4] == [f"`{commits[0][:12]}`", f"`{commits[1][:12]}`"]
    assert row(markdown, "git.dirty")[2:4] == ["`clean`", "`dirty (uncommitted edits)`"]
    run(store, "report", runs["base"], runs["edited"], "-o", tmp_path / "review.html")
    html = (tmp_path / "review.html").read_text()
    assert '<td class="mono">git.commit</td>' in html and '<td class="mono">git.dirty</td>' in html


def test_a_recorded_absence_of_a_gpu_is_a_value(captured):
    """A capture on this GPU-less machine against a GTX 1660 report: different hardware."""
    store, runs, _ = captured
    gemm = json.loads(run(store, "archive", "--json", corpus_file(GEMM[0])))[0]["id"]
    diff = json.loads(run(store, "diff", runs["base"], gemm, "--json"))
    gpu = item(diff, "gpu.name")
    assert (gpu["a"], gpu["b"], gpu["severity"]) == (
        "none", "NVIDIA GeForce GTX 1660 SUPER", "invalidates")
    assert diff["verdict"] == "invalid"
    assert load_record(Store.open(store), runs["base"]).gpu_absent
    assert not load_record(Store.open(store), gemm).gpu_absent


def test_fields_unknown_in_both_runs_are_listed_and_cap_the_verdict(tmp_path):
    """The demo's exports were made without a GPU, which an export does not say: 'GPU unknown'
    in both runs is never the same GPU."""
    from triage.demo import demo_file

    store = tmp_path / "store"
    before, after = (json.loads(run(store, "archive", "--json", demo_file(f)))[0]["id"]
                     for f in ("before.sqlite", "after.sqlite"))
    diff = json.loads(run(store, "diff", before, after, "--json"))
    assert diff["verdict"] == "caution"
    unrecorded = {i["field"]: i for i in diff["drift"] if i["state"] == "unrecorded"}
    assert {f: unrecorded[f]["severity"] for f in ("gpu.name", "gpu.sm_count", "command")} == {
        "gpu.name": "caution", "gpu.sm_count": "caution", "command": "unknown"}
    assert all(i["a"] is None and i["b"] is None for i in unrecorded.values())
    assert "settings.clock_control" not in unrecorded  # an ncu option: not an nsys field
    text = words(run(store, "diff", before, after))
    assert "caution not recorded in either run: gpu.name, gpu.sm_count, " \
        "gpu.compute_capability (a difference here would invalidate" in text
    assert "unknown not recorded in either run: workload.program, workload.arguments" in text
    markdown = run(store, "diff", before, after, "--format", "md")
    cells = row(markdown, "gpu.name, gpu.sm_count, gpu.compute_capability")
    assert cells[0] == "| ⚠️ caution" and cells[2:4] == ["`not recorded`", "`not recorded`"]
    run(store, "report", before, after, "-o", tmp_path / "review.html")
    assert '<td class="mono">gpu.name, gpu.sm_count, gpu.compute_capability</td>' in \
        (tmp_path / "review.html").read_text()


def test_values_are_never_cut_where_they_differ(tmp_path):
    store = tmp_path / "store"
    ids = {name: json.loads(run(store, "archive", "--json", corpus_file(name)))[0]["id"]
           for name in (*GEMM, REDUCE, *RWOFFSET)}
    text = words(run(store, "diff", ids[GEMM[0]], ids[GEMM[1]]))
    assert "-o [reps/naive.ncu-rep → reps/global_mem_coalesce.ncu-rep] -f" in text
    text = words(run(store, "diff", ids[GEMM[0]], ids[REDUCE]))
    assert "host.cpu Intel(R) [Xeon(R) W-2133 → Core(TM) i7-10870H] CPU @ [3.60GHz → 2.20GHz]" \
        in text
    sections = json.loads(run(store, "diff", *(ids[n] for n in RWOFFSET), "--json"))
    item_ = item(sections, "settings.sections")
    assert isinstance(item_["a"], list) and "SpeedOfLight" in item_["b"]
    text = words(run(store, "diff", *(ids[n] for n in RWOFFSET)))
    assert "settings.sections +ComputeWorkloadAnalysis +InstructionStats" in text
    assert "+WarpStateStats -MemoryCheck different section set" in text


def test_text_uses_the_width_it_is_given(tmp_path):
    """A terminal's width where there is one (names cut to fit, the rest laid out wider);
    piped, as the CLI here is, nothing is cut."""
    store = tmp_path / "store"
    a, b = (json.loads(run(store, "archive", "--json", corpus_file(n)))[0]["id"] for n in GEMM)
    piped = run(store, "diff", a, b)
    result = diff_runs(Store.open(store), a, b)
    narrow, wide = (render_diff(result, layout=Layout(width)) for width in (100, 140))
    assert max(map(len, narrow.splitlines())) <= 100 < max(map(len, wide.splitlines())) <= 140
    name = "naive_gemm(const float *, const float *, float *, int, int, int, float, float)"
    assert name in wide and name not in narrow and name in piped


def test_the_issue_examples_read_as_asked():
    """The shapes issue 16 asks for, on the views' own helpers (the CLI tests above show them
    on real runs)."""
    from triage.views.text import changed_tokens, set_change

    assert changed_tokens("./train 20 2000000", "./train 20 1000000") == \
        "./train 20 [2000000 → 1000000]"
    assert changed_tokens(("test", "16"), ("test", "8")) == "test [16 → 8]"
    assert set_change(["SpeedOfLight"], ["NumaAffinity", "PmSampling", "SpeedOfLight"]) == \
        "+NumaAffinity +PmSampling"
