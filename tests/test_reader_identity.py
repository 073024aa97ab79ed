"""Identity is the report, not the path triage took to read it (issue 44, item 5): the same
.qdrep read through nsys's SQLite export (its Arrow export failing) is the same run as read
through the Arrow export, and so is a report whose tables an older schema wrote; a Ctrl-C at
the Arrow read or export aborts (exit 130), files nothing and leaves no temporary file, never
taken for an Arrow export to read as SQLite instead.

The nsys here is Debian's 2022.4 behind a wrapper placed first on PATH: it fails (or sleeps in)
`nsys export --type arrow` and hands every other call to the real nsys. Whoever runs this
module holds /tmp/triage-tools.lock (concurrent nsys runs fail spuriously)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import corpus_file
from triage.schemas import tables as schema_tables

QDREP = "Yandong-Luo__parallel_diff_evolution__report7.qdrep"  # 173 KB, exported by nsys 2022.4
NCU = "LakshyaSingh354__CudaCode__report.ncu-rep"

# What the wrapper does with `nsys export --type arrow`: nsys's own failure line and exit 1, or
# say it started (a file the test waits for) and sleep until killed.
ARROW = {"fail": 'echo "Exportation error: arrow export not available" >&2; exit 1',
         "sleep": 'touch "$TRIAGE_TEST_MARKER"; exec sleep 600'}


def nsys_wrapper(folder: Path, real: str, arrow: str) -> Path:
    """A folder holding `nsys`: the real one, but for its Arrow export (ARROW[arrow])."""
    folder.mkdir()
    script = folder / "nsys"
    is_arrow = '[ "$prev" = "--type" ] && [ "$a" = "arrow" ]'
    script.write_text("#!/bin/sh\n"
                      'prev=""\n'
                      'for a in "$@"; do\n'
                      f"  if {is_arrow}; then {ARROW[arrow]}; fi\n"
                      '  prev="$a"\n'
                      "done\n"
                      f'exec {real} "$@"\n')
    script.chmod(0o755)
    return folder


def manifest(store: Path, run_id: str) -> dict:
    return json.loads((store / "runs" / f"{run_id}.json").read_bytes())


def test_a_report_read_through_sqlite_is_the_run_read_through_arrow(triage, tmp_path,
                                                                    monkeypatch, nsys_exe):
    report = corpus_file(QDREP)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    read = triage.json("--store", mine, "archive", report)[0]
    wrapper = nsys_wrapper(tmp_path / "bin", shutil.which(nsys_exe), "fail")
    monkeypatch.setenv("PATH", f"{wrapper}{os.pathsep}{os.environ['PATH']}")
    fallen_back = triage.json("--store", theirs, "archive", report)[0]
    exports = [manifest(store, read["id"])["reports"][0]["export"]["format"]
               for store in (mine, theirs)]
    assert exports == ["arrow", "sqlite"]  # two paths taken, one run
    assert fallen_back["id"] == read["id"]
    # In one store, its dedup key lost (a race, a run pulled from a colleague's store): the
    # SQLite path finds the run the Arrow path filed.
    shutil.rmtree(mine / "keys")
    again = triage("--store", mine, "archive", report).stdout
    assert again.startswith(read["id"][:12]) and "(already archived)" in again, again
    assert [r["id"] for r in triage.json("--store", mine, "ls")] == [read["id"]]


def test_tables_of_an_older_schema_are_the_same_run(triage, tmp_path, monkeypatch):
    """A report archived by a triage whose tables had another schema version (then migrated) is
    `already archived` by today's, not a second run beside the first, its label left behind."""
    store = tmp_path / "store"
    with monkeypatch.context() as older:
        older.setattr(schema_tables, "tables_version", lambda: 1)
        first = triage.json("--store", store, "archive", "--label", "base", corpus_file(NCU))[0]
    assert manifest(store, first["id"])["tables_schema_version"] == 1
    now = triage.json("--store", store, "archive", corpus_file(NCU))[0]
    assert (now["id"], now["new"]) == (first["id"], False)
    assert triage.json("--store", store, "show", "base")["id"] == first["id"]


# `triage ARGS` with Python's own SIGINT handler, as an interactive shell starts it (one started
# in the background of a script inherits SIGINT ignored, and Python then leaves it so).
TRIAGE = ("import signal, sys\n"
          "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
          "sys.argv = ['triage', *sys.argv[1:]]\n"
          "from triage.cli import main\n"
          "main()\n")
# The same, its Arrow read held in a DuckDB query that runs until a Ctrl-C ends it (the
# reader's own DuckDB work stands in: DuckDB takes the SIGINT and raises an error of its own).
HELD_AT_THE_ARROW_READ = (
    "import os, pathlib\n"
    "import triage.base.duck as duck\n"
    "import triage.capture.nsys_arrow as arrow\n"
    "def held(*args):\n"
    "    con = duck.connect(threads=1)\n"
    "    pathlib.Path(os.environ['TRIAGE_TEST_MARKER']).touch()\n"
    "    con.execute('select count(*) from range(1000000000000) t where hash(range) = 0')\n"
    "arrow._read_streams = held\n" + TRIAGE)


def interrupted_archive(tmp_path: Path, argv: list[str], env: dict) -> tuple[int, str]:
    """Run `argv` (an archive), send it SIGINT once the marker says it reached the point under
    test (a bounded wait: a failure, not a hang); (exit status, stderr)."""
    marker = tmp_path / "reached"
    env = {**env, "TRIAGE_TEST_MARKER": str(marker), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    archive = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # its group: killed whole
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and archive.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), archive.communicate(timeout=60)
        archive.send_signal(signal.SIGINT)
        _out, err = archive.communicate(timeout=120)
    finally:
        if archive.poll() is None:  # a failure: nothing of it (nsys, its sleep) may stay
            os.killpg(archive.pid, signal.SIGKILL)
            archive.wait()
    return archive.returncode, err


@pytest.mark.parametrize("where", ["arrow read", "arrow export"])
def test_ctrl_c_at_the_arrow_read_files_nothing(tmp_path, nsys_exe, where):
    store, report = tmp_path / "store", str(corpus_file(QDREP))
    env = dict(os.environ)
    if where == "arrow read":
        script = HELD_AT_THE_ARROW_READ
    else:
        wrapper = nsys_wrapper(tmp_path / "bin", shutil.which(nsys_exe), "sleep")
        env["PATH"] = f"{wrapper}{os.pathsep}{env['PATH']}"
        script = TRIAGE
    status, err = interrupted_archive(
        tmp_path, [sys.executable, "-c", script, "--store", str(store), "archive", report], env)
    assert (status, err) == (130, "triage: error: interrupted (SIGINT); nothing was filed\n")
    left = [p for p in store.rglob("*") if p.is_file()] if store.exists() else []
    assert left == [], left  # no run, no export, no temp file: the store made for it is gone
    assert list((tmp_path / "tmp").iterdir()) == []
