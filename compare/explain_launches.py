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

from triage.compare.explain_result import LaunchConfig, NcuRule
from triage.compare.explain_sol import RULE_ID
from triage.compare.explain_tables import METRICS
from triage.compare.launch_stats import NcuTables, RawValues
from triage.compare.matching import Launch


# What classifies a launch: its configuration and the inputs of ncu's SOLBottleneck rule.
CLASSIFYING = tuple(n for key in ("grid_size", "block_size", "sm_pct", "mem_pct", "waves")
                    for n in METRICS[key].names)
MESSAGES = "message_type IN ('ok', 'optimization', 'warning')"  # an error is no message
SOL_RULES = f"rule_id = '{RULE_ID}' AND {MESSAGES}"


@dataclass(frozen=True)
class LaunchData:
    """Per launch (report index, kernel index): the metric values that classify it
    (`CLASSIFYING`) and ncu's SOLBottleneck messages; the launches that carry metric values
    (None: the run stored no metrics)."""

    values: dict[Launch, RawValues]
    rules: dict[Launch, list[NcuRule]]
    with_data: set[Launch] | None

    def carries_values(self, launches: Sequence[Launch]) -> bool:
        """Whether any of these launches holds a value the profiler measured (`capture.ncu`'s
        measure, the one the archive's notice and the diff's no_data use)."""
        return bool(self.with_data and self.with_data.intersection(launches))


def read_launches(tables: NcuTables, launches: Sequence[Launch]) -> LaunchData:
    """What classifies each launch, and which carry values (of the whole run, one scan); the
    SOLBottleneck messages of these launches (the statistics of each group come from
    `NcuTables.stats`)."""
    values, with_data = tables.facts(CLASSIFYING) or ({}, None)
    return LaunchData(values, rule_messages(tables.rows("rules", launches, SOL_RULES)),
                      with_data)


def rule_messages(rows: list[dict]) -> dict[Launch, list[NcuRule]]:
    """ncu's rule messages per launch from rules-table rows (an error is no message)."""
    rules: dict[Launch, list[NcuRule]] = {}
    for row in rows:
        if row["message_type"] in ("ok", "optimization", "warning"):
            rules.setdefault((row["report_index"], row["kernel_index"]), []).append(
                NcuRule(row["rule_id"], row["message_type"], row["title"], row["message"]))
    return rules


def numeric(value: object) -> bool:
    """Whether a metric's value is a number to read (not text, not None, not NaN)."""
    return isinstance(value, (int, float)) and not math.isnan(value)


def launch_number(raw: RawValues, key: str) -> float | None:
    """The first of the key's namings (METRICS) with a number in these values, as a bare
    number (what `Values.get` cites)."""
    for name in METRICS[key].names:
        value = raw.get(name, (None, None))[0]
        if numeric(value):
            return value
    return None


def launch_config(raw: RawValues) -> LaunchConfig:
    """One launch's grid and block size (None where LaunchStats was not collected)."""
    return LaunchConfig(launch_number(raw, "grid_size"), launch_number(raw, "block_size"))


def split_by_behaviour(launches: Sequence[Launch],
                       behaviour: Callable[[Launch], Hashable]) -> list[list[Launch]]:
    """The launches grouped by what `behaviour` says of each, groups in the order of their
    first launch, launches in their own order."""
    groups: dict[Hashable, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(behaviour(launch), []).append(launch)
    return list(groups.values())
