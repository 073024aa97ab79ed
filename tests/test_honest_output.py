"""Output that cannot lie or inject (issue 36, item 4), through the CLI on real corpus reports:
a repeated column name is kept in every format; nothing is cut when stdout is not a terminal
(`--no-trunc` and `--width` where it is one); a report's or a user's control characters are
escaped in `show` and `explain`.

The hostile report is derived from a real one by code: the ncu report of an RTX 4090 with its
kernel's name `readOffset` and the GPU's `GeForce` rewritten, byte for byte the same length,
to ESC, BEL and U+202E (ncu stores names as plain strings, so the edited copy reads as the
original does).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from helpers import corpus_file, on_a_terminal

RTX_4090 = "Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep"
HOSTILE_NAME = "\x1b\x07\u202effset"  # as long in UTF-8 as readOffset: 10 bytes
HOSTILE_GPU = "\x1b[5mGe\x07"  # as long as GeForce
CONTROLS = ("\x1b", "\x07", "\u202e")


@pytest.fixture
def hostile_report(tmp_path) -> Path:
    data = corpus_file(RTX_4090).read_bytes()
    assert data.count(b"readOffset") >= 2
    path = tmp_path / "hostile.ncu-rep"
    data = data.replace(b"readOffset", HOSTILE_NAME.encode())
    path.write_bytes(data.replace(b"GeForce", HOSTILE_GPU.encode()))
    return path




# -- duplicate column names ----------------------------------------------------------------------

DUPLICATES = ["query", "select 1 as x, 2 as x, 3 as x_1"]


def test_duplicate_columns_are_kept_apart_as_text(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    lines = triage(*DUPLICATES).stdout.splitlines()
    assert lines[0].split() == ["x", "x_2", "x_1"]
    assert lines[2].split() == ["1", "2", "3"]


def test_duplicate_columns_are_kept_apart_as_csv(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    rows = list(csv.reader(io.StringIO(triage(*DUPLICATES, "--csv").stdout)))
    assert rows == [["x", "x_2", "x_1"], ["1", "2", "3"]]


def test_duplicate_columns_are_kept_apart_as_json(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    assert json.loads(triage(*DUPLICATES, "--json").stdout) == [{"x": 1, "x_2": 2, "x_1": 3}]


# -- nothing cut where nothing needs to fit ------------------------------------------------------


def test_piped_ls_keeps_the_whole_gpu_name(triage, store_dir, monkeypatch):
    """`triage ls | grep 4090`: the report's long name once made the GPU's give way."""
    monkeypatch.setenv("COLUMNS", "60")
    triage("archive", corpus_file(RTX_4090))
    found = [line for line in triage("ls").stdout.splitlines() if "4090" in line]
    assert len(found) == 1 and "NVIDIA GeForce RTX 4090" in found[0]
    assert RTX_4090 in found[0]


def test_ls_width_fits_and_no_trunc_keeps_all_on_a_terminal(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    env = {"TRIAGE_STORE": str(store_dir), "COLUMNS": "60"}
    assert max(map(len, on_a_terminal(["ls"], env))) <= 60
    assert max(map(len, triage("ls", "--width", "70").stdout.splitlines())) <= 70
    whole = on_a_terminal(["ls", "--no-trunc"], env)
    assert "NVIDIA GeForce RTX 4090" in whole[2] and RTX_4090 in whole[2]


def test_piped_query_keeps_values_longer_than_60(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    out = triage("query", "select command from runs").stdout
    assert "./build/readWriteOffset_cg 0,11,128 512" in out
    assert "…" not in out


def test_query_on_a_terminal_fits_it_unless_no_trunc(triage, store_dir):
    triage("archive", corpus_file(RTX_4090))
    env = {"TRIAGE_STORE": str(store_dir), "COLUMNS": "80"}
    cut = on_a_terminal(["query", "select command, 1 as one from runs"], env)
    assert max(map(len, cut)) <= 80 and cut[2].endswith("1") and "…" in cut[2]
    whole = on_a_terminal(["query", "--no-trunc", "select command from runs"], env)
    assert whole[2].endswith("./build/readWriteOffset_cg 0,11,128 512")


# Two real nsys captures of one program whose cuBLAS kernel names run to 412 characters, and
# an ncu report whose kernel name runs to 1,397.
LONG_NAMES_A = "Yandong-Luo__parallel_diff_evolution__report7.qdrep"
LONG_NAMES_B = "Yandong-Luo__parallel_diff_evolution__report3.qdrep"
LONGEST_NCU = "AlpriElse__cs599k__silu-2025-04-19-v1_nosections.ncu-rep"


@pytest.fixture
def long_names(triage, store_dir) -> str:
    """The pair archived as `a` and `b`; the longest kernel name of `a`."""
    triage("archive", corpus_file(LONG_NAMES_A), "--label", "a")
    triage("archive", corpus_file(LONG_NAMES_B), "--label", "b")
    rows = json.loads(triage("query", "--json", "select name from kernel_summary where run_id = "
                             "(select id from runs where 'a' in labels) order by length(name) "
                             "desc limit 1").stdout)
    assert len(rows[0]["name"]) > 400
    return rows[0]["name"]


@pytest.mark.parametrize("args", [["top", "a"], ["diff", "a", "b", "--limit", "100"]],
                         ids=["top", "diff"])
def test_piped_reports_keep_a_kernel_name_whole(triage, long_names, args):
    """`triage top RUN | grep` (and diff) once found names cut at 56 or 100 columns."""
    out = triage(*args).stdout
    assert long_names in out


LONG_LABEL = "release-candidate-of-the-solver-rewrite/"


def test_piped_history_keeps_a_label_whole(triage, long_names):
    """History's run column was cut at 24 characters, so a series' labels could not be told."""
    for run in "ab":
        triage("label", LONG_LABEL + run, run)
    out = triage("history", f"{LONG_LABEL}*", "--kernel", "gemv2T_kernel_val").stdout
    assert LONG_LABEL + "a" in out and LONG_LABEL + "b" in out


def test_piped_explain_keeps_a_kernel_name_whole(triage, store_dir):
    triage("archive", corpus_file(LONGEST_NCU))
    name = json.loads(triage("query", "--json", "select name from kernels order by length(name) "
                             "desc limit 1").stdout)[0]["name"]
    assert len(name) > 1000 and name in triage("explain", "latest").stdout


def test_a_diff_written_to_a_file_keeps_names_whole(triage, long_names, tmp_path):
    triage("diff", "a", "b", "--limit", "100", "-o", tmp_path / "diff.txt")
    assert long_names in (tmp_path / "diff.txt").read_text()


@pytest.mark.parametrize("command", [["top", "a"], ["diff", "a", "b"]], ids=["top", "diff"])
def test_reports_on_a_terminal_fit_it_unless_no_trunc(long_names, store_dir, command):
    env = {"TRIAGE_STORE": str(store_dir), "COLUMNS": "80"}
    cut = on_a_terminal(command, env)
    assert long_names not in "\n".join(cut)
    shortened = [line for line in cut if "…" in line]
    assert shortened and max(map(len, shortened)) <= 80
    assert long_names in "\n".join(on_a_terminal([*command, "--no-trunc"], env))


def test_no_trunc_and_width_together_are_refused(triage, store_dir):
    result = triage("ls", "--no-trunc", "--width", "80", expect=2)
    assert "give one" in result.stderr


# -- control characters escaped ------------------------------------------------------------------


def test_show_escapes_a_note_and_a_command(triage, store_dir, hostile_report):
    note = "slow\x1b[2J\x07 \u202etxt.exe"
    triage("archive", hostile_report, "--note", note)
    out = triage("show", "latest").stdout
    assert not any(c in out for c in CONTROLS)
    assert "slow\\x1b[2J\\x07 \\u202etxt.exe" in out


def test_explain_escapes_the_gpu_and_kernel_names(triage, store_dir, hostile_report):
    triage("archive", hostile_report)
    out = triage("explain", "latest").stdout
    assert not any(c in out for c in CONTROLS)
    assert "\\x1b\\x07\\u202effset(float *" in out
    assert "NVIDIA \\x1b[5mGe\\x07 RTX 4090" in out.splitlines()[0]


def test_ls_and_query_escape_the_kernel_and_file_name(triage, store_dir, hostile_report,
                                                    tmp_path):
    named = tmp_path / "bell\x07.ncu-rep"
    named.write_bytes(hostile_report.read_bytes())
    triage("archive", named)
    for args in (["ls"], ["query", "select name from kernels"]):
        out = triage(*args).stdout
        assert not any(c in out for c in CONTROLS), args
