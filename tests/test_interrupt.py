"""An interrupted `triage capture` (issue 19 item 4): Ctrl-C or a kill while the profiler runs
records a failed attempt with what was known, exits with the shell's code for the signal and
says so in one line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nvtx_capture import profiler_failed
from triage.capture.process_tree import descendants


def wait_for_application(capture: subprocess.Popen, name: str, limit: float = 120) -> None:
    """Until the profiled program runs under `capture` (bounded: a failure, not a hang). A
    capture that ends first because nsys failed by itself raises ProfilerFailedByItself (the
    test is run again); anything else fails the test with what was running and what the
    capture said, so that a failure in CI explains itself."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and capture.poll() is None:
        if name in _commands(descendants(capture.pid)).values():
            return
        time.sleep(0.1)
    running = _commands(descendants(capture.pid))
    if capture.poll() is None:
        capture.kill()
    out, err = capture.communicate(timeout=60)
    profiler_failed(err)
    pytest.fail(f"{name} never started under the capture (exit {capture.returncode}); "
                f"running below it then: {running}\nstdout: {out}\nstderr: {err}")


def _commands(pids: list[int]) -> dict[int, str]:
    """The name (`comm`) of each of these processes still running."""
    names = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
    return names


def agents_left(pids: list[int], limit: float = 60) -> list[int]:
    """nsys agents of sessions these processes started still running after `limit` seconds."""
    from triage.capture.process_tree import _alive, agents_of

    deadline = time.monotonic() + limit
    while (left := [p for p in agents_of(pids) if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_capture_is_recorded_as_a_failed_attempt(triage, nsys_exe, tmp_path,
                                                                store_dir, signum):
    command = [nsys_exe, "profile", "--trace=osrt", "--sample=none", "--cpuctxsw=none",
               "-o", "hung", "sleep", "300"]
    capture = subprocess.Popen([sys.executable, "-m", "triage", "capture", "--", *command],
                               cwd=tmp_path, env={**os.environ, "TRIAGE_STORE": str(store_dir)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_application(capture, "sleep")
        profiler = descendants(capture.pid)  # nsys and what it started
        capture.send_signal(signum)
        _out, err = capture.communicate(timeout=120)
    finally:
        if capture.poll() is None:
            capture.kill()
    name = signal.Signals(signum).name
    assert capture.returncode == 128 + signum
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"triage: error: interrupted ({name}) after ")
    run = triage.json("show", "latest")
    assert run["id"][:12] in err and run["source"] == "capture-failed"
    assert run["notices"][0].startswith(f"interrupted ({name}) after ")
    assert run["capture"]["argv"] == command and run["capture"]["seconds"] > 0
    # the signal is the status, not nsys's exit code (0 after it stopped its application)
    assert run["capture"]["status"] == name and run["capture"]["exit_code"] is None
    assert not agents_left(profiler)  # the agent nsys detached is ended too
    assert run["capture"]["environment"]["TRIAGE_STORE"] == str(store_dir)
    assert [r["source"] for r in triage.json("ls")] == ["capture-failed"]


def ctrl_c(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("late", ["indexing", "printing"])
def test_an_archive_interrupted_after_filing_names_the_run(triage, monkeypatch, late):
    """Ctrl-C after a run's manifest is written (issue 44, item 5): the run is whole and stays,
    the exit is 130 with one line that names it, never click's `Aborted!` (exit 1) as if
    nothing was filed; archiving the report again finds it."""
    from helpers import corpus_file
    from triage.archive import catalog
    from triage.views import runs as runs_view

    report = corpus_file("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep")
    with monkeypatch.context() as patch:
        if late == "indexing":  # the catalog row, after the manifest
            patch.setattr(catalog, "add_rows", ctrl_c)
        else:  # the run's line, after everything
            patch.setattr(runs_view, "archive_line", ctrl_c)
        done = triage("archive", report, expect=130)
    run_id = triage.json("show", "latest")["id"]
    assert done.stderr == f"triage: error: interrupted (SIGINT) after filing run {run_id[:12]}; " \
        "archive the same report(s) again to file the rest (`already archived` for those " \
        "filed)\n", done.stderr
    assert "Aborted" not in done.output
    assert triage.json("verify")["ok"]
    again = triage.json("archive", report)[0]
    assert (again["id"], again["new"]) == (run_id, False)


def test_an_interrupted_batch_has_named_each_run_it_filed(triage, monkeypatch):
    """`triage archive A B C` names each run as it is filed (issue 43, item 5): Ctrl-C while
    the third is stored leaves the first two printed on stdout, whole in the store, and named
    again by the interrupt's line (before, a batch printed its runs only at the end: an
    interrupted one had filed runs it never named)."""
    from helpers import corpus_file
    from triage.archive import ingest

    reports = [corpus_file(name) for name in (
        "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",
        "LakshyaSingh354__CudaCode__gemm_global_mem_coalesce.ncu-rep",
        "Lashi0812__CudaProgramming__simpleSOA.ncu-rep")]
    finish, finished = ingest._Steps.finish, []

    def third_interrupted(steps):
        finished.append(steps)
        if len(finished) == 3:
            raise KeyboardInterrupt
        return finish(steps)

    with monkeypatch.context() as patch:
        patch.setattr(ingest._Steps, "finish", third_interrupted)
        done = triage("archive", *reports, expect=130)
    printed = [line.split()[0] for line in done.stdout.splitlines() if "(new)" in line]
    assert len(printed) == 2 and all(run in done.stderr for run in printed), done.output
    listed = [run["id"][:12] for run in triage.json("ls")]
    assert sorted(listed) == sorted(printed)
    assert triage.json("verify")["ok"]


STALL_AT_THIRD_RUN = """import sys, time
from triage.archive import ingest
from triage.capture import ncu_results
ncu_results.cores = lambda limit: 2  # the batch read by a pool of two, on any machine
stage_run, built, signal_file = ingest._stage_run, [], sys.argv.pop(1)
def stalled(*args):
    built.append(1)
    if len(built) == 3:  # the pool is reading the reports after it: the test may press Ctrl-C
        open(signal_file, "w").close()
        for _ in range(6000):  # in slices, as real work runs Python: a Ctrl-C the kernel gave
            time.sleep(0.1)    # another thread (the store's) is raised here within one
    return stage_run(*args)
ingest._stage_run = stalled
from triage.cli import main
sys.argv[0] = "triage"
main()
"""


def test_ctrl_c_in_a_batch_read_by_the_pool_ends_every_worker(tmp_path):
    """A real Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while the
    batch's relay and workers read ahead: triage exits 130 naming the runs it filed, and no
    process of the batch is left. The archive stalls at its third run and says so through a
    file, so no timing is guessed."""
    from conftest import Triage
    from helpers import CORPUS
    from triage.capture.process_tree import _alive

    reports = sorted(str(p) for p in (CORPUS / "ncu").glob("*.ncu-rep"))
    stalled, store = tmp_path / "stalled", tmp_path / "store"
    archive = subprocess.Popen(
        [sys.executable, "-c", STALL_AT_THIRD_RUN, str(stalled), "--store", str(store),
         "archive", *reports], start_new_session=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not stalled.exists() and archive.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stalled.exists(), archive.communicate()
        pool = descendants(archive.pid)
        assert len(pool) >= 2  # the relay and its workers
        os.killpg(archive.pid, signal.SIGINT)
        out, err = archive.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(archive.pid, signal.SIGKILL)
    assert archive.returncode == 130, err
    filed = [line.split()[0] for line in out.splitlines() if "(new)" in line]
    assert len(filed) == 2 and err.startswith("triage: error: interrupted (SIGINT) after filing")
    deadline = time.monotonic() + 10  # the workers' parent death signal, delivered by the kernel
    while (left := [pid for pid in pool if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    listed = Triage().json("--store", store, "ls")
    assert sorted(run["id"][:12] for run in listed) == sorted(filed)
    assert Triage().json("--store", store, "verify")["ok"]


class SignalledAtStart(subprocess.Popen):
    """A Popen that gets SIGINT the moment its child exists: the window after the fork in which
    a plain `subprocess.run` has no process object yet to kill (a real Ctrl-C landed there in
    test_reader_identity's Arrow export about one time in ten on a loaded machine)."""

    started: list[int] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        SignalledAtStart.started.append(self.pid)
        signal.raise_signal(signal.SIGINT)


@pytest.fixture
def signalled_at_start(monkeypatch):
    """Every Popen of the test signalled as it starts; the pids it started, killed after."""
    SignalledAtStart.started = []
    monkeypatch.setattr(subprocess, "Popen", SignalledAtStart)
    yield SignalledAtStart.started
    for pid in SignalledAtStart.started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_ctrl_c_as_a_tool_starts_ends_the_tool(signalled_at_start):
    from triage.capture.process_tree import _alive, run_ended

    with pytest.raises(KeyboardInterrupt):
        run_ended(["sleep", "600"], timeout=60)
    assert len(signalled_at_start) == 1 and not _alive(signalled_at_start[0])


def test_a_ctrl_c_as_the_profiler_starts_stops_it(signalled_at_start, tmp_path):
    from triage.capture.process_tree import _alive
    from triage.capture.session import run_profiler

    outcome = run_profiler(["sleep", "600"], False, tmp_path, dict(os.environ), lambda _: None)
    assert outcome.interrupted == "SIGINT" and outcome.exit_code == -signal.SIGINT
    assert len(signalled_at_start) == 1 and not _alive(signalled_at_start[0])


def test_a_tool_past_its_timeout_is_killed_and_reaped():
    from triage.capture.process_tree import run_ended

    before = set(descendants(os.getpid()))  # the suite's own (its S3 server)
    with pytest.raises(subprocess.TimeoutExpired):
        run_ended(["sleep", "600"], timeout=0.2)
    assert set(descendants(os.getpid())) == before


def signalled_from_another_thread() -> threading.Thread:
    """A thread that, once the test's child runs, sends SIGINT to itself: the kernel may hand a
    Ctrl-C to any of triage's threads (DuckDB's, pyarrow's), and Python's handler trips there
    without waking the main thread's blocked wait (in a CI run, an `nsys export` that was
    never stopped)."""
    before = set(descendants(os.getpid()))  # the suite's own (its S3 server)

    def send() -> None:
        deadline = time.monotonic() + 60
        while set(descendants(os.getpid())) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the main thread in its wait by now (else the test passes anyway)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    sender = threading.Thread(target=send)
    sender.start()
    return sender


def test_a_ctrl_c_given_to_another_thread_ends_the_tool(tmp_path):
    """Ended, not waited for: a tool that would finish on its own in 30 s never does."""
    from triage.capture.process_tree import run_ended

    before = set(descendants(os.getpid()))
    sender = signalled_from_another_thread()
    with pytest.raises(KeyboardInterrupt):
        run_ended([sys.executable, "-c", "import pathlib, sys, time; time.sleep(30); "
                   "pathlib.Path(sys.argv[1]).touch()", str(tmp_path / "finished")], timeout=120)
    sender.join()
    assert set(descendants(os.getpid())) == before and not (tmp_path / "finished").exists()


def test_a_ctrl_c_given_to_another_thread_ends_the_wait_for_workers(tmp_path):
    """The archive's main thread waiting for an ncu worker's result meets it too: the worker,
    which would finish on its own in 30 s, is ended with its relay."""
    from triage.capture.workers import Relay

    def slow(_task) -> bytes:
        time.sleep(30)
        (tmp_path / "finished").touch()
        return b""

    before = set(descendants(os.getpid()))
    sender = signalled_from_another_thread()
    relay = Relay(range(1), slow, 1)
    try:
        with pytest.raises(KeyboardInterrupt):
            next(relay)
    finally:
        relay.close()
    sender.join()
    assert set(descendants(os.getpid())) == before and not (tmp_path / "finished").exists()


def test_a_ctrl_c_given_to_another_thread_stops_the_profiler(tmp_path):
    from triage.capture.session import run_profiler

    sender = signalled_from_another_thread()
    outcome = run_profiler(["sleep", "600"], False, tmp_path, dict(os.environ), lambda _: None,
                           timeout=120)
    sender.join()
    assert outcome.interrupted == "SIGINT" and outcome.timed_out is None


def test_a_tool_started_with_ctrl_c_ignored_inherits_that():
    """A job started in the background of a script ignores SIGINT, and so do the tools it
    runs: holding the signal while a tool starts does not change what the tool inherits."""
    from triage.capture.process_tree import run_ended

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        done = run_ended([sys.executable, "-c", "import signal; "
                          "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"],
                         timeout=60, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done.stdout.strip() == "True"


def test_a_tool_a_probe_thread_waits_on_ends_with_triage(tmp_path):
    """A Ctrl-C reaches only the main thread: when triage exits, a tool that a probe's thread
    (a daemon) still waits on is killed, not left behind."""
    from triage.capture.process_tree import _alive

    script = ("import threading, time\n"
              "from triage.capture import process_tree\n"
              "threading.Thread(target=process_tree.run_ended, args=(['sleep', '600'], 700),"
              " daemon=True).start()\n"
              "while not process_tree._WAITED_ON:  # its Popen returned\n"
              "    time.sleep(0.05)\n"
              "print(next(iter(process_tree._WAITED_ON)).pid, flush=True)\n"
              "raise KeyboardInterrupt\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert "KeyboardInterrupt" in done.stderr
    tool = int(done.stdout)
    deadline = time.monotonic() + 30  # the kill is sent at exit; its end is the kernel's
    while _alive(tool) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(tool)
