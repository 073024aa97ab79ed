"""Archiving real Nsight Compute reports from the corpus."""

from __future__ import annotations

import pytest

from helpers import corpus_file, corpus_manifest

NCU_ROWS = [r for r in corpus_manifest() if r["kind"] == "ncu"]
GEMM_NAIVE = "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"


def store_bytes(store_dir) -> int:
    return sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file())


def expected_version(row: dict) -> str | None:
    """MANIFEST's 'ncu 2024.1.1.0' -> '2024.1.1.0'; 'ncu unknown (...)' -> None."""
    version = row["tool_version"].split()[1]
    return None if version == "unknown" else version


@pytest.mark.parametrize("row", NCU_ROWS, ids=lambda r: r["file"].split("/")[-1][:48])
def test_every_corpus_report_archives_with_its_versions(triage, corpus, row):
    runs = triage.json("archive", corpus / row["file"])
    assert len(runs) == 1 and runs[0]["new"] is True
    shown = triage.json("show", runs[0]["id"])
    assert shown["tool"] == "ncu"
    assert shown["tool_version"] == expected_version(row)
    assert shown["environment"]["gpus"][0]["name"] == row["gpu"].strip()
    assert shown["environment"]["cuda_version"] == (row["cuda_version"] or None)
    assert shown["environment"]["driver_version"] == (row["driver_version"] or None)
    assert shown["kernels"] == int(row["n_kernels"])
    assert shown["settings"]["clock_control"] in ("base", "none")


def test_gemm_naive_acceptance(triage, corpus, store_dir):
    path = corpus_file(GEMM_NAIVE)
    run = triage.json("archive", path)[0]
    shown = triage.json("show", run["id"])
    assert shown["tool_version"].startswith("2024.1.1")
    assert shown["environment"]["driver_version"] == "570.133.20"
    assert shown["environment"]["cuda_version"] == "12.8"
    assert shown["environment"]["gpus"][0]["name"] == "NVIDIA GeForce GTX 1660 SUPER"
    assert "--set full" in shown["command"]
    assert shown["settings"]["clock_control"] == "base"
    assert shown["settings_source"]["clock_control"] == "report"
    assert shown["settings"]["section_set"] == "full"
    assert shown["settings_source"]["section_set"] == "command"
    assert shown["settings"]["cache_control"] == "all"
    assert shown["settings_source"]["cache_control"] == "default"
    assert shown["reports"][0]["sha256"] == next(
        r["sha256"] for r in corpus_manifest() if r["file"].endswith(GEMM_NAIVE))
    assert shown["evidence"]["clock"]["executed_locked"] == 2
    # Re-archiving finds the same run and adds no bytes.
    before = store_bytes(store_dir)
    again = triage.json("archive", path)[0]
    assert again == {**run, "new": False}
    assert store_bytes(store_dir) - before < 512  # only the rewritten annotation may change size


def test_required_show_keys(triage, corpus):
    run = triage.json("archive", corpus_file(GEMM_NAIVE))[0]
    shown = triage.json("show", "latest")
    for key in ("id", "tool", "tool_version", "created", "archived", "labels", "command",
                "environment", "settings", "settings_source", "reports", "kernels"):
        assert key in shown
    assert shown["id"] == run["id"]
    assert set(shown["environment"]) >= {"driver_version", "cuda_version", "gpus", "host"}
    assert set(shown["settings"]) >= {"clock_control", "cache_control", "replay_mode", "sections"}
    assert set(shown["reports"][0]) >= {"name", "sha256", "bytes"}


def test_ui_report_settings_come_from_the_report(triage, corpus):
    run = triage.json("archive", corpus_file("DarrenLu666888__CUDATutorial__profile.ncu-rep"))[0]
    shown = triage.json("show", run["id"])
    assert shown["command"] is None
    assert shown["settings"]["clock_control"] == "base"
    assert shown["settings_source"]["clock_control"] == "report"
    assert shown["application"]["argv"] == ["/root/workspace/CUDATutorial/8_copy_if"]


