"""Re-executing a recorded capture command (`triage rerun`): its argv with the output paths moved
into a fresh directory, and the environment it recorded without the values redaction hid.

Pure functions over what the capture recorded; running it is `session.run`'s job, as for any
capture. The output options come from the same tables the capture's parse uses
(`profiler_args`), so every spelling the profiler accepts (`-o X`, `--output=X`, `--export X`) is
found; a command that names no output (nsys's default `report%n` in the working directory) gets
one, so the original's files are never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from triage.capture.outputs import NSYS_DEFAULT_OUTPUT, OUTPUT_OPTION
from triage.capture.profiler_args import (NCU_ALIASES, NSYS_ALIASES, NSYS_SUBCOMMANDS,
                                          parse_command, tool_of)
from triage.capture.redact import MARKER
from triage.base.errors import UsageError


def _aliases(tool: str) -> dict[str, str]:
    return NCU_ALIASES if tool == "ncu" else NSYS_ALIASES


def _moved(value: str, into: Path) -> str:
    """The output name's file part in the fresh directory (its %p, %q{VAR} patterns kept)."""
    return str(into / PurePath(value).name)


def rewrite_outputs(argv: list[str], into: Path) -> list[str]:
    """The argv with every output option's value moved into `into`; an nsys command without one
    gets `-o INTO/report%n` after its subcommand. The profiler's own options only: the words
    from the application on are left as they are."""
    parsed = parse_command(argv)
    if parsed.tool is None:
        raise UsageError(f"the recorded command runs no ncu or nsys: {' '.join(argv)}")
    start = next(i for i, word in enumerate(argv) if tool_of(word))
    stop = len(argv) - len(parsed.application)
    option, aliases = OUTPUT_OPTION[parsed.tool], _aliases(parsed.tool)
    out, i, found = list(argv), start + 1, False
    while i < stop:
        name, eq, value = out[i].partition("=")
        if aliases.get(name, name) == option:
            found = True
            if eq:
                out[i] = f"{name}={_moved(value, into)}"
            elif i + 1 < stop:
                out[i + 1] = _moved(out[i + 1], into)
                i += 1
        i += 1
    if not found and parsed.tool == "nsys":
        at = start + 1 + (1 if argv[start + 1:start + 2] and argv[start + 1] in NSYS_SUBCOMMANDS
                          else 0)
        out[at:at] = ["-o", str(into / NSYS_DEFAULT_OUTPUT)]
    return out


@dataclass(frozen=True)
class ReplayEnvironment:
    """The environment a rerun runs in: the recorded variables, redacted ones taken from the
    current environment (`supplied`), and those redacted and not set here (`missing`)."""

    variables: dict[str, str]
    supplied: tuple[str, ...]
    missing: tuple[str, ...]


def replay_environment(recorded: Mapping[str, object],
                       current: Mapping[str, str]) -> ReplayEnvironment:
    """Never the redaction marker: a redacted value is the user's (set here) or missing."""
    variables, supplied, missing = {}, [], []
    for name, value in recorded.items():
        text = str(value)
        if MARKER not in text:
            variables[name] = text
        elif name in current:
            variables[name] = current[name]
            supplied.append(name)
        else:
            missing.append(name)
    return ReplayEnvironment(variables, tuple(supplied), tuple(missing))


def redacted_words(argv: list[str]) -> list[str]:
    """Words of the recorded argv that redaction changed: such a command cannot be replayed."""
    return [word for word in argv if MARKER in word]
