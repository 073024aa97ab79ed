"""Archiving every Nsight Systems report of the corpus (nsys 2019.5 ... 2026.1).

.sqlite exports are read without nsys. .nsys-rep/.qdrep files are exported with the local nsys
(Debian's 2022.4 in CI): the ones it can read must archive, the newer ones must fail with the
"too old" error and leave the store unchanged. Kernel rankings are checked against nsys's own
`nsys stats` kernel summary of the same export.
"""

from __future__ import annotations

import csv
import io
import shutil
import sqlite3
import subprocess
from collections import defaultdict

import pytest

from helpers import REPO, corpus_file, corpus_manifest
from nvtx_capture import ToolUnavailable, export_sqlite, nsys_version, require_or_skip, require_tool
from triage.capture.nsys import cuda_version, driver_version
from triage.capture.nsys_file import version_number, version_tuple

NSYS_ROWS = [r for r in corpus_manifest() if r["kind"] in ("nsys-rep", "nsys-sqlite")]
ids = lambda r: r["file"].split("/")[-1][:56]  # noqa: E731 - pytest ids


def expected_version(row: dict) -> str | None:
    """'nsys 2020.3.4.32-52657a0' / 'nsys 2026.1.1.204 (schema 3.24.14)' -> the number."""
    return version_number(row["tool_version"].removeprefix("nsys "))


def first_word(value: str) -> str | None:
    """'470.256.02 (raw 47025602)', '560.94 (strings heuristic)' -> the value itself."""
    return value.split()[0] if value.strip() else None


def gpu_name(row: dict) -> str:
    return row["gpu"].replace("[strings heuristic]", "").strip()


@pytest.fixture(scope="module")
def local_nsys() -> tuple[str, str]:
    try:
        exe = require_tool("nsys")
    except ToolUnavailable as exc:
        require_or_skip(exc)
    return exe, nsys_version(exe)


def readable(row: dict, local: str) -> bool:
    return version_tuple(expected_version(row))[:2] <= version_tuple(local)[:2]


