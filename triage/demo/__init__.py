"""`triage demo`: the main job on bundled data, on any machine.

Two small nsys captures made by this project from its NVTX test program (a "before" and an
"after" variant; see README.md beside this file for how they were made) are archived into the
given store and diffed. The `.sqlite` exports are used, so no nsys and no GPU are needed.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from triage.archive.ingest import archive_files
from triage.archive.store import Store
from triage.compare.diff import diff_runs

DEMO_FILES = ("before.sqlite", "after.sqlite")


def demo_file(name: str) -> Path:
    """A bundled demo capture (shipped as package data)."""
    return Path(str(resources.files("triage.demo").joinpath(name)))


def run_demo(store_path: Path) -> dict:
    """Archive the bundled before/after captures (labels `before`, `after`) and diff them."""
    results = []
    for name in DEMO_FILES:
        label = name.split(".")[0]
        results += archive_files(store_path, [str(demo_file(name))], label=label,
                                 note="triage demo capture")
    diff = diff_runs(Store.open(store_path), "before", "after")
    return {"store": str(store_path), "runs": results, "diff": diff}
