"""Where a store keeps a run's tables: tables/<table>/run_id=<id>/<sha256>.parquet, hive style,
so that Spark, DuckDB, Polars or pyarrow read tables/<table>/ as one dataset with `run_id` as
its partition column, no triage code needed; each named by the hash of its bytes, so a file
never changes once written. (Writing them: tables.py; they are published as objects are.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triage.archive.store import Store

TABLES_DIR = "tables"
TABLE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Tables.key's keys, and nothing else under tables/
TABLE_KEY_RE = re.compile(r"^tables/[a-z][a-z0-9_]{0,63}/run_id=[0-9a-f]{64}/"
                          r"[0-9a-f]{64}\.parquet$")


class Tables:
    """A store's tables/: the files of every run's tables, by run, table and hash."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def key(run_id: str, name: str, sha256: str) -> str:
        """Where a run's table lies (see the module's docstring)."""
        return f"{TABLES_DIR}/{name}/run_id={run_id}/{sha256}.parquet"

    def local(self, run_id: str, name: str, sha256: str) -> Path:
        """A local file holding a run's table, for readers that want a path (Parquet, DuckDB)."""
        return self.store.objects.local_copy(self.key(run_id, name, sha256), sha256)
