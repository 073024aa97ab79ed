"""`triage demo`: the README's main job, on the bundled captures, with no nsys and no GPU."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from triage.demo import DEMO_FILES, REPEATS, SIDES, demo_file


def test_demo_tells_the_story_without_nsys(triage, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys, no ncu: the .sqlite exports suffice
    text = triage("demo").stdout
    flat = " ".join(text.split())
    # a valid comparison of five runs a side: forward significant, backward within noise
    assert "A: 5 runs: before/1..before/5" in text and "B: 5 runs: after/1..after/5" in text
    assert "numbers: median of 5 runs a side" in text
    assert re.search(r"forward .*\n .* significant;", text)
    assert re.search(r"backward .*\n .* within noise;", text)
    # the regression gate the other way round, and its exit code
    assert "Gate failed: NVTX range forward +50" in text and "exit code: 4" in text
    # a comparison triage cautions on, and why: the recorded nsys version differs
    assert "tool_version 2022.4.2.1 -> 2023.4.1 different profiler version" in flat
    assert "with --strict=caution, exit code: 3" in text
    page = Path(re.search(r"^wrote (.+\.html)$", text, re.M).group(1))
    assert page.is_file() and "<html" in page.read_text()[:500].lower()
    shutil.rmtree(page.parent)  # the demo's own temp folder, left for the user to open


def test_demo_json_and_review_page_where_asked(triage, tmp_path):
    page = tmp_path / "review.html"
    doc = triage.json("demo", "-o", page)
    forward = {e["text"]: e for e in doc["valid"]["nsys"]["nvtx"]}["forward"]
    assert forward["noise"]["significance"] == "significant"
    assert forward["b"]["total_ns"] < forward["a"]["total_ns"]
    assert doc["gate"]["exit_code"] == 4 and doc["caution"]["strict_caution_exit_code"] == 3
    assert doc["html"] == str(page) and page.is_file()


def test_demo_files_ship_with_the_package():
    names = [*DEMO_FILES, *(f"repeats/{s}-{i}.sqlite.xz" for s in SIDES
                            for i in range(1, REPEATS + 1))]
    for name in names:
        assert demo_file(name).stat().st_size > 0
