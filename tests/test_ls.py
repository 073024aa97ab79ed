"""`triage ls` for a real archive: newest first, `-n`, filters, the terminal's width, CSV and
JSON, on three real corpus runs (two ncu reports, one nsys export) of three GPUs.

The runs are archived here in this process with the clock that stamps archive times set to
days apart (runs archived on other days cannot exist in a test otherwise); everything else is
what `triage archive` writes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import Triage
from helpers import REPO, corpus_file, on_a_terminal
from triage.views import text as textview
from triage.archive import catalog, catalogview, ingest, lease, listing, query
from triage.archive.annotations import Annotations
from triage.archive.store import Store
from triage.base.errors import StoreError
from triage.schemas.tables import arrow_schema

RUNS = {  # name: (report, archived)
    "gemm": ("LakshyaSingh354__CudaCode__report.ncu-rep", "2026-01-10T09:00:00.000000Z"),
    "soa": ("Lashi0812__CudaProgramming__simpleSOA.ncu-rep", "2026-01-20T09:00:00.000000Z"),
    "async": ("0x822a5b87__test-cuda__report1.sqlite", "2026-01-30T09:00:00.000000Z"),
}
LABELS = {"gemm": "before/1", "soa": "before/2", "async": "after/1"}


def run_cli(*args, expect: int | None = 0):
    return Triage()(*args, expect=expect)


@pytest.fixture(scope="module")
def archive_store(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A store of the three runs, archived 10 days apart, each labelled; name -> run id."""
    store = tmp_path_factory.mktemp("ls") / "store"
    ids = {}
    with pytest.MonkeyPatch.context() as patch:
        for name, (report, archived) in RUNS.items():
            patch.setattr(ingest, "utc_now", lambda precise=False, at=archived: at)
            out = run_cli("--store", store, "archive", corpus_file(report), "--json").stdout
            ids[name] = json.loads(out)[0]["id"]
    for name, label in LABELS.items():
        run_cli("--store", store, "label", label, ids[name])
    return store, ids


def listed(store: Path, *args) -> list[str]:
    """The run ids `ls --json` lists, in its order."""
    return [r["id"] for r in json.loads(run_cli("--store", store, "ls", "--json",
                                                *args).stdout)]


def text_ids(text: str) -> list[str]:
    """The short ids of a text listing, in its order."""
    return [line.split()[0] for line in text.splitlines()[2:] if re.match(r"^[0-9a-f]{12} ", line)]


def test_newest_first_in_every_format(archive_store):
    store, ids = archive_store
    newest_first = [ids["async"], ids["soa"], ids["gemm"]]
    assert listed(store) == newest_first
    assert text_ids(run_cli("--store", store, "ls").stdout) == [i[:12] for i in newest_first]
    rows = list(csv.DictReader(io.StringIO(run_cli("--store", store, "ls", "--csv").stdout)))
    assert [r["id"] for r in rows] == newest_first


def test_n_lists_the_newest_n_and_says_what_it_left_out(archive_store):
    store, ids = archive_store
    text = run_cli("--store", store, "ls", "-n", "2").stdout
    assert text_ids(text) == [ids["async"][:12], ids["soa"][:12]]
    assert text.splitlines()[-1] == ("1 older not shown (the newest 2 of 3); add -n all to list "
                                     "every one")
    assert listed(store, "-n", "1") == [ids["async"]]
    assert len(listed(store, "-n", "all")) == len(listed(store, "-n", "3")) == 3
    for bad in ("0", "-1", "two"):
        result = run_cli("--store", store, "ls", "-n", bad, expect=2)
        assert "give a number of runs (-n 20) or -n all" in result.stderr


def test_the_text_listing_is_a_page_and_json_lists_every_run(archive_store, monkeypatch):
    """The default page is 50 runs; with a page of 2, text shows 2 and JSON and CSV all 3."""
    store, ids = archive_store
    monkeypatch.setattr(listing, "DEFAULT_PAGE", 2)
    text = run_cli("--store", store, "ls").stdout
    assert len(text_ids(text)) == 2 and "1 older not shown" in text
    assert len(listed(store)) == 3
    assert len(run_cli("--store", store, "ls", "--csv").stdout.splitlines()) == 1 + 3


