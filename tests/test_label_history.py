"""Labels without lost updates and with no conditional writes (issue 17, item 5): every move is
a new, uniquely named file in the label's history; the newest by (time, writer) wins, on every
node, and labels/<name> ends on it."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import corpus_file
from triage.archive.store import Store

REPORTS = ["LakshyaSingh354__CudaCode__report.ncu-rep",
           "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"]
MOVES = 25
MOVER = """
import sys
from triage.archive import runs
from triage.archive.store import Store
from triage.base.errors import LabelMoveLost
store = Store.open(sys.argv[1])
for _ in range(int(sys.argv[3])):
    try:
        runs.point_label(store, "shared", sys.argv[2])
    except LabelMoveLost:  # the other writer's move landed after this one: said, and kept
        pass
"""


def test_two_writers_moving_one_label_lose_no_move(triage, store_dir):
    ids = [triage.json("archive", corpus_file(name))[0]["id"] for name in REPORTS]
    writers = [subprocess.Popen([sys.executable, "-c", MOVER, str(store_dir), run_id,
                                 str(MOVES)]) for run_id in ids]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    store = Store.open(store_dir)
    moves = store.labels.history("shared")
    assert len(moves) == 2 * MOVES  # no move lost
    assert sorted(m.run_id for m in moves) == sorted(ids * MOVES)
    assert len({m.writer for m in moves}) == 2 * MOVES  # each move its own file
    newest = max(moves, key=lambda m: (m.time, m.writer))
    assert store.labels.all()["shared"] == newest.run_id  # the pointer ends on the newest move
    assert triage.json("show", "shared")["id"] == newest.run_id
    listed = triage("label", "--history", "shared").stdout.splitlines()
    assert len(listed) == 2 * MOVES and listed[-1].endswith(newest.run_id[:12])
    assert triage.json("verify")["ok"]


def test_a_deletion_is_a_move_too(triage):
    run_id = triage.json("archive", corpus_file(REPORTS[0]))[0]["id"]
    triage("label", "base", run_id)
    triage("label", "-d", "base")
    triage("label", "base", run_id)
    listed = triage("label", "--history", "base").stdout.splitlines()
    assert [line.split()[-1] for line in listed] == [run_id[:12], "deleted", run_id[:12]]
    missing = triage("label", "--history", "nosuch", expect=1).stderr
    assert "label 'nosuch' has no history" in missing