def test_legacy_report_without_clock_status_falls_back_to_default(triage, corpus):
    path = corpus_file("strrules105__PhysiCell__profile.nsight-cuprof-report")
    shown = triage.json("show", triage.json("archive", path)[0]["id"])
    assert shown["reports"][0]["format"] == "nsight-cuprof-report"
    assert shown["tool_version"] is None
    assert shown["settings"]["clock_control"] == "base"
    assert shown["settings_source"]["clock_control"] == "default"
    assert shown["evidence"]["clock"]["results_with_status"] == 0


def test_tables_hold_every_metric_section_and_rule(triage, corpus):
    import ncu_report

    path = corpus_file(GEMM_NAIVE)
    run = triage.json("archive", path)[0]
    action = ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)
    counts = triage.json("query", "select (select count(*) from metrics where kernel_index = 0) m,"
                         " (select count(distinct section_id) from sections"
                         "  where kernel_index = 0) s,"
                         " (select count(*) from rules where kernel_index = 0) r")[0]
    assert counts == {"m": len(action.metric_names()), "s": len(action.sections()),
                      "r": len(action.rule_results_as_dicts())}
    duration = triage.json("query", f"select duration_ns from kernels where run_id = '{run['id']}'"
                           " and kernel_index = 0")[0]["duration_ns"]
    assert duration == action.metric_by_name("gpu__time_duration.sum").value()


def test_store_option_before_or_after_the_command(triage, tmp_path, monkeypatch):
    monkeypatch.delenv("TRIAGE_STORE")
    store = tmp_path / "elsewhere"
    run = triage.json("--store", store, "archive", corpus_file(GEMM_NAIVE))[0]
    assert [r["id"] for r in triage.json("ls", "--store", store)] == [run["id"]]
    assert [r["id"] for r in triage.json("--store", store, "ls")] == [run["id"]]
    result = triage("--store", tmp_path / "none", "ls", expect=1)
    assert "no triage store" in result.stderr


def test_a_file_name_with_control_characters_stays_on_one_line(triage, tmp_path):
    odd = tmp_path / "we\nird\t.ncu-rep"
    odd.write_bytes(corpus_file(GEMM_NAIVE).read_bytes())
    archived = triage("archive", odd).stdout
    assert archived.count("\n") == 1 and "we\\nird\\t.ncu-rep  (new)" in archived
    listed = triage("ls").stdout.splitlines()
    assert len(listed) == 3 and listed[2].endswith("we\\nird\\t.ncu-rep")
    assert triage.json("ls")[0]["report_names"] == "we\nird\t.ncu-rep"


def test_csv_writes_lists_as_json(triage):
    triage("archive", corpus_file(GEMM_NAIVE), "--label", "naive")
    assert triage("query", "select labels from runs", "--csv").stdout == 'labels\n"[""naive""]"\n'


def test_a_column_added_to_a_table_shifts_no_data(monkeypatch):
    """Readers name their columns: a column declared in the middle of a table (as a later
    tables.json might) is null for a reader that does not fill it, and every other column
    keeps its values."""
    import copy

    import pyarrow as pa

    from triage.capture import ncu_results
    from triage.capture.formats import prepare_report
    from triage.schemas import tables as schema

    monkeypatch.setattr(ncu_results, "IN_PROCESS_RESULTS", 10**9)

    def kernels() -> pa.Table:
        report = prepare_report(corpus_file("spymaster2h__spyinfer__report.ncu-rep"))
        try:
            return pa.concat_tables([t for name, t in report.batches(0) if name == "kernels"])
        finally:
            report.close()

    before = kernels()
    specs = copy.deepcopy(schema.table_specs())
    specs["tables"]["kernels"]["columns"].insert(2, ["added", "string", "a later column"])
    monkeypatch.setattr(schema, "table_specs", lambda: specs)
    schema.arrow_schema.cache_clear()
    try:
        after = kernels()
    finally:
        schema.arrow_schema.cache_clear()
    assert after.column_names[2] == "added" and after["added"].null_count == after.num_rows
    assert after.drop_columns(["added"]).equals(before)
