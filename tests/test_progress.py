"""Long work is not silent (issue 19 item 3): a capture on a terminal redraws nsys's `\\r`
progress bar in place and shows the elapsed time; piped, each line comes once."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from nvtx_capture import profiler_failed
from triage.capture.progress import LineCollapser, OutputLine
from triage.demo import demo_file

NSYS_ARGS = ["profile", "--trace=osrt", "--sample=none", "--cpuctxsw=none",
             "--force-overwrite", "true", "-o", "quick", "true"]


def nsys_output(nsys_exe: str, cwd) -> str:
    """What the real nsys prints to a pipe: its progress bar redrawn with carriage returns."""
    done = subprocess.run([nsys_exe, *NSYS_ARGS], cwd=cwd, capture_output=True, check=True)
    return done.stdout.decode() + done.stderr.decode()


def test_nsys_progress_bar_collapses_to_its_final_state(nsys_exe, tmp_path):
    text = nsys_output(nsys_exe, tmp_path)
    bar = [part for part in text.replace("\n", "\r").split("\r") if part.startswith("[1/1]")]
    assert len(bar) > 3  # the real thing redraws, whatever the machine's speed
    collapser = LineCollapser()
    lines = [line for i in range(0, len(text), 7) for line in collapser.feed(text[i:i + 7])]
    lines += collapser.close()
    final = [line.text for line in lines if line.final]
    assert [t for t in final if t.startswith("[1/1]")] == [bar[-1]]
    assert "100%" in bar[-1] and final[0].startswith("Generating ")
    assert [line.text for line in lines if not line.final] == bar[:-1]  # redraws, in order
    assert OutputLine(bar[-1]) in lines


def test_a_piped_capture_prints_each_line_once(triage, nsys_exe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRIAGE_PROGRESS_AFTER", "0")
    out = triage("capture", "--", nsys_exe, *NSYS_ARGS).stdout
    assert "\r" not in out and "\x1b" not in out and "running" not in out
    assert len([line for line in out.splitlines() if line.startswith("[1/1]")]) == 1


def on_terminal(args: list[str], cwd, store_dir) -> tuple[int, str]:
    """Run `triage ARGS` with stdout and stderr on a pseudo-terminal: its exit code and what
    the terminal got. TRIAGE_PROGRESS_AFTER=0: progress shows from the start, whatever the
    machine's speed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TRIAGE_STORE": str(store_dir), "TRIAGE_PROGRESS_AFTER": "0"}
    with subprocess.Popen([sys.executable, "-m", "triage", *map(str, args)], cwd=cwd, env=env,
                          stdout=follower, stderr=follower, stdin=subprocess.DEVNULL) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=120)
    os.close(leader)
    shown = b"".join(chunks).decode()
    if process.returncode:
        profiler_failed(shown)
    return process.returncode, shown


def test_a_capture_on_a_terminal_shows_progress_in_place(nsys_exe, tmp_path, store_dir):
    code, shown = on_terminal(["capture", "--", nsys_exe, *NSYS_ARGS], tmp_path, store_dir)
    assert code == 0, shown
    assert "\r\x1b[K" in shown and "nsys running " in shown  # redrawn, with the elapsed time
    lines = shown.replace("\r\n", "\n").split("\n")
    # on screen, the bar's states overwrite each other on one line
    assert len([line for line in lines if "[1/1]" in line]) == 1


def test_archive_verify_export_and_import_show_progress_on_a_terminal_only(
        triage, tmp_path, store_dir, monkeypatch):
    report = demo_file("before.sqlite")
    bundle = tmp_path / "one.tar"
    steps = {("archive", report): "triage: reading before.sqlite (0/1)",
             ("verify",): "triage: re-hashing runs (0/1)",
             ("export", "latest", "-o", bundle): "triage: writing ",
             ("import", bundle): "triage: reading one.tar"}
    for args, said in steps.items():
        code, shown = on_terminal(list(args), tmp_path, store_dir)
        assert code == 0, shown
        assert "\r\x1b[K" + said in shown, (args, shown)
        assert said not in shown.split("\r\x1b[K")[-1]  # erased before the result
    monkeypatch.setenv("TRIAGE_PROGRESS_AFTER", "0")
    for args in steps:  # piped (CliRunner): nothing extra, on either stream
        result = triage(*args)
        assert "\r" not in result.stdout + result.stderr and "\x1b" not in result.stderr
    assert "\r" not in triage("archive", report, "--json").stderr
