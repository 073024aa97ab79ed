"""A store for the console's tests, made from the demo's bundled nsys captures: the series
`before` (5 runs), `after` (5 runs) and `nightly` (the 5 after runs, then copies of the 5
before runs captured a day later: a series that steps up, slower), and one run derived from a
before run with HTML and script planted in its command, a kernel name, an NVTX range and a
note."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from helpers import derive_run, distinct

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def make_store(root: Path, work: Path) -> dict[str, list[str]]:
    """Archive the demo's repeats into `root`; the run ids of each series."""
    from triage.archive.ingest import archive_files
    from triage.archive.store import Store
    from triage.demo import REPEATS, demo_file

    ids: dict[str, list[str]] = {"before": [], "after": [], "nightly": []}
    work.mkdir(parents=True, exist_ok=True)
    for side in ("before", "after"):
        for i in range(1, REPEATS + 1):
            path = work / f"{side}-{i}.sqlite"
            path.write_bytes(lzma.decompress(demo_file(f"repeats/{side}-{i}.sqlite.xz")
                                             .read_bytes()))
            note = HOSTILE if (side, i) == ("before", 1) else None
            ids[side] += [r.id for r in archive_files(root, [str(path)], label=f"{side}/{i}",
                                                      note=note)]
    store = Store.open(root)
    for i, run_id in enumerate(ids["after"], 1):
        store.labels.point(f"nightly/{i}", run_id)
    for i, run_id in enumerate(ids["before"], 1):
        manifest = store.runs.read_manifest(run_id)
        manifest["created"] = "2026-12-05" + manifest["created"][10:]
        copy = derive_run(store, run_id, distinct(manifest, f"nightly-{i}"))
        store.labels.point(f"nightly/{REPEATS + i}", copy)
        ids["nightly"].append(copy)
    ids["planted"] = [planted_run(store, ids["before"][0])]
    store.labels.point("planted/1", ids["before"][1])
    store.labels.point("planted/2", ids["planted"][0])
    return ids


def planted_run(store, seed: str) -> str:
    """A copy of run `seed` whose command, first kernel and first NVTX range are HOSTILE (each
    table that names them rewritten, under the copy's id)."""
    from triage.archive.run_manifests import manifest_file
    from triage.base.hashing import hash_file

    manifest = distinct(json.loads(json.dumps(store.runs.read_manifest(seed))), "planted")
    manifest["command"] = f"nsys profile -o x ./app '{HOSTILE}'"
    staged = {}
    for table, column in (("kernel_summary", "name"), ("kernels", "name"),
                          ("nvtx_summary", "text"), ("nvtx_ranges", "text")):
        ref = manifest["tables"][table]
        data = pq.read_table(store.root / store.tables.key(seed, table, ref["sha256"]))
        names = data.column(column).to_pylist()
        if not names:
            continue
        names = [HOSTILE if n == names[0] else n for n in names]
        data = data.set_column(data.schema.get_field_index(column), column,
                               pa.array(names, type=data.schema.field(column).type))
        staged[table] = store.root / f"planted-{table}.parquet"
        pq.write_table(data, staged[table])
        ref["sha256"], ref["bytes"] = hash_file(staged[table])
    run_id, _data = manifest_file(manifest)
    for table, file in staged.items():
        target = store.root / store.tables.key(run_id, table, manifest["tables"][table]["sha256"])
        target.parent.mkdir(parents=True, exist_ok=True)
        file.rename(target)
    return derive_run(store, seed, manifest)
