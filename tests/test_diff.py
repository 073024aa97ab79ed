"""`triage diff` on corpus families: verdicts, reasons, JSON keys, exit codes."""

from __future__ import annotations

import copy

import pytest

from helpers import corpus_file, typed
from triage.compare.drift import DRIFT_RULES, SEVERITY_ORDER, grade, verdict

GEMM = ("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep")
MLP = [f"armleth__cuda-mlp-inference__mlp_{v}.ncu-rep"
       for v in ("v1", "v2", "v3_loop_unroll", "v4_8_per_thread")]
RWOFFSET = ("Lashi0812__CudaProgramming__readWriteOffset_cg.ncu-rep",
            "Lashi0812__CudaProgramming__readWriteOffset_cg_setfull.ncu-rep")
BWD29 = ("bwd29__self-join-MiSTIC__nodeCalc_profile.out.ncu-rep",
         "bwd29__self-join-MiSTIC__nodeCalc_profile10.out.ncu-rep")
TRANSPOSE = ("2388612861__GPU-DEMO__transpose_ncu_report.ncu-rep",
             "2388612861__GPU-DEMO__transpose_ncu_report_optimized.ncu-rep")


def archived(triage, *names) -> list[str]:
    return [triage.json("archive", corpus_file(n))[0]["id"] for n in names]


def drift_fields(diff: dict, severity: str) -> set[str]:
    return {d["field"] for d in diff["drift"] if d["severity"] == severity}


def test_gemm_pair_is_another_program_and_faster(triage):
    """build/naive.out then build/global_coal.out: the workload changed, so only with care."""
    a, b = archived(triage, *GEMM)
    diff = triage.json("diff", a, b)
    assert diff["a"] == a and diff["b"] == b
    assert diff["verdict"] == "caution"
    assert not drift_fields(diff, "invalidates")
    assert drift_fields(diff, "caution") == {"workload.program"}
    kernel = diff["kernels"][0]
    assert kernel["match"] == "matched" and kernel["matched_by"] == "launch_order"
    # codes in --json (whole names beside them); the views word the note
    assert kernel["notes"] == ["kernels.renamed"] and kernel["name_b"].startswith("sgemm_global")
    assert "note: paired by launch order, a guess: naive_gemm -> sgemm_global_mem_coalesce" in \
        triage("diff", a, b).stdout
    assert kernel["b"]["duration_ns"] < kernel["a"]["duration_ns"]
    assert kernel["delta_pct"] < 0
    sol = next(s for s in kernel["sections"] if s["section"] == "SpeedOfLight")
    duration = next(m for m in sol["metrics"] if m["name"] == "gpu__time_duration.sum")
    assert duration["a"] == kernel["a"]["duration_ns"] and duration["unit"] == "ns"


def test_json_has_the_documented_keys(triage):
    diff = triage.json("diff", *archived(triage, *GEMM))
    assert {"a", "b", "verdict", "drift", "kernels"} <= set(diff)
    for item in diff["drift"]:
        assert {"field", "a", "b", "severity", "why"} <= set(item)
    kernel = diff["kernels"][0]
    assert {"name", "match", "a", "b", "delta_pct", "sections"} <= set(kernel)
    assert "duration_ns" in kernel["a"] and "duration_ns" in kernel["b"]
    metric = kernel["sections"][0]["metrics"][0]
    assert {"name", "unit", "a", "b", "delta_pct"} <= set(metric)


def test_section_set_difference_is_caution_and_per_section(triage):
    diff = triage.json("diff", *archived(triage, *RWOFFSET))
    assert diff["verdict"] == "caution"
    assert "settings.sections" in drift_fields(diff, "caution")
    kernel = diff["kernels"][0]
    not_comparable = {s["section"] for s in kernel["sections"] if not s["comparable"]}
    assert "SpeedOfLight" in not_comparable  # collected only by the --set full run
    assert {f"section:{s}" for s in not_comparable} <= drift_fields(diff, "not_comparable")


def test_driver_drift_is_caution_with_reason(triage):
    diff = triage.json("diff", *archived(triage, *BWD29))
    assert diff["verdict"] == "caution"
    item = next(d for d in diff["drift"] if d["field"] == "driver.major")
    assert (item["a"], item["b"]) == ("470", "515")
    assert "driver" in item["why"]
    assert "cuda_version" in drift_fields(diff, "caution")
    assert diff["kernels"][0]["delta_pct"] < -80  # the 515 run is 6x faster


