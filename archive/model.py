"""What a run is, as typed values: built once from a stored manifest and its annotations.

Every reader of a run (drift, catalog, show, report, explain, top, the CLI) reads these frozen
dataclasses instead of digging through the manifest dict: a missing or null field becomes None
(or an empty tuple) here, in one place, so no reader needs its own `(x or {}).get(...)` chain.
The manifest dict itself stays available as `RunRecord.manifest` for the JSON views, which print
it as stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from triage.base.records import EMPTY, mapping_of



def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _dicts(value: object) -> list[Mapping[str, Any]]:
    """The dict entries of a list field (a hostile or damaged manifest may hold anything)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: object) -> str | None:
    """A string field that views slice or join, None when absent or not a string."""
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    """An integer field, None when absent or not an integer (a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Gpu:
    """One GPU as the report (or nvidia-smi, for a failed capture) recorded it."""

    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    max_sm_clock_khz: float | None = None
    max_mem_clock_khz: float | None = None
    memory_bytes: int | None = None
    uuid: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Gpu:
        return cls(raw.get("name"), raw.get("compute_capability"), raw.get("sm_count"),
                   raw.get("max_sm_clock_khz"), raw.get("max_mem_clock_khz"),
                   raw.get("memory_bytes"), raw.get("uuid"))


@dataclass(frozen=True)
class Host:
    """The machine the profiler ran on."""

    name: str | None = None
    os: str | None = None
    cpu: str | None = None
    arch: str | None = None
    platform: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Host:
        return cls(raw.get("name"), raw.get("os"), raw.get("cpu"), raw.get("arch"),
                   raw.get("platform"))


@dataclass(frozen=True)
class Environment:
    """Driver, CUDA, GPUs and host of a capture; `variables` are already redacted."""

    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    host: Host = Host()
    working_directory: str | None = None
    variables: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    # "library": cuda_version is the installed CUDA driver library's, no GPU driver was loaded
    cuda_version_of: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Environment:
        return cls(raw.get("driver_version"), raw.get("cuda_version"),
                   tuple(Gpu.from_dict(g) for g in _dicts(raw.get("gpus"))),
                   Host.from_dict(mapping_of(raw.get("host"))), raw.get("working_directory"),
                   mapping_of(raw.get("variables")), raw.get("cuda_version_of"))

    @property
    def gpu(self) -> Gpu | None:
        """The first GPU: the one drift and the catalog compare (None when none was recorded)."""
        return self.gpus[0] if self.gpus else None


# Where a setting's value may come from and still be a record of what ran: the report said
# it, its command line said it, or the data proves it. A tool's documented default is one only
# where the command line was recorded (the option was not given, so the default applied).
RECORDED_SOURCES = ("report", "command", "derived")


@dataclass(frozen=True)
class Setting:
    """One profiler setting in effect and where its value came from: `report` (the report
    recorded it), `command` (parsed from the recorded command line), `derived` (what the
    report's data proves) or `default` (the tool's default for that version, which nothing
    recorded); source None when nothing said."""

    value: Any
    source: str | None = None


@dataclass(frozen=True)
class ClockEvidence:
    """Whether an ncu run's kernels ran with locked clocks, from the report itself."""

    results: int | None = None
    results_with_status: int | None = None
    requested_lock: int | None = None
    executed_locked: int | None = None
    measured_sm_clock_hz: float | None = None
    max_sm_clock_hz: float | None = None
    measured_to_max: float | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ClockEvidence:
        return cls(raw.get("results"), raw.get("results_with_status"),
                   raw.get("requested_lock"), raw.get("executed_locked"),
                   raw.get("measured_sm_clock_hz"), raw.get("max_sm_clock_hz"),
                   raw.get("measured_to_max"))

    @property
    def recorded(self) -> bool:
        return any(v is not None for v in (self.results_with_status, self.measured_sm_clock_hz,
                                           self.measured_to_max))


