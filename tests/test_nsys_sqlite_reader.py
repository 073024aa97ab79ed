"""The .sqlite reader: launch-level tables read columnar (ADBC's SQLite driver into Arrow, string
lookups resolved in Arrow) must give the bytes `sqlite3`'s rows give, whatever the columns hold.

ADBC's driver guesses a column's type from the first batch of rows and holds the later batches
to it; triage reads BATCH rows a batch, checks each column against the type it reads it as, and
carries on with `sqlite3` from the first row the driver cannot give (a value of another type).
The exports here are real corpus exports, copied and changed with sqlite3 (`grown`).
"""

from __future__ import annotations

import errno
import sqlite3
from contextlib import closing

import pytest

from helpers import corpus_file, corpus_manifest, grown

SQLITE_ROWS = [r for r in corpus_manifest() if r["kind"] == "nsys-sqlite"]


def table_hashes(triage, path, store) -> dict[str, str]:
    shown = triage.json("--store", store, "archive", path)[0]
    return {name: ref["sha256"] for name, ref in
            triage.json("--store", store, "show", shown["id"])["tables"].items()}


def both_ways(triage, path, tmp_path, monkeypatch) -> tuple[dict, dict, list]:
    """The run's table hashes read columnar, then with the columnar read switched off; and
    the (table, rows read columnar before) of each launch-level query `sqlite3` read."""
    from triage.capture import nsys_sqlite

    by_sqlite3: list[tuple[str, int]] = []
    fetched = nsys_sqlite.SqliteExport._fetched

    def watched(self, query, fields, skip=0):
        if query.table != "StringIds":
            by_sqlite3.append((query.table, skip))
        return fetched(self, query, fields, skip)

    with monkeypatch.context() as patch:
        patch.setattr(nsys_sqlite.SqliteExport, "_fetched", watched)
        columnar = table_hashes(triage, path, tmp_path / "columnar")

    def switched_off(self, query, fields):
        raise nsys_sqlite.ColumnarUnfit("switched off")
        yield  # a generator, as the real one

    with monkeypatch.context() as patch:
        patch.setattr(nsys_sqlite.SqliteExport, "_columnar", switched_off)
        by_rows = table_hashes(triage, path, tmp_path / "rows")
    return columnar, by_rows, by_sqlite3


def unconstrained(table: str) -> tuple[str, ...]:
    """SQL that makes a table's columns nullable (NOT NULL dropped), its rows kept in order."""
    return (f"CREATE TABLE copied AS SELECT * FROM {table} ORDER BY rowid", f"DROP TABLE {table}",
            f"ALTER TABLE copied RENAME TO {table}")


def changed(path, *statements: str):
    """The export with the statements run on it."""
    with closing(sqlite3.connect(path)) as con:
        for statement in statements:
            con.execute(statement)
        con.commit()
    return path


@pytest.mark.parametrize("row", SQLITE_ROWS, ids=lambda r: r["file"].split("/")[-1][:56])
def test_every_corpus_export_reads_the_same_columnar(triage, corpus, row, tmp_path, monkeypatch):
    """With 5-row batches: many batches, lookups resolved batch by batch."""
    from triage.capture import nsys_sqlite

    monkeypatch.setattr(nsys_sqlite, "BATCH", 5)
    columnar, by_rows, by_sqlite3 = both_ways(triage, corpus / row["file"], tmp_path, monkeypatch)
    assert columnar == by_rows and by_sqlite3 == []


@pytest.mark.parametrize("batch", [65536, 512], ids=["guessed from all", "guessed from NULLs"])
def test_text_column_null_for_its_first_rows_then_text(triage, tmp_path, monkeypatch, batch):
    """API names NULL for the first 1,100 calls, then text: ADBC's own 1,024-row guess would
    type the column int64 and fail on the text. Read 65,536 rows a batch, the guess sees the
    text; read 512 a batch, the read fails on it and `sqlite3` carries on from there."""
    from triage.capture import nsys_sqlite

    monkeypatch.setattr(nsys_sqlite, "BATCH", batch)
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    path = changed(grown(tmp_path / "late-text.sqlite", 2000, table), *unconstrained(table),
                   f"UPDATE {table} SET nameId = NULL WHERE rowid <= 1100")
    columnar, by_rows, by_sqlite3 = both_ways(triage, path, tmp_path, monkeypatch)
    assert columnar == by_rows
    assert by_sqlite3 == ([] if batch > 2000 else [(table, 1024)])
    names = triage.json("--store", tmp_path / "columnar", "query",
                        "select count(name) as n from api_calls where api = 'runtime'")
    assert names == [{"n": 900}]


def test_names_held_as_text_are_read_by_sqlite3(triage, tmp_path, monkeypatch):
    """An id column holding the name itself (as old exports do) from row 1,100 on."""
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    path = changed(grown(tmp_path / "inline.sqlite", 2000), *unconstrained(table),
                   f"UPDATE {table} SET shortName = NULL WHERE rowid <= 1100",
                   f"UPDATE {table} SET shortName = 'k' || rowid WHERE rowid > 1100")
    columnar, by_rows, by_sqlite3 = both_ways(triage, path, tmp_path, monkeypatch)
    assert columnar == by_rows and by_sqlite3 == [(table, 0)]
    names = triage.json("--store", tmp_path / "columnar", "query",
                        "select count(short_name) as n from kernels")
    assert names == [{"n": 900}]


