"""The drift rows read from `triage capture`'s machine facts: GPU persistence mode and whether
the capturing user could read GPU counters (RmProfilingAdminOnly, root). `triage rerun` grades
this machine against a run's record with them before running.

The records are a real ncu report's (the corpus's gemm run), given the capture block a
`triage capture` of it would have had: this machine's own facts, with the two fields set.
"""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from helpers import corpus_file, typed
from triage.capture.machine import collect_machine_facts, known
from triage.cli import cli
from triage.compare.drift import grade, verdict

GEMM = "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict:
    """The gemm record as `show --json` gives it, with machine facts: persistence on,
    counters open to every user."""
    runner = CliRunner()
    store = str(tmp_path_factory.mktemp("drift") / "store")
    run = runner.invoke(cli, ["--store", store, "archive", "--json", str(corpus_file(GEMM))])
    assert run.exit_code == 0, run.output
    run_id = json.loads(run.stdout)[0]["id"]
    record = json.loads(runner.invoke(cli, ["--store", store, "show", "--json", run_id]).stdout)
    facts = collect_machine_facts()
    facts["gpu"]["gpus"] = known([{"name": "NVIDIA GeForce RTX 3060", "persistence_mode": True}])
    facts["profiling_counters"] = {"admin_only": known(False), "is_root": False, "advice": None}
    record["capture"] = {"argv": ["ncu", "./naive.out"], "machine": facts}
    return record


def _with(record: dict, persistence=True, admin_only=False, is_root=False) -> dict:
    other = copy.deepcopy(record)
    machine = other["capture"]["machine"]
    machine["gpu"]["gpus"]["value"][0]["persistence_mode"] = persistence
    machine["profiling_counters"].update(admin_only=known(admin_only), is_root=is_root)
    return other


def _items(a: dict, b: dict) -> dict:
    return {i.field: i for i in grade(typed(a), typed(b))}


def test_persistence_mode_off_on_one_side_is_caution(captured):
    item = _items(captured, _with(captured, persistence=False))["gpu.persistence_mode"]
    assert (item.a, item.b, item.state, item.severity) == (True, False, "different", "caution")
    assert _items(captured, _with(captured))["gpu.persistence_mode"].state == "same"


def test_counters_closed_to_this_user_invalidate_an_ncu_comparison(captured):
    items = _items(captured, _with(captured, admin_only=True))
    item = items["counters.permitted"]
    assert (item.a, item.b, item.severity) == (True, False, "invalidates")
    assert verdict(items.values()) == "invalid"
    # admin only, but run as root: the counters are readable, as before
    assert _items(captured, _with(captured, admin_only=True, is_root=True))[
        "counters.permitted"].state == "same"


def test_machine_rows_need_a_capture_on_both_sides(captured):
    archived = copy.deepcopy(captured)
    archived["capture"] = None
    items = _items(captured, archived)
    assert "gpu.persistence_mode" not in items and "counters.permitted" not in items
