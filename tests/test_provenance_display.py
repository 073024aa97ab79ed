"""Provenance as `show` tells it (issue 19, item 14): whose CUDA version a capture without a GPU
records, the trace kinds a report lists when its export does not, `nsys nvprof` settings, and a
report with bytes after its end marker named with its version."""

from __future__ import annotations

import pytest

from helpers import REPO, corpus_file
from triage.capture.nsys import derive_settings
from triage.capture.nsys_file import read_nsys_file
from triage.capture.profiler_args import parse_command

DEMO = REPO / "triage" / "demo"
NVPROF_QDREP = "mabdullahsoyturk__cardiac-simulation__report1.qdrep"  # nsys 2021.3.3 nvprof


def _show(triage, path, label: str) -> list[str]:
    triage("archive", path, "--label", label)
    return triage("show", label).stdout.splitlines()


@pytest.mark.parametrize("name", ["before.nsys-rep", "before.sqlite"])
def test_cuda_of_a_capture_without_a_gpu_says_whose_it_is(triage, nsys_exe, name):
    # made here, on a machine with libcuda 535 installed and no GPU: nsys records CUDA 12.2
    lines = _show(triage, DEMO / name, "demo")
    assert "  CUDA             12.2 (the installed CUDA driver library's; no GPU driver " \
           "loaded)" in lines
    assert "  driver           -" in lines


def test_a_qdrep_without_capture_metadata_shows_the_trace_it_lists(triage, nsys_exe):
    # nsys 2022.4 exports this report without META_DATA_CAPTURE; the file lists cuda and nvtx
    lines = _show(triage, corpus_file(NVPROF_QDREP), "qdrep")
    assert "  trace            cuda,nvtx   [report]" in lines


def test_nsys_nvprof_settings_are_its_defaults_not_unknown(triage, nsys_exe):
    # `nsys nvprof ./version3 -n 100 -t 5`: the -t 5 is the program's, not nvprof's --timeout
    lines = _show(triage, corpus_file(NVPROF_QDREP), "nvprof")
    for line in ("  capture_range    none   [default]", "  duration         0   [default]",
                 "  sample           none   [default]", "  delay            0   [default]",
                 "  gpu_metrics      none   [default]"):
        assert line in lines


def test_nvprof_switches_are_read_as_the_settings_they_stand_for():
    parsed = parse_command("/opt/nsys nvprof --profile-from-start off -t 30 "
                           "--cpu-thread-tracing=on --cpu-profiling on -o out ./app -t 5")
    settings, sources = derive_settings({}, parsed)
    assert parsed.application == ["./app", "-t", "5"]
    assert (settings["capture_range"], settings["duration"], settings["trace"],
            settings["sample"]) == ("cudaProfilerApi", "30", "cuda,nvtx,osrt", "process-tree")
    assert sources["duration"] == "command" and sources["gpu_metrics"] == "default"
    settings, _ = derive_settings({}, parse_command("nsys nvprof --profile-api-trace none ./a"))
    assert settings["trace"] == "nvtx"


def test_stray_bytes_after_a_corpus_reports_end_marker_name_its_version(triage, store_dir,
                                                                         tmp_path):
    source = corpus_file("Lashi0812__CudaProgramming__streamSimple.nsys-rep")  # nsys 2023.3.1
    path = tmp_path / "appended.nsys-rep"
    path.write_bytes(source.read_bytes() + b"\r\n")  # e.g. a copy that added a line ending
    result = triage("archive", path, expect=1)
    assert result.stderr.startswith(
        f"triage: error: {path}: 2 stray bytes after the end marker of an Nsight Systems report "
        "written by nsys 2023.3.1.92 (")
    assert "truncated or corrupt" not in result.stderr
    assert read_nsys_file(source).version.startswith("2023.3.1.92")
