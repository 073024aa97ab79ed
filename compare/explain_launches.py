"""The launches of an ncu run as `triage explain` reads them: per launch its metric values,
section ids and ncu's rule messages; and a kernel's launches split by behaviour.

Launches of one kernel are explained together only when they behave alike: the same launch
configuration (grid and block size) and the same outcome of ncu's SOLBottleneck rule, each launch
classified on its own. A mean over a memory-bound launch of 39,312 blocks and a latency-bound
one of 5,418 blocks would describe neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from triage.capture.ncu import measured_metric
from triage.compare.explain_result import LaunchConfig, NcuRule
from triage.compare.explain_tables import METRICS
from triage.compare.matching import Launch
from triage.compare.rundata import RunData

RawValues = dict[str, tuple]  # metric name -> (value or text, unit)


@dataclass(frozen=True)
class LaunchData:
    """Per launch (report index, kernel index): its metric values, the ids of the sections
    collected for it and ncu's rule messages (ok ones too)."""

    values: dict[Launch, RawValues]
    sections: dict[Launch, set[str]]
    rules: dict[Launch, list[NcuRule]]


def _rows(run: RunData, table: str, columns: list[str]) -> list[dict]:
    data = run.table(table, columns)
    return data.to_pylist() if data is not None else []


def read_launches(run: RunData) -> LaunchData:
    values: dict[Launch, RawValues] = {}
    for row in _rows(run, "metrics", ["report_index", "kernel_index", "name", "unit", "value",
                                      "text"]):
        value = row["value"] if row["value"] is not None else row["text"]
        values.setdefault((row["report_index"], row["kernel_index"]), {})[row["name"]] = \
            (value, row["unit"])
    sections: dict[Launch, set[str]] = {}
    for row in _rows(run, "sections", ["report_index", "kernel_index", "section_id"]):
        sections.setdefault((row["report_index"], row["kernel_index"]), set()).add(
            row["section_id"])
    return LaunchData(values, sections, rule_messages(_rows(run, "rules", [
        "report_index", "kernel_index", "rule_id", "message_type", "title", "message"])))


def rule_messages(rows: list[dict]) -> dict[Launch, list[NcuRule]]:
    """ncu's rule messages per launch from rules-table rows (an error is no message)."""
    rules: dict[Launch, list[NcuRule]] = {}
    for row in rows:
        if row["message_type"] in ("ok", "optimization", "warning"):
            rules.setdefault((row["report_index"], row["kernel_index"]), []).append(
                NcuRule(row["rule_id"], row["message_type"], row["title"], row["message"]))
    return rules


def carries_values(raw: RawValues) -> bool:
    """Whether one launch's metrics hold any value the profiler measured (`capture.ncu`'s
    measure, the one the archive's notice and the diff's no_data use)."""
    return any(value is not None and measured_metric(name) for name, (value, _u) in raw.items())


def mean_values(per_launch: list[RawValues]) -> RawValues:
    """name -> (mean of the numeric values over launches, unit), or the first text."""
    out: RawValues = {}
    for name in {n for launch in per_launch for n in launch}:
        found = [launch[name] for launch in per_launch if name in launch]
        numbers = [v for v, _u in found if isinstance(v, (int, float))]
        out[name] = (sum(numbers) / len(numbers) if numbers else found[0][0], found[0][1])
    return out


def _number(raw: RawValues, key: str) -> float | None:
    for name in METRICS[key].names:
        value = raw.get(name, (None, None))[0]
        if isinstance(value, (int, float)) and not math.isnan(value):
            return value
    return None


def launch_config(raw: RawValues) -> LaunchConfig:
    """One launch's grid and block size (None where LaunchStats was not collected)."""
    return LaunchConfig(_number(raw, "grid_size"), _number(raw, "block_size"))


def split_by_behaviour(launches: Sequence[Launch],
                       behaviour: Callable[[Launch], Hashable]) -> list[list[Launch]]:
    """The launches grouped by what `behaviour` says of each, groups in the order of their
    first launch, launches in their own order."""
    groups: dict[Hashable, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(behaviour(launch), []).append(launch)
    return list(groups.values())
