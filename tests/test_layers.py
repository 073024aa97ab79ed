"""triage is built in floors, and every import points down: `base` (errors, hashing, units,
time, progress, DuckDB) is the ground, then `schemas` and `templates`, then `capture`
(readers, profiler runs), `archive`, `compare`, the `demo` (the main job on bundled captures),
the `views` that word results, and the `cli` on top. Every folder of the package is on a
floor, and every import counts, those inside functions and under TYPE_CHECKING too: a lazy
import is still a dependency, only a later one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# floor -> the folder it lives in; a floor imports only floors listed before it
FLOORS = {"base": "base", "schemas": "schemas", "templates": "templates", "capture": "capture",
          "archive": "archive", "compare": "compare", "demo": "triage/demo",
          "views": "triage/views", "ci": "triage/ci", "cli": "triage/cli"}
ORDER = list(FLOORS)
# the same height: neither imports the other
SIDE_BY_SIDE = {frozenset({"schemas", "templates"})}


def floor_of(module: str) -> str | None:
    """The floor a dotted module name of triage is on (`triage` itself: the top, None)."""
    parts = module.split(".")
    if parts[0] != "triage" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in FLOORS else None


def imported_modules(path: Path) -> set[str]:
    """Every module of triage a file imports, wherever in it the import is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "triage"}


def imported_floors(path: Path) -> set[str]:
    """The floors a file imports; `triage` where it takes a name from the top package itself
    (`from triage import __version__`), which sits above every floor."""
    return {floor_of(name) or "triage" for name in imported_modules(path)}


def upward_imports(floor: str, root: Path = ROOT) -> dict[str, list[str]]:
    """{module: the floors it imports that are not below `floor`}."""
    allowed = set(ORDER[:ORDER.index(floor) + 1]) - {
        other for pair in SIDE_BY_SIDE if floor in pair for other in pair if other != floor}
    found = {}
    for path in sorted((root / FLOORS[floor]).rglob("*.py")):
        wrong = sorted(imported_floors(path) - allowed)
        if wrong:
            found[str(path.relative_to(root))] = wrong
    return found


@pytest.mark.parametrize("floor", ORDER)
def test_a_floor_imports_only_the_floors_below_it(floor):
    assert upward_imports(floor) == {}


def test_every_folder_of_the_package_is_on_a_floor():
    """A new folder must be given a floor, or the test above would not look at it."""
    import tomllib

    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {folder for name, folder in mapped["package-dir"].items() if name != "triage"}
    folders |= {str(p.parent.relative_to(ROOT)) for p in (ROOT / "triage").glob("*/__init__.py")}
    assert folders == set(FLOORS.values())
    top = {p.name for p in (ROOT / "triage").glob("*.py")}
    assert top == {"__init__.py", "__main__.py"}, "triage/ holds only the floors and the entry"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    """The walk must find lazy imports, or the tests above could pass on an upward one."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from triage.archive.store import Store\n"
                      "    from triage import views\n    return Store, views\n")
    assert imported_floors(module) == {"archive", "views"}
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "probe.py").write_text("def f():\n    from triage.cli import cli\n")
    assert upward_imports("base", tmp_path) == {"base/probe.py": ["cli"]}


@pytest.mark.parametrize("name, tables", [
    ("spymaster2h__spyinfer__report.ncu-rep", {"kernels", "metrics", "sections", "rules"}),
    ("0x822a5b87__test-cuda__report1.sqlite", {"kernels", "api_calls", "memops"}),
])
def test_a_reader_hands_over_named_tables_and_provenance_without_a_store(name, tables):
    """Readers return data; only the archive writes. No store is opened here."""
    from helpers import corpus_file
    from triage.capture.formats import prepare_report
    from triage.schemas.tables import arrow_schema

    report = prepare_report(corpus_file(name))
    try:
        seen = set()
        for table, batch in report.batches(0):
            assert batch.schema == arrow_schema(table), table
            seen.add(table)
        assert tables <= seen
        provenance = report.provenance()
    finally:
        report.close()
    assert provenance["tool"] == report.tool and provenance["environment"]["gpus"]
