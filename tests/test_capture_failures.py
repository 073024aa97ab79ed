"""Honest repeats and profiler failures named right (issue 36 items 1 and 2), through the CLI on
real nsys captures of the suite's NVTX program.

Where a failure cannot be made to happen on demand (nsys failing on the third try, a hung
profiler), a shell script named `nsys` on PATH in tmp_path stands for it: it runs the real nsys
for every other call, and at the chosen call runs the real nsys with an option it rejects (the
profiler's own message), or a real program that sleeps. Each test says which.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from nvtx_capture import CAPTURE_OPTIONS
from triage.capture import process_tree


def wrapper(bin_dir: Path, real: str, body: str) -> Path:
    """`bin_dir/nsys`: `--version` and every call but the ones `body` takes are the real nsys.
    $n counts the `profile` calls."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nsys"
    script.write_text(f"""#!/bin/sh
REAL={real}
[ "$1" = profile ] || exec "$REAL" "$@"
n=$(( $(cat {bin_dir}/count 2>/dev/null || echo 0) + 1 )); echo $n > {bin_dir}/count
{body}
exec "$REAL" "$@"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """tmp_path/bin first on PATH (the wrapper `nsys` goes there)."""
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "bin"


def repeat(triage, tmp_path, count, *options, expect=0):
    return triage("capture", "--repeat", count, "--label", "rep", *options, "--", "nsys",
                  "profile", *CAPTURE_OPTIONS, "-o", tmp_path / "rep", "--force-overwrite",
                  "true", tmp_path / "prog", "3", "20", expect=expect)


@pytest.fixture
def prog(nvtx_program, tmp_path):
    (tmp_path / "prog").symlink_to(nvtx_program)
    return tmp_path / "prog"


def by_label(triage) -> dict:
    return {label: run for run in triage.json("ls") for label in run["labels"] or ["-"]}


def test_a_failed_repeat_never_archives_the_repeat_before_it(triage, tmp_path, nsys_exe,
                                                             prog, on_path):
    """The third try stands for an nsys that fails after touching its -o file: the wrapper
    touches rep.nsys-rep (same bytes as try 2, new mtime) and runs the real nsys with
    --trace=bogus, which it refuses. Before: try 2's file archived again as rep/3."""
    wrapper(on_path, nsys_exe, f'[ $n = 3 ] && touch {tmp_path}/rep.nsys-rep && '
            'exec "$REAL" profile --trace=bogus true')
    failed = repeat(triage, tmp_path, 3, expect=1)
    assert "try 3 of 3 failed and is not in the group 'rep'" in failed.stderr
    assert "Illegal --trace argument 'bogus'" in failed.stderr
    assert "left from before this run" in failed.stderr
    labels = by_label(triage)
    assert sorted(labels) == ["-", "rep/1", "rep/2"]
    attempt = triage.json("show", labels["-"]["id"])
    assert attempt["source"] == "capture-failed" and attempt["capture"]["group"] is None
    assert attempt["capture"]["status"] == "exited 1"
    hashes = [triage.json("show", f"rep/{i}")["reports"][0]["sha256"] for i in (1, 2)]
    assert hashes[0] != hashes[1]
    diff = triage.json("diff", "rep/*", "rep/1")
    assert diff["sides"]["a"] == [labels["rep/1"]["id"], labels["rep/2"]["id"]]


def test_a_failed_try_is_no_member_of_the_group(triage, tmp_path, nsys_exe, prog, on_path):
    """The second try stands for an nsys that fails before writing: the wrapper removes the old
    report and runs the real nsys with --trace=bogus. Before: the attempt was labelled rep/2 in
    the group and `diff 'rep/*'` refused the whole group."""
    wrapper(on_path, nsys_exe, f'[ $n = 2 ] && rm -f {tmp_path}/rep.nsys-rep && '
            'exec "$REAL" profile --trace=bogus true')
    failed = repeat(triage, tmp_path, 2, expect=1)
    assert "try 2 of 2 failed" in failed.stderr and "rep/1" in failed.stderr
    labels = by_label(triage)
    assert sorted(labels) == ["-", "rep/1"]
    rows = triage.json("query", "select capture_group, source from runs order by source")
    assert rows == [{"capture_group": "rep", "source": "capture"},
                    {"capture_group": None, "source": "capture-failed"}]
    assert triage.json("diff", "rep/*", "rep/1")["sides"]["a"] == [labels["rep/1"]["id"]]


@pytest.mark.parametrize("tool,command,fix", [
    ("nsys", ["profile", "-o", "r", "./prog"], "--force-overwrite true"),
    ("nsys", ["profile", "-o", "r", "--force-overwrite", "false", "./prog"],
     "--force-overwrite true"),
    ("ncu", ["-o", "r", "./prog"], "add -f"),
])
def test_repeat_without_overwrite_is_refused_before_running(triage, tmp_path, store_dir,
                                                            nsys_exe, tool, command, fix):
    if tool == "ncu":
        from helpers import require_tool

        require_tool("ncu")
    refused = triage("capture", "--repeat", "2", "--label", "r", "--", tool, *command, expect=2)
    assert fix in refused.stderr and refused.stderr.count("\n") == 1
    assert not store_dir.exists() and not list(tmp_path.glob("r.*"))


def test_repeat_with_a_counter_in_the_name_needs_no_overwrite(triage, tmp_path, nsys_exe, prog,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = json.loads(triage("capture", "--repeat", "2", "--label", "n", "--json", "--", "nsys",
                             "profile", *CAPTURE_OPTIONS, "-o", "n%p", "./prog", "2", "10").stdout)
    names = [r["reports"][0] for r in runs]
    assert len(set(names)) == 2 and all(name.startswith("n") for name in names)


def test_an_existing_output_file_is_named_and_its_stray_report_removed(triage, tmp_path,
                                                                       nsys_exe, prog,
                                                                       monkeypatch):
    """nsys 2022.4 refusing to overwrite -o says 'File exists', exits 0 and writes the report
    to $TMPDIR instead. Before: 'its QdstrmImporter is missing', and the stray report stayed."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.chdir(tmp_path)
    argv = ["nsys", "profile", *CAPTURE_OPTIONS, "-o", "step", "./prog", "2", "10"]
    triage("capture", "--", *argv)
    failed = triage("capture", "--", *argv, expect=1)
    assert "refused to overwrite its existing output file" in failed.stderr
    assert "--force-overwrite true" in failed.stderr and "QdstrmImporter" not in failed.stderr
    assert "File exists" in failed.stderr and "removed its stray report" in failed.stderr
    assert not [p.name for p in temp.iterdir() if p.name.startswith("nsys-report-")]
    attempt = triage.json("show", "latest")
    assert attempt["source"] == "capture-failed" and attempt["capture"]["status"] == "exited 0"


def gone(pid: int, limit: float = 60) -> bool:
    """Whether `pid` has exited (or is a zombie) within `limit` seconds (bounded, generous)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not process_tree._alive(pid):
            return True
        time.sleep(0.2)
    return False


def test_timeout_ends_a_hung_profiler_its_agent_and_its_temporary_report(triage, tmp_path,
                                                                          nsys_exe, on_path,
                                                                          monkeypatch):
    """A hung nsys stands in as the wrapper: it writes a temporary .qdstrm and says so as nsys
    does, starts a detached 'agent' (a real sleeping python whose argv carries nsys's
    --start-agent --session-name=profile-APP-PID) and a real `sleep` holding its output, and
    waits. Before: no --timeout, and capture waited forever."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    pids = tmp_path / "pids"
    wrapper(on_path, nsys_exe, f"""
: > {temp}/nsys-report-beef.qdstrm
echo "Generating '{temp}/nsys-report-beef.qdstrm'"
setsid python3 -c 'import time; time.sleep(600)' --start-agent \\
    --session-name=profile-prog-$$ </dev/null >/dev/null 2>&1 &
echo $! >> {pids}
sleep 600 &
echo $! >> {pids}
wait
""")
    failed = triage("capture", "--timeout", "3s", "--", "nsys", "profile", "-o", "hung",
                    "./prog", expect=1)
    assert "timed out after 3 s" in failed.stderr
    attempt = triage.json("show", "latest")
    assert attempt["capture"]["status"] == "timed out after 3 s"
    assert attempt["capture"]["exit_code"] is None
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2 and all(gone(pid) for pid in started)
    assert not list(temp.glob("nsys-report-*"))


def test_a_bad_timeout_is_a_usage_error(triage, nsys_exe):
    refused = triage("capture", "--timeout", "soon", "--", "nsys", "profile", "./a", expect=2)
    assert "invalid duration 'soon'" in refused.stderr


def test_the_series_goes_on_after_a_failed_try_and_lists_it_beside_the_group(
        triage, tmp_path, nsys_exe, prog, on_path):
    """The second of three tries stands for an nsys that fails (the real nsys refusing
    --trace=bogus). Before: the series stopped at try 2, and `diff`/`history` of 'rep/*' did
    not say that a try of the series had failed."""
    wrapper(on_path, nsys_exe, f'[ $n = 2 ] && rm -f {tmp_path}/rep.nsys-rep && '
            'exec "$REAL" profile --trace=bogus true')
    failed = repeat(triage, tmp_path, 3, expect=1)
    assert "try 2 of 3 failed and is not in the group 'rep'" in failed.stderr
    assert "the group holds 2 run(s): rep/1" in failed.stderr and "rep/3" in failed.stderr
    labels = by_label(triage)
    assert sorted(labels) == ["-", "rep/1", "rep/3"]
    attempt = labels["-"]["id"]
    assert triage.json("show", attempt)["capture"]["series"] == "rep/2"
    for ordinary in ("rep/1", "rep/3"):
        assert "series" not in triage.json("show", ordinary)["capture"]
    listed = {"id": attempt, "name": "rep/2", "status": "exited 1"}
    diff = triage.json("diff", "rep/*", "rep/1")
    assert diff["aggregate"]["a"]["failed"] == [listed] and diff["aggregate"]["b"]["failed"] == []
    assert diff["sides"]["a"] == [labels["rep/1"]["id"], labels["rep/3"]["id"]]
    line = f"1 failed try of the series, not in the group: rep/2 (exited 1, {attempt[:8]})"
    assert f"A failed: {line}" in triage("diff", "rep/*", "rep/1").stdout
    assert line in triage("diff", "rep/*", "rep/1", "--format", "md").stdout
    history = ("history", "rep/*", "--nvtx", "forward")
    assert triage.json(*history)["failed"] == [listed]
    assert f"Failed: {line}" in triage(*history).stdout
    assert line in triage(*history, "--format", "md").stdout


def test_the_git_state_is_the_tree_before_the_workload_writes_to_it(triage, tmp_path, nsys_exe,
                                                                    on_path, monkeypatch):
    """The git state is read on the probes' thread, and the profiler starts only once it is
    read: a workload writing into its tree (a log, a checkpoint) is not counted among the
    untracked files, however slowly git answers. Here git is made 0.5 s slow, and the wrapper
    writes written.txt, then runs the real nsys with an option it refuses (a failed capture
    keeps its git state). Before, the file was counted or not by timing."""
    import subprocess

    from triage.capture import git_state

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q",
                                  "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    real = git_state.git_snapshot
    monkeypatch.setattr(git_state, "git_snapshot",
                        lambda *args: (time.sleep(0.5), real(*args))[1])
    wrapper(on_path, nsys_exe, f'echo log > {repo}/written.txt && '
            'exec "$REAL" profile --trace=bogus true')
    monkeypatch.chdir(repo)
    triage("capture", "--", "nsys", "profile", "-o", repo / "prof", "true", expect=1)
    assert (repo / "written.txt").exists()  # the workload ran, and wrote
    (attempt,) = triage.json("ls")
    git = triage.json("show", attempt["id"])["capture"]["git"]
    assert git["untracked_count"] == 0 and git["dirty"] is False, git


def test_an_agent_is_found_by_the_mark_its_profiler_run_gave_it(tmp_path):
    """An nsys agent whose session's nsys came and went unseen (a profile shorter than the
    look at the profiler's processes) is still ended: it inherited the profiler run's mark.
    A process standing for such an agent (its command line an agent's, its session another
    pid's) is found by the mark alone, and ended."""
    import subprocess
    import sys

    mark = f"test.{os.getpid()}"
    agent = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--start-agent",
         "--session-name=profile-app-1"], env={**os.environ, process_tree.MARK: mark})
    try:
        deadline = time.monotonic() + 30  # /proc may show the exec a moment after Popen
        while process_tree.agents_of([], mark) != [agent.pid]:
            assert time.monotonic() < deadline, "the marked process was never found"
            time.sleep(0.05)
        assert agent.pid not in process_tree.agents_of([os.getpid()])
        assert agent.pid not in process_tree.agents_of([], "another")
        process_tree.end_agents([], mark)
        assert agent.wait(timeout=30) == -9
    finally:
        agent.kill()
        agent.wait()
