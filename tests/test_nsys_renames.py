"""nsys exports name some tables with a version suffix (`X_V2`, `X_V3`) in newer releases: the
readers find them by base name. An export derived from a corpus one, its tables renamed so,
archives to the same tables."""

from __future__ import annotations

import shutil
import sqlite3

import pyarrow.parquet as pq

from helpers import corpus_file, table_file
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
