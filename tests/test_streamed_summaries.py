"""Summaries gathered from the kernels as they stream into their table, not read back from the
finished Parquet: gpu_gaps in NumPy (`summaries.GpuGaps`), the same rows as GPU_GAPS, batch
boundaries, ties, unnamed kernels and several devices included, and the SQL wherever the
kernels do not come in the order it reads them; an ncu run's kernel_summary from the rows
written (`KernelRows`), and from the SQL past PYTHON_SUMMARY_ROWS kernels."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from helpers import corpus_file
from triage.archive.store import Store
from triage.archive import summaries
from triage.archive.summaries import GPU_GAPS, KERNEL_SUMMARY, GpuGaps
from triage.base.duck import connect, fetch_arrow, sql_string
from triage.capture.formats import prepare_report
from triage.schemas.tables import arrow_schema

EXPORT = "Lashi0812__CudaProgramming__streamSimple.sqlite"


def real_kernels() -> pa.Table:
    """The kernels table a real export's reader writes (16 kernels on one device)."""
    prepared = prepare_report(corpus_file(EXPORT))
    try:
        return pa.concat_tables([b for name, b in prepared.batches(0) if name == "kernels"])
    finally:
        prepared.close()


def duckdb_gaps(kernels: pa.Table, tmp_path) -> pa.Table:
    path = tmp_path / "kernels.parquet"
    pq.write_table(kernels, path)
    return fetch_arrow(connect(threads=1), GPU_GAPS.format(
        kernels=f"read_parquet({sql_string(path)})")).cast(arrow_schema("gpu_gaps"))


def streamed(kernels: pa.Table, rows: int) -> pa.Table | None:
    gaps = GpuGaps()
    for offset in range(0, kernels.num_rows, rows):
        gaps.add(kernels.slice(offset, rows))
    return gaps.table()


def derived_kernels() -> pa.Table:
    """The real kernels four times over, each copy later in time, made awkward: the second copy
    on device 1, the third with no device (device 0 in the SQL), names missing (arg_max skips
    them), a kernel ending where the furthest end already is under another name (a tie: the
    first keeps it), one that ends before it starts, one without an end, one spanning the
    next kernels; in start order, numbered as a reader numbers them."""
    real = real_kernels().to_pylist()
    span = max(r["end_ns"] for r in real) - min(r["start_ns"] for r in real) + 1000
    rows = []
    for copy in range(4):
        for r in real:
            rows.append(dict(r, start_ns=r["start_ns"] + copy * span,
                             end_ns=r["end_ns"] + copy * span,
                             device_id={1: 1, 2: None}.get(copy, r["device_id"])))
    rows[3]["name"] = rows[20]["name"] = rows[21]["name"] = None
    rows[6] = dict(rows[6], name="a tie", end_ns=max(r["end_ns"] for r in rows[:6]))
    rows[9] = dict(rows[9], end_ns=rows[9]["start_ns"] - 5)
    rows[12] = dict(rows[12], end_ns=None)
    rows[40] = dict(rows[40], end_ns=rows[44]["start_ns"] + 1)
    rows.sort(key=lambda r: r["start_ns"])
    for index, r in enumerate(rows):
        r["kernel_index"] = index
    return pa.Table.from_pylist(rows, schema=arrow_schema("kernels"))


def test_the_gaps_of_awkward_kernels_streamed_in_small_batches_are_duckdbs(tmp_path):
    kernels = derived_kernels()
    expected = duckdb_gaps(kernels, tmp_path)
    assert len(set(expected["device_id"].to_pylist())) == 2 and expected.num_rows > 10
    for rows in (1, 5, 64, kernels.num_rows):
        assert streamed(kernels, rows).equals(expected), rows


def test_kernels_out_of_the_sqls_order_are_left_to_it():
    kernels = derived_kernels()
    assert streamed(kernels.take(list(range(kernels.num_rows))[::-1]), 8) is None
    second = kernels.set_column(0, "report_index", pa.array([0] * 30 + [1] * 34, pa.int32()))
    assert streamed(second, 8) is None


def test_an_archived_export_stores_the_streamed_gaps(triage, store_dir, tmp_path):
    run = triage.json("show", triage.json("archive", corpus_file(EXPORT))[0]["id"])
    gaps = stored(store_dir, run, "gpu_gaps")
    assert gaps.num_rows == 3 and gaps.equals(duckdb_gaps(stored(store_dir, run, "kernels"),
                                                          tmp_path))


def stored(store_dir, run: dict, name: str) -> pa.Table:
    store = Store.open(store_dir)
    return pq.ParquetFile(store.root / store.tables.key(
        run["id"], name, run["tables"][name]["sha256"])).read()


