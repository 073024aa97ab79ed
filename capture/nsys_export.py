"""Nsight Systems exports, opened for SQL: the `Export` every reader is, its `Query`, the helpers
both readers use, and `open_export`, which picks the reader.

Both formats carry the same tables and columns (StringIds, TARGET_INFO_*, CUPTI_ACTIVITY_KIND_*,
NVTX_EVENTS, ...), so the readers in `nsys_tables` and `nsys` build one SQL text for either, and
one of two engines runs it: `nsys_sqlite` (a `.sqlite` export) or `nsys_arrow` (`nsys export
--type arrow`). `open_export` imports a reader only when an export of its kind is opened: the
readers import this module, never it them, nor each other.

Export schemas differ across nsys versions (tables absent when empty, columns added, renamed,
or holding text inline instead of a StringIds id), so every query is built from the columns
the export actually has (`columns`, `col`, `string`).
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from triage.base.errors import UnsupportedReport

if TYPE_CHECKING:
    import pyarrow as pa

BATCH = 65536
NOT_NSYS = ("an SQLite database but not an Nsight Systems export (no StringIds / TARGET_INFO_* "
            "tables); pass the file written by `nsys export --type sqlite REPORT.nsys-rep`")


@overload
def as_text(value: None) -> None: ...


@overload
def as_text(value: str | bytes | int | float) -> str: ...


def as_text(value: object) -> str | None:
    """Export text as str; exports can hold bytes that are not UTF-8. NULL stays None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def utf8(array):
    """Binary -> string; bytes that are not UTF-8 are decoded with replacement characters.

    Valid text is cast in place; only a chunk holding invalid bytes is rebuilt value by value.
    """
    import pyarrow as pa

    if pa.types.is_string(array.type):
        return array
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([utf8(chunk) for chunk in array.chunks], pa.string())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([as_text(v) for v in array.to_pylist()], pa.string())


@dataclass(frozen=True)
class Query:
    """One launch-level SELECT kept in its parts, so that an engine may run it over slices of
    its table: the rows of `table` (named `alias`) that pass `where`, in `order` (whose last
    key is the export's own row order, which makes the order total)."""

    table: str
    alias: str
    select: tuple[str, ...]
    order: tuple[str, ...] = ()
    where: str = ""
    select_params: tuple[Any, ...] = ()
    where_params: tuple[Any, ...] = ()

    def sql(self, source: str | None = None, order: tuple[str, ...] | None = None) -> str:
        """The SELECT over the table (or over `source`, a slice of it), in `order` if given."""
        keys = self.order if order is None else order
        return (f"SELECT {', '.join(self.select)} FROM {source or self.table} {self.alias}"
                + (f" WHERE {self.where}" if self.where else "")
                + (f" ORDER BY {', '.join(keys)}" if keys else ""))

    @property
    def params(self) -> list[Any]:
        """The parameters in the order their `?` appear: the select list's, then the filter's."""
        return [*self.select_params, *self.where_params]


_VERSIONED = re.compile(r"(.+)_V(\d+)")


def by_base_name(tables: set[str]) -> dict[str, str]:
    """Base name -> the table that holds it, for the tables a newer nsys exports with a
    version suffix (`X_V2`, `X_V3`) where the export has no plain `X`: the highest version."""
    found: dict[str, tuple[int, str]] = {}
    for table in tables:
        match = _VERSIONED.fullmatch(table)
        if match and match.group(1) not in tables:
            version = int(match.group(2))
            if version > found.get(match.group(1), (-1, ""))[0]:
                found[match.group(1)] = (version, table)
    return {base: table for base, (_version, table) in found.items()}


class Export(ABC):
    """An open export: its tables and their columns (probed once), and SQL over them. A table
    nsys exports under a version suffix (`_V2`, `_V3`) is known by its base name too, so the
    readers name every table one way whatever the nsys version (`by_base_name`)."""

    def __init__(self, path, tables: set[str]):
        self.real = by_base_name(tables)  # base name -> the suffixed table holding it
        self.path, self.tables = path, tables | set(self.real)
        self._columns: dict[str, set[str]] = {}
        self._base_names = re.compile(r"\b(" + "|".join(map(re.escape, self.real)) + r")\b") \
            if self.real else None

    def resolved(self, sql: str) -> str:
        """SQL with each base name of a suffixed table replaced by the table's real name."""
        if self._base_names is None:
            return sql
        return self._base_names.sub(lambda m: self.real[m.group(1)], sql)

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = self._table_columns(table) if table in self.tables else set()
        return self._columns[table]

    def col(self, table: str, name: str, alias: str = "t") -> str:
        """`alias.name` when the table has that column, else NULL."""
        return f"{alias}.{name}" if name in self.columns(table) else "NULL"

    def pairs(self, table: str) -> list[tuple[str, str]]:
        if not {"name", "value"} <= self.columns(table):
            return []
        _names, rows = self.rows(f"SELECT name, value FROM {table}")
        return [(as_text(name), as_text(value)) for name, value in rows]

    def check_is_nsys(self) -> None:
        if "StringIds" not in self.tables or not any(t.startswith("TARGET_INFO_")
                                                     for t in self.tables):
            raise UnsupportedReport(f"{self.path}: {NOT_NSYS}")

    def early_table(self, tables: list[str]) -> str | None:
        """Of these tables, the one whose read is worth starting before the others are read
        (beside them, on a thread of its own): None where reads share one connection."""
        return None

    def string(self, table: str, column: str, alias: str = "t") -> str:
        """SQL for a column holding a StringIds id, resolved to its text (older exports held
        the text itself)."""
        expr = self.col(table, column, alias)
        lookup = f"(SELECT value FROM StringIds WHERE id = {expr})"
        holds_id = self._holds_integers(table, column)
        if holds_id is None:
            return f"(CASE WHEN typeof({expr}) = 'integer' THEN {lookup} ELSE {expr} END)"
        return lookup if holds_id else expr

    # -- what each engine supplies ------------------------------------------------------------

    @abstractmethod
    def _table_columns(self, table: str) -> set[str]:
        """The column names of a table the export has."""

    @abstractmethod
    def _holds_integers(self, table: str, column: str) -> bool | None:
        """Whether a column holds integers; None when only each row's value can tell."""

    @abstractmethod
    def row_order(self, table: str, alias: str) -> str | None:
        """SQL for the export's own order of a table's rows, when it has one."""

    @abstractmethod
    def rows(self, sql: str, params=()) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of a small query."""

    @abstractmethod
    def batches(self, query: Query, fields) -> Iterator[pa.Table]:
        """The query's rows as Arrow tables of at most BATCH rows, columns named and typed by
        `fields` ((name, "int" | "str") pairs); never the whole result at once."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection and whatever the export maps."""


def open_export(path, exported=None, fmt: str = "sqlite") -> Export:
    """The export at `exported` (or `path` itself, a user's .sqlite) in the given format. An
    Arrow export's large sorts spill to a folder of the system's temp directory that DuckDB
    makes only when it spills and removes when closed (never into the store, whose layout
    has no place for it)."""
    if fmt == "arrow":
        from triage.capture.nsys_arrow import ArrowExport

        spill = os.path.join(tempfile.gettempdir(), f"triage-spill-{secrets.token_hex(8)}")
        return ArrowExport(path, exported, spill)
    from triage.capture.nsys_sqlite import SqliteExport

    return SqliteExport(path, exported)
