"""The typed result of `triage top`: where an nsys run spent GPU time, and the ncu commands that
profile its top kernels next.

`compare.top` builds these once; `triage.views.top` words them; `TopResult.to_json()` writes
the `top --json` document that `schemas/top.schema.json` describes. Names are whole here (the
view clips them). A run with no kernels has `HostTime` (where the host's time went) where a
run with kernels has `KernelTime`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from triage.base.records import AsJson

JsonDict = dict[str, Any]
NO_KERNELS = "no kernel activity recorded"


@dataclass(frozen=True)
class RankedKernel(AsJson):
    """One kernel (all its launches) by total GPU time, with its share and the running total."""

    name: str | None
    short_name: str | None
    launches: int | None
    total_ns: float | None
    avg_ns: float | None
    median_ns: float | None
    share: float | None  # of all kernel time (0..1)
    cumulative: float | None  # of all kernel time, this kernel and those above it



@dataclass(frozen=True)
class Rest(AsJson):
    """The kernels below those listed, added up."""

    kernels: int
    total_ns: float
    share: float | None



@dataclass(frozen=True)
class Ranking:
    """Kernels by total GPU time; how few make up `tail_pct` % of it."""

    total_ns: float
    kernels: int
    top: tuple[RankedKernel, ...]
    rest: Rest
    kernels_for_tail_pct: int
    tail_pct: int

    def to_json(self) -> JsonDict:
        return {"total_ns": self.total_ns, "kernels": self.kernels,
                "top": [k.to_json() for k in self.top], "rest": self.rest.to_json(),
                "kernels_for_tail_pct": self.kernels_for_tail_pct, "tail_pct": self.tail_pct}


@dataclass(frozen=True)
class DeviceBusy(AsJson):
    """One GPU from its first kernel to its last: busy (any stream) and idle time."""

    device_id: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    idle_share: float | None



@dataclass(frozen=True)
class Gap(AsJson):
    """One idle gap between kernels on a GPU, and what the host did meanwhile: the CUDA API
    call and the NVTX range that cover most of it, the host time outside CUDA calls, the
    copies that ran; `cause` names the likely one."""

    device_id: int | None
    start_ns: int
    end_ns: int
    gap_ns: int
    before_kernel: str | None
    after_kernel: str | None
    api: str | None
    api_ns: int
    outside_api_ns: int
    nvtx: str | None
    nvtx_ns: int
    copy_ns: int
    cause: str



@dataclass(frozen=True)
class GpuIdle:
    """Per device busy vs idle; how many gaps between kernels, and the largest of them."""

    devices: tuple[DeviceBusy, ...]
    gaps: int
    gap_ns: int
    largest: tuple[Gap, ...]

    def to_json(self) -> JsonDict:
        return {"devices": [d.to_json() for d in self.devices], "gaps": self.gaps,
                "gap_ns": self.gap_ns, "largest": [g.to_json() for g in self.largest]}


@dataclass(frozen=True)
class CopyKind(AsJson):
    """Host<->device copies of one kind; `serialised`: those during which no kernel ran on
    their device; `exposed_ns`: their time not under a kernel."""

    kind: str
    count: int
    total_ns: int
    meaning: str  # what a copy of this kind running under a kernel means
    serialised: int
    serialised_ns: int
    exposed_ns: int
    serialised_bytes: int



@dataclass(frozen=True)
class Copy(AsJson):
    """One serialised host<->device copy."""

    kind: str
    bytes: int | None
    start_ns: int
    end_ns: int
    device_id: int | None
    stream_id: int | None



@dataclass(frozen=True)
class Copies:
    """Copies by kind, most exposed time first, and the longest serialised ones."""

    kinds: tuple[CopyKind, ...]
    largest: tuple[Copy, ...]

    def to_json(self) -> JsonDict:
        return {"kinds": [k.to_json() for k in self.kinds],
                "largest": [c.to_json() for c in self.largest]}


@dataclass(frozen=True)
class Nccl:
    """NCCL kernel time and how much of it ran while compute kernels ran on the same device;
    only `traced` (False) when the run has no NCCL kernels."""

    traced: bool
    kernels: int = 0
    nccl_ns: int = 0
    overlapped_ns: int = 0
    exposed_ns: int = 0
    overlap_share: float | None = None

    def to_json(self) -> JsonDict:
        return asdict(self) if self.traced else {"traced": False}


@dataclass(frozen=True)
class NvtxGpuTime(AsJson):
    """The ranges of one NVTX text: their wall time and the kernel time (all GPUs) inside."""

    domain: str | None
    text: str | None
    kind: str | None
    instances: int
    range_ns: int
    gpu_ns: int
    gpu_share: float | None



@dataclass(frozen=True)
class NcuSuggestion:
    """The ncu command that profiles one typical launch of a ranked kernel: launch `launch` of
    its `launches` (0-based), `skip` launches of kernels of its function name before it; with
    an NVTX range that held it, the command that profiles it inside that range."""

    kernel: str | None
    function: str
    launch: int
    launches: int
    skip: int
    from_run: str
    notes: tuple[str, ...]
    command: str
    capture_command: str  # the same, archived by `triage capture` and linked to the run
    nvtx_range: str | None = None  # an --nvtx-include expression
    nvtx_command: str | None = None

    def to_json(self) -> JsonDict:
        out = {"kernel": self.kernel, "function": self.function, "launch": self.launch,
               "launches": self.launches, "skip": self.skip, "from_run": self.from_run,
               "notes": list(self.notes), "command": self.command,
               "capture_command": self.capture_command}
        if self.nvtx_range is not None:
            out |= {"nvtx_range": self.nvtx_range, "nvtx_command": self.nvtx_command}
        return out


@dataclass(frozen=True)
class KernelTime:
    """What `top` finds in a run with kernels."""

    ranking: Ranking
    gpu: GpuIdle
    copies: Copies
    nccl: Nccl
    nvtx: tuple[NvtxGpuTime, ...]
    next: tuple[NcuSuggestion, ...]

    def to_json(self) -> JsonDict:
        return {"ranking": self.ranking.to_json(), "gpu": self.gpu.to_json(),
                "copies": self.copies.to_json(), "nccl": self.nccl.to_json(),
                "nvtx": [r.to_json() for r in self.nvtx],
                "next": [s.to_json() for s in self.next]}


@dataclass(frozen=True)
class MemopKind(AsJson):
    """One kind of memory operation, as nsys summarises them (a memop_summary row)."""

    op: str | None
    kind: str | None
    count: int | None
    total_ns: int | None
    avg_ns: float | None
    median_ns: float | None
    min_ns: int | None
    max_ns: int | None
    total_bytes: int | None
    avg_bytes: float | None
    min_bytes: int | None
    max_bytes: int | None
    share: float | None



@dataclass(frozen=True)
class NvtxTotal(AsJson):
    """The ranges of one NVTX text, by total time (an nvtx_summary row)."""

    text: str | None
    domain: str | None
    kind: str | None
    instances: int | None
    total_ns: int | None



@dataclass(frozen=True)
class CallTotal:
    """The calls of one OS runtime function (`api` None) or CUDA API function (`api`: runtime
    or driver), by total time."""

    name: str | None
    calls: int | None
    total_ns: int | None
    api: str | None = None

    def to_json(self) -> JsonDict:
        calls = {"name": self.name, "calls": self.calls, "total_ns": self.total_ns}
        return calls if self.api is None else {"api": self.api, **calls}


@dataclass(frozen=True)
class HostTime:
    """What `top` finds in a run with no kernels (a CPU program, or a capture that missed
    --trace=cuda): memory operations, and where the host's time went."""

    memops: tuple[MemopKind, ...]
    nvtx: tuple[NvtxTotal, ...]
    osrt: tuple[CallTotal, ...]
    api: tuple[CallTotal, ...]
    cuda_traced: bool | None = None  # the capture traced CUDA (recorded or proved); None: unknown

    def to_json(self) -> JsonDict:
        return {"message": NO_KERNELS, "ranking": None, "cuda_traced": self.cuda_traced,
                "memops": [m.to_json() for m in self.memops],
                "cpu": {"nvtx": [r.to_json() for r in self.nvtx],
                        "osrt": [r.to_json() for r in self.osrt],
                        "api": [r.to_json() for r in self.api]},
                "next": []}


@dataclass(frozen=True)
class TopResult:
    """`triage top RUN` (schemas/top.schema.json); `settings` are top's own numbers (rows
    listed, warm-up launches, what counts as typical), not the profiler's."""

    run: str
    tool_version: str | None
    application: tuple[str, ...] | None
    settings: Mapping[str, int]
    found: KernelTime | HostTime

    def to_json(self) -> JsonDict:
        return {"run": self.run, "tool_version": self.tool_version,
                "application": list(self.application) if self.application is not None
                else None, "settings": dict(self.settings),
                "kernel_activity": isinstance(self.found, KernelTime), **self.found.to_json()}
