"""`triage top` on real nsys exports of the corpus, and its interval arithmetic."""

from __future__ import annotations

import re
import shlex
import shutil

import pytest
from hypothesis import given, strategies as st

from helpers import assert_valid, corpus_file, corpus_manifest, typed
from triage.compare import top
from triage.compare.top_result import RankedKernel

pytest.importorskip("triage.capture.nsys")

SQLITE_ROWS = [r for r in corpus_manifest() if r["file"].endswith(".sqlite")]
NO_KERNELS = {"haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.sqlite",
              "mabdullahsoyturk__cardiac-simulation__report1.sqlite",
              "unschlagbar__neural-networks__prof.sqlite"}
needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys to export")


def archived(triage, name: str) -> str:
    return triage.json("archive", corpus_file(name))[0]["id"]


def check_command(command: str, function: str, argv: list[str] | None) -> list[str]:
    """The suggested ncu command parses, filters this kernel and profiles one launch fully."""
    words = shlex.split(command)
    assert words[0] == "ncu"
    pattern = words[words.index("-k") + 1]
    assert pattern.startswith("regex:") and re.fullmatch(pattern[len("regex:"):], function)
    assert words[words.index("--set") + 1] == "full"
    assert words[words.index("-c") + 1] == "1" and words[words.index("-s") + 1].isdigit()
    assert words[words.index("-o") + 1]
    tail = words[words.index("-o") + 2:]
    assert tail == (argv or ["<your", "program>"])
    return words


@pytest.mark.parametrize("row", SQLITE_ROWS, ids=lambda r: r["file"].split("/")[-1][:48])
def test_top_on_every_corpus_export(triage, row):
    name = row["file"].split("/")[-1]
    run = archived(triage, name)
    result = triage.json("top", run)
    assert_valid("top.schema.json", result)
    text = triage("top", run).stdout
    if name in NO_KERNELS:
        assert result["kernel_activity"] is False and result["next"] == []
        assert "no kernel activity recorded" in text
        return
    ranking = result["ranking"]
    shares = [r["share"] for r in ranking["top"]]
    cumulative = [r["cumulative"] for r in ranking["top"]]
    assert cumulative == sorted(cumulative) and shares == sorted(shares, reverse=True)
    assert abs(cumulative[-1] + ranking["rest"]["share"] - 1) < 1e-9
    assert 1 <= len(result["next"]) <= 3
    for suggestion in result["next"]:
        check_command(suggestion["command"], suggestion["function"], result["application"])
        capture = shlex.split(suggestion["capture_command"])
        assert capture[:4] == ["triage", "capture", "--from", run[:12]]
        assert suggestion["command"] in text
    assert "kernels by total GPU time" in text and "next: profile" in text


def test_stream_simple(triage):
    run = archived(triage, "Lashi0812__CudaProgramming__streamSimple.sqlite")
    result = triage.json("top", run, "-k", "2")
    assert [(r["name"], r["launches"]) for r in result["ranking"]["top"]] == [
        ("kernel_2()", 4), ("kernel_1()", 4), ("kernel_3()", 4), ("kernel_4()", 4)]
    assert result["gpu"]["devices"] == [{"device_id": 0, "span_ns": 76929, "busy_ns": 63073,
                                         "idle_ns": 13856, "idle_share": 13856 / 76929}]
    largest = result["gpu"]["largest"][0]
    assert (largest["gap_ns"], largest["before_kernel"], largest["cause"]) == (
        5504, "kernel_2()", "kernel launch overhead")
    first = result["next"][0]
    assert (first["function"], first["launch"], first["launches"]) == ("kernel_2", 2, 4)
    assert first["command"] == ("ncu -k 'regex:^kernel_2$' -s 2 -c 1 --set full -o "
                                f"kernel_2-s2-from-{run[:12]} ./build/streamSimple")
    assert "run from /workspaces/CudaProgramming" in first["notes"]
    assert len(result["next"]) == 2


def test_k_0_prints_the_ranking_and_no_empty_next_heading(triage):
    run = archived(triage, "Lashi0812__CudaProgramming__streamSimple.sqlite")
    text = triage("top", run, "-k", "0").stdout
    assert "kernels by total GPU time" in text and "next:" not in text


def test_copies_that_serialise(triage):
    """test-cuda copies 800 MB in and 400 MB out with no kernel running meanwhile."""
    run = archived(triage, "0x822a5b87__test-cuda__report1.sqlite")
    result = triage.json("top", run)
    kinds = {c["kind"]: c for c in result["copies"]["kinds"]}
    assert (kinds["HtoD"]["count"], kinds["HtoD"]["serialised"],
            kinds["HtoD"]["serialised_bytes"]) == (8, 8, 800_000_000)
    assert (kinds["DtoH"]["count"], kinds["DtoH"]["serialised"],
            kinds["DtoH"]["serialised_bytes"]) == (4, 4, 400_000_000)
    assert kinds["HtoD"]["exposed_ns"] == kinds["HtoD"]["total_ns"]
    assert {g["cause"] for g in result["gpu"]["largest"]} == {"synchronisation"}
    assert "HtoD: 8 of 8 copies serialised" in triage("top", run).stdout


