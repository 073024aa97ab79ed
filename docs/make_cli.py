"""Write docs/cli.md from the `--help` of every triage command and subcommand.

    python docs/make_cli.py          # rewrite docs/cli.md
    python docs/make_cli.py --check  # exit 1 when docs/cli.md is not what this writes now

Run it with the installed package (`pip install -e .`). Help is rendered 100 columns wide
whatever the terminal, so the page is the same on every machine; tests/test_docs.py fails when
the page and the CLI disagree."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner

from triage.cli import cli

WIDTH = 100
PAGE = Path(__file__).resolve().parent / "cli.md"
HEAD = """\
# Command reference

Generated from `triage --help` and each command's `--help` by `python docs/make_cli.py`; do not
edit by hand (`tests/test_docs.py` fails when this page and the CLI disagree). The README
says what each command is for; this page is every option.
"""


def walk(command: click.Command, path: tuple[str, ...] = ()
         ) -> Iterator[tuple[tuple[str, ...], str]]:
    """(command words, help text) for `command` and, if it is a group, every subcommand below
    it, in the order `--help` lists them. The text is what `triage ... --help` prints."""
    yield path, help_text(path)
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1] if path else "triage")
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))


def help_text(path: tuple[str, ...]) -> str:
    """`triage PATH --help` as a terminal WIDTH columns wide shows it."""
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="triage",
                                terminal_width=WIDTH, max_content_width=WIDTH)
    if result.exit_code != 0:
        raise SystemExit(f"triage {' '.join(path)} --help failed: {result.output}")
    return result.output.rstrip()


def render() -> str:
    """The whole page: a list of the commands, then each one's help."""
    helps = list(walk(cli, ()))
    index = [f"- [`{' '.join(('triage', *p))}`](#{anchor(p)})" for p, _ in helps[1:]]
    sections = [f"## {' '.join(('triage', *p))}\n\n```\n{text}\n```" for p, text in helps]
    return "\n".join([HEAD, *index, "", *(s + "\n" for s in sections)]).rstrip() + "\n"


def anchor(path: tuple[str, ...]) -> str:
    """GitHub's anchor for the heading `triage <path>`."""
    return "-".join(("triage", *path))


def main(argv: list[str]) -> int:
    page = render()
    if argv == ["--check"]:
        if PAGE.exists() and PAGE.read_text(encoding="utf-8") == page:
            return 0
        print(f"{PAGE} is out of date; run: python docs/make_cli.py", file=sys.stderr)
        return 1
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