def test_mlp_series_pairs_and_transpose_kernel_set(triage):
    ids = archived(triage, *MLP)
    for later in ids[1:]:
        diff = triage.json("diff", ids[0], later)
        assert diff["verdict"] == "comparable"
        assert diff["kernels"][0]["matched_by"] == "name"
    diff = triage.json("diff", *archived(triage, *TRANSPOSE))
    assert diff["verdict"] == "caution"
    assert {"kernels.set", "settings.sections"} <= drift_fields(diff, "caution")
    kinds = {k["name"].split("(")[0]: k["match"] for k in diff["kernels"]}
    assert kinds["transposeMatrix"] == "matched"
    assert kinds["transposeMatrixShared"] == "only_a"
    assert kinds["transposeMatrixAdvanced"] == "only_b"


def test_strict_exit_codes(triage):
    gemm = archived(triage, *GEMM)
    bwd = archived(triage, *BWD29)
    other_gpu = archived(triage, "armleth__cuda-mlp-inference__mlp_v1.ncu-rep")[0]
    triage("diff", *gemm, "--strict", expect=0)
    triage("diff", *bwd, "--strict", expect=0)
    triage("diff", *bwd, "--strict=caution", expect=3)
    result = triage("diff", gemm[0], other_gpu, "--strict", expect=3)
    assert "invalid" in result.stderr
    assert triage.json("diff", gemm[0], other_gpu)["verdict"] == "invalid"


def test_filters_and_text_output(triage):
    a, b = archived(triage, *GEMM)
    diff = triage.json("diff", a, b, "--section", "SpeedOfLight", "--metric", "duration")
    sections = diff["kernels"][0]["sections"]
    assert [s["section"] for s in sections] == ["SpeedOfLight"]
    assert [m["name"] for m in sections[0]["metrics"]] == ["gpu__time_duration.sum"]
    everything = triage.json("diff", a, b, "--all", "--threshold", "50")
    statuses = {m["status"] for s in everything["kernels"][0]["sections"] for m in s["metrics"]}
    assert "unchanged" in statuses
    text = triage("diff", a, b, "--width", "100").stdout
    assert text.splitlines()[2].startswith("VERDICT: CAUTION")
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "no kernel" in triage("diff", a, b, "--kernel", "no_such_kernel", expect=1).stderr


def test_unknown_run_is_one_line_error(triage):
    a, _ = archived(triage, *GEMM)
    result = triage("diff", a, "feedfacefeed", expect=1)
    assert result.stderr.count("\n") == 1 and "not found" in result.stderr


def _record(triage) -> dict:
    return triage.json("show", archived(triage, GEMM[0])[0])


NCU_RULES = [r for r in DRIFT_RULES  # the nsys-only fields: tests/test_diff_nsys.py; git facts
             # come from captures: tests/test_workload_drift.py; machine facts too:
             # tests/test_machine_drift.py
             if r.field not in ("settings.trace", "environment.working_directory", "git.commit",
                                "git.dirty", "gpu.persistence_mode", "counters.permitted")]


@pytest.mark.parametrize("rule", NCU_RULES, ids=lambda r: r.field)
def test_grading_table_on_every_field(triage, rule):
    """Each rule, fed real records that differ only in its field, grades as the table says."""
    record_a = _record(triage)
    record_b = copy.deepcopy(record_a)
    value = rule.read(typed(record_a))
    changed = _change_field(record_b, rule.field, value)
    assert changed, f"{rule.field}: not set in the gemm report"
    item = next(i for i in grade(typed(record_a), typed(record_b)) if i.field == rule.field)
    assert item.state == "different" and item.severity == rule.severity
    assert item.code == rule.field
    assert verdict([item]) == {"invalidates": "invalid", "caution": "caution"}.get(
        rule.severity, "comparable")
    unknown = copy.deepcopy(record_a)
    _change_field(unknown, rule.field, value, to_none=True)
    states = {i.field: i.state for i in grade(typed(record_a), typed(unknown))}
    assert states.get(rule.field, "unknown") == "unknown"


