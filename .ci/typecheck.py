"""Type-check the library under the module names it is installed as (archive/ is triage.archive).

mypy cannot follow setuptools' editable-install finder, and run on the folders it would call them
`archive`, not `triage.archive`. So it checks a tree of links laid out like the installed
package, built from pyproject's own package-dir mapping, and names the files as they are here.

Usage: python3 .ci/typecheck.py [mypy options]   (Python 3.11 or later: tomllib)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "triage"


def package_dirs() -> dict[str, str]:
    """{'triage.archive': 'archive', ...}: where each subpackage of triage lives in the checkout."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: folder for name, folder in setuptools["package-dir"].items() if name != PACKAGE}


def link_tree(dest: Path, mapped: dict[str, str]) -> None:
    """dest/triage: links to triage/'s own files, and to each mapped folder under its name."""
    top = dest / PACKAGE
    top.mkdir()
    for entry in (ROOT / PACKAGE).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in mapped.items():
        (dest / name.replace(".", "/")).symlink_to(ROOT / folder, target_is_directory=True)


def main(options: list[str]) -> int:
    mapped = package_dirs()
    with tempfile.TemporaryDirectory(prefix="triage-typecheck-") as tree:
        link_tree(Path(tree), mapped)
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", str(ROOT / ".mypy_cache"), *options, "-p", PACKAGE],
            cwd=tree, capture_output=True, text=True)
    out = result.stdout
    for name, folder in mapped.items():
        out = out.replace(name.replace(".", "/") + "/", folder + "/")
    sys.stdout.write(out)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