@dataclass(frozen=True)
class ReportRef:
    """One raw report blob of a run."""

    name: str
    sha256: str
    bytes: int
    format: str
    tool_version: str | None = None
    created: str | None = None
    host: str | None = None
    rank: int | None = None
    process: Mapping[str, Any] | None = None
    export: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ReportRef:
        return cls(str(raw.get("name", "")), str(raw.get("sha256", "")),
                   _int(raw.get("bytes")) or 0, str(raw.get("format", "")),
                   raw.get("tool_version"), raw.get("created"), raw.get("host"),
                   raw.get("rank"), raw.get("process"), raw.get("export"))


@dataclass(frozen=True)
class TableRef:
    """A stored Parquet table of a run: its object hash, rows and bytes."""

    sha256: str
    rows: int
    bytes: int

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TableRef:
        return cls(str(raw.get("sha256", "")), _int(raw.get("rows")) or 0,
                   _int(raw.get("bytes")) or 0)


@dataclass(frozen=True)
class GitPatch:
    """The dirty tree's patch a capture stored as a blob (`archive/captured.py`): redacted, so
    its hash is not `diff_sha256`; `redactions` values were replaced and the binary changes
    of `binary_left_out` left out."""

    sha256: str
    bytes: int
    redactions: int = 0
    binary_left_out: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: object) -> GitPatch | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("sha256"), str):
            return None
        return cls(raw["sha256"], _int(raw.get("bytes")) or 0, _int(raw.get("redactions")) or 0,
                   _strings(raw.get("binary_left_out")))


@dataclass(frozen=True)
class GitState:
    """The source tree a capture ran in (`capture/git_state.py` records it), with its stored
    patch or the note saying why there is none; `patch_recorded` is False for captures made
    before patches were stored."""

    repository: str | None = None
    reason: str | None = None
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    untracked_count: int | None = None
    remote_url: str | None = None
    patch: GitPatch | None = None
    patch_note: str | None = None
    patch_recorded: bool = False

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> GitState:
        return cls(raw.get("repository"), raw.get("reason"), _text(raw.get("commit")),
                   raw.get("branch"), raw.get("dirty"), raw.get("untracked_count"),
                   _text(mapping_of(raw.get("remote")).get("url")),
                   GitPatch.from_dict(raw.get("patch")), _text(raw.get("patch_note")),
                   "patch" in raw)

    @property
    def why_no_patch(self) -> str | None:
        """Why no stored patch rebuilds this tree (None: one does); `show` says it beside the
        git state and `show --patch` in its error, in the same words."""
        if self.patch is not None:
            return None
        if not self.repository:
            return self.reason or "no git state was recorded"
        if self.patch_note:
            return self.patch_note
        if self.dirty is False:
            return f"the tree was clean: commit {(self.commit or '?')[:12]} is the whole source"
        if not self.patch_recorded:
            return "captured before triage stored patches"
        return "git diff HEAD was empty"


@dataclass(frozen=True)
class StoredNcuListing:
    """Where a capture's `ncu --list-sections`/`--list-sets` output is stored, as its run
    records it (the listing itself, as captured: capture.session.CapturedNcuListing)."""

    blob: str | None = None
    count: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class CaptureInfo:
    """How `triage capture` ran the profiler (absent for `triage archive` runs)."""

    argv: tuple[str, ...] = ()
    cwd: str | None = None
    exit_code: int | None = None
    started: str | None = None
    ended: str | None = None
    seconds: float | None = None
    tool_version: str | None = None
    git: GitState | None = None
    ncu_sections: StoredNcuListing | None = None
    ncu_sets: StoredNcuListing | None = None
    warnings: tuple[str, ...] = ()
    group: str | None = None
    rank: int | None = None
    from_run: str | None = None
    nsys_source: str | None = None
    machine: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    rerun_of: str | None = None  # the run `triage rerun` re-executed to make this one
    environ: Mapping[str, Any] = field(default_factory=lambda: EMPTY)  # redacted
    shell: bool = False
    status: str | None = None  # `exited N`, the interrupting signal, or `timed out after N s`
    series: str | None = None  # a failed try of `capture --repeat`: the label it would have had
    investigation: str | None = None  # `capture`/`bench --investigation NAME`, or the --from run's

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CaptureInfo:
        git = raw.get("git")
        lists = mapping_of(raw.get("ncu_lists"))
        return cls(_strings(raw.get("argv")), raw.get("cwd"), raw.get("exit_code"),
                   raw.get("started"), raw.get("ended"), raw.get("seconds"),
                   raw.get("tool_version"),
                   GitState.from_dict(git) if isinstance(git, dict) else None,
                   _listing(lists.get("sections")), _listing(lists.get("sets")),
                   _strings(raw.get("warnings")), raw.get("group"), raw.get("rank"),
                   raw.get("from_run"), raw.get("nsys_source"), mapping_of(raw.get("machine")),
                   _text(raw.get("rerun_of")), mapping_of(raw.get("environment")),
                   bool(raw.get("shell")), _text(raw.get("status")), _text(raw.get("series")),
                   _text(raw.get("investigation")))


