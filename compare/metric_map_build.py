"""Builds `compare/data/metric_map.json`, the cross-version map of ncu metric names, from data.

ncu's section definitions give each metric a display label within its section ("DRAM
Throughput" in SpeedOfLight). Two names that one section shows under one label, each the only
name of that label in the ncu versions that use it, are one metric renamed: a candidate. It is
confirmed where the values agree in kind: the same unit in the reports that recorded one, or,
where a version recorded none (ncu 2019), value ranges that overlap (within 0..100 for a
percentage). Candidates whose units differ are refused, and so is any pair of names that one
version shows side by side in one section (two metrics, whatever their labels say).

The evidence is what ncu itself wrote: the section files of an installed ncu (Debian's 2022.3
here) and the sections and metrics of every ncu report of the corpus. Each entry keeps, per
name, the versions and sources that showed it, its unit and the range of its values.

`python docs/make_metric_map.py` rewrites the data file (`--check`: exit 1 where it would
change); this module is the library it calls, and prints nothing.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from triage.compare.renames import MAP_VERSION, NOT_RECORDED, version_key

SECTIONS_DIRS = ("/usr/lib/x86_64-linux-gnu/nsight-compute/sections",
                 "/usr/lib/nsight-compute/sections")
NCU_SUFFIXES = (".ncu-rep", ".nsight-cuprof-report")
_TOKEN = re.compile(r'\s*(?:#[^\n]*|("(?:[^"\\]|\\.)*")|([{}])|([^\s{}:"]+)\s*:?)')


@dataclass(frozen=True)
class Seen:
    """One metric as one source showed it: the ncu version, the section, the label and name,
    and, from a report, its unit and the lowest and highest value it recorded."""

    version: str
    source: str
    section: str
    label: str
    name: str
    unit: str | None = None
    low: float | None = None
    high: float | None = None


# -- section files -----------------------------------------------------------------------------

def parse_text_proto(text: str) -> list[tuple[str, object]]:
    """A protobuf text file as nested (key, value) lists: a value is a string, or the list of
    a `Key { ... }` block (ncu's .section files, read without their schema)."""
    tokens = [m.group(1) or m.group(2) or m.group(3) for m in _TOKEN.finditer(text)]
    tokens = [t for t in tokens if t]

    def block(at: int) -> tuple[list[tuple[str, object]], int]:
        items: list[tuple[str, object]] = []
        while at < len(tokens) and tokens[at] != "}":
            key = tokens[at]
            if tokens[at + 1] == "{":
                value, at = block(at + 2)
                items.append((key, value))
                at += 1  # the closing brace
            else:
                raw = tokens[at + 1]
                items.append((key, json.loads(raw) if raw.startswith('"') else raw))
                at += 2
        return items, at

    return block(0)[0]


def _metrics_blocks(items: list[tuple[str, object]]) -> Iterator[list[tuple[str, object]]]:
    for key, value in items:
        if isinstance(value, list):
            if key == "Metrics":
                yield value
            yield from _metrics_blocks(value)


def section_file_metrics(text: str, version: str, source: str) -> Iterator[Seen]:
    """Each labelled metric of a .section file, with the names its per-architecture Options
    give under the same label (or their own)."""
    from triage.capture.ncu import display_label

    items = parse_text_proto(text)
    section = next((v for k, v in items if k == "Identifier"), None)
    if not isinstance(section, str):
        return
    for metric in _metrics_blocks(items):
        fields = dict((k, v) for k, v in metric if isinstance(v, str))
        options = [dict((k, v) for k, v in o if isinstance(v, str))
                   for k, o in metric if k == "Options" and isinstance(o, list)]
        for entry in [fields, *options]:
            name = entry.get("Name")
            label = display_label(entry.get("Label") or fields.get("Label"), name or "")
            if name and label:
                yield Seen(version, source, section, label, name)


def debian_sections() -> tuple[str, str] | None:
    """(folder, ncu version) of the installed ncu's section files, None where there are none."""
    folder = next((d for d in SECTIONS_DIRS if os.path.isdir(d)), None)
    if folder is None:
        return None
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "nsight-compute"],
                          capture_output=True, text=True, check=False)
    version = ".".join(done.stdout.split("~")[0].split(".")[:3]) if done.returncode == 0 \
        else "installed"
    return folder, version


def section_files(folder: str, version: str) -> Iterator[Seen]:
    for path in sorted(Path(folder).glob("*.section")):
        yield from section_file_metrics(path.read_text(errors="replace"), version,
                                        f"{version} {path.name}")


# -- reports -----------------------------------------------------------------------------------

