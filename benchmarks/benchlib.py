"""What more than one benchmark uses, in one place, so that no benchmark imports another (each
is a script of its own, free to change without breaking the rest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


CHECKOUT = Path(__file__).resolve().parents[1]


def compile_sources(root: Path = CHECKOUT) -> None:
    """Write triage's bytecode caches first (of this checkout, or of the one at `root`), as a
    pip install or a first run does: a process started with PYTHONDONTWRITEBYTECODE=1 (this
    sandbox sets it) and no caches recompiles every triage module each run (0.3-0.5 s under
    load), which no user pays twice."""
    folders = [str(root / name) for name in ("triage", "base", "archive", "capture", "compare",
                                             "schemas", "templates")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True,
                   capture_output=True)


def compile_legs(baseline: str | None) -> None:
    """`compile_sources` of this checkout and, for a `--baseline PYTHON` leg, of the checkout
    that interpreter imports (or its leg pays the compiling)."""
    compile_sources()
    if baseline:
        compile_sources(checkout_of(baseline))


def checkout_of(python: str) -> Path:
    """The checkout whose triage this interpreter imports."""
    found = subprocess.run([python, "-c", "import pathlib, triage.archive as a; "
                            "print(pathlib.Path(a.__file__).resolve().parents[1])"],
                           check=True, capture_output=True, text=True).stdout
    return Path(found.strip())
