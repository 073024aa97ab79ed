"""RunRecord: a manifest read once into typed values, and the views that read only those."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import corpus_file, require_tool
from triage.archive import catalog
from triage.archive.model import RunRecord
from triage.archive.runs import load_record
from triage.archive.store import Store
from triage.views.show import render_show

NCU_REPORT = "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"
NSYS_REPORT = "0x822a5b87__test-cuda__report1.sqlite"


@pytest.fixture
def ncu_run(archived, store_dir) -> RunRecord:
    (run_id,) = archived((NCU_REPORT, "--label", "naive"))
    return load_record(Store.open(store_dir), run_id)


def test_a_real_ncu_run_reads_into_typed_values(ncu_run):
    assert ncu_run.tool == "ncu" and ncu_run.tool_version == "2024.1.1.0"
    assert ncu_run.gpu_name == "NVIDIA GeForce GTX 1660 SUPER" and ncu_run.gpu is not None
    assert (ncu_run.gpu.compute_capability, ncu_run.gpu.sm_count) == ("7.5", 22)
    assert ncu_run.kernels == 2 and ncu_run.labels == ("naive",)
    assert [(r.name, r.bytes) for r in ncu_run.reports] == [(NCU_REPORT, 488820)]
    clock = ncu_run.settings["clock_control"]
    assert (clock.value, clock.source) == ("base", "report")
    assert (ncu_run.clock.executed_locked, ncu_run.clock.results_with_status) == (2, 2)
    assert ncu_run.capture is None  # `triage archive`, not `triage capture`


def test_show_renders_the_record(triage, ncu_run):
    text = triage("show", "naive").stdout
    assert text == render_show(ncu_run) + "\n"
    lines = text.splitlines()
    for line in (
            "  tool             ncu 2024.1.1.0",
            "  labels           naive",
            "  source           archive",
            "  GPU              NVIDIA GeForce GTX 1660 SUPER (cc 7.5, 22 SMs, max SM 1815 MHz)",
            "  kernels          2",
            "  clock_control    base   [report]",
            "  kernel_filter    -   [default]",
            "  clock evidence   2/2 results ran with locked clocks; measured SM clock 1535 MHz; "
            "85% of max",
            f"  {NCU_REPORT}  ncu-rep  488,820 bytes  sha256 f865fa474d1ea0dc"):
        assert line in lines
    assert "capture" not in lines


def test_show_json_is_the_manifest_with_id_labels_and_notes(triage, store_dir, ncu_run):
    shown = triage.json("show", "naive")
    stored = Store.open(store_dir).runs.read_manifest(ncu_run.id)
    assert shown == {"id": ncu_run.id, **stored, "archived": ncu_run.archived,
                     "labels": ["naive"], "notes": [], "arrived": None}  # archived here


def test_ls_and_archive_say_what_the_record_says(triage, store_dir):
    archived = triage.json("archive", corpus_file(NCU_REPORT), corpus_file(NSYS_REPORT))
    rows = {row["id"]: row for row in triage.json("ls")}
    for entry in archived:
        record = load_record(Store.open(store_dir), entry["id"])
        row = rows[entry["id"]]
        assert record.gpu_name is not None and entry["gpu"] == row["gpu"] == record.gpu_name
        assert entry["kernels"] == row["kernels"] == record.kernels
        assert entry["reports"] == row["report_names"].split(",") == \
            [r.name for r in record.reports]
        assert row["clock_control"] == record.setting("clock_control")
    assert {e["tool"] for e in archived} == {"ncu", "nsys"}


def hostile(manifest: dict) -> dict:
    """A real manifest with the oddities an edited or foreign bundle may carry."""
    odd = copy.deepcopy(manifest)
    odd.update(environment="x", kernels="many", reports=[1, {"name": 7, "bytes": "big"}],
               tables={"kernels": 5}, evidence={"clock": "locked"},
               capture="x", notices="none", application={"argv": "python x.py"})
    return odd


def test_a_hostile_manifest_degrades_instead_of_raising(ncu_run):
    odd = RunRecord.from_manifest(ncu_run.id, hostile(dict(ncu_run.manifest)),
                                  {"notes": "x", "archived": 5})
    assert odd.environment.gpus == () and odd.gpu_name is None
    assert odd.environment.host.name is None and odd.kernels is None
    assert [(r.name, r.bytes) for r in odd.reports] == [("7", 0)]
    assert odd.tables == {} and not odd.clock.recorded and odd.archived is None
    assert odd.capture is None and odd.notices == () and odd.notes == ()
    assert odd.application_argv == ()
    assert RunRecord.from_manifest(ncu_run.id, {**ncu_run.manifest, "settings": ["a"]}
                                   ).settings == {}
    odd = RunRecord.from_manifest(ncu_run.id, {**odd.manifest, "settings": {"sections": [1, 2]}})
    lines = render_show(odd).splitlines()
    assert "  GPU              -" in lines and "  kernels          -" in lines
    assert "  sections         1, 2   [report]" in lines and "  archived         -" in lines


def test_a_hostile_manifest_still_gets_a_catalog_row(store_dir, ncu_run):
    row = catalog.catalog_row(Store.open(store_dir), ncu_run.id,
                              hostile(dict(ncu_run.manifest)), {})
    assert (row["gpu"], row["gpu_count"], row["kernels"], row["reports"]) == (None, 0, None, 1)
    assert row["report_names"] == "7" and row["tables"] == "{}"
    assert row["kernel_summary"] == [] and row["notes"] is None


def test_show_of_a_failed_capture_says_how_it_ran(triage, store_dir, tmp_path, monkeypatch):
    require_tool("ncu")
    work = tmp_path / "work"
    work.mkdir()
    for args in (["init", "-q"], ["-c", "user.email=t@example.com", "-c", "user.name=t",
                                  "commit", "-q", "--allow-empty", "-m", "w"]):
        subprocess.run(["git", *args], cwd=work, check=True)
    monkeypatch.chdir(work)
    argv = ["ncu", "--set", "full", "-o", "prof", sys.executable, "-c", "pass"]
    triage("capture", "--group", "g1", "--", *argv, expect=1)
    record = load_record(Store.open(store_dir), "latest")
    assert record.failed_capture and record.capture is not None
    assert record.capture.git is not None and record.capture.git.dirty is False
    lines = triage("show", "latest").stdout.splitlines()
    assert lines[lines.index("capture"):][:2] == ["capture", f"  argv             {' '.join(argv)}"]
    assert f"  cwd              {Path(work)}" in lines and "  group            g1" in lines
    assert any(line.startswith("  git              ") and line.endswith(f"(clean) in {work}")
               for line in lines)
    sections, sets = record.capture.ncu_sections, record.capture.ncu_sets
    assert sections is not None and sets is not None
    assert f"  ncu knew         {sections.count} sections, {sets.count} sets" in lines