def report_metrics(path: str) -> Iterator[Seen]:
    """Each labelled section metric of an ncu report, its unit and its value range over the
    report's results."""
    from triage.capture.ncu import display_label, open_ncu_report, report_version

    report = open_ncu_report(path)
    version = report_version(report.info) or \
        f"{NOT_RECORDED} (PerfWorks {report.info.versions.get('PerfWorks', '?')})"
    found: dict[tuple[str, str, str], list] = {}
    for _index, _range, action in report.actions():
        for section in action.sections():
            for metric in [*section.header_metrics(), *section.body_metrics()]:
                name = metric.name()
                label = display_label(metric.label(), name)
                if not label:
                    continue
                entry = found.setdefault((section.identifier(), label, name), [None, []])
                value = action.metric_by_name(name)
                if value is None:
                    continue
                entry[0] = entry[0] or value.unit() or None
                number = _number(value)
                if number is not None:
                    entry[1].append(number)
    source = os.path.basename(path)
    for (section_id, label, name), (unit, values) in sorted(found.items()):
        yield Seen(version, source, section_id, label, name, unit,
                   min(values) if values else None, max(values) if values else None)


def _number(metric) -> float | None:
    """A metric's finite numeric value; None for text, no value and NaN."""
    from ncu_report import IMetric

    if metric.kind() not in (IMetric.ValueKind_DOUBLE, IMetric.ValueKind_FLOAT,
                             IMetric.ValueKind_UINT32, IMetric.ValueKind_UINT64):
        return None
    value = metric.as_double()
    return value if math.isfinite(value) else None


def corpus_reports(corpus: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(corpus, "ncu", "*"))
                  if p.endswith(NCU_SUFFIXES))


def observations(corpus: str | None) -> list[Seen]:
    """Every labelled metric of the installed section files and the corpus reports."""
    seen: list[Seen] = []
    installed = debian_sections()
    if installed:
        seen += section_files(*installed)
    for path in corpus_reports(corpus) if corpus else []:
        seen += report_metrics(path)
    return seen


# -- the map -----------------------------------------------------------------------------------

@dataclass
class Name:
    """What the sources showed of one metric name in one section, under one label."""

    name: str
    versions: set[str]
    sources: set[str]
    unit: str | None = None
    low: float | None = None
    high: float | None = None

    def add(self, seen: Seen) -> None:
        self.versions.add(seen.version)
        self.sources.add(seen.source)
        self.unit = self.unit or seen.unit
        if seen.low is not None and seen.high is not None:
            self.low = seen.low if self.low is None else min(self.low, seen.low)
            self.high = seen.high if self.high is None else max(self.high, seen.high)

    def to_json(self) -> dict:
        return {"name": self.name, "versions": sorted(self.versions, key=version_key),
                "sources": sorted(self.sources), "unit": self.unit,
                "range": [self.low, self.high] if self.low is not None else None}


def _verdict(a: Name, b: Name, together: set[str]) -> tuple[str, str | None, str]:
    """(status, confirmed by, why) of two names a section showed under one label."""
    if together:
        return "refused", None, "both shown in this section by ncu " + ", ".join(sorted(together))
    if a.unit and b.unit:
        if a.unit != b.unit:
            return "refused", None, f"units differ: {a.unit} and {b.unit}"
        return "confirmed", "unit", f"same unit: {a.unit}"
    if a.low is None or b.low is None:
        return "unconfirmed", None, "no recorded value of " + (a.name if a.low is None else b.name)
    assert a.high is not None and b.high is not None
    if "%" in (a.unit, b.unit) and not all(0 <= v <= 100 for v in (a.low, a.high, b.low, b.high)):
        return "refused", None, "a percentage against values outside 0..100"
    if a.low > b.high or b.low > a.high:
        return "refused", None, "value ranges do not overlap"
    return "confirmed", "range", "value ranges overlap (" + (a.unit or b.unit or "no unit") + \
        " recorded on one side only)"


def _first_version(name: Name) -> tuple[int, ...]:
    return min(version_key(v) for v in name.versions)


def build_map(seen: Iterable[Seen]) -> dict:
    """The map document: an entry for every two names one section shows under one label."""
    groups: dict[tuple[str, str], dict[str, Name]] = defaultdict(dict)
    in_section: dict[tuple[str, str], set[str]] = defaultdict(set)  # (section, name): versions
    sources: dict[str, str] = {}
    for item in seen:
        groups[(item.section, item.label)].setdefault(
            item.name, Name(item.name, set(), set())).add(item)
        in_section[(item.section, item.name)].add(item.version)
        sources[item.source] = item.version
    entries = []
    for (section, label), names in sorted(groups.items()):
        ordered = sorted(names.values(), key=lambda n: (_first_version(n), n.name))
        for i, a in enumerate(ordered):
            for b in ordered[i + 1:]:
                together = in_section[(section, a.name)] & in_section[(section, b.name)]
                status, by, why = _verdict(a, b, together)
                entries.append({"section": section, "label": label, "status": status,
                                "confirmed_by": by, "why": why, "a": a.to_json(),
                                "b": b.to_json()})
    return {"version": MAP_VERSION, "built_by": "python -m triage.compare.metric_map_build",
            "sources": [{"source": s, "ncu": v} for s, v in sorted(sources.items())],
            "entries": entries}


def map_text(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"
