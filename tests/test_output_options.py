"""One output convention for every command: --json, --csv, --format and -o mean the same
everywhere, a file name's suffix picks the format by one rule, and a suffix naming a format the
command cannot write is refused before anything is computed or written."""

from __future__ import annotations

import json

import pytest

from triage.cli.options import resolve_output
from triage.base.errors import UsageError
from triage.demo import demo_file


@pytest.fixture
def pair(triage):
    """The bundled before/after captures (real nsys exports), archived."""
    return tuple(triage.json("archive", demo_file(f"{side}.sqlite"))[0]["id"]
                 for side in ("before", "after"))


@pytest.mark.parametrize("name, fmt", [("d.json", "json"), ("d.md", "md"), ("d.txt", "text"),
                                       ("d.log", "text"), ("d", "text")])
def test_the_suffix_picks_the_format_of_diff(triage, pair, tmp_path, name, fmt):
    out = tmp_path / name
    result = triage("diff", *pair, "-o", out)
    assert result.stdout == "" and f"wrote {out}" in result.stderr
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["verdict"]
    elif fmt == "md":
        assert text.startswith("#")
    else:
        assert text.startswith("A: ")


def test_a_suffix_the_command_cannot_write_is_refused_with_where_to_go(triage, pair, tmp_path):
    refused = triage("diff", *pair, "-o", tmp_path / "d.html", expect=2)
    assert "`triage diff` writes text, json, md, not html" in refused.stderr
    assert "triage report A B -o FILE.html" in refused.stderr
    assert triage("report", *pair, "-o", tmp_path / "r.txt", expect=2)
    assert not (tmp_path / "d.html").exists() and not (tmp_path / "r.txt").exists()


def test_history_and_report_follow_the_same_rule(triage, pair, tmp_path):
    triage("history", ",".join(pair), "--nvtx", "forward", "-o", tmp_path / "h.html")
    assert (tmp_path / "h.html").read_text().lstrip().lower().startswith("<!doctype html")
    triage("report", *pair, "-o", tmp_path / "r.md")
    assert (tmp_path / "r.md").read_text().startswith("#")
    triage("report", *pair, "--format", "md", "-o", tmp_path / "r.html")  # asked wins
    assert (tmp_path / "r.html").read_text().startswith("#")


@pytest.mark.parametrize("args", [("ls", "--json", "--csv"), ("query", "select 1", "--json",
                                                              "--format", "csv")])
def test_two_formats_asked_for_are_refused(triage, args):
    result = triage(*args, expect=2)
    assert "ask for two formats; give one" in result.stderr


def test_the_same_format_asked_twice_is_one_format():
    assert resolve_output("ls", ("text", "json"), ["json", "json"], None).fmt == "json"
    with pytest.raises(UsageError, match="--json and --csv"):
        resolve_output("ls", ("text", "json", "csv"), ["json", "csv"], None)


def test_every_command_with_json_output_offers_it_the_same_way():
    """--json is one option with one help text wherever a command prints JSON."""
    import click

    from triage.cli import cli

    ctx = click.Context(cli)
    helps = set()
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        subcommands = (command.commands.values() if isinstance(command, click.Group)
                       else [command])
        for sub in subcommands:
            helps |= {p.help for p in sub.params if "--json" in getattr(p, "opts", ())}
    assert helps == {"Print JSON (same as --format json)."}
