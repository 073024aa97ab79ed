"""The tables of schemas/tables.json as Arrow schemas, for the readers that fill them and the
archive that writes and reads them (one place, so neither side imports the other).

Readers hand over Arrow tables with named columns; `named_table` builds one from named values
and refuses a column the schema does not declare, so adding or reordering a column in
tables.json never shifts data into the wrong column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import pyarrow as pa

ARROW_TYPES = {
    "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
    "string": pa.string(), "bool": pa.bool_(),
}


@lru_cache(maxsize=1)
def table_specs() -> dict[str, Any]:
    """schemas/tables.json, parsed once."""
    text = resources.files("triage.schemas").joinpath("tables.json").read_text()
    return json.loads(text)


def tables_version() -> int:
    return int(table_specs()["version"])


def tables_for_tool(tool: str) -> list[str]:
    """The tables every run of this tool has (possibly empty), in declaration order."""
    return [name for name, spec in table_specs()["tables"].items() if tool in spec["tools"]]


def _spec(name: str) -> dict[str, Any]:
    specs = table_specs()
    spec: dict[str, Any] = specs["catalog"] if name == "catalog" else specs["tables"][name]
    return spec


def _arrow_type(kind: str) -> pa.DataType:
    """An Arrow type from its declaration; 'list:T' is a list of rows of table T."""
    if kind.startswith("list:"):
        return pa.list_(pa.struct(list(arrow_schema(kind[5:]))))
    return ARROW_TYPES[kind]


@lru_cache(maxsize=None)
def arrow_schema(name: str) -> pa.Schema:
    """The Arrow schema of one table (or of the catalog), from its declaration."""
    return pa.schema([pa.field(col, _arrow_type(kind))
                      for col, kind, _doc in _spec(name)["columns"]])


def check_columns(name: str, columns: Iterable[str]) -> None:
    """Refuse a column `name`'s schema does not declare (a reader's bug, so a plain error)."""
    unknown = [c for c in columns if c not in arrow_schema(name).names]
    if unknown:
        raise ValueError(f"table {name} has no column {', '.join(unknown)} "
                         "(schemas/tables.json declares its columns)")


def named_table(name: str, columns: Mapping[str, pa.Array | pa.ChunkedArray], rows: int
                ) -> pa.Table:
    """A table of `name`'s schema from named columns; a declared column not given is null."""
    check_columns(name, columns)
    schema = arrow_schema(name)
    arrays = [columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in schema]
    table = pa.table(arrays, names=schema.names)
    # Cast only when needed: the first cast imports pyarrow.compute (60 ms per command).
    return table if table.schema.equals(schema) else table.cast(schema)


def rows_table(name: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> pa.Table:
    """Python row tuples whose values are the named `columns` as a table of `name`'s schema,
    converted in one C++ pass (as a struct array) rather than column by column.

    Text that was not UTF-8 in the report reaches Python with surrogate escapes (`ncu_report`
    decodes that way), which Arrow refuses: such a batch is converted again with those bytes
    as U+FFFD, as text read from SQLite exports is.
    """
    check_columns(name, columns)
    schema = arrow_schema(name)
    struct = pa.struct([schema.field(c) for c in columns])
    try:
        array = pa.array(rows, type=struct)
    except UnicodeEncodeError:
        array = pa.array([tuple(map(_valid_text, row)) for row in rows], type=struct)
    return named_table(name, dict(zip(columns, array.flatten(), strict=True)), len(rows))


def records_table(name: str, records: list[dict[str, Any]]) -> pa.Table:
    """Rows given as {column: value} (each with the same columns) as a table of `name`'s
    schema; for the few rows of a table with many columns, where a tuple would be positional."""
    columns = tuple(records[0]) if records else ()
    check_columns(name, columns)
    schema = arrow_schema(name)
    struct = pa.struct([schema.field(c) for c in columns])
    try:
        array = pa.array(records, type=struct)
    except UnicodeEncodeError:
        array = pa.array([{k: _valid_text(v) for k, v in r.items()} for r in records],
                         type=struct)
    return named_table(name, dict(zip(columns, array.flatten(), strict=True)), len(records))


def _valid_text(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value