def _change_field(record: dict, field: str, value, to_none: bool = False) -> bool:
    """Alter the record so that `field` reads differently (or None); False if impossible."""
    env = record.setdefault("environment", {})
    gpu = env["gpus"][0]
    new = None if to_none else f"{value}-changed" if isinstance(value, str) else \
        value + ("changed",) if isinstance(value, tuple) else \
        (not value if isinstance(value, bool) else (value or 0) + 1)
    application = record.get("application") or {}
    setters = {
        "gpu.name": lambda: gpu.__setitem__("name", new),
        "gpu.sm_count": lambda: gpu.__setitem__("sm_count", new),
        "gpu.compute_capability": lambda: gpu.__setitem__("compute_capability", new),
        "clock.locked": lambda: record["evidence"]["clock"].__setitem__(
            "executed_locked", None if to_none else 0) or (to_none and record["evidence"][
                "clock"].__setitem__("results_with_status", 0) or record["settings"].__setitem__(
                "clock_control", None)),
        "tool_version": lambda: record.__setitem__("tool_version", new),
        "driver.major": lambda: env.__setitem__("driver_version", None if to_none else "999.1"),
        "driver.version": lambda: env.__setitem__(
            "driver_version", None if to_none else env["driver_version"] + "1"),
        "cuda_version": lambda: env.__setitem__("cuda_version", new),
        "host.cpu": lambda: env["host"].__setitem__("cpu", new),
        "host.os": lambda: env["host"].__setitem__("os", new),
        "host.name": lambda: env["host"].__setitem__("name", new),
        "environment.working_directory": lambda: env.__setitem__("working_directory", new),
        "command": lambda: record.__setitem__("command", new),
        # the application as the report recorded it; unknown when no command says it either
        "workload.program": lambda: record.update(application=None, command=None) if to_none
        else application["argv"].__setitem__(0, new),
        "workload.arguments": lambda: record.update(application=None, command=None) if to_none
        else application.__setitem__("argv", application["argv"][:1] + list(new)),
    }
    if field.startswith("settings."):
        key = field.split(".", 1)[1]
        if key not in record["settings"] or value is None and not to_none:
            return False
        record["settings"][key] = None if to_none else (
            ["Changed"] if key == "sections" else new)
        return True
    if value is None and not to_none:
        return False
    setters[field]()
    return True


TWISTY = ("BrennenTaylor__Twisty__output1.nsight-cuprof-report",
          "BrennenTaylor__Twisty__profile.nsight-cuprof-report")


def test_old_reports_get_their_duration_like_explain(triage):
    """ncu 2019 reports record gpu__time_duration (no .sum): the diff reads it as explain does."""
    a, b = archived(triage, *TWISTY)
    diff = triage.json("diff", a, b, "--all")
    matched, new = diff["kernels"]
    sol = next(s for s in matched["sections"] if s["section"] == "SpeedOfLight")
    metric = next(m for m in sol["metrics"] if m["name"] == "gpu__time_duration")
    assert (matched["a"]["duration_ns"], matched["b"]["duration_ns"]) == (metric["a"], metric["b"])
    assert matched["delta_total_ns"] == metric["b"] - metric["a"]
    assert new["match"] == "only_b" and new["b"]["duration_ns"] > 1e11  # about 159 s
    assert "5.86 us ->    5.95 us" in triage("diff", a, b).stdout
    markdown = triage("diff", a, b, "--format", "md").stdout
    assert "| +159.3 s |" in markdown and "0 ns" not in markdown


def test_unknown_drift_is_explained_as_unknown(triage):
    a, b = archived(triage, "shortstheory__cuda-experiments__reduce_report2.ncu-rep", GEMM[0])
    diff = triage.json("diff", a, b)
    driver = next(i for i in diff["drift"] if i["field"] == "driver.major")
    assert driver["severity"] == "unknown" and driver["a"] is None
    assert driver["why"].startswith("not recorded on one side")
    nsys, ncu = archived(triage, "Lashi0812__CudaProgramming__streamSimple.sqlite",
                         "Lashi0812__CudaProgramming__readWriteOffset_ca.ncu-rep")
    markdown = triage("diff", nsys, ncu, "--format", "md").stdout
    row = next(line for line in markdown.splitlines() if "`clock.locked`" in line)
    assert row.startswith("| unknown |") and "not recorded on one side" in row
    assert "one run locked the GPU clocks" not in markdown