def _listing(raw: object) -> StoredNcuListing | None:
    if not isinstance(raw, dict):
        return None
    return StoredNcuListing(raw.get("blob"), raw.get("count"), raw.get("error"))


@dataclass(frozen=True)
class Note:
    """A note added to a run (annotations are the only part of a run that grows)."""

    time: str
    text: str


@dataclass(frozen=True)
class RunRecord:
    """One archived run: its manifest read once into typed values, with id, labels and notes.

    `manifest` is the stored document as it is (what `show --json` prints, with id, archive
    time, labels and notes added by `as_json`)."""

    id: str
    tool: str
    tool_version: str | None
    created: str | None
    source: str
    command: str | None
    application_argv: tuple[str, ...] | None
    environment: Environment
    settings: Mapping[str, Setting]
    clock: ClockEvidence
    versions: Mapping[str, str | None]
    reports: tuple[ReportRef, ...]
    tables: Mapping[str, TableRef]
    kernels: int | None
    notices: tuple[str, ...]
    capture: CaptureInfo | None
    redact_patterns: tuple[str, ...]
    manifest: Mapping[str, Any] = field(repr=False)
    archived: str | None = None
    labels: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    arrived: str | None = None  # how it came from another store ("import from B"); None: here

    @classmethod
    def from_manifest(cls, run_id: str, manifest: Mapping[str, Any],
                      annotations: Mapping[str, Any] = EMPTY,
                      labels: tuple[str, ...] = ()) -> RunRecord:
        """The one place a manifest dict is read field by field."""
        application = manifest.get("application")
        capture = manifest.get("capture")
        return cls(
            id=run_id, tool=str(manifest.get("tool")), tool_version=manifest.get("tool_version"),
            created=manifest.get("created"), source=str(manifest.get("source") or "archive"),
            command=manifest.get("command"),
            application_argv=_strings(application.get("argv"))
            if isinstance(application, dict) and application.get("argv") else None,
            environment=Environment.from_dict(mapping_of(manifest.get("environment"))),
            settings=_settings(mapping_of(manifest.get("settings")),
                               mapping_of(manifest.get("settings_source"))),
            clock=ClockEvidence.from_dict(mapping_of(mapping_of(manifest.get("evidence"))
                                                   .get("clock"))),
            versions=mapping_of(manifest.get("versions")),
            reports=tuple(ReportRef.from_dict(r) for r in _dicts(manifest.get("reports"))),
            tables=MappingProxyType({str(name): TableRef.from_dict(ref) for name, ref
                                     in mapping_of(manifest.get("tables")).items()
                                     if isinstance(ref, dict)}),
            kernels=_int(manifest.get("kernels")),
            notices=_strings(manifest.get("notices")),
            capture=CaptureInfo.from_dict(capture) if isinstance(capture, dict) and capture
            else None,
            redact_patterns=_strings(manifest.get("redact_patterns")),
            manifest=manifest, archived=_text(annotations.get("archived")), labels=tuple(labels),
            notes=tuple(Note(str(n.get("time", "")), str(n.get("text", "")))
                        for n in _dicts(annotations.get("notes"))))

    @property
    def gpu(self) -> Gpu | None:
        return self.environment.gpu

    @property
    def gpu_name(self) -> str | None:
        """The first GPU's name, as listings show it (None when no GPU was recorded)."""
        return self.gpu.name if self.gpu is not None else None

    @property
    def gpu_absent(self) -> bool:
        """Whether the run recorded that there was no GPU: the report lists none and the
        capture's machine facts say nvidia-smi listed none, or was not there to run (no
        driver installed). An archived report listing no GPU says nothing either way."""
        if self.gpu is not None or self.capture is None:
            return False
        seen = mapping_of(mapping_of(self.capture.machine.get("gpu")).get("gpus"))
        reason = seen.get("reason")
        return seen.get("value") == [] or (seen.get("value") is None and isinstance(reason, str)
                                           and reason.startswith("nvidia-smi not found"))

    @property
    def failed_capture(self) -> bool:
        """A capture attempt that produced no report: recorded, but nothing to compare."""
        return self.source == "capture-failed"

    def setting(self, name: str) -> Any:
        """A setting's value as it stands in the record, a tool's default included (None when
        not even that is known): what `show` lists, never what a comparison grades."""
        found = self.settings.get(name)
        return found.value if found is not None else None

    def is_recorded(self, name: str) -> bool:
        """Whether the run records or proves a setting: the report or its command line gave it,
        or the command line was recorded without it (the tool's default then applied)."""
        found = self.settings.get(name)
        return found is not None and (found.source in RECORDED_SOURCES or (
            found.source == "default" and self.command is not None))

    def recorded_setting(self, name: str) -> Any:
        """A setting's value where the run records or proves it; None where only the tool's
        documented default stands for it (no command line, no report field): an assumption is
        no record of what ran, so two runs that both assume `--cache-control all` are not known
        to have flushed alike."""
        return self.setting(name) if self.is_recorded(name) else None

    def assumed_setting(self, name: str) -> Any:
        """The tool's documented default where that is all that stands for a setting."""
        return None if self.is_recorded(name) else self.setting(name)

    def as_json(self) -> dict[str, Any]:
        """What `triage show --json` prints: the manifest plus id, archive time, labels, notes."""
        return {"id": self.id, **self.manifest, "archived": self.archived,
                "labels": list(self.labels),
                "notes": [{"time": n.time, "text": n.text} for n in self.notes],
                "arrived": self.arrived}


