"""Names that are not plain text (issue 15, low items): a file name of bytes that are not UTF-8,
a newline in a file name, and kernel names holding terminal controls or a bidirectional
override. Each archives or fails in one line, and every view shows such a name as visible
escapes: no raw NUL, BEL, ESC or U+202E reaches the terminal, a .md or an .html page."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from helpers import corpus_file
from triage.views.text import printable

NCU = "Lashi0812__CudaProgramming__simpleAOS.ncu-rep"
SQLITE = "Lashi0812__CudaProgramming__streamSimple.sqlite"
HOSTILE = "\x00\x07\x1b[31m\u202e"  # NUL, BEL, an ANSI colour, RIGHT-TO-LEFT OVERRIDE
RAW = ("\x00", "\x07", "\x1b", "\u202e")


def run(args: list, store: Path) -> subprocess.CompletedProcess:
    """The real command line, so a file name can be bytes that are not UTF-8."""
    return subprocess.run([sys.executable, "-m", "triage", "--store", os.fsencode(store),
                           *args], capture_output=True, timeout=300)


def test_reports_whose_names_are_not_utf8_archive(tmp_path):
    store = tmp_path / "store"
    for name, suffix in ((NCU, b".ncu-rep"), (SQLITE, b".sqlite")):
        path = os.fsencode(tmp_path) + b"/caf\xe9" + suffix  # Latin-1, as another OS wrote it
        shutil.copyfile(corpus_file(name), path)
        done = run(["archive", path], store)
        assert done.returncode == 0, done.stderr
        assert b"caf\xef\xbf\xbd" + suffix in done.stdout  # the name kept, its bad byte U+FFFD
    assert run(["verify"], store).returncode == 0


def test_an_error_about_a_name_with_a_newline_is_one_line(tmp_path):
    path = tmp_path / "two\nlines.ncu-rep"
    path.write_bytes(corpus_file(NCU).read_bytes()[:100])
    done = run(["archive", os.fsencode(path)], tmp_path / "store")
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.count(b"\n") == 1 and b"two\\nlines.ncu-rep" in done.stderr


def hostile_export(tmp_path: Path) -> Path:
    """The real export with its kernel names prefixed by control characters (edited by SQL)."""
    path = tmp_path / "hostile.sqlite"
    shutil.copyfile(corpus_file(SQLITE), path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT demangledName "
                    "FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT shortName FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL)", (HOSTILE,))
    con.close()
    return path


def test_control_characters_in_kernel_names_are_shown_escaped(tmp_path, triage):
    before = triage.json("archive", corpus_file(SQLITE))[0]["id"]
    after = triage.json("archive", hostile_export(tmp_path))[0]["id"]
    pages = {suffix: tmp_path / f"review{suffix}" for suffix in (".md", ".html")}
    for page in pages.values():
        triage("report", before, after, "-o", page)
    shown = {
        "top": triage("top", after).stdout,
        "diff": triage("diff", before, after).stdout,
        "diff.md": triage("diff", before, after, "--format", "md").stdout,
        **{suffix: page.read_text() for suffix, page in pages.items()},
    }
    for view, text in shown.items():
        assert not [c for c in RAW if c in text], view
    assert printable(HOSTILE) in shown["top"]  # visible, not dropped
    assert "\\u202e" in shown[".html"] and "\\x1b" in shown[".md"]


def test_printable_escapes_what_a_terminal_or_browser_would_obey():
    assert printable("k\tname\n") == "k\\tname\\n"
    assert printable(HOSTILE) == "\\x00\\x07\\x1b[31m\\u202e"
    assert printable("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"
    assert printable("gemm<float, 128>(…)") == "gemm<float, 128>(…)"
