"""`triage` ends without the interpreter's teardown (cli._exit), and loses nothing by it: the
exit code, every byte of its output, and a thread still at work are as Python's own exit has
them."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import corpus_file

# `triage ARGS` as `python -m triage` runs it, with an atexit handler that says whether the
# interpreter's teardown ran.
WRAPPED = ("import atexit, sys\n"
           "atexit.register(lambda: print('teardown', file=sys.stderr))\n"
           "sys.argv = ['triage', *sys.argv[1:]]\n"
           "from triage.cli import main\n"
           "main()\n")


def wrapped(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRAPPED, *map(str, args)], capture_output=True,
                          text=True, timeout=120, **kwargs)


def test_each_exit_code_and_every_byte_of_output_without_the_teardown(tmp_path):
    store = tmp_path / "store"
    archived = wrapped("--store", store, "archive", corpus_file(
        "LakshyaSingh354__CudaCode__gemm_naive.ncu-rep"))
    assert archived.returncode == 0 and "(new)" in archived.stdout, archived.stderr
    # 100,000 lines through a pipe, whole
    many = wrapped("--store", store, "query", "select range from range(100000)", "--csv")
    assert many.returncode == 0 and many.stdout.splitlines() == \
        ["range", *map(str, range(100000))], many.stderr
    for args, code in ((["show", "no-such-run"], 1), (["ls", "--no-such-option"], 2),
                       (["--help"], 0)):
        done = wrapped("--store", store, *args)
        assert done.returncode == code, (args, done.stderr)
        assert "teardown" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_what_is_still_buffered_is_written():
    """Python's and C's stdio buffers are flushed before the process ends (click flushes each
    echo itself; `show --patch` and a native library's printf do not). PYTHONUNBUFFERED, which
    would make both unbuffered, is left out."""
    code = ("import ctypes, sys\n"
            "from triage.cli import _exit\n"
            "sys.stdout.write('python ')\n"
            "ctypes.CDLL(None).printf(b'and C')\n"
            "_exit(0)\n")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          env=buffered)
    assert (done.returncode, done.stdout) == (0, b"python and C"), done.stderr


def test_a_profiler_still_gets_to_write_its_profile(tmp_path):
    """Under cProfile (or coverage) the ordinary exit runs, so the profile is written."""
    profile = tmp_path / "out.prof"
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m",
                           "triage", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and profile.stat().st_size > 0, done.stderr


def test_a_thread_still_at_work_is_waited_for():
    """A command that left a thread running exits as Python does: after the thread ends."""
    code = ("import threading, time\n"
            "from triage.cli import _exit\n"
            "threading.Thread(target=lambda: (time.sleep(0.3), print('finished'))).start()\n"
            "_exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (3, "finished\n"), done.stderr
