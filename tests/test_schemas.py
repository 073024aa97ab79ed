"""The manifest and table schemas are the single source of truth: everything written obeys them."""

from __future__ import annotations

import json

import jsonschema
import pyarrow.parquet as pq
import pytest

from triage.archive.manifest import manifest_schema
from triage.archive.store import Store
from triage.archive.tables import arrow_schema


@pytest.fixture
def archived_store(archived, store_dir):
    archived(("LakshyaSingh354__CudaCode__gemm_naive.ncu-rep",),
             ("evozone96__matrixMul__profile.nsight-cuprof-report",),
             ("AlpriElse__cs599k__silu-2025-04-19-v1_nosections.ncu-rep",))
    return Store.open(store_dir)


def test_every_manifest_validates(archived_store):
    validator = jsonschema.Draft202012Validator(manifest_schema())
    ids = archived_store.runs.ids()
    assert len(ids) == 3
    for run_id in ids:
        validator.validate(json.loads(archived_store.runs.path(run_id).read_bytes()))


def test_every_table_has_its_declared_schema(archived_store):
    for run_id in archived_store.runs.ids():
        manifest = archived_store.runs.read_manifest(run_id)
        for name, ref in manifest["tables"].items():
            path = archived_store.root / archived_store.tables.key(run_id, name, ref["sha256"])
            assert pq.read_schema(path).remove_metadata() == arrow_schema(name), name
            assert pq.read_metadata(path).num_rows == ref["rows"]


def test_each_column_is_encoded_as_its_data_suits(archived_store):
    """Dictionaries for text only (repeating names), delta encoding for integers (timestamps
    and ids: a dictionary of nearly unique values was most of the encoding time), floats and
    booleans plain: in every column of every table written."""
    import pyarrow as pa

    wanted = {pa.string(): "RLE_DICTIONARY", pa.int32(): "DELTA_BINARY_PACKED",
              pa.int64(): "DELTA_BINARY_PACKED", pa.float64(): "PLAIN", pa.bool_(): "PLAIN"}
    seen = set()
    for run_id in archived_store.runs.ids():
        for name, ref in archived_store.runs.read_manifest(run_id)["tables"].items():
            path = archived_store.root / archived_store.tables.key(run_id, name, ref["sha256"])
            metadata, schema = pq.read_metadata(path), arrow_schema(name)
            for group in range(metadata.num_row_groups):
                for index, field in enumerate(schema):
                    encodings = metadata.row_group(group).column(index).encodings
                    assert wanted[field.type] in encodings, (name, field.name, encodings)
                    assert (field.type == pa.string()) == ("RLE_DICTIONARY" in encodings)
                    seen.add(field.type)
    assert seen == set(wanted)  # every kind of column was checked


def test_schema_rejects_a_broken_manifest(archived_store):
    manifest = archived_store.runs.read_manifest(archived_store.runs.ids()[0])
    manifest["reports"][0]["sha256"] = "not-a-hash"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, manifest_schema())


def test_table_bytes_do_not_depend_on_how_rows_were_batched(tmp_path):
    """Readers hand rows over in batches of whatever size their source gives (sqlite3 fetches,
    DuckDB vectors, one ncu result at a time); the Parquet file must depend on the rows only."""
    import pyarrow as pa

    from triage.archive.tables import BATCH_ROWS, TableWriter

    rows = [(0, i, f"metric__{i % 7}.sum", "byte", float(i), None)
            for i in range(2 * BATCH_ROWS + 123)]
    schema = arrow_schema("metrics")
    as_arrow = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows],
                                    schema=schema)

    def write(name, feed) -> bytes:
        writer = TableWriter("metrics", tmp_path / name)
        feed(writer)
        assert writer.close() == len(rows)
        return (tmp_path / name).read_bytes()

    one_by_one = write("a", lambda w: [w.write_arrow(as_arrow.slice(i, 1))
                                        for i in range(0, 3000)] and
                       w.write_arrow(as_arrow.slice(3000)))
    in_odd_slices = write("b", lambda w: [w.write_arrow(as_arrow.slice(i, 977))
                                           for i in range(0, len(rows), 977)])
    as_arrow_batches = write("c", lambda w: [w.write_arrow(as_arrow.slice(i, 5000))
                                              for i in range(0, len(rows), 5000)])
    reordered = as_arrow.select(list(reversed(schema.names)))  # columns go by name
    mixed = write("d", lambda w: (w.write_arrow(reordered.slice(0, 70000)),
                                  w.write_arrow(as_arrow.slice(70000))))
    assert one_by_one == in_odd_slices == as_arrow_batches == mixed
    groups = pq.ParquetFile(tmp_path / "a").metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == \
        [BATCH_ROWS, BATCH_ROWS, 123]


def test_rows_after_close_are_refused_not_dropped(tmp_path):
    from triage.archive.tables import TableWriter
    from triage.schemas.tables import rows_table

    columns = ("report_index", "kernel_index", "name", "value")
    writer = TableWriter("metrics", tmp_path / "m.parquet")
    writer.write_arrow(rows_table("metrics", columns, [(0, 0, "a__b.sum", 1.0)]))
    assert writer.close() == 1
    with pytest.raises(RuntimeError, match="closed"):
        writer.write_arrow(rows_table("metrics", columns, [(0, 1, "a__b.sum", 2.0)]))
    assert pq.read_metadata(tmp_path / "m.parquet").num_rows == 1


def test_a_column_the_schema_does_not_declare_is_refused_not_shifted(tmp_path):
    """Readers name their columns: a misspelt or undeclared one is a bug, said at once."""
    from triage.archive.tables import TableWriter
    from triage.schemas.tables import rows_table

    with pytest.raises(ValueError, match="table metrics has no column valeu"):
        rows_table("metrics", ("report_index", "valeu"), [(0, 1.0)])
    table = rows_table("metrics", ("report_index", "value"), [(0, 1.0)])
    with pytest.raises(ValueError, match="table kernels has no column unit, value, text"):
        TableWriter("kernels", tmp_path / "k.parquet").write_arrow(table)
