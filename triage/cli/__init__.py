"""The `triage` command line: parse arguments, call one library function, render.

This is the only place where a TriageError becomes a message and an exit code:
0 ok, 1 error, 2 usage, 3 comparison gate (`diff --strict`), 4 regression gate
(`diff --max-slowdown`), 5 the regression gate had nothing to judge (ncu durations alone),
130 interrupted (Ctrl-C).
Any other exception is a bug and keeps its traceback.

Each command family lives in a module of its own, imported only when one of its commands runs
(or `--help` lists them): `COMMANDS` says where each one is.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import NoReturn

import click

from triage.base.duck import interrupted
from triage.base.errors import EXIT_INTERRUPTED, EXIT_OK, Interrupted, TriageError
from triage.base.version import __version__
from triage.cli.options import STORE_HELP, store_option
from triage.views import text as textview
from triage.views.runs import interrupted_line

# command name -> the module of triage.cli that defines it, and its function there
COMMANDS = {
    "archive": ("runs", "archive"), "ls": ("runs", "ls_command"), "show": ("runs", "show"),
    "label": ("runs", "label"), "query": ("runs", "query"), "accept": ("runs", "accept"),
    "capture": ("capture", "capture"), "rerun": ("capture", "rerun"),
    "env": ("capture", "env_command"), "bench": ("bench", "bench"),
    "diff": ("compare", "diff"), "report": ("compare", "report"), "top": ("compare", "top"),
    "explain": ("compare", "explain"), "history": ("compare", "history"),
    "versions": ("compare", "versions"),
    "verify": ("upkeep", "verify"), "gc": ("upkeep", "gc_command"),
    "migrate": ("upkeep", "migrate"),
    "export": ("share", "export_command"), "import": ("share", "import_command"),
    "remote": ("share", "remote"), "push": ("share", "push"), "pull": ("share", "pull"),
    "demo": ("demo", "demo"), "ci": ("ci", "ci"),
    "publish": ("console", "publish"), "serve": ("console", "serve"),
}


class TriageGroup(click.Group):
    """A click group that turns TriageErrors into one-line messages with their exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TriageError as exc:
            # One line whatever the message holds (a file name with a newline or an ESC).
            click.echo(f"triage: error: {textview.printable(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(EXIT_OK)
        except KeyboardInterrupt as exc:
            _interrupted(ctx, exc)
        except Exception as exc:
            if not interrupted(exc):  # a bug: its traceback stays
                raise
            _interrupted(ctx, exc)


def _interrupted(ctx: click.Context, exc: BaseException) -> NoReturn:
    """Ctrl-C: one line and exit 130, as a shell reports a command it ended (never click's
    "Aborted!" and exit 1); the runs an archive filed before it are named."""
    filed = exc.filed if isinstance(exc, Interrupted) else None
    click.echo(f"triage: error: {interrupted_line(filed)}", err=True)
    ctx.exit(EXIT_INTERRUPTED)


class LazyGroup(TriageGroup):
    """The top group: a command's module is imported when the command is looked up (as click's
    own `complex` example does), so `triage ls` never imports what `triage report` needs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"triage.cli.{module}"), name)
        assert isinstance(command, click.Command), cmd_name
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="triage")
@store_option
def cli() -> None:
    """Archive Nsight Systems / Nsight Compute reports with how they were captured, and compare
    them weeks later, loudly flagging version, GPU and clock drift.

    Exit codes: 0 ok, 1 error, 2 usage, 3 comparison gate (diff --strict), 4 regression gate
    (diff --max-slowdown), 5 the regression gate had nothing to judge (ncu durations alone),
    130 interrupted (Ctrl-C)."""


cli.params[-1].help = STORE_HELP.replace("Store directory", "Store directory for any command")


def main() -> None:
    """The `triage` command; click ends every command with SystemExit."""
    try:
        cli(prog_name="triage")
    except SystemExit as done:
        _exit(done.code)


def _exit(code: object) -> NoReturn:
    """Exit with `code`, skipping the interpreter's teardown when nothing is left to wait for.

    Freeing pyarrow's, NumPy's and DuckDB's module state at exit takes 0.03-0.06 s, a tenth of
    a query over 100,000 runs and more than issue 20 allows an ncu archive over a bare script.
    Nothing of triage's needs that teardown: every write is closed (and renamed into place)
    before its command returns, and triage registers no atexit handler. Python's ordinary exit
    is taken, as before, when a thread (not a daemon) is still running, the exit code is a
    message, a profiler or tracer (cProfile, coverage) would write at exit, or the output
    cannot be flushed (a closed pipe); C's stdio buffers (a native library's printf) are
    flushed as exit() would."""
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others or not (code is None or isinstance(code, int)) or sys.getprofile() is not None \
            or sys.gettrace() is not None:
        raise SystemExit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, ValueError, AttributeError, TypeError):  # ValueError: a closed stream;
        # TypeError: no C library to load by None (Windows), so no stdio of its to flush
        raise SystemExit(code) from None
    os._exit(code or 0)
