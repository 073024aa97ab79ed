"""Archiving Nsight Systems reports made here: a tiny NVTX program captured with the real nsys.

The captures need gcc, nsys and the nvidia-nvtx headers but no GPU. Without them these tests skip,
unless TRIAGE_REQUIRE_TOOLS=1 (CI), which turns a missing tool into a failure. The demo captures
under triage/demo (made by its make_demo.sh) are used where nsys is not needed.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import REPO, strings_in
from nvtx_capture import capture, export_sqlite, nsys_version
from triage.capture.nsys import PreparedNsys

DEMO = REPO / "triage" / "demo"
SECRET = "hunter2"


@pytest.fixture(scope="session")
def steps_capture(nvtx_program, nsys_exe, tmp_path_factory) -> Path:
    """6 steps, forward 200 us, backward 1000 us (far apart: a preempted spin on a busy CI
    machine cannot swap their ranks); the environment holds a secret and a value that is not
    UTF-8 (nsys records its environment in the report)."""
    env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    env.update({b"MY_API_TOKEN": SECRET.encode(), b"TRIAGE_LATIN1": b"caf\xe9"})
    return capture(nvtx_program, [6, 200, 1000], tmp_path_factory.mktemp("capture") / "steps",
                   env=env, nsys=nsys_exe)


def archive_one(triage, path, *options) -> dict:
    run = triage.json("archive", path, *options)[0]
    return triage.json("show", run["id"])


def query(triage, sql: str) -> list[dict]:
    return triage.json("query", sql)


# -- a fresh capture -----------------------------------------------------------------------------


def test_capture_archives_with_its_provenance(triage, steps_capture, nsys_exe):
    shown = archive_one(triage, steps_capture)
    local = nsys_version(nsys_exe)
    assert shown["tool"] == "nsys" and shown["tool_version"] == local
    assert shown["versions"]["nsys capture"].startswith(local + "-")
    assert shown["versions"]["nsys export"] == local
    report = shown["reports"][0]
    assert report["format"] == "nsys-rep" and report["export"]["by"] == "triage"
    assert report["export"]["nsys_version"] == local and report["export"]["schema_version"]
    assert shown["command"].startswith(f"{nsys_exe} profile --trace=nvtx,osrt --sample=none")
    assert shown["application"]["argv"][1:] == ["6", "200", "1000"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", shown["created"])
    assert shown["environment"]["host"]["name"] == os.uname().nodename
    assert shown["environment"]["host"]["platform"] == "linux"
    settings = {k: (shown["settings"][k], shown["settings_source"][k]) for k in shown["settings"]}
    assert settings["trace"] == ("nvtx,osrt", "report")  # the report file lists what it traced
    assert settings["sample"] == ("none", "command")
    assert settings["cpuctxsw"] == ("none", "command")
    assert settings["cuda_memory_usage"] == ("false", "default")
    assert settings["capture_range"] == ("none", "default")
    assert shown["kernels"] == 0 and shown["notices"] == []


def test_nvtx_ranges_nest_with_domains_and_without_marks(triage, steps_capture):
    archive_one(triage, steps_capture)
    rows = query(triage, "select text, domain, kind, depth, count(*) n, min(duration_ns) shortest "
                 "from nvtx_ranges group by all order by text")
    by_text = {r["text"]: r for r in rows}
    assert set(by_text) == {"backward", "epoch", "forward", "step"}  # "step done" is a mark
    assert by_text["epoch"] | {"shortest": 0} == {"text": "epoch", "domain": "triage",
                                                   "kind": "start_end", "depth": None, "n": 1,
                                                   "shortest": 0}
    for text, depth in (("step", 0), ("forward", 1), ("backward", 1)):
        assert (by_text[text]["domain"], by_text[text]["kind"]) == (None, "push_pop")
        assert (by_text[text]["depth"], by_text[text]["n"]) == (depth, 6)
    assert by_text["forward"]["shortest"] >= 200_000
    assert by_text["backward"]["shortest"] >= 1_000_000
    orphans = query(triage, "select count(*) n from nvtx_ranges c where depth = 1 and not exists "
                    "(select 1 from nvtx_ranges p where p.text = 'step' and p.start_ns <= "
                    "c.start_ns and p.end_ns >= c.end_ns)")
    assert orphans == [{"n": 0}]


def test_nvtx_summary_ranks_the_ranges(triage, steps_capture):
    archive_one(triage, steps_capture)
    rows = query(triage, "select domain, text, kind, instances, total_ns, share "
                 "from nvtx_summary order by total_ns desc")
    # The spins are wall-clock: under load a preempted "forward" can outlast "backward", so
    # the expected ranking is the ranges' own totals, not the spins the program asked for.
    totals = query(triage, "select text, sum(duration_ns) total from nvtx_ranges "
                   "where kind = 'push_pop' group by text order by total desc")
    ranked = [r["text"] for r in rows if r["kind"] == "push_pop"]
    assert ranked == [r["text"] for r in totals] and ranked[0] == "step"  # it holds the others
    assert {r["text"]: r["total_ns"] for r in rows if r["kind"] == "push_pop"} == \
        {r["text"]: r["total"] for r in totals}
    assert {r["text"]: r["instances"] for r in rows} == {"step": 6, "forward": 6, "backward": 6,
                                                          "epoch": 1}
    assert sum(r["share"] for r in rows if r["kind"] == "push_pop") == pytest.approx(1.0)


def test_sqlite_export_gives_the_same_tables(triage, steps_capture, nsys_exe, tmp_path):
    exported = export_sqlite(steps_capture, tmp_path / "steps.sqlite", nsys=nsys_exe)
    from_rep = archive_one(triage, steps_capture)
    from_sqlite = archive_one(triage, exported)
    assert from_rep["reports"][0]["export"]["format"] == "arrow"
    assert from_sqlite["reports"][0]["export"] | {"format": "arrow", "by": "triage"} == \
        from_rep["reports"][0]["export"]
    # Read through DuckDB (Arrow) or sqlite3, every table has the same bytes.
    assert {k: v["sha256"] for k, v in from_rep["tables"].items()} == \
        {k: v["sha256"] for k, v in from_sqlite["tables"].items()}
    assert from_sqlite["tool_version"] == from_rep["tool_version"]
    assert from_sqlite["command"] is None and from_sqlite["versions"]["nsys capture"] is None
    for table in ("nvtx_ranges", "osrt_calls", "nvtx_summary"):
        rows = [query(triage, f"select * exclude (run_id) from {table} where run_id = '{run}' "
                              "order by all") for run in (from_rep["id"], from_sqlite["id"])]
        assert rows[0] == rows[1] and rows[0], table


@pytest.mark.parametrize("check", ["rising", "slices", "unordered", "scrambled"],
                         ids=["rising start", "each slice sorted", "sorted whole",
                              "slice results out of order"])
def test_arrow_export_read_in_slices_gives_the_sqlite_tables(triage, steps_capture, nsys_exe,
                                                              tmp_path, monkeypatch, check):
    """An Arrow export's launch-level queries run slice by slice, each slice numbered (rowid)
    as it is read, when the rows are in the query's order: known at once from a first key
    that rises strictly, else from each slice sorted with the last selected row of the one
    before; with 5-row slices that is many slices, and the tables must still be the SQLite
    route's bytes. Rows not in the query's order take the whole-table sort instead: the same
    bytes again. A slice is read unsorted first; rows that DuckDB gave back out of export
    order (reversed here) are read again sorted."""
    from triage.capture import nsys_arrow, nsys_sqlite

    for reader in (nsys_arrow, nsys_sqlite):
        monkeypatch.setattr(reader, "BATCH", 5)
    if check not in ("rising", "scrambled"):
        monkeypatch.setattr(nsys_arrow.ArrowExport, "rises", lambda *_: False)
    if check == "unordered":
        monkeypatch.setattr(nsys_arrow.ArrowExport, "in_order", lambda *_: False)
    if check == "scrambled":
        run = nsys_arrow.ArrowExport.run_sql

        def reversed_unless_sorted(self, sql, part, params):
            found = run(self, sql, part, params)
            if "ORDER BY" in sql:
                return found
            return [b.take(pa.array(range(b.num_rows - 1, -1, -1))) for b in reversed(found)]

        monkeypatch.setattr(nsys_arrow.ArrowExport, "run_sql", reversed_unless_sorted)
    exported = export_sqlite(steps_capture, tmp_path / "steps.sqlite", nsys=nsys_exe)
    tables = [{k: v["sha256"] for k, v in archive_one(triage, path)["tables"].items()}
              for path in (steps_capture, exported)]
    assert tables[0] == tables[1]
    assert len(query(triage, "select * from nvtx_ranges")) > 2 * 5


def test_export_goes_where_staging_says_and_close_removes_it(steps_capture, nsys_exe, tmp_path):
    """The archive stages exports in its store (a temp file gc removes if the archive is
    killed); the reader writes only where it is told, and removes what it wrote."""
    staging = tmp_path / "staging"
    staging.mkdir()
    made: list[Path] = []

    def new_file(suffix: str) -> Path:
        made.append(staging / f"export-{len(made)}{suffix}")
        made[-1].touch()
        return made[-1]

    before = sorted(os.listdir(steps_capture.parent))
    prepared = PreparedNsys.open(steps_capture, "nsys-rep", nsys=nsys_exe, staging=new_file)
    try:
        assert [p.name for p in staging.iterdir()] == ["export-0-export.arrow"]
        assert made[0].stat().st_size > 0
    finally:
        prepared.close()
    assert list(staging.iterdir()) == []
    assert sorted(os.listdir(steps_capture.parent)) == before


ARROW_FAILURES = {
    "fails": 'echo "Exportation error: arrow unsupported" >&2; exit 1',
    "fails saying nothing": 'echo "Exportation error:" >&2; exit 1',
    "unreadable": 'for a; do out=$prev; prev=$a; done; echo garbage > "$out"; exit 0',
}


@pytest.mark.parametrize("failure", sorted(ARROW_FAILURES))
def test_sqlite_export_when_the_arrow_export_fails(triage, steps_capture, nsys_exe, tmp_path,
                                                   failure):
    """An nsys whose Arrow export fails or cannot be read still archives, via SQLite."""
    wrapper = tmp_path / "nsys"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *"--type arrow"*) {ARROW_FAILURES[failure]};; '
                       f'esac\nexec {nsys_exe} "$@"\n')
    wrapper.chmod(0o755)
    via_sqlite = archive_one(triage, steps_capture, "--nsys", str(wrapper))
    assert via_sqlite["reports"][0]["export"]["format"] == "sqlite"
    via_arrow = archive_one(triage, steps_capture)  # the same report: already archived
    assert via_arrow["id"] == via_sqlite["id"]


def test_archiving_a_report_again_needs_no_export(triage, steps_capture, tmp_path):
    """A report already in the store is found by its hash before nsys would be run."""
    first = triage.json("archive", steps_capture)[0]
    again = triage.json("archive", steps_capture, "--nsys", str(tmp_path / "no-such-nsys"))[0]
    assert again["id"] == first["id"] and first["new"] and not again["new"]
    result = triage("archive", steps_capture, "--nsys", str(tmp_path / "no-such-nsys"),
                    "--store", str(tmp_path / "new-store"), expect=1)
    assert "nsys not found" in result.output


# -- secrets and odd bytes -----------------------------------------------------------------------


def test_secrets_are_redacted_everywhere_but_the_raw_report(triage, steps_capture, store_dir):
    raw = steps_capture.read_bytes()
    shown = archive_one(triage, steps_capture)
    assert shown["environment"]["variables"]["MY_API_TOKEN"] == "<redacted>"
    assert SECRET not in triage("show", "--json", shown["id"]).stdout
    blob = shown["reports"][0]["sha256"]
    checked = 0
    for path in (p for p in store_dir.rglob("*") if p.is_file()):
        if path.name == blob[2:] and path.parent.name == blob[:2]:
            assert path.read_bytes() == raw  # the user's own file, stored unchanged
        elif path.read_bytes()[:4] == b"PAR1":
            strings = strings_in(pq.read_table(path).to_pylist())
            assert not any(SECRET in s for s in strings), path
            checked += 1
        else:
            assert SECRET.encode() not in path.read_bytes(), path
    assert checked >= 10  # every table of the run, and the catalog segment


def test_environment_values_that_are_not_utf8_do_not_crash(triage, steps_capture):
    shown = archive_one(triage, steps_capture)
    assert shown["environment"]["variables"]["TRIAGE_LATIN1"] == "caf\ufffd"


# -- clear errors --------------------------------------------------------------------------------


def store_snapshot(store_dir: Path) -> dict:
    return {str(p): p.stat().st_size for p in store_dir.rglob("*") if p.is_file()}


def test_missing_nsys_is_a_clear_error(triage, store_dir, tmp_path, monkeypatch):
    triage("archive", DEMO / "before.sqlite")
    before = store_snapshot(store_dir)
    result = triage("archive", DEMO / "after.nsys-rep", "--nsys", tmp_path / "no-nsys", expect=1)
    assert f"nsys not found at {tmp_path / 'no-nsys'}" in result.stderr
    assert "nsys export --type sqlite after.nsys-rep" in result.stderr
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TRIAGE_NSYS", raising=False)
    result = triage("archive", DEMO / "after.nsys-rep", expect=1)
    assert "needs nsys to export it and none is on PATH" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert store_snapshot(store_dir) == before


def test_sqlite_that_is_not_an_nsys_export_is_refused(triage, tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("create table t (x)")
    result = triage("archive", path, expect=1)
    assert result.stderr.startswith(f"triage: error: {path}: an SQLite database but not an "
                                    "Nsight Systems export")


# -- the demo captures (no nsys needed for the .sqlite) ------------------------------------------


def demo_summary(triage, run_id: str) -> dict:
    rows = query(triage, f"select text, instances, avg_ns from nvtx_summary where run_id = "
                         f"'{run_id}'")
    return {r["text"]: r for r in rows}


def test_demo_before_and_after_differ_where_the_program_changed(triage):
    before = demo_summary(triage, archive_one(triage, DEMO / "before.sqlite")["id"])
    after = demo_summary(triage, archive_one(triage, DEMO / "after.sqlite")["id"])
    for text in ("step", "forward", "backward"):
        assert before[text]["instances"] == after[text]["instances"] == 20
        assert 1.2 < before[text]["avg_ns"] / after[text]["avg_ns"] < 1.8, text
    assert before["forward"]["avg_ns"] >= 300_000 and after["forward"]["avg_ns"] >= 200_000


def test_demo_report_and_its_export_agree(triage, nsys_exe):
    from_rep = archive_one(triage, DEMO / "after.nsys-rep")
    from_sqlite = archive_one(triage, DEMO / "after.sqlite")
    assert demo_summary(triage, from_rep["id"]) == demo_summary(triage, from_sqlite["id"])
    assert from_rep["settings"] == from_sqlite["settings"] | {
        k: from_rep["settings"][k] for k in ("trace", "sample", "cpuctxsw")}
    assert from_rep["application"]["argv"] == ["./nvtx_steps", "20", "200"]


def test_same_report_gives_the_same_run_in_any_fresh_store(tmp_path, nsys_exe):
    """Run ids hash the tables: reading an export must be deterministic (batches, threads)."""
    from triage.archive.ingest import archive_files

    reports = [str(DEMO / "before.sqlite"), str(DEMO / "before.nsys-rep")]
    first = [r.id for r in archive_files(tmp_path / "one", reports, nsys=nsys_exe)]
    second = [r.id for r in archive_files(tmp_path / "two", reports, nsys=nsys_exe)]
    assert first == second and len(set(first)) == 2