@pytest.mark.parametrize(("options", "names"), [
    (["--tool", "nsys"], ["async"]),
    (["--tool", "ncu"], ["soa", "gemm"]),
    (["--gpu", "rtx 40"], ["async", "soa"]),  # a part of the name, in any case
    (["--gpu", "GTX 1660"], ["gemm"]),
    (["--gpu", "A100"], []),
    (["--label", "before/*"], ["soa", "gemm"]),
    (["--label", "after/1"], ["async"]),
    (["--label", "before"], []),  # a glob matches whole names
    (["--since", "2026-01-15"], ["async", "soa"]),
    (["--since", "2026-01-20T09:00"], ["async", "soa"]),  # at or after
    (["--since", "2026-01-20 09:00:01Z"], ["async"]),
    (["--since", "2026-01-20T10:00:01+01:00"], ["async"]),  # an offset is converted to UTC
    (["--since", "100000d"], ["async", "soa", "gemm"]),
    (["--since", "2999-01-01"], []),
    (["--tool", "ncu", "--label", "before/*", "--since", "2026-01-15"], ["soa"]),
])
def test_filters(archive_store, options, names):
    store, ids = archive_store
    assert listed(store, *options) == [ids[n] for n in names]


def test_a_filter_that_matches_nothing_says_so(archive_store):
    store, _ids = archive_store
    assert run_cli("--store", store, "ls", "--gpu", "A100").stdout == (
        "no run matches these filters; `triage ls` lists all 3\n")


@pytest.mark.parametrize("options", [["--since", "yesterday"], ["--since", "5y"],
                                     ["--tool", "rocprof"], ["--json", "--csv"]])
def test_bad_options_are_usage_errors(archive_store, options):
    store, _ids = archive_store
    assert "rror" in run_cli("--store", store, "ls", *options, expect=2).stderr


def test_since_an_age_counts_back_from_now():
    from datetime import datetime, timezone

    now = datetime(2026, 2, 1, 12, 30, tzinfo=timezone.utc)
    assert listing.parse_since("90m", now) == "2026-02-01T11:00:00"
    assert listing.parse_since("2w", now) == "2026-01-18T12:30:00"


def test_csv_is_like_query_with_labels_as_json(archive_store):
    store, ids = archive_store
    rows = list(csv.reader(io.StringIO(run_cli("--store", store, "ls", "--csv").stdout)))
    assert rows[0] == [*listing.LIST_COLUMNS, "labels"]
    by_id = {r[0]: dict(zip(rows[0], r, strict=True)) for r in rows[1:]}
    assert json.loads(by_id[ids["soa"]]["labels"]) == ["before/2"]
    assert by_id[ids["async"]]["tool"] == "nsys"
    assert by_id[ids["gemm"]]["gpu"] == "NVIDIA GeForce GTX 1660 SUPER"


def test_json_keys_are_the_ones_the_docs_list(archive_store):
    store, ids = archive_store
    rows = json.loads(run_cli("--store", store, "ls", "--json").stdout)
    assert [list(r) for r in rows] == [[*listing.LIST_COLUMNS, "labels"]] * 3
    assert rows[0]["labels"] == ["after/1"] and rows[0]["archived"] == RUNS["async"][1]
    usage = (REPO / "docs" / "usage.md").read_text()
    documented = re.search(r"`ls --json` keys: (.*?)\.", usage, re.DOTALL)
    assert documented, "docs/usage.md lists the keys of `ls --json`"
    assert re.findall(r"`(\w+)`", documented.group(1)) == [*listing.LIST_COLUMNS, "labels"]


def ls_on_a_terminal(store: Path, columns: str) -> list[str]:
    """`triage ls` in a new process whose stdout is a pseudo-terminal, with $COLUMNS set."""
    return on_a_terminal(["ls"], {"TRIAGE_STORE": str(store), "COLUMNS": columns})


@pytest.mark.parametrize("columns", ["60", "72", "90", "200"])
def test_the_text_listing_fits_the_terminal_width(archive_store, columns):
    store, ids = archive_store
    lines = ls_on_a_terminal(store, columns)
    assert max(map(len, lines)) <= int(columns), lines
    assert text_ids("\n".join(lines)) == [ids[n][:12] for n in ("async", "soa", "gemm")]
    if columns == "200":  # room for every name whole
        assert lines[2].split()[-2:] == ["after/1", RUNS["async"][0]]


