"""Names nsys and libraries moved: exports name some tables with a version suffix (`X_V2`,
`X_V3`) in newer releases, which the readers find by base name (an export derived from a corpus
one, its tables renamed so, archives to the same tables); NCCL renamed its kernels
(ncclKernel_* -> ncclDevKernel_*), which the diff pairs across the rename."""

from __future__ import annotations

import shutil
import sqlite3

import pyarrow.parquet as pq
import pytest

from helpers import assert_valid, corpus_file, table_file
from nvtx_capture import capture
from triage.capture.nsys_export import by_base_name

STREAMS = "Lashi0812__CudaProgramming__streamSimple.sqlite"  # nsys 2023.3: kernels and API
RENAMED = {"CUPTI_ACTIVITY_KIND_KERNEL": "CUPTI_ACTIVITY_KIND_KERNEL_V2",
           "CUPTI_ACTIVITY_KIND_RUNTIME": "CUPTI_ACTIVITY_KIND_RUNTIME_V3",
           "TARGET_INFO_GPU": "TARGET_INFO_GPU_V2"}


def test_a_base_name_is_its_highest_suffixed_table_unless_the_plain_one_exists():
    assert by_base_name({"A_V2", "A_V3", "B", "B_V2", "C_V1x", "StringIds"}) == {"A": "A_V3"}


def test_an_export_with_suffixed_tables_archives_to_the_same_tables(triage, tmp_path,
                                                                    store_dir):
    derived = tmp_path / "streams_v2.sqlite"
    shutil.copyfile(corpus_file(STREAMS), derived)
    with sqlite3.connect(derived) as con:
        for old, new in RENAMED.items():
            con.execute(f"ALTER TABLE {old} RENAME TO {new}")
    con.close()
    original, renamed = (triage.json("archive", path)[0]["id"]
                         for path in (corpus_file(STREAMS), derived))
    for table in ("kernels", "api_calls", "kernel_summary"):
        tables = [pq.read_table(table_file(store_dir, run, table)) for run in (original, renamed)]
        assert tables[0].num_rows > 0 and tables[0].equals(tables[1]), table
    shown = [triage.json("show", run) for run in (original, renamed)]
    gpus = [s["environment"]["gpus"] for s in shown]  # TARGET_INFO_GPU_V2 read as the table
    assert gpus[0] == gpus[1] and gpus[0][0]["name"] == "NVIDIA GeForce RTX 4090"
    assert shown[0]["settings"]["trace"] == shown[1]["settings"]["trace"]


def _with_kernel_named(source, dest, name: str):
    """A copy of a corpus export whose kernel_2 is called `name` (its demangled and short
    name strings rewritten)."""
    shutil.copyfile(source, dest)
    with sqlite3.connect(dest) as con:
        con.execute("UPDATE StringIds SET value = ? WHERE id IN (SELECT demangledName FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName = 242)", (f"{name}()",))
        con.execute("UPDATE StringIds SET value = ? WHERE id = 243", (name,))
    con.close()
    return dest


def test_a_library_renamed_kernel_family_is_paired_across_the_rename(triage, tmp_path):
    old, new = "ncclKernel_AllReduce_RING_LL_Sum_float", \
        "ncclDevKernel_AllReduce_RING_LL_Sum_float"
    a, b = (triage.json("archive", _with_kernel_named(corpus_file(STREAMS),
                                                      tmp_path / f"{n}.sqlite", n))[0]["id"]
            for n in (old, new))
    for extra in ((), ("--no-rename-pairing",)):  # a rule is not a guess: paired either way
        diff = triage.json("diff", a, b, *extra)
        assert_valid("diff.schema.json", diff)
        (kernel,) = [k for k in diff["kernels"] if k["name"] == f"{old}()"]
        assert (kernel["matched_by"], kernel["name_b"]) == ("rename_rule", f"{new}()")
        assert kernel["pairing"]["rule"] == "NCCL renamed ncclKernel_* to ncclDevKernel_*"
        assert kernel["notes"] == ["kernels.rename_rule"]
        assert {k["match"] for k in diff["kernels"]} == {"matched"}
    (item,) = [d for d in diff["drift"] if d["field"] == "kernels.rename_rule"]
    assert item["severity"] == "info"
    words = " ".join(triage("diff", a, b).stdout.split())  # the note is wrapped, not cut
    assert f"note: paired across a rename: {old}() -> {new}() (NCCL renamed ncclKernel_* to " \
        "ncclDevKernel_*)" in words
    back = triage.json("diff", b, a)  # newer name in A: the same rule, the other way
    assert [k["matched_by"] for k in back["kernels"] if k["name"] == f"{new}()"] == \
        ["rename_rule"]


@pytest.fixture(scope="module")
def steps_report(nvtx_program, nsys_exe, tmp_path_factory):
    """A real nsys capture of tests/programs/nvtx_steps.c (2 steps, 50 us and 100 us)."""
    return capture(nvtx_program, [2, 50, 100], tmp_path_factory.mktemp("capture") / "steps",
                   nsys=nsys_exe)


def test_an_arrow_export_with_suffixed_tables_reads_the_same(triage, steps_report, tmp_path,
                                                             monkeypatch):
    """The Arrow route: the real export of a capture, its tables renamed with suffixes as it
    is read, archives to the same tables."""
    from triage.capture import nsys_arrow

    def archived(store) -> dict:
        (run,) = triage.json("--store", store, "archive", steps_report)
        assert run["new"]
        shown = triage.json("--store", store, "show", run["id"])
        return {name: ref["sha256"] for name, ref in shown["tables"].items()}

    plain = archived(tmp_path / "plain")
    read = nsys_arrow._read_streams
    renamed = {"NVTX_EVENTS": "NVTX_EVENTS_V2", "StringIds": "StringIds_V3"}
    monkeypatch.setattr(nsys_arrow, "_read_streams", lambda source: {
        renamed.get(name, name): table for name, table in read(source).items()})
    assert archived(tmp_path / "suffixed") == plain and "nvtx_ranges" in plain