def test_all_null_columns(triage, tmp_path, monkeypatch):
    """A column of only NULLs comes back from ADBC as int64: an id column (its lookups) and a
    text column computed in SQL (API names) are text columns of NULLs all the same."""
    path = changed(grown(tmp_path / "nulls.sqlite", 2000),
                   *unconstrained("CUPTI_ACTIVITY_KIND_RUNTIME"),
                   "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET mangledName = NULL",
                   "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = NULL")
    columnar, by_rows, by_sqlite3 = both_ways(triage, path, tmp_path, monkeypatch)
    assert columnar == by_rows and by_sqlite3 == []
    counts = triage.json("--store", tmp_path / "columnar", "query",
                         "select (select count(mangled_name) from kernels) as k, "
                         "(select count(name) from api_calls) as a")
    assert counts == [{"k": 0, "a": 0}]


@pytest.mark.parametrize("batch", [65536, 512], ids=["in the first batch", "in a later batch"])
def test_columns_holding_other_types_read_as_sqlite3_converts_them(triage, tmp_path,
                                                                    monkeypatch, batch):
    """Text and a float in integer columns, a float and text in id columns: `sqlite3`'s rows
    (NULL, the float truncated, the text itself) from the row the driver cannot type on."""
    from triage.capture import nsys_sqlite

    monkeypatch.setattr(nsys_sqlite, "BATCH", batch)
    path = changed(grown(tmp_path / "mixed.sqlite", 2000),
                   "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'wide' WHERE rowid = 1500",
                   "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridY = 2.5 WHERE rowid = 1600",
                   "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 'inline' "
                   "WHERE rowid = 1700")
    columnar, by_rows, by_sqlite3 = both_ways(triage, path, tmp_path, monkeypatch)
    assert columnar == by_rows
    assert by_sqlite3 == [("CUPTI_ACTIVITY_KIND_KERNEL", 0 if batch > 2000 else 1024)]
    rows = triage.json("--store", tmp_path / "columnar", "query",
                       "select count(*) - count(grid_x) as x, count(*) filter (grid_y = 2) as y, "
                       "count(*) filter (name = 'inline') as n from kernels")
    assert rows[0]["x"] == 1 and rows[0]["y"] >= 1 and rows[0]["n"] == 1


def test_a_failure_in_the_middle_of_a_columnar_read_is_one_line(triage, tmp_path, monkeypatch):
    """A write that fails while a table is read columnar (its ADBC statement still open, the
    read's generator suspended) is reported as itself: closing the export closes the
    statement first, and the store the archive made is removed again."""
    from test_archive_leftovers import check_clean_failure
    from triage.archive import tables
    from triage.capture import nsys_sqlite

    monkeypatch.setattr(nsys_sqlite, "BATCH", 2)  # the kernels span many batches
    write = tables.TableWriter.write_arrow

    def full(self, table):
        if self.name == "kernels":
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, table)

    monkeypatch.setattr(tables.TableWriter, "write_arrow", full)
    store = tmp_path / "store"
    result = triage("--store", store, "archive",
                    corpus_file("Lashi0812__CudaProgramming__streamSimple.sqlite"), expect=None)
    check_clean_failure(triage, store, result, runs_before=[])


def test_the_largest_table_is_read_first_and_an_unread_one_closes(tmp_path, monkeypatch):
    """`batches` starts the read of the export's largest launch-level table at once, on a
    thread of its own, before any batch is asked for (SQLite sorts it while the archive sets
    up); a reader closed before reading it (a failure, Ctrl-C) ends that read and the one
    begun beside it, their statements and their threads, and leaves no statement open."""
    import threading

    from triage.capture import nsys_sqlite
    from triage.capture.formats import prepare_report

    monkeypatch.setattr(nsys_sqlite, "BATCH", 100)
    # 2,000 runtime API calls, fewer kernels: the kernels (read first) are begun beside them
    path = grown(tmp_path / "calls.sqlite", 2000, "CUPTI_ACTIVITY_KIND_RUNTIME")
    started, ended = threading.Event(), []
    reading = nsys_sqlite.SqliteExport._adbc_batches

    def watched(export, query):
        if query.table != "StringIds":
            started.set()
        try:
            yield from reading(export, query)
        finally:
            ended.append(query.table)

    monkeypatch.setattr(nsys_sqlite.SqliteExport, "_adbc_batches", watched)
    before = set(threading.enumerate())
    prepared = prepare_report(path)
    export = prepared.export
    try:
        stream = prepared.batches(0)
        assert started.wait(20), "no read started before a batch was asked for"
        next(stream)  # a read begun beside it, left half-way (a failure, Ctrl-C)
    finally:
        prepared.close()
    assert {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"} <= set(ended)
    assert export._reading == set() and export._adbc == {}
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