def test_piped_text_is_whole_whatever_columns_says(archive_store, monkeypatch):
    """Nothing is cut when stdout is no terminal (`triage ls | grep ...` finds whole names);
    --width cuts to fit where asked."""
    store, _ids = archive_store
    monkeypatch.setenv("COLUMNS", "60")
    lines = run_cli("--store", store, "ls").stdout.splitlines()
    assert "…" not in "\n".join(lines)
    assert all(RUNS[n][0] in "\n".join(lines) for n in RUNS)
    narrow = run_cli("--store", store, "ls", "--width", "90").stdout.splitlines()
    assert max(map(len, narrow)) <= 90 < max(map(len, lines))


def test_a_run_indexed_again_is_listed_once_with_its_newest_row(archive_store, tmp_path):
    """Adding a note writes a second catalog row for the run; ls, latest and a merge keep the
    newer one."""
    store, ids = archive_store
    copy = Path(shutil.copytree(store, tmp_path / "store"))
    run_cli("--store", copy, "archive", corpus_file(RUNS["soa"][0]), "--note", "rerun of 2")
    rows = json.loads(run_cli("--store", copy, "ls", "--json").stdout)
    assert [(r["id"], r["notes"]) for r in rows] == [
        (ids["async"], None), (ids["soa"], "rerun of 2"), (ids["gemm"], None)]
    assert json.loads(run_cli("--store", copy, "show", "latest", "--json").stdout)["id"] == \
        ids["async"]
    catalog.merge(Store.open(copy))
    assert len(catalog.segments(Store.open(copy))) == 1
    assert json.loads(run_cli("--store", copy, "ls", "--json").stdout) == rows


def test_json_and_csv_stream_as_the_one_piece_writers_write():
    """A long list comes out in batches byte for byte as `to_json`/`to_csv` write it whole."""
    items = [{"id": f"{i:064x}", "kernels": i, "labels": ["a"] if i % 7 else [],
              "x": float("nan")} for i in range(250)]
    for size in (1, 100, 101, 250):
        batches = [items[i:min(i + 40, size)] for i in range(0, size, 40)]
        assert "".join(textview.json_chunks(batches)) == textview.to_json(items[:size])
        rows = [tuple(item.values()) for item in items[:size]]
        assert "".join(textview.csv_chunks(list(items[0]), [rows[:3], [], rows[3:]])) == \
            textview.to_csv(list(items[0]), rows)
    assert "".join(textview.json_chunks([])) == textview.to_json([]) == "[]"


# -- a merged catalog: paged from its end, the segments after it slotted in ----------------


def merged_copy(archive_store, tmp_path, monkeypatch) -> tuple[Path, dict[str, str]]:
    """A copy of the three-run store whose catalog is one merged segment of a run per row
    group, so that every listing pages across row groups."""
    store, ids = archive_store
    copy = Path(shutil.copytree(store, tmp_path / "store"))
    monkeypatch.setattr(catalog, "MERGED_ROWS", 1)
    catalog.merge(Store.open(copy))
    merged = pq.ParquetFile(copy / catalog.segments(Store.open(copy))[0])
    assert catalog.MERGED in merged.metadata.metadata and merged.num_row_groups == 3
    return copy, ids


