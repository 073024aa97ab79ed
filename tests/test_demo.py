"""`triage demo`: the README's main job, on the bundled captures, with no nsys and no GPU."""

from __future__ import annotations

import json

from triage.demo import DEMO_FILES, demo_file


def test_demo_archives_and_diffs_the_bundled_captures(triage, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys, no ncu: the .sqlite exports suffice
    result = triage("demo")
    lines = result.stdout.splitlines()
    assert len([l for l in lines if "(new)" in l]) == 2
    # the captures ran without a GPU, which their exports do not record: never "the same"
    assert "VERDICT: CAUTION" in result.stdout and "not recorded in either run: gpu.name" in \
        " ".join(result.stdout.split())
    assert "NVTX ranges" in result.stdout and "forward" in result.stdout


def test_demo_json_shows_forward_got_faster(triage):
    diff = json.loads(triage("demo", "--json").stdout)
    assert diff["verdict"] == "caution"
    nvtx = {e["text"]: e for e in diff["nsys"]["nvtx"]}
    forward = nvtx["forward"]
    assert forward["b"]["total_ns"] < forward["a"]["total_ns"]
    assert forward["a"]["instances"] == forward["b"]["instances"] == 20


def test_demo_files_ship_with_the_package():
    for name in DEMO_FILES:
        assert demo_file(name).stat().st_size > 0
