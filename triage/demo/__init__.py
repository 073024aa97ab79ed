"""`triage demo`: the main job on bundled data, on any machine.

The project's own nsys captures of its NVTX test program (see README.md beside this file for how
`make_demo.sh` made them): five runs of a "before" (forward 300 us, backward 600 us) and five of
an "after" (forward 200 us, backward unchanged), shipped as xz-compressed `.sqlite` exports, so no
nsys and no GPU are needed. They are archived into the given store and compared four ways: a
valid comparison (forward significantly faster, backward within noise), the regression gate the
other way round, a comparison triage cautions on (one run's export derived by code, with the
nsys version it records changed as after an upgrade) and the HTML review page.
"""

from __future__ import annotations

import lzma
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from triage.archive.ingest import archive_files
from triage.archive.model import ArchiveResult
from triage.archive.labels import series_label
from triage.archive.store import Store
from triage.base.errors import ComparisonGate, RegressionGate
from triage.compare.diff import diff_runs
from triage.compare.result import DiffOptions, DiffResult

DEMO_FILES = ("before.sqlite", "after.sqlite")
REPEATS = 5
SIDES = ("before", "after")
GATE_PCT = 5.0
UPGRADED_VERSION = "2023.4.1"  # the nsys version the derived export says it was made by
UPGRADED = "after-nsys-upgrade"  # not matched by the glob after/*


def demo_file(name: str) -> Path:
    """A bundled demo capture (shipped as package data)."""
    return Path(str(resources.files("triage.demo").joinpath(name)))


@dataclass(frozen=True)
class DemoOutcome:
    """What the demo did: the runs it archived, its comparisons and where the page went."""

    store: Path
    runs: tuple[ArchiveResult, ...]
    valid: DiffResult  # before/* vs after/*
    gate: DiffResult  # after/* vs before/* --max-slowdown GATE_PCT
    caution: DiffResult  # after/1 vs its export with another nsys version recorded
    html: Path

    @property
    def gate_exit_code(self) -> int:
        """The exit code `triage diff --max-slowdown` gives for the gate's diff."""
        gate = self.gate.gate
        return RegressionGate.exit_code if gate and gate.failed else 0

    @property
    def caution_exit_code(self) -> int:
        """The exit code `triage diff --strict=caution` gives for the caution's diff."""
        return ComparisonGate.exit_code if self.caution.verdict in ("caution", "invalid") else 0

    def to_json(self) -> dict[str, Any]:
        """`triage demo --json` (schemas/demo.schema.json): the three diffs as `diff --json`
        documents, the exit codes, the page."""
        return {"valid": self.valid.to_json(),
                "gate": {**self.gate.to_json(), "exit_code": self.gate_exit_code},
                "caution": {**self.caution.to_json(),
                            "strict_caution_exit_code": self.caution_exit_code},
                "html": str(self.html)}


def run_demo(root: Path, write_page: Callable[[Path, DiffResult], Path],
             html: Path | None = None) -> DemoOutcome:
    """Unpack the captures under `root`, archive them into `root/store`, compare, and have
    `write_page` write the review page of the valid comparison (to `html`, default
    `root/review.html`): the page is a view, and views sit above the demo."""
    captures, store_path = root / "captures", root / "store"
    captures.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(1, REPEATS + 1):
        for side in SIDES:
            path = _unpacked(f"{side}-{i}.sqlite", captures)
            runs += archive_files(store_path, [str(path)], label=series_label(side, i, REPEATS),
                                  note="triage demo capture")
    upgraded = upgraded_export(captures / "after-1.sqlite", captures, UPGRADED_VERSION)
    runs += archive_files(store_path, [str(upgraded)], label=UPGRADED,
                          note=f"after/1's export, its nsys version set to {UPGRADED_VERSION}")
    store = Store.open(store_path)
    valid = diff_runs(store, "before/*", "after/*")
    gate = diff_runs(store, "after/*", "before/*", DiffOptions(max_slowdown_pct=GATE_PCT))
    caution = diff_runs(store, "after/1", UPGRADED)
    page = write_page(html or root / "review.html", valid)
    return DemoOutcome(store_path, tuple(runs), valid, gate, caution, page)


def _unpacked(name: str, folder: Path) -> Path:
    """A shipped repeat, decompressed: the export's own bytes."""
    path = folder / name
    path.write_bytes(lzma.decompress(demo_file(f"repeats/{name}.xz").read_bytes()))
    return path


def upgraded_export(export: Path, folder: Path, version: str) -> Path:
    """A copy of a real nsys export that says a different nsys made it (EXPORT_META_DATA's
    EXPORT_PRODUCT_VERSION, where triage reads the version of an export): the drift a profiler
    upgrade between two captures shows, with every measurement unchanged."""
    path = folder / f"{export.stem}-nsys-{version}.sqlite"
    path.write_bytes(export.read_bytes())
    with sqlite3.connect(path) as con:
        con.execute("update EXPORT_META_DATA set value = ? where name = 'EXPORT_PRODUCT_VERSION'",
                    (version,))
    con.close()
    return path