@pytest.mark.parametrize("streamed", [None, "WHOLE_ROWS", "WHOLE_RANKINGS"])
def test_rows_of_runs_indexed_again_after_a_merge_are_listed_once(archive_store, tmp_path,
                                                                  monkeypatch, streamed):
    """A note added after the merge is a newer row of a merged run; a stale row (indexed
    before the merged one: a segment a racing merge had not deleted yet) loses to it. A query
    reads the catalog whole, or streams the merged segment past either size (`streamed`)."""
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    datasets: list[object] = []
    made = catalogview.View.merged_dataset
    monkeypatch.setattr(catalogview.View, "merged_dataset",
                        lambda self: datasets.append(made(self)) or datasets[-1])
    if streamed:
        monkeypatch.setattr(query, streamed, 0)
    store = Store.open(copy)
    stale = catalog.catalog_row(store, ids["soa"], store.runs.read_manifest(ids["soa"]),
                                {**store.annotations.read(ids["soa"]), "notes": [
                                    {"time": "2000-01-01T00:00:00Z", "text": "stale"}]})
    catalog._write_segment(store, pa.Table.from_pylist(
        [dict(stale, indexed="2000-01-01T00:00:00.000000Z")], schema=arrow_schema("catalog")))
    run_cli("--store", copy, "archive", corpus_file(RUNS["gemm"][0]), "--note", "again")
    rows = json.loads(run_cli("--store", copy, "ls", "--json").stdout)
    assert [(r["id"], r["notes"]) for r in rows] == [
        (ids["async"], None), (ids["soa"], None), (ids["gemm"], "again")]
    assert text_ids(run_cli("--store", copy, "ls").stdout) == [r["id"][:12] for r in rows]
    assert listed(copy, "-n", "2") == [ids["async"], ids["soa"]]
    assert json.loads(run_cli("--store", copy, "show", "latest", "--json").stdout)["id"] == \
        ids["async"]
    queried = json.loads(run_cli("--store", copy, "query", "select run_id, notes, labels from "
                                 "runs order by archived", "--json").stdout)
    assert [(r["run_id"], r["notes"]) for r in queried] == [
        (ids["gemm"], "again"), (ids["soa"], None), (ids["async"], None)]
    assert queried[0]["labels"] == ["before/1"]
    ranked = json.loads(run_cli("--store", copy, "query", "select distinct run_id from "
                                "kernel_summary order by run_id", "--json").stdout)
    assert [r["run_id"] for r in ranked] == sorted(ids.values())
    # streamed: both statements past WHOLE_ROWS, only the ranking one past WHOLE_RANKINGS
    assert len(datasets) == {None: 0, "WHOLE_ROWS": 2, "WHOLE_RANKINGS": 1}[streamed]
    assert all(d is not None for d in datasets)


def test_query_of_some_runs_reads_only_the_row_groups_that_hold_them(archive_store, tmp_path,
                                                                    monkeypatch):
    """`query --run` takes each run's newest row (a note added after the merge is in a later
    segment) and reads the merged segment's row groups of those runs, not the segment."""
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    run_cli("--store", copy, "archive", corpus_file(RUNS["gemm"][0]), "--note", "again")
    read: list[int] = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, group, **kw: read.append(group) or original(self, group,
                                                                                 **kw))
    whole = pq.ParquetFile.read
    monkeypatch.setattr(pq.ParquetFile, "read", lambda self, **kw: pytest.fail("merged, whole")
                        if catalog.MERGED in (self.metadata.metadata or {}) else whole(self, **kw))
    sql = "select run_id, notes, labels, k.name is not null ranked from runs " \
          "left join (select distinct run_id, name from kernel_summary) k using (run_id)"
    for name, note, groups in (("soa", None, {1}), ("gemm", "again", set())):
        read.clear()
        rows = json.loads(run_cli("--store", copy, "query", "--run", ids[name], sql,
                                  "--json").stdout)
        assert [(r["run_id"], r["notes"], r["labels"], r["ranked"]) for r in rows] == [
            (ids[name], note, [LABELS[name]], True)]
        # oldest first, a run a row group: gemm's (0) is read for its `indexed` stamp only
        assert set(read) - {0} == groups, read


def test_ls_of_every_run_reads_the_merged_segment_a_row_group_at_a_time(archive_store,
                                                                        tmp_path, monkeypatch):
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    expected = [ids["async"], ids["soa"], ids["gemm"]]
    assert listed(copy) == expected
    read = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, group, **kw: read.append(group) or original(self, group,
                                                                                 **kw))
    monkeypatch.setattr(catalogview, "BATCH_ROWS", 1)
    batches = listing.list_runs(Store.open(copy)).batches()
    assert [r["id"] for r in next(batches)] == expected[:1] and read == [2]
    assert [r["id"] for b in batches for r in b] == expected[1:] and read == [2, 1, 0]


def test_id_prefixes_resolve_in_the_merged_segment_and_after_it(archive_store, tmp_path,
                                                                monkeypatch):
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    newer = json.loads(run_cli("--store", copy, "archive", corpus_file(
        "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"), "--json").stdout)[0]["id"]
    for run_id in [*ids.values(), newer]:
        shown = json.loads(run_cli("--store", copy, "show", run_id[:8], "--json").stdout)
        assert shown["id"] == run_id
    diff = json.loads(run_cli("--store", copy, "diff", ids["gemm"][:8], newer[:8],
                              "--json").stdout)
    assert (diff["a"], diff["b"]) == (ids["gemm"], newer)
    missing = run_cli("--store", copy, "show", "ffffffffffff", expect=1).stderr
    assert "not found" in missing


