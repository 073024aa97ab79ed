"""The design card's packages import one way: capture (readers, profiler runs) and schemas below
archive, archive below compare. Every import counts, those inside functions and under
TYPE_CHECKING too: a lazy import is still a dependency, only a later one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("archive", "compare", "capture", "schemas", "templates")
FORBIDDEN = {"capture": {"archive", "compare"}, "archive": {"compare"},
             "schemas": {"archive", "compare", "capture", "templates"}}


def imported_packages(path: Path) -> set[str]:
    """The design-card packages a module imports, wherever in it the import is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == "triage" and parts[1] in PACKAGES:
                found.add(parts[1])
    return found


def edges() -> dict[str, dict[str, list[str]]]:
    """package -> {imported package: [the modules importing it]}."""
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in PACKAGES}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for target in imported_packages(path) - {package}:
                graph[package].setdefault(target, []).append(str(path.relative_to(ROOT)))
    return graph


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_package_imports_nothing_above_it(package):
    graph = edges()
    assert {t: m for t, m in graph[package].items() if t in FORBIDDEN[package]} == {}


def test_the_packages_import_each_other_without_a_cycle():
    graph = edges()

    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(t == goal or (t not in seen and reaches(t, goal, seen | {t}))
                   for t in graph[start])

    assert [p for p in PACKAGES if reaches(p, p)] == []


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    """The walk must find lazy imports, or the tests above could pass on a cycle."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from triage.archive.store import Store\n    return Store\n")
    assert imported_packages(module) == {"archive"}


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
