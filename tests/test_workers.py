"""Forked worker processes (capture/workers.py): order, failures, and nothing left behind.

The tasks here are plain functions; the readers that use workers are tested on real reports in
test_ncu_results.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from triage.capture import workers
from triage.base.errors import UnsupportedReport

pytestmark = pytest.mark.skipif(not workers.can_fork(), reason="workers fork (Linux only)")


def children() -> list[int]:
    """This process's child processes in its own session, zombies included: a server that a
    session fixture started in a session of its own (tests/s3server.py) is not a worker."""
    me, session, found = os.getpid(), os.getsid(0), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and int(fields[3]) == session:
            found.append(int(pid))
    return found


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_results_come_in_task_order_with_more_tasks_than_workers():
    def work(task: int) -> bytes:
        time.sleep(0.05 * (task % 3))  # later tasks often finish first
        return str(task).encode() * 50_000  # more than a pipe buffer holds

    results = list(workers.in_order(range(7), work, 3))
    assert results == [str(t).encode() * 50_000 for t in range(7)]
    assert children() == []


def test_a_worker_serves_tasks_until_its_budget_then_another_takes_over():
    """Workers are reused across tasks (a fork per task would be a fixed cost per small
    report) and each ends once it has done its budget of their weight, taking what it
    allocated with it."""
    def work(task: int) -> bytes:
        return f"{task} {os.getpid()}".encode()

    served = [tuple(map(int, r.split())) for r in workers.in_order(range(9), work, 2,
                                                                    budget=10**6)]
    assert [task for task, _pid in served] == list(range(9))
    assert len({pid for _task, pid in served}) <= 2
    served = [tuple(map(int, r.split())) for r in workers.in_order(
        range(9), work, 2, weight=lambda task: 2, budget=4)]
    per_worker = [pid for _task, pid in served]
    assert max(map(per_worker.count, per_worker)) == 2  # 2 tasks of weight 2 each: 4
    assert children() == []


@pytest.mark.parametrize("task_fails, reason, crashed", [
    (lambda: 1 / 0, "ZeroDivisionError: division by zero", False),
    (lambda: exec("raise RuntimeError('line one\\nline two')"),
     "RuntimeError: line one line two", False),
    (lambda: os.kill(os.getpid(), signal.SIGKILL), "killed by SIGKILL", True),
])
def test_a_failed_task_names_itself_in_one_line_and_the_others_are_reaped(task_fails, reason,
                                                                          crashed):
    before = open_fds()

    def work(task: int) -> bytes:
        if task == 1:
            task_fails()
        time.sleep(0.5)
        return b"done"

    with pytest.raises(workers.WorkerFailed) as failed:
        list(workers.in_order(range(4), work, 3))
    assert (failed.value.task, failed.value.reason, failed.value.crashed) == (1, reason, crashed)
    assert children() == [] and open_fds() == before


def test_a_worker_dying_between_taking_a_task_and_saying_so_fails_the_pool(monkeypatch):
    """That task is lost (no worker will ever do it): waiting for it would hang, and forking
    workers for the rest would find an empty queue, forever."""
    real = workers._frame

    def dies_taking_task_2(pipe, kind, data):
        if kind == workers.TAKEN and workers.NUMBER.unpack(data)[0] == 2:
            os._exit(3)
        real(pipe, kind, data)

    monkeypatch.setattr(workers, "_frame", dies_taking_task_2)
    with pytest.raises(workers.WorkerFailed) as failed:
        list(workers.in_order(range(5), lambda task: b"done", 2, budget=10))
    assert (failed.value.task, failed.value.reason, failed.value.crashed) == \
        (None, "exit status 3", True)
    assert children() == []


def test_a_triage_error_in_a_task_is_raised_as_it_is():
    """A verdict on the input (a corrupt report) keeps its class and message."""
    def work(task: int) -> bytes:
        if task == 1:
            raise UnsupportedReport("report.ncu-rep: corrupt Nsight Compute report (result 1)")
        return b"done"

    with pytest.raises(UnsupportedReport, match=r"^report.ncu-rep: corrupt .*\(result 1\)$"):
        list(workers.in_order(range(3), work, 2))
    assert children() == []


def test_ctrl_c_while_a_result_is_awaited_leaves_no_worker_and_no_pipe(monkeypatch):
    """The alarm is armed after the workers are forked (children inherit no timer), so only
    this process is interrupted, while it waits for the first result."""
    before, real_hear = open_fds(), workers._Pool._hear

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    def hear_interrupted(pool):
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        return real_hear(pool)

    monkeypatch.setattr(workers._Pool, "_hear", hear_interrupted)
    previous = signal.getsignal(signal.SIGALRM)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(workers.in_order(range(3), lambda task: time.sleep(30) or b"", 2))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert children() == [] and open_fds() == before


def test_workers_end_with_their_parent_even_when_it_is_killed():
    """SIGKILL (the OOM killer) gives the parent no chance to stop its workers; the kernel must."""
    script = ("import os, sys, time\n"
              "from triage.capture import workers\n"
              "def work(task):\n"
              "    os.write(1, f'{os.getpid()}\\n'.encode())  # one write: lines never interleave\n"
              "    time.sleep(60)\n"
              "    return b''\n"
              "list(workers.in_order(range(2), work, 2))\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(parent.stdout.readline()) for _ in range(2)]
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(alive, pids))


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (the container's init may never reap it) has ended."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_relay_forks_its_workers_in_a_process_without_the_callers_threads():
    """A lock another thread holds at fork time stays held in the child, forever. The relay is
    forked before that thread starts, so its workers find the lock free; a worker forked by
    this process (`in_order`) finds it held."""
    lock, holding, release = threading.Lock(), threading.Event(), threading.Event()

    def work(task: int) -> bytes:
        return b"free" if lock.acquire(timeout=1) else b"held"

    def hold() -> None:
        with lock:
            holding.set()
            release.wait()

    relay = workers.Relay(range(3), work, 2)
    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait()
    try:
        assert list(relay) == [b"free"] * 3
        assert list(workers.in_order(range(1), work, 1)) == [b"held"]  # what the relay avoids
    finally:
        release.set()
        thread.join()
    assert children() == []


def test_a_relay_reports_a_failed_task_and_a_relay_closed_unread_leaves_nothing():
    before = open_fds()

    def work(task: int) -> bytes:
        if task == 2:
            raise RuntimeError("no")
        return b"ok"

    with pytest.raises(workers.WorkerFailed) as failed:
        list(workers.Relay(range(4), work, 2))
    assert (failed.value.task, failed.value.reason, failed.value.crashed) == \
        (2, "RuntimeError: no", False)
    workers.Relay(range(4), lambda task: time.sleep(30) or b"", 2).close()
    assert children() == [] and open_fds() == before


def test_a_relay_whose_first_step_fails_says_why_in_one_line():
    """`first` runs in the relay (ncu_report's first decode): its error is told as it is, not
    as a relay that exited with status 1."""
    def first():
        raise RuntimeError("in method 'IAction_metric_by_name',\nbad bytes")

    relay = workers.Relay(range(3), lambda task: b"", 2, first=first)
    with pytest.raises(workers.WorkerFailed) as failed:
        next(relay)
    assert (failed.value.task, failed.value.reason, failed.value.crashed) == \
        (None, "RuntimeError: in method 'IAction_metric_by_name', bad bytes", False)
    assert children() == []


def test_a_relay_that_dies_is_a_crash_of_no_task_and_is_reaped():
    relay = workers.Relay(range(3), lambda task: time.sleep(30) or b"", 2)
    os.kill(relay.pid, signal.SIGKILL)
    with pytest.raises(workers.WorkerFailed) as failed:
        next(relay)
    assert (failed.value.task, failed.value.reason, failed.value.crashed) == \
        (None, "killed by SIGKILL", True)
    relay.close()
    assert children() == []
