"""Which profiler settings were in effect, and how triage knows each one.

Every reader (ncu, nsys, and a capture that left no report) answers the same way: a setting is
the first of what the report recorded, what the command line said, and the tool's default. The
manifest keeps the source too, so a diff can tell a recorded value from an assumed one. A reader
may replace an unrecorded default by what the report's data proves, sourced "derived" (an nsys
export's trace domains, from the tables it holds).
"""

from __future__ import annotations

from collections.abc import Iterable

from triage.capture.profiler_args import ParsedCommand

SOURCES = ("report", "command", "default")


def resolve(rows: Iterable[tuple]) -> tuple[dict, dict]:
    """(name, from_report, from_command, default) rows -> ({name: value}, {name: source}).

    None means "not known there", so the next column is asked; any other value, even "", is
    taken. A setting known nowhere is None, sourced "default": the tool's default is unknown.
    """
    settings, sources = {}, {}
    for name, *candidates in rows:
        settings[name], sources[name] = next(
            ((value, source) for source, value in zip(SOURCES, candidates, strict=True)
             if value is not None),
            (None, "default"))
    return settings, sources


def joined_option(command: ParsedCommand, *options: str, sep: str = ",") -> str | None:
    """All values of the first of `options` the command line gives, joined; None if none is.

    An option given more than once (--metrics, --nvtx-include) keeps all its values, in order.
    """
    given = [sep.join(command.options[o]) for o in options if command.has(o)]
    return given[0] if given else None
