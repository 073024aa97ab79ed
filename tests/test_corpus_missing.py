"""Without the report corpus the suite stops at once with one line that says where it looked
and how to point it elsewhere, not with a collection error per module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_corpus_is_one_clear_failure(tmp_path):
    env = {**os.environ, "TRIAGE_CORPUS": str(tmp_path / "nowhere")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_archive_ncu.py",
                           "tests/test_diff_schema.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert f"the report corpus is not at {tmp_path / 'nowhere'}" in output
    assert "set TRIAGE_CORPUS" in output and "ERROR collecting" not in output
