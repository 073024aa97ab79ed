"""A running profiler's output as typed events, for the CLI to render (the library never
prints).

Profilers redraw a progress bar in place with carriage returns (nsys: `[1/1] [==43%   ]
y.nsys-rep\\r[1/1] [===65%  ] ...`). Read as lines, each redraw would be a line of its own;
`LineCollapser` makes them updates of one line instead (`OutputLine(final=False)`), and the
line's last state its final text. `Elapsed` ticks say how long the profiler has run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BREAK = re.compile(r"\r\n|\n|\r")


@dataclass(frozen=True)
class OutputLine:
    """A line of the profiler's output; `final` False for a carriage-return redraw that a
    later state of the same line replaces (a terminal shows it in place; a pipe skips it)."""

    text: str
    final: bool = True


@dataclass(frozen=True)
class Elapsed:
    """The profiler has been running `seconds`."""

    seconds: float


ProgressEvent = OutputLine | Elapsed


class LineCollapser:
    """Turns output text, fed in pieces as it arrives, into OutputLines: a line redrawn with
    `\\r` gives one update per state and one final line, its last state."""

    def __init__(self) -> None:
        self._pending = ""  # text after the last line break
        self._state: str | None = None  # the line's last redrawn state

    def feed(self, text: str) -> list[OutputLine]:
        out = []
        pieces = _BREAK.split(self._pending + text)
        breaks = _BREAK.findall(self._pending + text)
        self._pending = pieces.pop()
        for piece, end in zip(pieces, breaks, strict=True):
            if end == "\r":
                if piece:
                    self._state = piece
                    out.append(OutputLine(piece, final=False))
            else:
                out.append(OutputLine(piece or self._state or ""))
                self._state = None
        return out

    def close(self) -> list[OutputLine]:
        """What is left when the output ends without a line break."""
        last = self._pending or self._state
        self._pending, self._state = "", None
        return [OutputLine(last)] if last else []
