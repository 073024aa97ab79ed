"""Batches keep going (issue 36, item 3): `triage archive` of many reports archives every
readable one, names each refused on one line, prints a summary and exits 1; `--fail-fast`
stops at the first and archives none. On real corpus reports: an .nsys-rep written by nsys
2026.1 (newer than any nsys this suite runs with, or no nsys at all: either way unreadable
here) and a truncated copy of a real ncu report, made in tmp_path."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from helpers import corpus_file

GOOD = ["Lashi0812__CudaProgramming__simpleSOA.ncu-rep", "0x822a5b87__test-cuda__report2.sqlite"]
NEWER = "0x822a5b87__test-cuda__report1.nsys-rep"  # written by nsys 2026.1.1


@pytest.fixture
def newer_nsys_rep():
    """The corpus .nsys-rep of nsys 2026.1: unreadable by the nsys here (or by none)."""
    nsys = shutil.which("nsys")
    if nsys:
        version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"(\d{4})\.(\d+)", version)
        if found and (int(found[1]), int(found[2])) >= (2026, 1):
            pytest.skip(f"{nsys} reads {NEWER}; the probe needs an older nsys or none")
    return corpus_file(NEWER)


@pytest.fixture
def truncated(tmp_path):
    data = corpus_file(GOOD[0]).read_bytes()
    path = tmp_path / "cut.ncu-rep"
    path.write_bytes(data[: len(data) // 2])
    return path


def test_archive_keeps_going_past_unreadable_reports(triage, store_dir, newer_nsys_rep,
                                                     truncated):
    reports = [newer_nsys_rep, corpus_file(GOOD[0]), truncated, corpus_file(GOOD[1])]
    result = triage("archive", *reports, expect=1)
    archived = result.stdout.splitlines()
    assert [line.split()[-2] for line in archived] == GOOD
    errors = result.stderr.splitlines()
    refused = [line for line in errors if line.startswith("triage: refused: ")]
    assert [line.split()[2] for line in refused] == [f"{newer_nsys_rep}", f"{truncated}:"]
    assert errors[-1] == "triage: archived 2 of 4 reports; 2 refused (named above)"
    assert len(triage.json("ls")) == 2


def test_archive_json_lists_the_runs_archived_and_refusals_go_to_stderr(triage, store_dir,
                                                                          truncated):
    result = triage("archive", truncated, corpus_file(GOOD[0]), "--json", expect=1)
    assert [run["reports"] for run in json.loads(result.stdout)] == [[GOOD[0]]]
    assert "cut.ncu-rep" in result.stderr


def test_every_report_refused_leaves_no_store(triage, store_dir, newer_nsys_rep, truncated):
    result = triage("archive", newer_nsys_rep, truncated, expect=1)
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == \
        "triage: archived 0 of 2 reports; 2 refused (named above)"
    assert not store_dir.exists()


def test_fail_fast_stops_at_the_first_and_archives_none(triage, store_dir, newer_nsys_rep):
    result = triage("archive", "--fail-fast", corpus_file(GOOD[0]), newer_nsys_rep, expect=1)
    assert result.stdout == ""
    assert result.stderr.startswith("triage: error: ") and result.stderr.count("\n") == 1
    assert not store_dir.exists()


def test_a_run_archived_before_is_found_again_in_a_batch_with_a_refusal(triage, store_dir,
                                                                        truncated):
    first = triage.json("archive", corpus_file(GOOD[0]))[0]["id"]
    result = triage("archive", corpus_file(GOOD[0]), truncated, expect=1)
    assert result.stdout.startswith(first[:12]) and "(already archived)" in result.stdout
    assert len(triage.json("ls")) == 1
