"""`triage capture` with the real Debian ncu (no GPU here: it profiles nothing) and `triage env`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import require_tool
from triage.capture.outputs import expected_reports
from triage.capture.profiler_args import parse_command
from triage.capture.session import CaptureRequest, questionable
from triage.base.errors import UsageError


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A real git repository with one commit, as the workload's working directory."""
    work = tmp_path / "work"
    work.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=work, check=True)
    (work / "app.py").write_text("print('hello from the workload')\n")
    subprocess.run(["git", "add", "app.py"], cwd=work, check=True)
    subprocess.run(["git", "commit", "-qm", "workload"], cwd=work, check=True)
    monkeypatch.chdir(work)
    return work


def head(work) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_ncu_capture_without_gpu_is_recorded_and_fails(triage, workdir, store_dir):
    require_tool("ncu")
    argv = ["ncu", "--set", "full", "-o", "prof", sys.executable, "app.py"]
    result = triage("capture", "--", *argv, expect=1)
    assert "no report was produced" in result.stderr and "No kernels were profiled" in result.stderr
    assert "found no GPU work to profile" in result.stderr  # the diagnosis, with its fix
    assert "`nvidia-smi` lists a GPU" in result.stderr
    assert "hello from the workload" in result.stdout  # the program's output was streamed
    shown = triage.json("show", "latest")
    assert shown["source"] == "capture-failed" and shown["reports"] == []
    assert shown["tool"] == "ncu" and shown["tool_version"].startswith("2022.3")
    capture = shown["capture"]
    assert capture["argv"] == argv and capture["exit_code"] == 0
    assert capture["cwd"] == str(workdir)
    assert capture["git"]["commit"] == head(workdir) and capture["git"]["dirty"] is False
    assert capture["ncu_lists"]["sections"]["count"] >= 15
    listing = capture["ncu_lists"]["sections"]["blob"]  # the output itself, which gc keeps
    triage("gc", "--grace", "0")
    assert (store_dir / "objects" / listing[:2] / listing[2:]).is_file()
    assert triage.json("verify")["ok"]
    assert shown["settings"]["section_set"] == "full"
    assert shown["settings_source"]["section_set"] == "command"
    assert shown["settings_source"]["clock_control"] == "default"
    assert any("No kernels were profiled" in line for line in capture["output_tail"])
    sections = triage.json("query", "select identifier from ncu_section_list")
    assert {"identifier": "SpeedOfLight"} in sections
    sets = triage.json("query", "select identifier, enabled from ncu_set_list where enabled")
    assert len(sets) == 1
    for command in (["diff", shown["id"], shown["id"]], ["explain", shown["id"]]):
        refused = triage(*command, expect=1)
        assert "produced no report" in refused.stderr and refused.stderr.count("\n") == 1


def test_capture_redacts_secrets_in_argv_and_environment(triage, workdir, monkeypatch):
    require_tool("ncu")
    monkeypatch.setenv("MY_API_TOKEN", "hunter2")
    triage("capture", "--", "ncu", "-o", "prof", sys.executable, "app.py", "--token=hunter2",
           expect=1)
    shown = triage("show", "latest", "--json").stdout
    assert "hunter2" not in shown
    record = json.loads(shown)["capture"]
    assert record["environment"]["MY_API_TOKEN"] == "<redacted>"
    assert record["argv"][-1] == "--token=<redacted>"


