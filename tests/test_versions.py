"""`triage versions`: what a store's runs span and which pairs of ncu versions the metric map
covers, read from the catalog only; on corpus runs, one of them derived with an ncu version the
map never saw."""

from __future__ import annotations

from helpers import assert_valid, corpus_file, derive_run
from triage.archive import catalog
from triage.archive.store import Store

OLD = "BrennenTaylor__Twisty__output1.nsight-cuprof-report"  # ncu 2019: version not recorded
NEW = "thedavidchu__speedy_scan__profile.ncu-rep"  # ncu 2020.3.1.0
NSYS = "Lashi0812__CudaProgramming__streamSimple.sqlite"  # nsys 2023.3.1.92
FUTURE = "2099.1.0.0"  # a version no report of the map's sources has


def _with_version(store_dir, seed: str, version: str) -> str:
    """A run derived from `seed`, its manifest naming another ncu version."""
    store = Store.open(store_dir)
    manifest = store.runs.read_manifest(seed)
    manifest["tool_version"] = version
    new = derive_run(store, seed, manifest)
    annotations = store.annotations.annotate(new, store.annotations.read(seed)["archived"], None)
    catalog.add_rows(store, [catalog.catalog_row(store, new, manifest, annotations)])
    return new


def test_versions_spans_the_store_and_names_the_pairs_the_map_covers(triage, store_dir):
    old, new, _nsys = (triage.json("archive", corpus_file(n))[0]["id"] for n in (OLD, NEW, NSYS))
    _with_version(store_dir, new, FUTURE)
    result = triage.json("versions")
    assert_valid("versions.schema.json", result)
    assert result["runs"] == 4
    assert result["tools"] == {"ncu": [{"value": None, "runs": 1},
                                       {"value": "2020.3.1.0", "runs": 1},
                                       {"value": FUTURE, "runs": 1}],
                               "nsys": [{"value": "2023.3.1.92", "runs": 1}]}
    pairs = {(p["a"], p["b"]): p for p in result["ncu_pairs"]}
    assert list(pairs) == [(None, "2020.3.1.0"), (None, FUTURE), ("2020.3.1.0", FUTURE)]
    known = pairs[(None, "2020.3.1.0")]
    assert known["covered"] and {"a": "gpu__time_duration", "b": "gpu__time_duration.sum",
                                 "section": "SpeedOfLight", "label": "Duration",
                                 "confirmed_by": "range"} in known["renames"]
    assert len(known["renames"]) == 8
    future = pairs[("2020.3.1.0", FUTURE)]
    assert not future["covered"] and future["in_map"] == {"a": True, "b": False}
    assert result["kernel_rules"] == ["NCCL: ncclKernel_* to ncclDevKernel_*"]

    text = triage("versions").stdout.splitlines()
    assert "  ncu versions: not recorded (1), 2020.3.1.0 (1), 2099.1.0.0 (1)" in text
    assert "  nsys versions: 2023.3.1.92 (1)" in text
    assert any(line.startswith("  ncu not recorded -> 2020.3.1.0: 8 metric(s) paired across a "
                               "rename: ") and "Duration" in line for line in text)
    assert f"  ncu 2020.3.1.0 -> {FUTURE}: NOT COVERED: the map has no evidence of ncu " \
        f"{FUTURE}; a metric renamed there reads as on one side only" in text


def test_versions_of_a_store_of_one_ncu_version(triage):
    triage("archive", corpus_file(NEW))
    result = triage.json("versions")
    assert_valid("versions.schema.json", result)
    assert (result["runs"], result["ncu_pairs"]) == (1, [])
    assert "  none: fewer than two ncu versions in this store" in triage("versions").stdout