def test_unified_memory_migrations_under_a_kernel(triage):
    """igouProto: 18k unified-memory migrations; the HtoD ones all run under the one kernel."""
    run = archived(triage, "igouProto__CSC746CUDALab__report5.sqlite")
    result = triage.json("top", run, "-k", "1")
    kinds = {c["kind"]: c for c in result["copies"]["kinds"]}
    assert (kinds["UVM HtoD"]["count"], kinds["UVM HtoD"]["serialised"]) == (12288, 0)
    assert (kinds["UVM DtoH"]["count"], kinds["UVM DtoH"]["serialised"]) == (6144, 6144)
    suggestion = result["next"][0]
    assert suggestion["command"].endswith(" <your program>")
    assert "the run does not record the profiled command: replace <your program>" in \
        suggestion["notes"]


@needs_nsys
def test_long_tail(triage):
    """cuFCM: 7701 launches of 20 kernels; 2 kernels are 80% of GPU time."""
    run = archived(triage, "racksa__cuFCM__report1.qdrep")
    result = triage.json("top", run)
    ranking = result["ranking"]
    assert (ranking["kernels"], ranking["kernels_for_tail_pct"]) == (20, 2)
    assert ranking["rest"]["kernels"] == 10 and ranking["rest"]["share"] < 0.01
    assert result["gpu"]["gaps"] == 7700
    assert [s["function"] for s in result["next"]] == [
        "cufcm_pair_correction_spatial_hashing_tpp",
        "cufcm_mono_dipole_distribution_bpp_shared_dynamic",
        "cufcm_particle_velocities_bpp_shared"]
    assert "the other 10 kernels add up to 0.4%" in triage("top", run).stdout


@needs_nsys
def test_nvtx_ranges_and_gaps(triage):
    """cumat (4 GPUs, MPI ranges traced by nsys): no kernel runs inside the MPI calls."""
    run = archived(triage, "DongHun1995__cumat__report1.qdrep")
    result = triage.json("top", run)
    assert_valid("top.schema.json", result)
    nvtx = {r["text"]: r for r in result["nvtx"]}
    assert nvtx["MPI_Isend"]["instances"] == 108 and nvtx["MPI_Isend"]["domain"] == "MPI"
    assert all(r["gpu_ns"] == 0 for r in result["nvtx"])
    assert len(result["gpu"]["devices"]) == 4
    assert result["gpu"]["largest"][0]["nvtx"] == "MPI_Barrier"
    assert "nvtx_command" not in result["next"][0]  # the launches are outside every range


def test_top_on_an_ncu_run_says_what_to_use(triage):
    run = triage.json("archive", corpus_file("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"))
    result = triage("top", run[0]["id"], expect=2)
    assert "`triage explain" in result.stderr


def test_function_name_is_what_ncu_matches():
    """ncu's --kernel-name-base function: no return type, namespace, templates, parameters."""
    cases = {
        "void cudaprocess::UpdateVecParamBasedClusterData<64>(cudaprocess::CudaParamIndividual*,"
        " cudaprocess::CudaParamClusterData<64>*)": "UpdateVecParamBasedClusterData",
        "void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4, "
        "void at::native::templates::cuda::uniform_and_transform<float>(float)>(int, float)":
            "distribution_elementwise_grid_stride_kernel",
        "(anonymous namespace)::scale(float*, int)": "scale",
        "kernel_2()": "kernel_2",
    }
    assert {name: top.function_name(name) for name in cases} == cases


def test_pick_launch_skips_warmup():
    assert top.pick_launch([900.0]) == 0
    assert top.pick_launch([900.0, 100.0]) == 1
    assert top.pick_launch([900.0, 500.0, 100.0, 101.0, 99.0]) == 2
    assert top.pick_launch([900.0, 500.0, 300.0, 100.0, 101.0, 99.0, 100.0]) == 3


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 50)), max_size=30),
       st.integers(0, 260), st.integers(0, 260))
def test_busy_covered_matches_brute_force(spans, a, b):
    intervals = [(s, s + d) for s, d in spans]
    busy = top.Busy(intervals)
    points = {t for s, e in intervals for t in range(s, e)}
    assert busy.total == len(points)
    assert busy.covered(a, b) == len({t for t in points if a <= t < b})


