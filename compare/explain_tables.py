"""What each step of `triage explain` reads, and the cut-offs it judges by, as data.

Kept apart from the step logic (`explain`) so that the tables read as a whole and a change of
an ncu metric name or a threshold touches nothing else. METRICS lists each metric name newest
first with its older fallbacks (names differ across ncu versions); THRESHOLDS holds every
number a judgement uses, with why; STALLS, UNITS, LIMITERS and CONCLUSION_RULES are tables read
top to bottom, first match wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


# -- what each step reads ----------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One quantity a step reads: the section that collects it, its names newest first."""

    section: str
    names: tuple[str, ...]


_SOL, _MWA, _TABLES = "SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables"
_ROOF, _OCC, _LAUNCH = "SpeedOfLight_RooflineChart", "Occupancy", "LaunchStats"
_SCHED, _DIST = "SchedulerStats", "WorkloadDistribution"

# Time units ncu reports use for gpu__time_duration; none given means ns.
NS_PER_UNIT = {"": 1, "ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6,
               "msecond": 1e6, "s": 1e9, "second": 1e9}

METRICS: dict[str, Metric] = {
    # step 1 (the *_sol_pct names are ncu 2019, PerfWorks era)
    "duration": Metric(_SOL, ("gpu__time_duration.sum", "gpu__time_duration")),
    "sm_pct": Metric(_SOL, ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__sol_pct")),
    "mem_pct": Metric(_SOL, ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                             "gpu__compute_memory_sol_pct")),
    "dram_pct": Metric(_SOL, ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                              "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                              "fbpa__sol_pct")),
    "l2_pct": Metric(_SOL, ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "ltc__sol_pct")),
    "l1_pct": Metric(_SOL, ("l1tex__throughput.avg.pct_of_peak_sustained_active", "tex__sol_pct")),
    # step 2
    "l1_hit": Metric(_MWA, ("l1tex__t_sector_hit_rate.pct",)),
    "l2_hit": Metric(_MWA, ("lts__t_sector_hit_rate.pct",)),
    "ld_bytes_per_sector": Metric(_TABLES, (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",)),
    "ld_sector_use_pct": Metric(_TABLES, (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",)),
    "st_bytes_per_sector": Metric(_TABLES, (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",)),
    "st_sector_use_pct": Metric(_TABLES, (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",)),
    "ld_sectors_per_request": Metric(_TABLES, (
        "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",)),
    "ld_sectors": Metric(_TABLES, ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",)),
    "ld_requests": Metric(_TABLES, ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",)),
    "dram_bytes_per_s": Metric(_ROOF, ("dram__bytes.sum.per_second",)),
    "smsp_hz": Metric(_ROOF, ("smsp__cycles_elapsed.avg.per_second",)),
    # step 3 (sm__active_warps_avg_per_active_cycle_pct is ncu 2019)
    "theoretical_occ": Metric(_OCC, ("sm__maximum_warps_per_active_cycle_pct",)),
    "achieved_occ": Metric(_OCC, ("sm__warps_active.avg.pct_of_peak_sustained_active",
                                  "sm__active_warps_avg_per_active_cycle_pct")),
    "limit_registers": Metric(_OCC, ("launch__occupancy_limit_registers",)),
    "limit_shared": Metric(_OCC, ("launch__occupancy_limit_shared_mem",)),
    "limit_warps": Metric(_OCC, ("launch__occupancy_limit_warps",)),
    "limit_blocks": Metric(_OCC, ("launch__occupancy_limit_blocks",)),
    "limit_barriers": Metric(_OCC, ("launch__occupancy_limit_barriers",)),
    "waves": Metric(_LAUNCH, ("launch__waves_per_multiprocessor",)),
    "grid_size": Metric(_LAUNCH, ("launch__grid_size",)),
    "block_size": Metric(_LAUNCH, ("launch__block_size",)),
    "registers": Metric(_LAUNCH, ("launch__registers_per_thread",)),
    "shared_static": Metric(_LAUNCH, ("launch__shared_mem_per_block_static",)),
    "shared_dynamic": Metric(_LAUNCH, ("launch__shared_mem_per_block_dynamic",)),
    "sm_count": Metric(_LAUNCH, ("launch__sm_count", "device__attribute_multiprocessor_count")),
    "sm_active_avg": Metric(_DIST, ("sm__cycles_active.avg",)),
    "sm_active_max": Metric(_DIST, ("sm__cycles_active.max",)),
    # step 4
    "no_issue_pct": Metric(_SCHED, ("smsp__issue_inst0.avg.pct_of_peak_sustained_active",)),
    "issue_pct": Metric(_SCHED, ("smsp__issue_active.avg.pct_of_peak_sustained_active",)),
    "eligible_warps": Metric(_SCHED, ("smsp__warps_eligible.avg.per_cycle_active",)),
    "active_warps": Metric(_SCHED, ("smsp__warps_active.avg.per_cycle_active",)),
}

# FLOPs per cycle for the arithmetic intensity (as ncu's roofline counts them): FMA counts twice.
FLOP_METRICS = (("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed", 2),
                ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed", 1),
                ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed", 1),
                ("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed", 2),
                ("smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed", 1),
                ("smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed", 1))

# Stall reasons, newest naming first: (name pattern with the reason as group 1, section, measure).
STALL_METRICS = (
    (r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$", "WarpStateStats",
     "warps per issued instruction"),
    (r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$", "WarpStateStats",
     "% of active warps"),
    (r"^smsp__pcsamp_warps_issue_stalled_(?!\w*_not_issued$)(\w+)$", "SourceCounters",
     "sampled warps"),
)


# -- cut-offs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A cut-off with its unit and why it is where it is: `triage explain --json` lists them."""

    value: float
    unit: str
    why: str


THRESHOLDS: dict[str, Threshold] = {
    "busy_pct": Threshold(60, "%", "a unit at or above this share of peak is busy; compute and "
                          "memory both below it means latency-bound (ncu SOLBottleneck, "
                          "sections/SpeedOfLight.py: latency_bound_threshold 60)"),
    "near_peak_pct": Threshold(80, "%", "compute or memory at or above this is near peak: the "
                               "higher side is the limit, a tie is compute, and only less work "
                               "on its busiest unit helps (ncu SOLBottleneck: "
                               "no_bound_threshold 80)"),
    "balanced_pp": Threshold(10, "points", "below near peak, compute and memory closer than this "
                             "are balanced, this far apart or more the higher side is the limit "
                             "(ncu SOLBottleneck: balanced_threshold 10)"),
    "compute_low_pct": Threshold(30, "%", "compute below this while memory is busy: little work "
                                 "per byte moved (busy is not useful)"),
    "sector_use_pct": Threshold(75, "%", "global loads or stores using less than this share of "
                                "each 32-byte sector waste over a quarter of the traffic: "
                                "uncoalesced or strided access (ncu flags any waste)"),
    "occupancy_gap_pp": Threshold(10, "points", "achieved occupancy this far below theoretical "
                                  "needs a cause (ncu AchievedOccupancy: 10)"),
    "low_occupancy_pct": Threshold(50, "%", "theoretical occupancy below this leaves few warps "
                                   "to hide latency"),
    "small_grid_waves": Threshold(1, "waves", "fewer waves than this leave SMs without work"),
    "tail_pct": Threshold(20, "%", "share of SM slots left empty by a partial last wave, "
                          "averaged over all waves, from which the tail matters"),
    "imbalance_pct": Threshold(20, "%", "busiest SM active this much longer than the average SM"),
    "issue_idle_pct": Threshold(40, "%", "cycles with no instruction issued at or above this: "
                                "issue slots idle, stalls matter (ncu IssueSlotUtilization: "
                                "issue below 60%)"),
    "top_stalls": Threshold(3, "reasons", "stall reasons listed (selected, not_selected left out)"),
}


def limit(name: str) -> float:
    return THRESHOLDS[name].value


# -- classification tables ---------------------------------------------------------------------

# Stall reason -> (path, what the warp waits for). Paths: memory (memory latency), sync
# (synchronisation), serial (serialisation in a shared unit), compute, latency (instruction).
STALLS: dict[str, tuple[str | None, str]] = {
    "long_scoreboard": ("memory", "waits for L1TEX data (global, local, texture)"),
    "lg_throttle": ("memory", "local/global memory instruction queue is full"),
    "tex_throttle": ("memory", "texture/L1TEX queue is full"),
    "drain": ("memory", "waits for stores to drain at exit"),
    "barrier": ("sync", "waits at a block barrier (__syncthreads) for slower warps"),
    "membar": ("sync", "waits at a memory fence"),
    "sleeping": ("sync", "sleeps (nanosleep, cooperative groups)"),
    "mio_throttle": ("serial", "MIO queue full: shared memory, atomics, special math"),
    "short_scoreboard": ("serial", "waits for MIO results: shared memory (bank conflicts), "
                         "special math"),
    "branch_resolving": ("serial", "waits for branch targets: divergence"),
    "math_pipe_throttle": ("compute", "an execution pipe is saturated"),
    "wait": ("latency", "fixed-latency dependency between instructions"),
    "dispatch_stall": ("latency", "dispatcher could not issue"),
    "no_instruction": ("latency", "instruction not fetched (instruction cache miss)"),
    "imc_miss": ("latency", "constant cache miss"),
    "misc": ("latency", "miscellaneous"),
    "selected": (None, "issuing: not a stall"),
    "not_selected": (None, "eligible, another warp issued: not a stall"),
}

# The unit behind a breakdown metric of SpeedOfLight, by name prefix, first match: (prefix, unit,
# the memory level its traffic goes to). Which side a unit is on is not here: ncu's SOLBottleneck
# counts every metric of breakdown:sm__throughput as compute, the LSU and MIO pipes included
# (they issue memory instructions, so their level is L1), and only
# breakdown:gpu__compute_memory_throughput as memory (see explain_sol).
UNITS = (("sm__inst_executed_pipe_lsu", "LSU pipe (load/store instructions)", "L1"),
         ("sm__mio", "MIO (shared memory, special-function queue)", "L1"),
         ("l1tex__", "L1/TEX cache", "L1"), ("lts__", "L2 cache", "L2"),
         ("ltc__", "L2 cache", "L2"), ("dram__", "DRAM", "DRAM"), ("fbpa__", "DRAM", "DRAM"),
         ("fbp__", "DRAM", "DRAM"), ("idc__", "constant cache", None),
         ("sm__pipe_fp64", "FP64 pipe", None),
         ("sm__pipe_tensor", "tensor pipe", None),
         ("sm__pipe_fma", "FMA pipe", None),
         ("sm__pipe_alu", "ALU pipe", None),
         ("sm__inst_executed_pipe_xu", "XU pipe (special functions)", None),
         ("sm__", "SM instruction issue", None),
         ("", "memory system", None))

# Occupancy limiter metric -> what it means, and the launch value that drives it.
LIMITERS = (("limit_registers", "registers", "registers"),
            ("limit_shared", "shared memory", "shared_static"),
            ("limit_warps", "warps per block (block size)", "block_size"),
            ("limit_blocks", "blocks per SM (small blocks)", "block_size"),
            ("limit_barriers", "barriers", None))


# -- conclusion --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConclusionRule:
    """One row of the conclusion table: the first row whose `when` holds decides."""

    label: str
    cause: str
    when: Callable[[dict], bool]
    uses: tuple[str, ...]  # tags of the findings quoted as evidence
    inspect: str
    fix: str


def _bound(kind: str) -> Callable[[dict], bool]:
    return lambda facts: facts.get("bound") == kind


def _latency_with(key: str, test) -> Callable[[dict], bool]:
    return lambda facts: facts.get("bound") == "latency" and test(facts.get(key))


CONCLUSION_RULES: list[ConclusionRule] = [
    ConclusionRule("memory-bound", "uncoalesced access",
                   lambda f: _bound("memory")(f) and bool(f.get("partial_sectors")),
                   ("sol", "sectors"),
                   "Source Counters: uncoalesced global accesses by source line",
                   "coalesce: consecutive threads read consecutive addresses (structure of "
                   "arrays, transpose through shared memory)"),
    ConclusionRule("memory-bound", "load/store traffic in L1",
                   lambda f: _bound("memory")(f) and f.get("level") == "L1", ("sol", "stall"),
                   "Memory Workload Analysis tables: L1 requests per instruction; Source "
                   "Counters: the load lines",
                   "load each value once per block: tile into shared memory or registers, wider "
                   "(vectorised) loads, fewer memory instructions"),
    ConclusionRule("memory-bound", "memory traffic", _bound("memory"), ("sol", "busy"),
                   "Memory Workload Analysis: which level (L1, L2, DRAM) is busiest and how many "
                   "bytes each request moves",
                   "move fewer bytes: reuse through shared-memory or register tiling, fuse "
                   "kernels, smaller data types"),
    ConclusionRule("compute-bound", "memory instructions",
                   lambda f: _bound("compute")(f) and f.get("level") == "L1", ("sol", "stall"),
                   "Compute Workload Analysis: the LSU and MIO pipes; Memory Workload Analysis "
                   "tables: L1 requests per instruction; Source Counters: the load lines",
                   "issue fewer memory instructions: load each value once per block (tile into "
                   "shared memory or registers), wider (vectorised) loads"),
    ConclusionRule("compute-bound", "busy pipe", _bound("compute"), ("sol",),
                   "Compute Workload Analysis: the busiest pipeline",
                   "fewer or cheaper instructions: FMA or tensor cores, no redundant math, lower "
                   "precision where allowed"),
    ConclusionRule("balanced", "compute and memory", _bound("balanced"), ("sol",),
                   "both Compute and Memory Workload Analysis",
                   "reduce both: an algorithmic change, or fusion that removes work and traffic"),
    ConclusionRule("latency-bound", "grid too small", _latency_with("small_grid", bool),
                   ("sol", "waves"), "Launch Statistics: grid size against the SM count",
                   "launch more blocks (smaller blocks, more work items), or run independent "
                   "kernels concurrently in streams"),
    ConclusionRule("sync/serialisation-bound", "synchronisation",
                   _latency_with("stall_path", lambda p: p == "sync"), ("sol", "stall"),
                   "Source Counters: the barrier or fence lines where warps wait",
                   "even out the work of the warps in a block, fewer __syncthreads, warp-level "
                   "primitives instead of block barriers"),
    ConclusionRule("sync/serialisation-bound", "serialisation",
                   _latency_with("stall_path", lambda p: p == "serial"), ("sol", "stall"),
                   "Source Counters: shared-memory bank conflicts, atomics, divergent branches",
                   "pad shared arrays against bank conflicts, spread atomics (per-warp partial "
                   "results), make branches uniform per warp"),
    ConclusionRule("latency-bound", "memory latency",
                   _latency_with("stall_path", lambda p: p == "memory"), ("sol", "stall"),
                   "Warp State Statistics and Source Counters: the loads warps wait on",
                   "more independent loads in flight: raise occupancy or ILP (several elements "
                   "per thread, unrolling), prefetch into shared memory"),
    ConclusionRule("latency-bound", "low occupancy",
                   _latency_with("theoretical", lambda t: t is not None and t < limit(
                       "low_occupancy_pct")), ("sol", "limiter"),
                   "Occupancy: the limiter (registers, shared memory, block size)",
                   "raise occupancy: fewer registers (__launch_bounds__), less shared memory per "
                   "block, another block size"),
    ConclusionRule("latency-bound", "latency", _bound("latency"), ("sol", "issue", "gap"),
                   "Scheduler and Warp State Statistics (--section SchedulerStats --section "
                   "WarpStateStats)",
                   "more parallelism per SM: more warps or more independent instructions"),
]


LABELS = tuple(dict.fromkeys(rule.label for rule in CONCLUSION_RULES))
