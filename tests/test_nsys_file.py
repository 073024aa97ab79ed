"""The end-of-file index of .nsys-rep/.qdrep files (read without nsys), and push/pop depths."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from helpers import REPO, corpus_manifest
from triage.capture.nsys_file import read_nsys_file, version_number, version_tuple
from triage.capture.nsys_tables import push_pop_depth
from triage.base.errors import UnsupportedReport

DEMO_REPORT = REPO / "triage" / "demo" / "before.nsys-rep"
REPORT_ROWS = [r for r in corpus_manifest() if r["kind"] == "nsys-rep"]


@pytest.mark.parametrize("row", REPORT_ROWS, ids=lambda r: r["file"].split("/")[-1][:56])
def test_every_corpus_report_says_which_nsys_wrote_it(corpus, row):
    info = read_nsys_file(corpus / row["file"])
    assert version_number(info.version) == version_number(row["tool_version"][5:])
    assert info.host and info.created_local and "UI Data" in info.sections
    if info.command:
        assert " profile " in info.command or " nvprof " in info.command


def test_demo_report_records_its_command_and_version():
    info = read_nsys_file(DEMO_REPORT)
    assert info.command.endswith("nsys profile --trace=nvtx,osrt --sample=none --cpuctxsw=none "
                                 "-o before --force-overwrite true ./nvtx_steps 20 300")
    assert version_tuple(info.version)[:2] == (2022, 4)


def test_truncated_reports_are_refused_with_one_line(tmp_path):
    data = DEMO_REPORT.read_bytes()
    path = tmp_path / "cut.nsys-rep"
    for cut in (0, 10, 40, len(data) // 2, len(data) - 17, len(data) - 8, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(UnsupportedReport) as caught:
            read_nsys_file(path)
        assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_corrupt_indexes_never_crash_or_hang(tmp_path):
    data = DEMO_REPORT.read_bytes()
    path = tmp_path / "bad.nsys-rep"
    rnd = random.Random(7)
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rnd.randrange(1, 6)):  # the index and UI Data are the last ~500 bytes
            damaged[rnd.randrange(len(data) - 600, len(data))] = rnd.randrange(256)
        path.write_bytes(damaged)
        try:
            read_nsys_file(path)
        except UnsupportedReport as exc:
            assert "truncated or corrupt" in str(exc)


def test_truncated_report_leaves_the_store_untouched(triage, store_dir, tmp_path):
    path = tmp_path / "cut.nsys-rep"
    path.write_bytes(DEMO_REPORT.read_bytes()[:-100])
    result = triage("archive", path, expect=1)
    assert result.stderr.startswith(f"triage: error: {path}: truncated or corrupt Nsight Systems")
    assert not [p for p in (store_dir / "objects").rglob("*") if p.is_file()]


@pytest.mark.parametrize("extra", [b"\0", b"\n" * 100, bytes(range(256)) * 40])
def test_bytes_after_the_end_marker_are_named_with_the_reports_version(triage, store_dir,
                                                                        tmp_path, extra):
    data = DEMO_REPORT.read_bytes()
    path = tmp_path / "appended.nsys-rep"
    path.write_bytes(data + extra)
    version = version_number(read_nsys_file(DEMO_REPORT).version)
    result = triage("archive", path, expect=1)
    assert result.stderr == (
        f"triage: error: {path}: {len(extra)} stray bytes after the end marker of an Nsight "
        f"Systems report written by nsys {version} (appended to, or a bad copy); copy the "
        f"report again from the machine that captured it, or cut it to its first {len(data)} "
        "bytes\n")
    assert not [p for p in (store_dir / "objects").rglob("*") if p.is_file()]
    path.write_bytes(data)  # cut as the message says: the report reads again
    assert version_number(read_nsys_file(path).version) == version


# -- nesting depth ---------------------------------------------------------------------------


def nested_ranges(seed: int, threads: int = 3, events: int = 3000) -> list[list]:
    """Random push/pop sequences per thread: [start, end (None if never popped), tid, depth]."""
    rnd, rows = random.Random(seed), []
    for tid in range(1000, 1000 + threads):
        time, stack = rnd.randrange(50), []
        for _ in range(events):
            if rnd.random() < 0.5 or not stack:
                stack.append([time, None, tid, len(stack)])
                rows.append(stack[-1])
            else:
                stack.pop()[1] = time
            time += rnd.choice([1, 2, 5])
    return sorted(rows, key=lambda r: (r[0], -(r[1] if r[1] is not None else 1 << 62)))


@pytest.mark.parametrize("batch, events", [(1, 150), (7, 600), (64, 3000), (100_000, 3000)])
def test_push_pop_depth_matches_a_stack_across_batches(batch, events):
    for seed in range(5):
        rows, carry, depths = nested_ranges(seed, events=events), None, []
        for i in range(0, len(rows), batch):
            chunk = rows[i:i + batch]
            table = pa.table({name: pa.array([r[k] for r in chunk], pa.int64())
                              for k, name in enumerate(("start_ns", "end_ns", "thread_id"))})
            depth, carry = push_pop_depth(table, carry)
            depths += depth.to_pylist()
        assert depths == [r[3] for r in rows]


def test_a_rising_first_key_is_taken_as_the_order_only_without_ties_or_nulls(monkeypatch):
    """An Arrow export's query skips sorting its slices only when its first key is a plain
    ascending column that rises strictly over the whole table (slices of 2 rows here, so a
    tie can fall on a slice boundary); any other first key is sorted slice by slice."""
    from triage.capture import nsys_arrow
    from triage.capture.nsys_arrow import ArrowExport, _leading_column
    from triage.capture.nsys_export import Query

    monkeypatch.setattr(nsys_arrow, "BATCH", 2)
    export = object.__new__(ArrowExport)  # no file: rises reads the table it is given
    export._map = None
    rising = [[1, 2, 3, 4, 5], [1, 2, 3, 3, 5], [1, 2, None, 4, 5], [3, 2, 4, 5, 6]]
    assert [export.rises(pa.table({"start": v}), "start") for v in rising] == \
        [True, False, False, False]
    assert not export.rises(pa.table({"start": [1.0, 2.0]}), "start")  # integers only
    assert not export.rises(pa.table({"start": [1, 2]}), None)
    keys = ["e.start", "e.start NULLS FIRST", "e.end DESC NULLS LAST", "NULL NULLS FIRST",
            "x.start", "e.start + 1"]
    assert [_leading_column(Query("T", "e", ("1",), (key,))) for key in keys] == \
        ["start", "start", None, None, None, None]
