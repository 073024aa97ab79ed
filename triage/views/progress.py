"""Terminal rendering of a running capture: the profiler's output with its progress bar
redrawn in place and the elapsed time on a status line, on a terminal; on a pipe (or with
--json) its final lines only, so that a log holds each line once."""

from __future__ import annotations

import os
import shutil
import threading
import time
from typing import TextIO

from triage.capture.progress import Elapsed, ProgressEvent
from triage.base.progress import Step
from triage.base.units import fmt_bytes

CLEAR = "\r\x1b[K"  # back to the line's start, erase it


def progress_after() -> float:
    """Seconds of work before a progress display starts ($TRIAGE_PROGRESS_AFTER, default 1: a
    second of silence is fine, more is not); tests set 0."""
    try:
        return max(0.0, float(os.environ.get("TRIAGE_PROGRESS_AFTER", "1")))
    except ValueError:
        return 1.0


class CaptureOutput:
    """The `on_output` of `triage capture`: called from the reading thread and the ticker, so
    one lock orders what is written."""

    def __init__(self, stream: TextIO, live: bool, tool: str):
        self.stream, self.live, self.tool = stream, live, tool
        self.lock = threading.Lock()
        self.redrawn: str | None = None  # the line being redrawn in place
        self.elapsed: float | None = None
        self.drawn = False  # a status or redrawn line is on screen, without its newline

    def __call__(self, event: ProgressEvent) -> None:
        with self.lock:
            if isinstance(event, Elapsed):
                self.elapsed = event.seconds
            elif event.final:
                self._write((CLEAR if self.drawn else "") + event.text + "\n")
                self.redrawn, self.drawn = None, False
                return
            else:
                self.redrawn = event.text
            if self.live:
                self._draw()

    def close(self) -> None:
        """Erase the status line once the profiler is done."""
        with self.lock:
            if self.drawn:
                self._write(CLEAR)
            self.drawn = False

    def _draw(self) -> None:
        clock = f"{self.tool} running {self.elapsed:.0f} s" if self.elapsed is not None else ""
        text = "  ".join(part for part in (self.redrawn, f"({clock})" if clock else "") if part)
        width = shutil.get_terminal_size().columns - 1
        self._write(CLEAR + text[:width])
        self.drawn = True

    def _write(self, text: str) -> None:
        if not self.live and text.startswith(CLEAR):
            text = text[len(CLEAR):]
        self.stream.write(text)
        self.stream.flush()


class StatusLine:
    """The `progress` of archive, export, import, verify, push and pull: one line on stderr
    saying what is being done and for how long, shown once the work has taken `after` seconds,
    redrawn by a ticker, erased when the work ends. Shown only where stdout and stderr are both
    terminals and no --json was asked for (`live`); otherwise nothing at all."""

    def __init__(self, stream: TextIO, live: bool, after: float):
        self.stream, self.live, self.after = stream, live, after
        self.lock = threading.Lock()
        self.step: Step | None = None
        self.drawn = False
        self.done = threading.Event()
        self.started = time.monotonic()
        self.ticker = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> StatusLine:
        if self.live:
            self.ticker.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.done.set()
        if self.ticker.is_alive():
            self.ticker.join()
        with self.lock:
            if self.drawn:
                self.stream.write(CLEAR)
                self.stream.flush()

    def __call__(self, step: Step) -> None:
        with self.lock:
            self.step = step
            self._draw()

    def say(self, text: str) -> None:
        """A line of the command's output (stdout) while the work goes on: the status line is
        erased first and drawn again under it, so the two never share a line."""
        import sys

        with self.lock:
            if self.drawn:
                self.stream.write(CLEAR)
                self.stream.flush()
                self.drawn = False
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            self._draw()

    def _tick(self) -> None:
        while not self.done.wait(0.5):
            with self.lock:
                self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self.started
        if not self.live or self.step is None or elapsed < self.after:
            return
        step = self.step
        count = f" ({step.done}/{step.total})" if step.total else ""
        text = f"triage: {step.what}{count}{_moved(step, elapsed)}  {elapsed:.0f} s"
        self.stream.write(CLEAR + text[:shutil.get_terminal_size().columns - 1])
        self.stream.flush()
        self.drawn = True


def _moved(step: Step, elapsed: float) -> str:
    """Bytes moved so far, of how many, and at what rate (push, pull); "" for other work."""
    if step.bytes_done is None:
        return ""
    total = f" of {fmt_bytes(step.bytes_total)}" if step.bytes_total else ""
    rate = fmt_bytes(step.bytes_done / max(elapsed, 1e-3))
    return f"  {fmt_bytes(step.bytes_done)}{total}, {rate}/s"


def status_line(as_json: bool = False) -> StatusLine:
    """The status line of a command, live where stdout and stderr are terminals, no --json."""
    import sys

    live = not as_json and sys.stdout.isatty() and sys.stderr.isatty()
    return StatusLine(sys.stderr, live, progress_after())