def test_missing_profiler_says_how_to_get_it(triage, workdir, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = triage("capture", "--", "ncu", "-o", "p", "./app", expect=1)
    assert "ncu not found on PATH" in result.stderr and "nsight-compute" in result.stderr
    assert not (tmp_path / "store").exists()  # nothing written before the tool was found


def test_not_a_profiler_is_a_usage_error(triage, workdir):
    result = triage("capture", "--", "python3", "app.py", expect=2)
    assert "ncu or nsys" in result.stderr


def test_rank_guard_and_group(workdir):
    from triage.capture.session import _rank_guard

    facts = {"scheduler": {"rank": 2, "world_size": 4}}
    with pytest.raises(UsageError, match="rank 2 of 4"):
        _rank_guard(CaptureRequest(["ncu"]), facts)
    _rank_guard(CaptureRequest(["ncu"], group="step20"), facts)  # tagged: allowed


def test_questionable_settings_are_said_before_the_run():
    parsed = parse_command(["ncu", "--clock-control", "none", "--cache-control", "none", "./a"])
    facts = {"profiling_counters": {"admin_only": {"value": True}, "is_root": False},
             "dcgm": {"running": {"value": True}, "advice": "dcgmi profile --pause"}}
    text = " | ".join(questionable(parsed, facts))
    for needle in ("--clock-control none", "--cache-control none", "no report file",
                   "RmProfilingAdminOnly", "dcgmi profile --pause"):
        assert needle in text


def test_rank_reports_are_found_and_tagged(tmp_path):
    for rank in (0, 1, 3):
        (tmp_path / f"prof.{rank}.ncu-rep").write_bytes(b"x")
    (tmp_path / "unrelated.ncu-rep").write_bytes(b"x")
    parsed = parse_command(["srun", "-n", "4", "ncu", "-o", "prof.%q{SLURM_PROCID}", "./app"])
    found = expected_reports(parsed, tmp_path, since=0)
    assert [(f.path.name, f.rank) for f in found] == [
        ("prof.0.ncu-rep", 0), ("prof.1.ncu-rep", 1), ("prof.3.ncu-rep", 3)]


def test_rank_in_a_report_name_is_read_like_rank_of(tmp_path):
    """Under `srun torchrun` a name can hold the task (SLURM_PROCID) and the worker (RANK): the
    report is the worker's, as `machine.rank_of` says of the process itself."""
    (tmp_path / "prof.1.6.ncu-rep").write_bytes(b"x")
    (tmp_path / "local.2.ncu-rep").write_bytes(b"x")
    both = parse_command(["ncu", "-o", "prof.%q{SLURM_PROCID}.%q{RANK}", "./app"])
    local = parse_command(["ncu", "-o", "local.%q{LOCAL_RANK}", "./app"])
    assert [f.rank for f in expected_reports(both, tmp_path, since=0)] == [6]
    assert [f.rank for f in expected_reports(local, tmp_path, since=0)] == [2]


def test_env_with_and_without_tools(triage, monkeypatch, tmp_path):
    report = triage.json("env")
    assert {"machine", "tools", "checklist"} <= set(report)
    assert report["machine"]["host"]["hostname"]["value"]
    monkeypatch.setenv("PATH", str(tmp_path))
    report = triage.json("env")
    assert report["tools"]["ncu"]["path"] is None
    assert "nsight-compute" in report["tools"]["ncu"]["missing"]
    assert "[FAIL] ncu installed" in triage("env").stdout


def test_nsys_capture_archives_one_run_with_how_it_ran(triage, workdir, nsys_exe, nvtx_program,
                                                       monkeypatch):
    """... with the machine facts and nsys's version probed beside the profiler (a thread, not
    before or after it), recorded as a probe before it would record them, and `nsys --version`
    run once (the archive's export does not ask again)."""
    import threading

    from triage.capture import machine, profilers

    probed_in: list[bool] = []

    def version(tool, executable):
        probed_in.append(threading.current_thread() is threading.main_thread())
        return real_version(tool, executable)

    def run_tool(argv, *args):
        asked.append(argv)
        return real_run(argv, *args)

    real_version, real_run, asked = profilers.tool_version, profilers.run_tool, []
    monkeypatch.setattr(profilers, "tool_version", version)
    monkeypatch.setattr(profilers, "run_tool", run_tool)
    monkeypatch.setattr(profilers, "_VERSION_OUTPUTS", {})  # none asked in this process yet
    argv = ["nsys", "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
            "-o", "step", str(nvtx_program), "3", "100"]
    run = json.loads(triage("capture", "--json", "--label", "step", "--note", "first capture",
                            "--", *argv).stdout)
    assert run["tool"] == "nsys" and run["new"] is True
    assert run["reports"] == ["step.nsys-rep"]
    shown = triage.json("show", "step")
    capture = shown["capture"]
    assert capture["argv"] == argv and capture["exit_code"] == 0
    assert shown["source"] == "capture" and shown["command"] == " ".join(argv)
    assert shown["tool_version"] == capture["tool_version"] == "2022.4.2.1"
    settings, source = shown["settings"], shown["settings_source"]
    assert (settings["trace"], source["trace"]) == ("nvtx,osrt", "report")
    assert (settings["sample"], source["sample"]) == ("none", "command")
    assert source["capture_range"] == "default" and source["duration"] == "default"
    assert capture["git"]["commit"] == head(workdir)
    host = capture["machine"]["host"]
    assert host["hostname"]["value"] and host["python_version"]["value"]
    assert [a[1:] for a in asked] == [["--version"]]  # the export asked none again
    assert probed_in == [False] and capture["tool_version_text"] == real_version("nsys", "nsys")[1]
    facts = machine.collect_machine_facts([str(nvtx_program)])
    assert sorted(capture["machine"]) == sorted(facts)
    assert {k: capture["machine"][k] for k in ("host", "scheduler", "container", "frameworks")} \
        == {k: facts[k] for k in ("host", "scheduler", "container", "frameworks")}
    assert shown["notes"][0]["text"] == "first capture"
    ranges = triage.json("query", "select text, count(*) n from nvtx_ranges group by text "
                         "order by text")
    assert {"text": "forward", "n": 3} in ranges and {"text": "step", "n": 3} in ranges
    assert "capture" in triage("show", "step").stdout


def test_nsys_capture_of_ranks_is_one_run(triage, workdir, nsys_exe, nvtx_program):
    """The documented multi-rank pattern, with a shell loop standing in for srun: every rank
    writes its own report (%q{RANK}); one triage process archives them as one run."""
    loop = ("for r in 0 1; do RANK=$r nsys profile --trace=nvtx --sample=none --cpuctxsw=none "
            f"-o rank.%q{{RANK}} {nvtx_program} 2 50 || exit 1; done")
    run = json.loads(triage("capture", "--json", "--shell", "--", loop).stdout)
    assert sorted(run["reports"]) == ["rank.0.nsys-rep", "rank.1.nsys-rep"]
    shown = triage.json("show", run["id"])
    assert sorted(r["rank"] for r in shown["reports"]) == [0, 1]
    per_report = triage.json("query", "select report_index, count(*) n from nvtx_ranges "
                             "where text = 'step' group by 1 order by 1")
    assert per_report == [{"report_index": 0, "n": 2}, {"report_index": 1, "n": 2}]


def test_capture_on_every_rank_needs_a_group(triage, workdir, nsys_exe, nvtx_program,
                                             monkeypatch):
    """srun starting `triage capture` on every rank: refused without --group, tagged with it."""
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    argv = ["nsys", "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", "-o",
            "rank1", str(nvtx_program), "1", "10"]
    refused = triage("capture", "--", *argv, expect=2)
    assert "rank 1 of 2" in refused.stderr and "--group" in refused.stderr
    run = json.loads(triage("capture", "--json", "--group", "step20", "--", *argv).stdout)
    rows = triage.json("query", "select id, capture_group from runs")
    assert rows == [{"id": run["id"], "capture_group": "step20"}]
    assert triage.json("show", run["id"])["capture"]["rank"] == 1