def kernel_rows(sqlite_path) -> int:
    with sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True) as con:
        tables = {name for (name,) in con.execute("select name from sqlite_master")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0
        return con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


def as_sqlite(row, corpus, tmp_path, nsys: str | None):
    """The export of a corpus file: itself, or our own `nsys export` of a report."""
    path = corpus / row["file"]
    if row["kind"] == "nsys-sqlite":
        return path
    return export_sqlite(path, tmp_path / "export.sqlite", nsys=nsys)


@pytest.mark.parametrize("row", [r for r in NSYS_ROWS if r["kind"] == "nsys-sqlite"], ids=ids)
def test_every_sqlite_export_archives(triage, corpus, row):
    shown = triage.json("show", triage.json("archive", corpus / row["file"])[0]["id"])
    check_archived(shown, row, kernel_rows(corpus / row["file"]))
    assert shown["reports"][0]["export"]["by"] == "user"


@pytest.mark.parametrize("row", [r for r in NSYS_ROWS if r["kind"] == "nsys-rep"], ids=ids)
def test_every_report_archives_or_says_nsys_is_too_old(triage, corpus, row, local_nsys,
                                                        store_dir, tmp_path):
    exe, local = local_nsys
    if not readable(row, local):
        return check_too_old(triage, corpus, row, exe, local, store_dir)
    shown = triage.json("show", triage.json("archive", corpus / row["file"])[0]["id"])
    exported = as_sqlite(row, corpus, tmp_path, exe)
    check_archived(shown, row, kernel_rows(exported))
    assert shown["reports"][0]["export"] == {"by": "triage", "nsys_version": local,
                                             "schema_version": shown["versions"]["export schema"],
                                             "format": "arrow"}
    # triage reads nsys's Arrow export with DuckDB; the same capture's SQLite export, read with
    # sqlite3, gives the same bytes in every table.
    from_sqlite = triage.json("show", triage.json("archive", exported)[0]["id"])
    assert {k: v["sha256"] for k, v in shown["tables"].items()} == \
        {k: v["sha256"] for k, v in from_sqlite["tables"].items()}


def check_archived(shown: dict, row: dict, kernels: int) -> None:
    environment = shown["environment"]
    assert shown["tool"] == "nsys"
    assert shown["tool_version"] == expected_version(row)
    assert shown["kernels"] == kernels
    if row["n_kernels"]:
        assert kernels == int(row["n_kernels"])
    assert environment["gpus"][0]["name"] == gpu_name(row)
    assert environment["driver_version"] == first_word(row["driver_version"])
    assert environment["cuda_version"] == first_word(row["cuda_version"])


def check_too_old(triage, corpus, row, exe, local, store_dir) -> None:
    triage("archive", corpus / "nsys" / "igouProto__CSC746CUDALab__report5.sqlite")
    before = {str(p): p.stat().st_size for p in store_dir.rglob("*") if p.is_file()}
    result = triage("archive", corpus / row["file"], expect=1)
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert f"was written by nsys {expected_version(row)} but {exe} is {local}" in message
    assert "which cannot read it" in message and "nsys export --type sqlite" in message
    assert {str(p): p.stat().st_size for p in store_dir.rglob("*") if p.is_file()} == before


# -- nsys's own summaries ----------------------------------------------------------------------

# Each summary table next to the `nsys stats` report that computes the same thing (renamed in
# nsys 2023: cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum, nvtx_sum).
STATS_REPORTS = {"kernel_summary": ("gpukernsum", "cuda_gpu_kern_sum"),
                 "api_summary": ("cudaapisum", "cuda_api_sum"),
                 "memop_summary": ("gpumemtimesum", "cuda_gpu_mem_time_sum"),
                 "nvtx_summary": ("nvtxppsum", "nvtx_sum")}


def nsys_stats(nsys: str, sqlite_path, table: str, tmp_path) -> list[dict]:
    """The rows of `nsys stats --format csv` for the report matching a summary table."""
    copy = tmp_path / "stats.sqlite"  # nsys stats may add tables; never touch the corpus
    shutil.copyfile(sqlite_path, copy)
    for report in STATS_REPORTS[table]:
        out = subprocess.run([nsys, "stats", "--report", report, "--format", "csv", "--output",
                              "-", str(copy)], capture_output=True, text=True).stdout
        if "Time (%)" in out:
            return list(csv.DictReader(io.StringIO(out[out.find("Time (%)"):].strip())))
    return []


def by_name(rows, name, count, total) -> list[tuple]:
    """(name, count, total ns) summed per name, ranked; nsys 2022.4 splits a kernel's rows by
    grid and block, which triage's kernel_summary does not."""
    sums = defaultdict(lambda: [0, 0])
    for row in rows:
        sums[name(row)][0] += int(row[count])
        sums[name(row)][1] += int(float(row[total]))
    return sorted(((n, c, t) for n, (c, t) in sums.items()), key=lambda r: (-r[2], r[0]))


# (summary table, how `nsys stats` names a row, how triage does; what `nsys stats` counts)
COMPARED = {
    "kernel_summary": (lambda r: r["Name"], lambda r: r["name"], "Instances", "instances"),
    "api_summary": (lambda r: r["Name"], lambda r: r["name"], "Num Calls", "calls"),
    "memop_summary": (lambda r: r["Operation"], lambda r: _memop_label(r), "Count", "count"),
    "nvtx_summary": (lambda r: r["Range"],
                     lambda r: f"{r['domain']}:{r['text']}" if r["domain"] else r["text"],
                     "Instances", "instances"),
}
WHERE = {"api_summary": "api = 'runtime'", "nvtx_summary": "kind = 'push_pop'"}


def _memop_label(row: dict) -> str:
    """nsys 2022.4's labels: [CUDA memcpy HtoD], [CUDA Unified Memory memcpy DtoH] ..."""
    if row["op"] == "memset":
        return "[CUDA memset]"
    kind = row["kind"].replace("UVM ", "Unified Memory memcpy ")
    return f"[CUDA {kind if kind.startswith('Unified') else 'memcpy ' + kind}]"


# The exports, and the reports that Debian's nsys 2022.4 (CI's) can export, says MANIFEST.csv.
EXPORTABLE = [r for r in NSYS_ROWS
              if r["kind"] == "nsys-sqlite" or "debian-nsys export ok" in r["loads_with"]]
SUMMARY_CASES = [(table, row) for row in EXPORTABLE for table in COMPARED
                 if table != "nvtx_summary" or "DongHun" in row["file"]]


@pytest.mark.parametrize("table, row", SUMMARY_CASES,
                         ids=[f"{t}-{ids(r)}" for t, r in SUMMARY_CASES])
def test_summaries_match_nsys_stats(triage, corpus, table, row, local_nsys, tmp_path):
    exe, local = local_nsys
    if row["kind"] == "nsys-rep" and not readable(row, local):
        pytest.skip(f"nsys {local} cannot export a {expected_version(row)} report")
    theirs_name, ours_name, count, ours_count = COMPARED[table]
    run = triage.json("archive", corpus / row["file"])[0]
    where = f" and {WHERE[table]}" if table in WHERE else ""
    ours = triage.json("query", f"select * from {table} where run_id = '{run['id']}'{where}")
    theirs = nsys_stats(exe, as_sqlite(row, corpus, tmp_path, exe), table, tmp_path)
    ours = [{**r, "label": ours_name(r)} for r in ours]
    assert by_name(ours, lambda r: r["label"], ours_count, "total_ns") == \
        by_name(theirs, theirs_name, count, "Total Time (ns)")


def test_demo_nvtx_summary_matches_nsys_stats(triage, local_nsys, tmp_path):
    exe, _ = local_nsys
    demo = REPO / "triage" / "demo" / "before.sqlite"
    run = triage.json("archive", demo)[0]
    ours = triage.json("query", f"select text, instances, total_ns from nvtx_summary where "
                                f"run_id = '{run['id']}' and kind = 'push_pop'")
    theirs = nsys_stats(exe, demo, "nvtx_summary", tmp_path)
    assert by_name(ours, lambda r: r["text"], "instances", "total_ns") == \
        by_name(theirs, lambda r: r["Range"], "Instances", "Total Time (ns)")


# -- what each version recorded --------------------------------------------------------------


def test_raw_driver_and_cuda_numbers_render_as_the_manifest_says():
    checked = 0
    for row in NSYS_ROWS:
        for field, render in (("driver_version", driver_version), ("cuda_version", cuda_version)):
            if "(raw " in row[field]:
                raw = row[field].split("(raw ")[1].rstrip(")")
                assert render(raw) == first_word(row[field]), (row["file"], field)
                checked += 1
    assert checked >= 10


def test_wsl2_export_without_kernels_says_so(triage, corpus):
    path = corpus / "nsys" / "haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.sqlite"
    run = triage.json("archive", path)[0]
    assert run["kernels"] == 0
    assert any(n.startswith("no kernel activity recorded") and "WSL2" in n for n in run["notices"])
    assert "note: no kernel activity recorded" in triage("archive", path).stdout
    api = triage.json("query", "select count(*) n from api_calls")[0]["n"]
    assert api == 2307


def test_settings_come_from_the_report_then_the_command(triage, corpus, local_nsys):
    recorded = triage.json("show", triage.json(
        "archive", corpus / "nsys" / "unschlagbar__neural-networks__prof.sqlite")[0]["id"])
    assert (recorded["settings"]["trace"], recorded["settings_source"]["trace"]) == ("cuda",
                                                                                     "report")
    assert recorded["application"]["argv"] == ["./target/release/examples/kern_prof", "1024",
                                               "40"]
    assert recorded["environment"]["working_directory"] == "/home/unschlagbar/Dev/neural-networks"
    from_command = triage.json("show", triage.json(
        "archive", corpus / "nsys" / "DongHun1995__cumat__report1.qdrep")[0]["id"])
    settings = {k: (v, from_command["settings_source"][k])
                for k, v in from_command["settings"].items()}
    assert settings["trace"] == ("mpi,cuda,nvtx", "command")
    assert settings["gpu_metrics"] == ("all", "command")
    assert settings["sample"] == ("process-tree", "default")
    assert from_command["application"]["argv"] == ["./main", "-v", "65536", "4096", "4096"]


def test_memcpy_kinds_and_nvtx_domains_of_real_exports(triage, corpus, local_nsys):
    triage("archive", corpus / "nsys" / "igouProto__CSC746CUDALab__report5.sqlite")
    kinds = triage.json("query", "select kind, count from memop_summary order by kind")
    assert kinds == [{"kind": "UVM DtoH", "count": 6144}, {"kind": "UVM HtoD", "count": 12288}]
    triage("archive", corpus / "nsys" / "DongHun1995__cumat__report1.qdrep")
    domains = triage.json("query", "select distinct domain, kind, depth from nvtx_ranges")
    assert domains == [{"domain": "MPI", "kind": "push_pop", "depth": 0}]


@pytest.mark.parametrize("name, reason", [
    ("0x822a5b87__test-cuda__report1.nsys-rep", "Version number is invalid"),
    ("haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.nsys-rep", "ProtobufParseException"),
])
def test_nsys_failing_on_a_newer_report_is_reported_as_too_old(triage, corpus, local_nsys,
                                                              tmp_path, name, reason):
    """The real nsys runs and fails; only its --version lies (a newer number), so that the
    version check lets the export run and nsys's own error is the one classified."""
    exe, _ = local_nsys
    wrapper = tmp_path / "nsys"
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then\n"
                       "  echo 'NVIDIA Nsight Systems version 2099.1.0.0-0000000'; exit 0\nfi\n"
                       f"exec {exe} \"$@\"\n")
    wrapper.chmod(0o755)
    result = triage("archive", corpus / "nsys" / name, "--nsys", wrapper, expect=1)
    assert f"but {wrapper} is 2099.1.0.0, which cannot read it ({reason})" in result.stderr


def test_a_damaged_export_archives_with_notices(triage, tmp_path):
    """Kernel names pointing at no string and calls ending before they start, made in a copy of
    a real export: archived (the rest is still evidence), and said."""
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(corpus_file("Lashi0812__CudaProgramming__streamSimple.sqlite"), damaged)
    damaged.chmod(0o644)
    with sqlite3.connect(damaged) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999999999")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 100 WHERE rowid < 4")
    notices = triage.json("archive", damaged)[0]["notices"]
    assert notices == ["16 kernels have no name (their string ids point nowhere): a damaged "
                       "export?", "3 api calls end before they start: a damaged export?"]