def test_an_ncu_runs_kernel_summary_past_the_python_limit_is_duckdbs(triage, store_dir,
                                                                      monkeypatch, tmp_path):
    """A report of 36 launches with the limit at 10: the rows gathered are dropped, and the SQL
    reads the finished kernels (the path of an ncu run of more than 65,536 launches)."""
    def not_in_python(_kernels):
        raise AssertionError("summed in Python past the limit")

    monkeypatch.setattr(summaries, "PYTHON_SUMMARY_ROWS", 10)
    monkeypatch.setattr(summaries, "kernel_summary", not_in_python)
    report = corpus_file("Lashi0812__CudaProgramming__readSegmentUnroll.ncu-rep")
    run = triage.json("show", triage.json("archive", report)[0]["id"])
    kernels = stored(store_dir, run, "kernels")
    path = tmp_path / "kernels.parquet"
    pq.write_table(kernels, path)
    expected = fetch_arrow(connect(threads=1), KERNEL_SUMMARY.format(
        kernels=f"read_parquet({sql_string(path)})")).cast(arrow_schema("kernel_summary"))
    assert kernels.num_rows == 36 and stored(store_dir, run, "kernel_summary").equals(expected)


def test_kernel_rows_give_the_python_summary_up_to_the_limit(monkeypatch):
    kernels = derived_kernels()
    rows = summaries.KernelRows()
    for offset in range(0, 40, 8):
        rows.add(kernels.slice(offset, 8))
    assert rows.summary().equals(summaries.kernel_summary(kernels.slice(0, 40)))
    monkeypatch.setattr(summaries, "PYTHON_SUMMARY_ROWS", 39)
    assert rows.summary() is None


def derived_ranges() -> pa.Table:
    """NVTX ranges derived from the real kernels: their names as texts, their durations made
    large (the mean's rounding shows) and spread over domains (none, named, the empty name
    that counts as none) and both kinds; texts missing, durations missing, a group of even
    and one of odd size, two groups of the same total (ranked by domain, then text), and a
    median between two durations far apart."""
    real = real_kernels().to_pylist()
    rows = []
    for copy in range(5):
        for index, r in enumerate(real):
            rows.append({"report_index": 0, "text": r["name"] if index % 5 else None,
                         "domain": [None, "triage", "", "other", None][copy],
                         "kind": "push_pop" if copy % 2 else "start_end",
                         "start_ns": r["start_ns"], "end_ns": r["end_ns"],
                         "duration_ns": (r["end_ns"] - r["start_ns"]) * (1 << 42)
                         + copy * 7919 + index
                         if index != 7 else None,
                         "thread_id": 1, "depth": 0 if copy % 2 else None})
    tie = dict(rows[1], domain="a tie", text="same")
    rows += [tie, dict(tie, domain="a tie 2"), dict(tie, duration_ns=tie["duration_ns"] + 1)]
    # a median between two far apart (lo * 0.5 + hi * 0.5, not lo + (hi - lo) * 0.5)
    rows += [dict(tie, text="spread", duration_ns=942879118058144418),
             dict(tie, text="spread", duration_ns=2927771633508938553)]
    return pa.Table.from_pylist(rows, schema=arrow_schema("nvtx_ranges"))


def duckdb_nvtx_summary(ranges: pa.Table, tmp_path) -> pa.Table:
    path = tmp_path / "ranges.parquet"
    pq.write_table(ranges, path)
    return fetch_arrow(connect(threads=1), summaries.NVTX_SUMMARY.format(
        nvtx_ranges=f"read_parquet({sql_string(path)})")).cast(arrow_schema("nvtx_summary"))


def test_the_nvtx_summary_of_awkward_ranges_streamed_is_duckdbs(tmp_path):
    ranges = derived_ranges()
    expected = duckdb_nvtx_summary(ranges, tmp_path)
    assert expected.num_rows > 15 and None in expected["domain"].to_pylist()
    for rows in (1, 7, ranges.num_rows):
        gathered = summaries.NvtxSummary()
        for offset in range(0, ranges.num_rows, rows):
            gathered.add(ranges.slice(offset, rows))
        assert gathered.table().equals(expected), rows


def test_too_many_ranges_or_groups_are_left_to_the_sql(monkeypatch):
    ranges = derived_ranges()
    for limit in ("GROUPS", "ROWS"):
        with monkeypatch.context() as patched:
            patched.setattr(summaries.NvtxSummary, limit, 10)
            gathered = summaries.NvtxSummary()
            gathered.add(ranges)
            assert gathered.table() is None, limit
