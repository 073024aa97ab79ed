"""What every command shares: the store it works on, how it writes its output, and the RUN
arguments that may name report files. One convention, so `--json`, `--csv`, `--format` and `-o`
mean the same on every command, and the store reaches a command one way."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import click

from triage.base.errors import UsageError
from triage.views import text as textview

if TYPE_CHECKING:
    from triage.archive.store import Store


# -- the store ---------------------------------------------------------------------------------


@dataclass
class StoreRef:
    """The store a command works on, as the user named it: `triage --store X CMD` or `triage
    CMD --store X`; None means $TRIAGE_STORE, else the per-user data directory. Opened by the
    command when it needs it, since some commands archive a report path first (which may make
    the store) and some hand the path to a library call that opens it itself."""

    path: str | None = None

    def open(self, create: bool = False, upgrade: bool = False) -> Store:
        from triage.archive.store import Store

        return Store.open(self.path, create=create, upgrade=upgrade)


pass_store = click.make_pass_decorator(StoreRef, ensure=True)


def _named_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """--store on the group or on a command: the command's wins. The path is not checked here:
    Store.open judges it, whichever gave it, so one mistake gets one message and exit code."""
    if value == "":
        raise click.BadParameter("an empty path (an unset variable?); give the store directory")
    if value is not None or ctx.parent is None:
        ctx.obj = StoreRef(value)


STORE_HELP = "Store directory (default: $TRIAGE_STORE, else the per-user data directory)."

store_option = click.option("--store", type=click.Path(readable=False), expose_value=False,
                            callback=_named_store, is_eager=True, help=STORE_HELP)


# -- the output --------------------------------------------------------------------------------


class JsonResult(Protocol):
    """A command's typed result: `to_json()` is its --json document (schemas/ describes it)."""

    def to_json(self) -> Any: ...


# The one rule for a file name's suffix: it names the format, for every command that writes one.
OUTPUT_SUFFIXES = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html",
                  ".htm": "html", ".csv": "csv", ".txt": "text"}


@dataclass(frozen=True)
class Output:
    """Where a command's result goes and in which format: standard output, or a file written
    atomically (a reader never sees half of it)."""

    fmt: str
    path: str | None = None

    @property
    def json(self) -> bool:
        return self.fmt == "json"

    def write(self, text: str, newline: bool = True) -> None:
        end = "\n" if newline else ""
        if self.path is None:
            click.echo(text + end, nl=False)
            return
        self.write_bytes((text + end).encode("utf-8"))

    def write_bytes(self, data: bytes) -> None:
        """Bytes as they are (a stored patch need not be UTF-8), to the file or stdout."""
        if self.path is None:
            sys.stdout.buffer.write(data)
            return
        from triage.archive.atomic import write_user_file

        write_user_file(Path(self.path), data)
        click.echo(f"wrote {self.path}", err=True)

    def show(self, result: JsonResult | Sequence[JsonResult],
             render: Callable[[Any], str]) -> None:
        """JSON prints the result's own document (a list of results: a list of theirs); text
        has `render` word the same typed result for people, so the two never disagree on what
        a command found."""
        if not self.json:
            self.write(render(result))
        elif isinstance(result, Sequence):
            self.write(textview.to_json([item.to_json() for item in result]))
        else:
            self.write(textview.to_json(result.to_json()))

    def stream(self) -> Any:
        """The text stream for progress and a profiler's own output: stderr when stdout carries
        a document (JSON), so that the document stays clean."""
        return sys.stderr if self.json else sys.stdout


def resolve_output(command: str, formats: tuple[str, ...], asked: list[str],
                   path: str | None, hint: str = "") -> Output:
    """The format: the one asked for (--json, --csv, --format: two different ones are refused),
    else the one -o's suffix names (refused when the command cannot write it), else the
    command's first format."""
    if len(set(asked)) > 1:
        raise UsageError(f"{' and '.join(_flag(f) for f in dict.fromkeys(asked))} ask for two "
                         "formats; give one")
    if asked:
        return Output(asked[0], path)
    suffix = Path(path).suffix.lower() if path else ""
    fmt = OUTPUT_SUFFIXES.get(suffix)
    if fmt is not None and fmt not in formats:
        raise UsageError(f"{path}: `triage {command}` writes {', '.join(formats)}, not {fmt}"
                         + (f"; {hint}" if hint else ""))
    return Output(fmt or formats[0], path)


def _flag(fmt: str) -> str:
    return {"json": "--json", "csv": "--csv"}.get(fmt, f"--format {fmt}")


