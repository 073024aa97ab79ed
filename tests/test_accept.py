"""`diff --junit` and `triage accept` on real corpus reports (no profiler runs): the JUnit file
against Jenkins' XSD whatever the gate found, acceptances kept apart from labels and carried by
push and pull, and the gate judging against an accepted run. tests/test_ci_kit.py runs them
through the CI kit on real captures."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from helpers import assert_valid, corpus_file

XSD = Path(__file__).resolve().parent / "data" / "junit-10.xsd"
NSYS_A = "0x822a5b87__test-cuda__report1.sqlite"
NSYS_B = "0x822a5b87__test-cuda__report2.sqlite"
NCU_A = "LakshyaSingh354__CudaCode__report.ncu-rep"
NCU_B = "Lashi0812__CudaProgramming__simpleSOA.ncu-rep"


def junit_of(path: Path) -> ET.Element:
    import xmlschema

    xmlschema.XMLSchema(XSD).validate(path.read_text())
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return suite


@pytest.fixture
def pair(triage) -> tuple[str, str]:
    """Two runs of one program (async.out), archived in capture order."""
    return tuple(triage.json("archive", corpus_file(n))[0]["id"] for n in (NSYS_A, NSYS_B))


def test_junit_lists_every_judged_time(triage, pair, tmp_path):
    out = tmp_path / "gate.xml"
    result = triage("diff", *pair, "--max-slowdown", "0", "--junit", out, "--json", expect=None)
    gate = json.loads(result.stdout)["gate"]
    suite = junit_of(out)
    cases = suite.findall("testcase")
    assert cases and [(c.get("classname"), c.get("name")) for c in cases] == [
        (f"gate.{c['kind']}", c["name"]) for c in gate["checked"]]
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == len(gate["failed"]) == int(suite.get("failures"))
    assert result.exit_code == (4 if gate["failed"] else 0)
    for case in failed:
        text = case.find("failure").text
        assert "change: " in text and "interval: " in text and "threshold: 0%" in text


def test_junit_of_a_gate_that_judged_nothing_is_an_error(triage, tmp_path):
    a, b = (triage.json("archive", corpus_file(n))[0]["id"] for n in (NCU_A, NCU_B))
    out = tmp_path / "gate.xml"
    result = triage("diff", a, b, "--max-slowdown", "5", "--junit", out, "--json", expect=None)
    gate = json.loads(result.stdout)["gate"]
    assert not gate["judged"] and result.exit_code in (0, 5)  # invalid: 0, ncu alone: 5
    suite = junit_of(out)
    (case,) = suite.findall("testcase")
    assert suite.get("errors") == "1" and case.find("error").get("type") == gate["reason"]


def test_junit_needs_the_gate(triage, pair, tmp_path):
    result = triage("diff", *pair, "--junit", tmp_path / "x.xml", expect=2)
    assert "--max-slowdown" in result.output and not (tmp_path / "x.xml").exists()


def test_accept_is_kept_apart_pushed_and_pulled(triage, pair, store_dir, tmp_path):
    triage("label", "base", pair[0])
    moves = sorted(p.name for p in (store_dir / "label-history").rglob("*.move"))
    accepted = triage.json("accept", "base", "--reason", "new kernel\x1b[31m", "--by", "ann")
    assert_valid("accept.schema.json", accepted)
    assert accepted["label"] == "base" and accepted["run"] == pair[0]
    assert accepted["who"] == "ann" and accepted["reason"] == "new kernel\x1b[31m"
    assert "\x1b" not in triage("accept", pair[1], "--reason", "x\x1b").stdout
    assert sorted(p.name for p in (store_dir / "label-history").rglob("*.move")) == moves
    triage("push", tmp_path / "team")
    triage("--store", tmp_path / "other", "pull", tmp_path / "team", pair[0])
    from triage.archive.store import Store

    (entry,) = Store.open(tmp_path / "other").acceptances.of_run(pair[0])
    assert (entry.who, entry.reason, entry.label) == ("ann", "new kernel\x1b[31m", "base")
    assert triage.json("verify", "--store", tmp_path / "team")["ok"]


def test_accept_refuses_an_empty_reason(triage, pair):
    result = triage("accept", pair[0], "--reason", "  ", expect=2)
    assert "--reason" in result.output


def test_the_gate_judges_against_the_accepted_run(triage, pair):
    before = json.loads(triage("diff", *pair, "--max-slowdown", "0", "--json",
                               expect=None).stdout)["gate"]
    assert before["accepted"] is None and before["failed"]  # 0%: any slower time fails
    triage("accept", pair[1], "--reason", "async copies are intended", "--by", "ann")
    after = triage("diff", *pair, "--max-slowdown", "0", expect=0)
    assert "Judged against the accepted step" in after.stdout and "ann" in after.stdout
    gate = triage.json("diff", *pair, "--max-slowdown", "0")["gate"]
    assert gate["passed"] and gate["accepted"]["reason"] == "async copies are intended"


def test_only_a_run_accepted_after_the_baseline_is_one(triage, pair, store_dir):
    """An acceptance counts between A (exclusive) and B (inclusive), in capture order, for runs
    of B's workload; one accepted at or before A, after B, or of another program, does not."""
    from triage.archive.runs import load_record
    from triage.archive.store import Store
    from triage.compare.accepted import accepted_runs, capture_key, newest_between

    other = triage.json("archive", corpus_file(NCU_A))[0]["id"]
    triage("accept", other, "--reason", "another program", "--by", "ann")
    store = Store.open(store_dir)
    a, b = (load_record(store, run) for run in pair)
    assert capture_key(a) < capture_key(b)
    assert accepted_runs(store, b) == []  # the ncu run is not this workload
    triage("accept", pair[0], "--reason", "old step", "--by", "ann")
    (found,) = accepted_runs(store, b)
    assert found.record.id == pair[0] and found.latest.reason == "old step"
    assert newest_between([found], a, b) is None  # accepted at A itself: nothing new
    triage("accept", pair[1], "--reason", "new step", "--by", "bob")
    accepted = accepted_runs(store, b)
    assert newest_between(accepted, a, b).latest.who == "bob"
    newer = [x for x in accepted if x.record.id == pair[1]]
    assert newest_between(newer, b, a) is None  # accepted after the run judged: not its base
    assert newest_between(accepted, b, a).record.id == pair[0]  # an accepted run passes itself