def test_a_run_with_a_manifest_and_no_row_is_listed_while_a_writer_is_at_work(
        archive_store, tmp_path, monkeypatch):
    """A writer holds its lease from before its manifest to after its row; while one does,
    readers reconcile the catalog with runs/; a merge indexes whatever has no row."""
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    newer = json.loads(run_cli("--store", copy, "archive", corpus_file(
        "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"), "--json").stdout)[0]["id"]
    store = Store.open(copy)

    def lose_the_new_row() -> None:  # as if its writer had died before writing it
        for key in catalog.segments(store):
            if catalog.MERGED not in (pq.ParquetFile(copy / key).metadata.metadata or {}):
                (copy / key).unlink()

    lose_the_new_row()
    assert listed(copy)[0] != newer  # no lease: the catalog is trusted
    shown = json.loads(run_cli("--store", copy, "show", newer[:12], "--json").stdout)
    assert shown["id"] == newer  # an id prefix the catalog misses is looked for in runs/
    with lease.held(store, "archive"):
        assert listed(copy)[0] == newer  # indexed from its manifest (and written)
    lose_the_new_row()
    catalog.merge(store)
    assert listed(copy) == [newer, ids["async"], ids["soa"], ids["gemm"]]


def test_gc_indexes_a_dead_writers_run_before_it_removes_its_lease(archive_store, tmp_path,
                                                                   monkeypatch):
    """A writer killed between its manifest and its row leaves its lease (readers list runs/
    while it is there); gc indexes the run before removing it, so that the catalog, trusted
    again, has it."""
    copy, ids = merged_copy(archive_store, tmp_path, monkeypatch)
    newer = json.loads(run_cli("--store", copy, "archive", corpus_file(
        "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"), "--json").stdout)[0]["id"]
    for key in catalog.segments(Store.open(copy)):
        if catalog.MERGED not in (pq.ParquetFile(copy / key).metadata.metadata or {}):
            (copy / key).unlink()  # its row, never written
    killed = ("import os, sys; from triage.archive import lease; "
              "from triage.archive.store import Store; "
              "held = lease.held(Store.open(sys.argv[1]), 'archive'); held.__enter__(); "
              "os._exit(0)")
    subprocess.run([sys.executable, "-c", killed, str(copy)], check=True)
    assert len(os.listdir(copy / "leases")) == 1
    result = json.loads(run_cli("--store", copy, "gc", "--grace", "0s", "--json").stdout)
    assert not os.listdir(copy / "leases"), result
    assert listed(copy) == [newer, ids["async"], ids["soa"], ids["gemm"]]


@pytest.mark.parametrize("step", ["catalog segment", "annotations"])
def test_a_writer_that_cannot_index_its_run_leaves_its_lease(archive_store, tmp_path,
                                                             monkeypatch, step):
    """The manifest is written, then the catalog segment or the annotations before it fail
    (the store filled up, the server went away): the writer reports the failure and keeps its
    lease, so that readers reconcile the catalog with runs/ and list the run, until gc finds
    the writer gone."""
    copy, _ids = merged_copy(archive_store, tmp_path, monkeypatch)

    def refused(*args, **kwargs):
        raise StoreError(f"cannot write the {step} (test)")

    with monkeypatch.context() as patch:
        if step == "annotations":
            patch.setattr(Annotations, "annotate", refused)
        else:
            patch.setattr(catalog, "add_rows", refused)
        failed = run_cli("--store", copy, "archive", corpus_file(
            "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"), expect=1)
    *filed, error = failed.output.splitlines()
    assert step in error
    # the run is whole before its catalog row is written: named as filed, then the failure
    assert len(filed) == (step == "catalog segment") and all("(new)" in f for f in filed), filed
    assert len(os.listdir(copy / "leases")) == 1
    made = os.listdir(copy / "runs")
    assert len(made) == 4  # the three runs and the new one, whose row was never written
    newer = next(Path(m).stem for m in made if Path(m).stem not in _ids.values())
    assert newer in listed(copy)  # indexed from its manifest (archived: as it records)