def output_options(*formats: str, to_file: bool = False, hint: str = "") -> Callable:
    """The output options of a command that writes `formats` (the first is the default):
    --json and --csv where it writes them, --format where it writes more than text and JSON or
    to a file, -o FILE with `to_file`. The command receives one `out: Output`."""

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def with_output(*args: Any, out_json: bool = False, out_csv: bool = False,
                        out_format: str | None = None, out_file: str | None = None,
                        **kwargs: Any) -> Any:
            asked = [f for f, on in (("json", out_json), ("csv", out_csv)) if on]
            asked += [out_format] if out_format else []
            name = click.get_current_context().command_path.partition(" ")[2]
            out = resolve_output(name, formats, asked, out_file, hint)
            return command(*args, out=out, **kwargs)

        for option in reversed(_output_params(formats, to_file)):
            with_output = option(with_output)
        return with_output

    return decorate


def _output_params(formats: tuple[str, ...], to_file: bool) -> list[Callable]:
    params = []
    if "json" in formats:
        params.append(click.option("--json", "out_json", is_flag=True,
                                   help="Print JSON (same as --format json)."))
    if "csv" in formats:
        params.append(click.option("--csv", "out_csv", is_flag=True,
                                   help="Print CSV (same as --format csv)."))
    if to_file or set(formats) - {"text", "json"}:
        params.append(click.option("--format", "out_format", type=click.Choice(formats),
                                   help=f"Output format (default: from the -o suffix, else "
                                   f"{formats[0]}; md: GitHub Markdown for a PR comment)."))
    if to_file:
        params.append(click.option("-o", "--output", "out_file", type=click.Path(dir_okay=False),
                                   help="Write to this file; its suffix (.json, .md, .html, "
                                   ".csv, .txt) picks the format."))
    return params


def width_options(command: Callable) -> Callable:
    """--no-trunc and --width N of a command whose text cuts values to fit a terminal (nothing
    is cut when stdout is not one, nor in a file that -o writes, unless --width says so). The
    command receives `width: int | None`, the text's width, None for no cut
    (`textview.fit_width`). Applied above `output_options`, it sees -o as `out_file`."""

    @functools.wraps(command)
    def with_width(*args: Any, no_trunc: bool = False, width: int | None = None,
                   **kwargs: Any) -> Any:
        if no_trunc and width is not None:
            raise UsageError("--no-trunc and --width ask for two widths; give one")
        whole = no_trunc or (width is None and kwargs.get("out_file") is not None)
        return command(*args, width=textview.fit_width(width, whole), **kwargs)

    with_width = click.option("--width", type=click.IntRange(min=20), metavar="N",
                              help="Cut text values to fit N columns (default: the terminal's "
                              "width; nothing is cut when output is not a terminal).")(with_width)
    return click.option("--no-trunc", is_flag=True,
                        help="Print every value whole, even on a terminal.")(with_width)


def echo_chunks(chunks: Iterator[str], newline: bool = False) -> None:
    """Output written as it is made (a listing of every run streams), and a newline after it
    where the text has none of its own (JSON; CSV rows end in one)."""
    for chunk in chunks:
        click.echo(chunk, nl=False)
    if newline:
        click.echo("")


def warn(message: str) -> None:
    click.echo(f"triage: warning: {message}", err=True)


# -- RUN arguments -----------------------------------------------------------------------------


def runs_named(store: StoreRef, refs: list[str], sides: bool = False) -> list[str]:
    """RUN arguments with a run id for each report path among them (`triage diff a.ncu-rep
    b.ncu-rep`): see runs_and_files."""
    return runs_and_files(store, refs, sides)[0]


def runs_and_files(store: StoreRef, refs: list[str],
                   sides: bool = False) -> tuple[list[str], list[str | None]]:
    """RUN arguments with a run id for each report path among them, and the file name each
    argument (its first run, for a side) was given as, for headers to name it by. The report is
    found by its hash or archived now, and that is said in one line on stderr, so that stdout
    (--json) holds only what the command prints."""
    from triage.archive.runs import reports_as_runs, side_parts

    named, reports = reports_as_runs(store.path, refs, sides=sides,
                                     nsys=os.environ.get("TRIAGE_NSYS"))
    for report in reports:
        run = textview.short_id(report.run_id)
        click.echo(f"triage: {textview.printable(report.path)}: " + (
            f"archived as run {run}" if report.new else f"run {run} (archived before)"), err=True)
    paths = {report.path for report in reports}
    firsts = [ref if ref in paths or not sides else side_parts(ref)[0] for ref in refs]
    return named, [os.path.basename(first) if first in paths else None for first in firsts]


def timeout_option(command):
    """--timeout SECONDS: how long one request to an S3 store may wait for its answer (the
    store's `timeout` setting, over the remote's and $TRIAGE_S3_TIMEOUT)."""
    return click.option(
        "--timeout", type=click.FloatRange(0.1, 600), metavar="SECONDS",
        help="S3 stores: seconds one request may wait for an answer before it is tried again "
        "[default: $TRIAGE_S3_TIMEOUT, else the remote's timeout=, else 3]; a silent server "
        "is given up on after its tries (4) of this, plus the backoff between them.")(command)
