"""Names that moved between profiler releases: the metric map is learned from ncu's own section
definitions and the corpus, rebuilt here exactly; a pair it confirms is one row of the diff; two
metrics that share a label in two sections, or that one version shows side by side, stay apart."""

from __future__ import annotations

from dataclasses import replace

from helpers import CORPUS, assert_valid, corpus_file
from triage.compare.metric_map_build import (build_map, map_text, observations,
                                             report_metrics)
from triage.compare.renames import MAP_FILE, MetricMap, MapEntry, metric_map

OLD = "BrennenTaylor__Twisty__output1.nsight-cuprof-report"  # ncu 2019 (PerfWorks 0.108.5)
NEW = "thedavidchu__speedy_scan__profile.ncu-rep"  # ncu 2020.3.1
PROFILE = "BrennenTaylor__Twisty__profile.nsight-cuprof-report"  # 2019: a wider value range
DURATION = ("gpu__time_duration", "gpu__time_duration.sum")


def test_the_metric_map_is_rebuilt_from_its_sources_unchanged():
    """A rebuild from Debian's section files and the corpus gives the file byte for byte:
    a source or rule that changes the map fails here until the map is rebuilt."""
    assert map_text(build_map(observations(str(CORPUS)))) == MAP_FILE.read_text()


def _durations() -> list:
    """The Duration metric as each version's report showed it (real rows, 2019 and 2020)."""
    seen = [*report_metrics(str(corpus_file(PROFILE))), *report_metrics(str(corpus_file(NEW)))]
    return [s for s in seen if s.section == "SpeedOfLight" and s.label == "Duration"]


def test_one_label_in_two_sections_is_two_metrics():
    old, new = _durations()
    assert (old.name, new.name) == DURATION
    together = build_map([old, new])["entries"]
    assert [(e["status"], e["confirmed_by"]) for e in together] == [("confirmed", "range")]
    apart = build_map([replace(old, section="PlantedA"), replace(new, section="PlantedB")])
    assert apart["entries"] == []  # one label in two sections pairs nothing


def test_two_names_one_version_shows_side_by_side_are_refused():
    old, new = _durations()
    both = replace(old, version=new.version, source="planted")  # one version shows both names
    (entry,) = build_map([old, new, both])["entries"]
    assert entry["status"] == "refused" and "both shown" in entry["why"]
    units = build_map([old, replace(new, unit="cycle"), replace(old, unit="ns")])["entries"]
    assert units[0]["status"] == "refused" and units[0]["why"] == "units differ: ns and cycle"


def test_a_confirmed_pair_maps_only_within_its_section():
    installed = metric_map()
    assert installed.section_renames("SpeedOfLight", [DURATION[0]], [DURATION[1]]) \
        .keys() == {DURATION[0]}
    assert installed.section_renames("LaunchStats", [DURATION[0]], [DURATION[1]]) == {}
    refused = [e for e in installed.entries if e.status == "refused"]
    assert refused and all(
        installed.section_renames(e.section, [e.names[0]], [e.names[1]]) == {} for e in refused)
    alone = MetricMap.of((MapEntry("S", "L", ("x", "y"), (("1",), ("2",)), "unconfirmed", None,
                                "no value"),))
    assert alone.section_renames("S", ["x"], ["y"]) == {}  # unconfirmed: never applied


def test_a_renamed_metric_is_one_row_of_the_diff(triage, tmp_path):
    a, b = (triage.json("archive", corpus_file(n))[0]["id"] for n in (OLD, NEW))
    diff = triage.json("diff", a, b, "--all")
    assert_valid("diff.schema.json", diff)
    sol = next(s for s in diff["kernels"][0]["sections"] if s["section"] == "SpeedOfLight")
    rows = {m["name"]: m for m in sol["metrics"]}
    assert DURATION[1] not in rows
    duration = rows[DURATION[0]]
    assert duration["status"] == "changed" and duration["b"] == 336704.0
    assert duration["renamed"] == {"a": DURATION[0], "b": DURATION[1], "section": "SpeedOfLight",
                                   "label": "Duration", "confirmed_by": "range",
                                   "versions": [None, "2020.3.1.0"]}
    assert "tool_version" in {d["field"] for d in diff["drift"]}  # the version drift stays
    one_side = [m["name"] for m in sol["metrics"] if m["status"] in ("only_a", "only_b")]
    assert "fbpa__sol_pct" in one_side  # a label ncu changed (SOL FB -> SOL DRAM) stays apart

    text = triage("diff", a, b).stdout.splitlines()
    at = text.index(next(line for line in text if line.startswith("      Duration ")))
    assert " ".join(text[at + 1:at + 3]).split() == \
        "paired across a rename: gpu__time_duration (version not recorded) = " \
        "gpu__time_duration.sum (2020.3.1.0)".split()
    markdown = triage("diff", a, b, "--format", "md").stdout
    assert "| Duration: gpu\\_\\_time\\_duration (version not recorded) = " in markdown
    triage("report", a, b, "-o", tmp_path / "r.html")
    assert "Duration: gpu__time_duration (version not recorded) = gpu__time_duration.sum " \
        "(2020.3.1.0)</td>" in (tmp_path / "r.html").read_text()


def test_history_follows_a_metric_across_a_rename(triage):
    a, b = (triage.json("archive", corpus_file(n))[0]["id"] for n in (OLD, NEW))
    result = triage.json("history", f"{a},{b}", "--metric", DURATION[1])
    assert_valid("history.schema.json", result)
    old, new = result["points"]
    assert (old["value"], old["read_as"]) == (5856.0, DURATION[0])
    assert new["value"] == 336704.0 and "read_as" not in new
    text = triage("history", f"{a},{b}", "--metric", DURATION[1]).stdout
    assert f"  run 1 ({a[:12]}): {DURATION[0]} (version not recorded)" in text.splitlines()