def test_kernel_filter_does_not_change_the_verdict(triage):
    a, b = archived(triage, "shortstheory__cuda-experiments__reduce_report2.ncu-rep",
                    "shortstheory__cuda-experiments__reduce_report3.ncu-rep")
    triage("diff", a, b, "--strict=caution", expect=3)
    diff = triage.json("diff", a, b, "--kernel", "Reduce2")
    assert [k["name"] for k in diff["kernels"]] == ["simpleReduce2(float *, float *, int)"]
    # report3 ran `a.out 1000000000`, report2 `a.out`: another workload size
    assert diff["verdict"] == "caution"
    assert drift_fields(diff, "caution") == {"kernels.set", "workload.arguments"}
    triage("diff", a, b, "--kernel", "Reduce2", "--strict=caution", expect=3)


def test_text_drift_is_wrapped_not_cut(triage):
    """The why of a caution names what differs; cut at 100 columns it named nothing."""
    a, b = archived(triage, "shortstheory__cuda-experiments__reduce_report2.ncu-rep", GEMM[0])
    text = triage("diff", a, b, "--width", "100").stdout
    drift = " ".join(text.split("\nkernels")[0].split())
    assert ("only in A: simpleReduce1(float *, float *, int), simpleReduce2(float *, float *, "
            "int); only in B: naive_gemm(") in drift
    assert max(map(len, text.splitlines())) <= 100


def test_a_run_against_itself_says_so(triage):
    (a,) = archived(triage, GEMM[0])
    diff = triage.json("diff", a, a[:12])
    assert diff["verdict"] == "comparable"
    # not even what neither run recorded: a run is the same as itself
    assert [(i["field"], i["severity"]) for i in diff["drift"]] == [("run", "info")]
    assert "A and B are the same run" in triage("diff", a, a).stdout


def test_ncu_names_that_differ_only_in_spacing_match_by_name(triage, store_dir, monkeypatch):
    """As an old and a new ncu write the same kernel; no 'paired by launch order' note."""
    from triage.archive.store import Store
    from triage.compare import ncu_diff
    from triage.compare.rundata import RunData

    (run,) = archived(triage, GEMM[0])
    a, b = RunData(Store.open(store_dir), run), RunData(Store.open(store_dir), run)
    real_rows = ncu_diff.kernel_rows

    def old_spacing(data):
        rows = real_rows(data)
        for row in rows if data is b else []:
            row["name"] = row["name"].replace(" *", "*")
        return rows

    monkeypatch.setattr(ncu_diff, "kernel_rows", old_spacing)
    kernels, _drift = ncu_diff.diff_ncu([a], [b], ncu_diff.DiffOptions())
    assert [(k.matched_by, k.name_b, k.notes) for k in kernels] == [("name", None, ())]


def test_every_view_lists_drift_in_one_order(triage):
    """One severity order (compare/drift.py): the terminal listed info before unknown while the
    report listed unknown first; an unknown clock matters more than another host name."""
    a, b = archived(triage, "shortstheory__cuda-experiments__reduce_report2.ncu-rep", GEMM[0])
    labels = {"INVALIDATES", "caution", "section", "unknown", "info"}
    text = triage("diff", a, b).stdout.split("\nkernels")[0]
    # fields unknown in both runs are one row: named by their first field here
    text_fields = [line.split(": ")[1].split(",")[0] if "not recorded in either run:" in line
                   else line.split()[1] for line in text.splitlines()
                   if line.startswith("  ") and line.split()[0] in labels]
    markdown = triage("diff", a, b, "--format", "md").stdout
    md_fields = [cells[2].strip().strip("`").split(",")[0] for cells in
                 (line.split("|") for line in markdown.splitlines())
                 if len(cells) > 3 and cells[2].strip().startswith("`")
                 and cells[1].strip() in labels | {"🛑 **INVALIDATES**", "⚠️ caution"}]
    assert text_fields == md_fields and len(text_fields) >= 4
    severity = {i["field"]: i["severity"] for i in triage.json("diff", a, b)["drift"]}
    order = [severity[f] for f in text_fields]
    assert order.index("unknown") < order.index("info")
    assert order == sorted(order, key=list(SEVERITY_ORDER).index)
