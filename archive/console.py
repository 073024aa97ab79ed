"""What the team's console (`triage publish`, `triage serve`) shows, read from the catalog alone.

A store of 100,000 runs is listed from its catalog segments (one read of a few columns) and the
labels: no manifest is opened here. A series is either of the two `triage history` follows:

- a label family: the runs labelled `before/1`, `before/2`, ... (what `triage capture --repeat N
  --label before` names them) form the series `before`, which `triage history 'before/*'`
  follows;
- a workload: the runs of one tool whose command line names the same program and arguments (a
  nightly capture of one program), which `triage history --workload RUN` follows. The catalog's
  command line says it (a bench run's command is the program itself); failed captures are left
  out, as history leaves them out.

The console compares each run of a series with the one before it, and each family with the
family of the same tool captured before it (`diff 'before/*' 'after/*'`); only the newest
SERIES_RUNS runs of a series are followed (its pages say so), so a nightly series of 100,000
runs costs what one of SERIES_RUNS does.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from triage.archive import atomic, catalog
from triage.archive.catalogview import View
from triage.archive.runs import labels_by_run
from triage.archive.store import Store
from triage.base.timeutil import capture_order
from triage.capture.profiler_args import parse_command

COLUMNS = ("id", "tool", "gpu", "created", "archived", "indexed", "command", "report_names",
           "kernels", "capture_group", "rerun_of", "investigation", "source")
SERIES_RUNS = 50  # the newest runs of a series that its history and comparisons follow
# A time as the store writes it (base/timeutil.py `utc_now`, `from_epoch`): UTC, no fraction or
# 6 digits (or 3), a year from 1 (Python reads no year 0). Arrow and Python read these alike;
# Python 3.10 reads no other count of digits.
STORE_TIME = (r"^(000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})"
              r"-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6})?Z$")


class ConsoleRun(NamedTuple):
    """One run as the console lists it: its catalog row and its labels (a named tuple: 100,000
    are made at each publish, five times faster than frozen dataclasses)."""

    id: str
    tool: str
    gpu: str | None
    created: str | None
    archived: str | None
    indexed: str | None
    command: str | None
    report_names: str | None
    kernels: int | None
    capture_group: str | None
    rerun_of: str | None
    investigation: str | None
    source: str | None
    labels: tuple[str, ...] = ()

    @property
    def workload(self) -> str:
        """What the run ran, as the runs list shows and filters it: its command, else its
        report files."""
        return self.command or self.report_names or ""

    def stamp(self) -> str:
        """What its pages are made from changes only with this (a note, a label moved)."""
        return f"{self.indexed}|{','.join(self.labels)}"


@dataclass(frozen=True)
class Series:
    """A label family (`name`: the part of the labels before their last `/`) or a workload
    (`name`: its program and arguments), its tool, its runs in capture order (the newest
    SERIES_RUNS) and how many it has in all."""

    name: str
    tool: str
    runs: tuple[ConsoleRun, ...]
    total: int
    workload: bool = False

    @property
    def selector(self) -> str:
        """What the pages call it: the label glob `triage history` and `diff` take for the
        whole family, or the workload."""
        return f"workload {self.name}" if self.workload else f"{self.name}/*"

    @property
    def slug(self) -> str:
        """The page's name: a family's name (its safe characters); a workload's, a hash of
        `workload TOOL PROGRAM ARGS` (two workloads of one program and two tools apart)."""
        return slug(f"workload {self.tool} {self.name}") if self.workload else slug(self.name)


@dataclass(frozen=True)
class Pair:
    """Two sides the console compares: two runs (ids) or two label globs."""

    a: str
    b: str
    series: str | None = None  # a run against the one before it in this series

    @property
    def slug(self) -> str:
        if self.series is None:
            return f"{slug(self.a)}--{slug(self.b)}"
        return f"{self.a}_{self.b}"


@dataclass(frozen=True)
class Console:
    """Every run newest last (the catalog's order), the series and the pairs to compare."""

    runs: tuple[ConsoleRun, ...]
    series: tuple[Series, ...]
    pairs: tuple[Pair, ...]
    problems: tuple[str, ...] = field(default=())

    def by_id(self) -> dict[str, ConsoleRun]:
        return {run.id: run for run in self.runs}


def slug(text: str) -> str:
    """A file name for a label or glob: its safe characters, and a hash of the whole when any
    was left out (two families never share a page)."""
    kept = "".join(c if c.isalnum() or c in "-." else "-" for c in text).strip("-.")[:60]
    if kept == text:
        return kept
    return f"{kept or 'x'}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def read_console(store: Store, keep: Path | None = None) -> Console:
    """The console's runs, series and pairs from the catalog and the labels. `keep`: a folder
    where the merged catalog segment's rows are kept from one call to the next (a publish
    keeps them beside its site): a merged segment never changes (a merge writes a new one), so
    a later call reads only the segments written since, and the kept rows from an Arrow file
    that is not decompressed."""
    view = catalog.open_view(store, list(COLUMNS))
    table = view.table(base=kept_base(view, keep)) if keep is not None else view.table()
    labels = {run_id: tuple(names) for run_id, names in labels_by_run(store).items()}
    columns = [table.column(name).to_pylist() for name in COLUMNS]
    tags = [labels.get(run_id, ()) for run_id in columns[0]]
    runs = tuple(map(ConsoleRun._make, zip(*columns, tags, strict=True)))
    rows = capture_rows(table)
    captured = sorted(runs, key=capture_key) if rows is None else [runs[row] for row in rows]
    series = label_series(captured) + workload_series(captured)
    return Console(runs, series, comparisons(series), view.problems)


def kept_base(view: View, keep: Path) -> pa.Table | None:
    """The merged segment's rows in the view's schema: from `keep` when they were kept there
    for the same segment and columns, else read and kept (in place of any other segment's);
    None for a catalog without a merged segment."""
    found = view.segments
    if found.base is None or found.base_path is None:
        return None
    path = keep / f"{found.base_path.stem}-{stamp_of(found.schema.to_string())[:12]}.arrow"
    try:
        with pa.OSFile(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
        if table.schema.equals(found.schema):
            return table
    except (OSError, pa.ArrowException):
        pass
    table = found.base_table()
    assert table is not None
    for other in keep.iterdir() if keep.is_dir() else ():  # an older segment's, a killed write
        other.unlink(missing_ok=True)
    with atomic.temp_file_in(keep, ".arrow") as (stream, temp):
        with pa.ipc.new_file(stream, table.schema) as writer:
            writer.write_table(table)
        stream.close()
        os.replace(temp, path)
    return table


def capture_key(run: ConsoleRun) -> tuple:
    """Capture order, as `triage history` puts a series (base.timeutil.capture_order), then
    the id: one order for runs made at one moment."""
    return (*capture_order(run.created, run.archived), run.id)


def capture_rows(table: pa.Table) -> list[int] | None:
    """The catalog rows in capture order (`capture_key`'s), sorted by Arrow: two times parsed
    per run in Python, to find each series' newest runs, cost 0.2-0.4 s of a publish at
    100,000 runs. None where a time is not in the form the store writes (an offset, another
    count of digits): `capture_key` reads those."""
    import pyarrow.compute as pc

    keys = {}
    for name, column in (("first", pc.coalesce(table["created"], table["archived"])),
                         ("archived", table["archived"])):
        if pc.all(pc.match_substring_regex(column, STORE_TIME)).as_py() is False:
            return None
        try:  # a day or an hour out of range (Feb 30, 24:00) is for `capture_key` to read
            micros = pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64())
        except pa.ArrowInvalid:
            return None
        keys[f"{name} unknown"], keys[name] = pc.is_null(micros), pc.fill_null(micros, 0)
    keys["id"] = table["id"]
    return pc.sort_indices(pa.table(keys), [(name, "ascending") for name in keys]).to_pylist()


def family(label: str) -> str | None:
    return label.rsplit("/", 1)[0] if "/" in label.strip("/") else None


def label_series(runs: Sequence[ConsoleRun]) -> tuple[Series, ...]:
    """Each label family of at least two runs of one tool, in the order of its first capture
    (`runs` in capture order)."""
    found: dict[str, list[ConsoleRun]] = {}
    for run in filter(lambda run: run.labels, runs):
        for name in {family(label) for label in run.labels} - {None}:
            assert name is not None
            found.setdefault(name, []).append(run)
    return _in_order([_series(name, members) for name, members in found.items()
                      if len({m.tool for m in members}) == 1])


def workload_series(runs: Sequence[ConsoleRun]) -> tuple[Series, ...]:
    """Each workload of at least two runs of one tool (`runs` in capture order, kept in each):
    the application words of its command line, in the order of its first capture. Each
    distinct tool and command line is parsed once and looked up by its pair of texts (whose
    hashes are kept) for the rest of its runs."""
    into: dict[tuple[str, str], list[ConsoleRun] | None] = {}
    found: dict[tuple[str, tuple[str, ...]], list[ConsoleRun]] = {}
    for run in runs:
        if run.command and run.source != "capture-failed":
            key = (run.tool, run.command)
            if key not in into:
                argv = tuple(parse_command(run.command).application)
                into[key] = found.setdefault((run.tool, argv), []) if argv else None
            members = into[key]
            if members is not None:
                members.append(run)
    return _in_order([_series(" ".join(argv), members, workload=True)
                      for (_tool, argv), members in found.items()])


def _series(name: str, members: list[ConsoleRun], workload: bool = False) -> Series | None:
    """A series of `members` (of one tool, in capture order): its newest SERIES_RUNS; none of
    one run."""
    if len(members) < 2:
        return None
    return Series(name, members[0].tool, tuple(members[-SERIES_RUNS:]), len(members), workload)


def _in_order(series: list[Series | None]) -> tuple[Series, ...]:
    return tuple(sorted(filter(None, series), key=lambda s: (capture_key(s.runs[0]), s.name)))


def comparisons(series: Sequence[Series]) -> tuple[Pair, ...]:
    """Each family against the family of its tool captured before it, then each run of a series
    against the run before it."""
    pairs: list[Pair] = []
    last: dict[str, Series] = {}
    for one in (s for s in series if not s.workload):
        if one.tool in last:
            pairs.append(Pair(last[one.tool].selector, one.selector))
        last[one.tool] = one
    for one in series:
        pairs += [Pair(a.id, b.id, one.name)
                  for a, b in zip(one.runs, one.runs[1:], strict=False)]
    return tuple({pair.slug: pair for pair in reversed(pairs)}.values())[::-1]


def stamp_of(*parts: object) -> str:
    """A page's inputs as one short hash: the page is rewritten when it changes."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