def _settings(values: Mapping[str, Any], sources: Mapping[str, Any]) -> Mapping[str, Setting]:
    return MappingProxyType({name: Setting(value, sources.get(name))
                             for name, value in values.items()})


@dataclass(frozen=True)
class ArchiveResult:
    """The outcome of archiving (or capturing) one run: its record, whether it is new, and
    whether objects of a run archived before were missing or damaged and were rewritten from
    the reports (`repaired`)."""

    record: RunRecord
    new: bool
    repaired: bool = False

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def manifest(self) -> Mapping[str, Any]:
        return self.record.manifest

    def to_json(self) -> dict[str, Any]:
        """One run as `triage archive --json` and `capture --json` print it
        (schemas/archive.schema.json)."""
        record = self.record
        return {"id": record.id, "new": self.new, "repaired": self.repaired, "tool": record.tool,
                "tool_version": record.tool_version, "gpu": record.gpu_name,
                "kernels": record.kernels, "reports": [r.name for r in record.reports],
                "notices": list(record.notices)}


@dataclass(frozen=True)
class Refusal:
    """A report an archive of several set aside, and why (the error's one-line message)."""

    path: str
    message: str


@dataclass(frozen=True)
class ArchiveBatch:
    """`triage archive REPORT...`: the runs archived, in the order given, and the reports
    refused (each named with its reason) while the others went on."""

    results: list[ArchiveResult]
    refused: list[Refusal]
