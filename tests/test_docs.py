"""The docs say what the CLI does today: docs/cli.md is what `python docs/make_cli.py` writes
from every command's `--help`, and the README's command table names every command."""

from __future__ import annotations

import importlib.util
import re
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


def readme_table() -> dict[str, str]:
    """The README's command table: {command name: the rest of its row}."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `triage (\w+)([^`]*)` \|(.*)\|$", readme, re.M)
    assert rows, "the README has a command table: | `triage NAME ...` | what it does |"
    table = {}
    for name, usage, what in rows:
        assert name not in table, f"`triage {name}` has two rows in the README's table"
        table[name] = usage + what
    return table


def test_readme_table_names_every_command_and_no_other():
    table = readme_table()
    names = {path[0] for path in commands()}
    assert sorted(names - set(table)) == [], "commands missing from the README's command table"
    assert sorted(set(table) - names) == [], "the README's command table names no such command"
    for path in commands():
        if len(path) > 1:  # a subcommand is named in its group's row
            assert re.search(rf"\b{path[-1]}\b", table[path[0]]), path


def test_readme_table_is_short_and_links_the_reference():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, row in readme_table().items():
        assert len(row) <= 160, f"`triage {name}`: one short line; options go to docs/cli.md"
    assert "(docs/cli.md)" in readme