def test_nccl_overlap():
    """Made-up rows: no corpus trace has NCCL kernels (they need several GPUs)."""
    row = lambda name, s, e, d=0: {"name": name, "start_ns": s, "end_ns": e,  # noqa: E731
                                   "device_id": d}
    kernels = [row("ncclKernel_AllReduce_RING_LL_Sum_float", 100, 200), row("gemm", 150, 300),
               row("ncclKernel_AllReduce_RING_LL_Sum_float", 400, 500), row("gemm", 0, 120, 1)]
    assert top.nccl_overlap(kernels).to_json() == {"traced": True, "kernels": 2, "nccl_ns": 200,
                                                   "overlapped_ns": 50, "exposed_ns": 150,
                                                   "overlap_share": 0.25}
    assert top.nccl_overlap([row("gemm", 0, 10)]).to_json() == {"traced": False}


def test_nvtx_include_command():
    """Made-up rows: kernels launched inside NVTX ranges need a GPU capture (none here)."""
    kernels = [{"name": "step_kernel(float*)", "short_name": "step_kernel", "start_ns": s + 5,
                "end_ns": s + 8, "duration_ns": 3, "device_id": 0, "correlation_id": c,
                "process_id": 1} for c, s in enumerate((0, 100, 200, 300, 400))]
    api = [{"correlation_id": c, "start_ns": s + 1, "thread_id": 7}
           for c, s in enumerate((0, 100, 200, 300, 400))]
    ranges = [{"text": "train/step", "domain": "app", "kind": "push_pop", "start_ns": 90,
               "end_ns": 450, "thread_id": 7, "depth": 0},
              {"text": "other thread", "domain": None, "kind": "push_pop", "start_ns": 0,
               "end_ns": 999, "thread_id": 8, "depth": 0}]

    class Run:  # the parts of RunData a suggestion reads
        id = "f" * 64
        record = typed({"id": "f" * 64, "tool": "nsys",
                        "application": {"argv": ["python", "train.py", "--epochs", "1"]}})

    entry = RankedKernel("step_kernel(float*)", "step_kernel", 5, None, None, None, None, None)
    out = top.ncu_suggestion(Run(), entry, kernels, top.Launcher(api, ranges))
    assert out is not None and out.nvtx_range == "app@train\\/step/"
    words = check_command(out.nvtx_command, "step_kernel", list(Run.record.application_argv))
    assert words[words.index("--nvtx-include") + 1] == "app@train\\/step/"
    assert "--nvtx" in words
    assert (out.launch, words[words.index("-s") + 1]) == (2, "1")  # 2nd launch in the range


# -- no kernels: the host's hot spots ----------------------------------------------------------


def test_no_kernels_shows_the_cuda_api_calls_instead(triage):
    run = archived(triage, "haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.sqlite")
    api = triage.json("query", "--run", run, "select name, calls, total_ns from api_summary "
                      "order by total_ns desc, name limit 1")[0]
    result = triage.json("top", run)
    top_call = result["cpu"]["api"][0]
    assert {key: top_call[key] for key in api} == api
    text = triage("top", run).stdout
    assert "CUDA API calls by total time (host side):" in text
    assert f"{api['calls']:>8} x  {api['name']}" in text


def test_no_kernels_shows_nvtx_ranges_and_os_runtime_calls(triage, nvtx_program, nsys_exe,
                                                            tmp_path):
    from nvtx_capture import capture

    report = capture(nvtx_program, [3, 100, 200], tmp_path / "steps", nsys=nsys_exe)
    run = triage.json("archive", report)[0]["id"]
    cpu = triage.json("top", run)["cpu"]
    ranges = {row["text"]: row["instances"] for row in cpu["nvtx"]}
    assert ranges["step"] == 3 and ranges["forward"] == 3
    assert cpu["osrt"] and all(row["calls"] >= 1 for row in cpu["osrt"])
    totals = [row["total_ns"] for row in cpu["osrt"]]
    assert totals == sorted(totals, reverse=True)
    text = triage("top", run).stdout
    assert "NVTX ranges by total time (host side):" in text and "x  forward" in text
    assert "OS runtime calls by total time (host side):" in text


@pytest.mark.parametrize("name, cuda, why", [
    ("unschlagbar__neural-networks__prof.sqlite", True, "nsys traced CUDA but recorded no GPU "
     "kernel"),
    ("demo:before.nsys-rep", False, "nsys did not trace CUDA (capture with --trace=cuda"),
    ("demo:before.sqlite", None, "check --trace=cuda"),  # derived: an absent domain proves nothing
])
def test_no_kernels_says_whether_cuda_was_traced(triage, name, cuda, why):
    from triage.demo import demo_file

    path = demo_file(name[5:]) if name.startswith("demo:") else corpus_file(name)
    run = triage.json("archive", path)[0]["id"]
    assert triage.json("top", run)["cuda_traced"] is cuda
    assert why in triage("top", run).stdout
