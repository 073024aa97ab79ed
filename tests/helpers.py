"""Test helpers shared by the test modules (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import csv
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRIAGE_CORPUS", REPO.parent / "shared" / "corpus"))


def corpus_manifest() -> list[dict]:
    manifest = CORPUS / "MANIFEST.csv"
    if not manifest.is_file():
        raise RuntimeError(f"the report corpus is not at {CORPUS}: the tests read "
                           "../shared/corpus beside the checkout; set TRIAGE_CORPUS to its path")
    with open(manifest, newline="") as stream:
        return list(csv.DictReader(stream))


def corpus_file(name: str) -> Path:
    """A corpus file by its name (with or without the ncu/ or nsys/ folder)."""
    for folder in ("", "ncu", "nsys", "text"):
        path = CORPUS / folder / name
        if path.is_file():
            return path
    raise FileNotFoundError(name)


def require_tool(name: str) -> str:
    """The tool's path; skip the test when it is missing, unless CI demands real tools."""
    import nvtx_capture

    try:
        return nvtx_capture.require_tool(name)
    except nvtx_capture.ToolUnavailable as exc:
        nvtx_capture.require_or_skip(exc)


def typed(record: dict):
    """A `show --json` document (possibly altered by a test) as the RunRecord drift grades."""
    from triage.archive.model import RunRecord

    return RunRecord.from_manifest(record["id"], record)


def strings_in(value) -> Iterator[str]:
    """Every string in a JSON-like value, keys included: where a planted secret could hide."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings_in(v)


def checked_schema(name: str) -> dict:
    """A JSON schema of schemas/ (as installed), itself checked against its metaschema."""
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("triage.schemas").joinpath(name).read_text("utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def assert_valid(name: str, document: object) -> None:
    """`document` (a command's --json output) obeys schemas/`name`, whose references to other
    schemas of schemas/ go by their $id; every error is listed when it does not."""
    import json
    from importlib import resources

    import jsonschema
    from referencing import Registry, Resource

    found = [json.loads(f.read_text("utf-8")) for f in resources.files("triage.schemas").iterdir()
             if f.name.endswith(".schema.json")]
    registry = Registry().with_resources((doc["$id"], Resource.from_contents(doc))
                                         for doc in found if "$id" in doc)
    validator = jsonschema.Draft202012Validator(checked_schema(name), registry=registry)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, errors


def table_file(root: Path, run_id: str, name: str) -> Path:
    """A run's stored table in a local store (tables/<name>/run_id=<id>/<sha>.parquet)."""
    from triage.archive.store import Store

    store = Store.open(root)
    sha = store.runs.read_manifest(run_id)["tables"][name]["sha256"]
    return root / store.tables.key(run_id, name, sha)


def distinct(manifest: dict, mark: str) -> dict:
    """`manifest` as a run of its own: a run's id hashes its reports and the facts of its making
    (run_manifests.REPORT_IDENTITY), not its dates, environment or tables, so a copy takes one
    more --redact pattern (harmless: it names nothing the run holds)."""
    return {**manifest, "redact_patterns": [*manifest.get("redact_patterns", ()), mark]}


def derive_run(store, seed: str, manifest: dict) -> str:
    """Write `manifest`, changed from run `seed`'s so that it is a run of its own (a new id),
    with copies of seed's tables under the new id, as an archive of it would have laid them
    out; its id. A change the id does not hash (a GPU, a tool version) is made a run of its
    own by `distinct`, marked with the hash of the changed manifest."""
    import hashlib
    import shutil

    from triage.archive.canonical import canonical_json
    from triage.archive.run_manifests import manifest_file

    run_id, _data = manifest_file(manifest)
    if run_id == seed:
        mark = hashlib.sha256(canonical_json(manifest)).hexdigest()[:12]
        manifest = distinct(manifest, f"derived-{mark}")
        run_id, _data = manifest_file(manifest)
    for name, ref in manifest["tables"].items():
        target = store.root / store.tables.key(run_id, name, ref["sha256"])
        if target.exists():  # written by the caller: a table of its own
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(store.root / store.tables.key(seed, name, ref["sha256"]), target)
    return store.runs.write_manifest(manifest)


# A real export with kernels and CUDA API calls (nsys 2023.3, 16 kernels on 4 streams).
GROWN_SEED = "Lashi0812__CudaProgramming__streamSimple.sqlite"


def grown(dest: Path, rows: int, table: str = "CUPTI_ACTIVITY_KIND_KERNEL") -> Path:
    """A copy of a real corpus export whose `table` (kernels, API calls) is grown to `rows`
    rows: its rows repeated, each copy later in time than the last (start, end and correlation
    ids shifted), in time order as nsys writes them. Large exports derived from a real one."""
    import shutil
    import sqlite3
    from contextlib import closing

    shutil.copyfile(corpus_file(GROWN_SEED), dest)
    with closing(sqlite3.connect(dest)) as con:
        columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
        count, first, last, top = con.execute(
            f"SELECT count(*), min(start), max(end), max(correlationId) FROM {table}").fetchone()
        shifted = {"start": "k.start + r.i * :period", "end": "k.end + r.i * :period",
                   "correlationId": "k.correlationId + r.i * :ids"}
        con.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r "
                    "WHERE i < :copies) "
                    f"SELECT {', '.join(shifted.get(c, f'k.{c}') for c in columns)} "
                    f"FROM r, {table} k ORDER BY r.i, k.rowid",
                    {"copies": -(-rows // count) - 1, "period": last - first + 1000, "ids": top})
        con.execute(f"DELETE FROM {table} WHERE rowid > ?", (rows,))
        con.commit()
    return dest


def on_a_terminal(args: list[str], env: dict[str, str]) -> list[str]:
    """`triage ARGS` in a new process whose stdout is a pseudo-terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "triage", *args], stdout=follower,
                            stderr=subprocess.PIPE, env={**os.environ, **env})
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode().replace("\r\n", "\n").splitlines()
