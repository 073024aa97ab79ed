"""CI installs through `.ci/constraints.txt` (written by `bash .ci/lock`). A dependency added to
pyproject.toml without locking again would install unpinned in CI, and a pin that falls outside
pyproject's range would make CI test a combination no user can install: both fail here."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    """{canonical name: pinned version} from the constraints file."""
    found = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = version.strip()
    return found


def declared() -> list[Requirement]:
    """pyproject's runtime and test requirements, and the build system's."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    texts = (data["project"]["dependencies"] + data["project"]["optional-dependencies"]["test"]
             + data["build-system"]["requires"])
    return [Requirement(text) for text in texts]


def test_every_declared_requirement_is_pinned_inside_its_range():
    pinned = pins()
    unpinned = [str(r) for r in declared() if canonicalize_name(r.name) not in pinned]
    outside = [f"{r} (pinned {pinned[canonicalize_name(r.name)]})" for r in declared()
               if canonicalize_name(r.name) in pinned
               and not r.specifier.contains(pinned[canonicalize_name(r.name)], prereleases=True)]
    assert (unpinned, outside) == ([], []), "run `bash .ci/lock` and commit .ci/constraints.txt"


def test_ci_installs_through_the_pins():
    script = (ROOT / ".ci" / "run").read_text()
    assert 'PIP_CONSTRAINT="$PWD/.ci/constraints.txt"' in script
    assert script.index("PIP_CONSTRAINT=") < script.index("pip install")
