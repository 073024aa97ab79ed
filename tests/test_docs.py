"""The docs say what the CLI does today: docs/cli.md is what `python docs/make_cli.py` writes
from every command's `--help`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

from triage.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def make_cli():
    """docs/make_cli.py, loaded as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("make_cli", ROOT / "docs" / "make_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_what_the_generator_writes_now():
    generator = make_cli()
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == generator.render(), (
        "docs/cli.md differs from the CLI's --help; regenerate it with "
        "`python docs/make_cli.py` and commit the result")


def test_cli_reference_covers_every_command_and_subcommand():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for path in commands():
        assert f"\n## triage {' '.join(path)}\n" in page, path


def commands() -> list[tuple[str, ...]]:
    """Every command path of the CLI: ('archive',), ('remote', 'add'), ..."""
    found = []

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            found.append((*path, name))
            if isinstance(command, click.Group):
                walk(command, (*path, name))

    walk(cli, ())
    return found
