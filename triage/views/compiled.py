"""The templates' compiled code, kept beside a published site for the next publish.

A publish is a fresh process, and compiling the dozen templates a new run's pages use costs it
0.15-0.35 s. Jinja keeps each template's code in a file of its own (its
`FileSystemBytecodeCache`), checked against the template's text when read."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import jinja2
import jinja2.bccache

from triage.archive.console import stamp_of
from triage.views.report import template_environment


@contextlib.contextmanager
def compiled_templates(home: Path, layout: str) -> Iterator[None]:
    """The HTML templates compiled into, and read from, a folder of `home` while a publish
    renders. The folder is named by Jinja's version, the site's `layout` (triage's version, the
    templates) and how the templates are read, since the code depends on those as well as on
    each template's text (which Jinja checks itself): a change of any is compiled anew, and
    the folders of other names are removed."""
    env = template_environment(False)
    folder = home / f"jinja-{jinja2.__version__}-{stamp_of(layout, *_read_as(env))}"
    if home.is_dir():
        for other in home.iterdir():
            if other != folder:
                shutil.rmtree(other, ignore_errors=True)
    if _private(folder):
        env.bytecode_cache = KeptBytecode(str(folder))
    try:
        yield
    finally:
        env.bytecode_cache = None


def _read_as(env: jinja2.Environment) -> tuple:
    """What compiled code depends on beside the templates' text: the environment's options,
    and how each filter, test and `finalize` is called (whether it is passed the context, the
    eval context or the environment), which Jinja writes into the code."""
    def called(function) -> str:
        return str(getattr(function, "jinja_pass_arg", ""))

    return (env.trim_blocks, env.lstrip_blocks, env.keep_trailing_newline, env.autoescape,
            env.finalize.__name__ if env.finalize else None, called(env.finalize),
            sorted((kind, name, called(function))
                   for kind, table in (("filter", env.filters), ("test", env.tests))
                   for name, function in table.items()))


def _private(folder: Path) -> bool:
    """Jinja unpickles and runs what it finds in the folder: it is used only where it is this
    user's and no one else may write to it (a shared site's folder may be writable by others),
    as Jinja checks its own default folder; else the templates are compiled in memory."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = folder.stat()
    mine = not hasattr(os, "getuid") or found.st_uid == os.getuid()
    return mine and not found.st_mode & 0o022


class KeptBytecode(jinja2.FileSystemBytecodeCache):
    """Jinja's cache of compiled templates in a folder. Jinja writes each file to a temporary
    one and renames it; nothing is fsynced, so after a power loss a file may be torn. Jinja
    compiles again where its header or its code does not read; this does where the
    template's checksum between them does not, instead of failing the publish."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (EOFError, pickle.UnpicklingError, ValueError):
            bucket.reset()
