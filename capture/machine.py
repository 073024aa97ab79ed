"""Facts about the machine a GPU profile was taken on, recorded at capture time.

A capture on a laptop without a GPU, in a container without nvidia-smi, or under a launcher this
module has never heard of must still produce a manifest, so no helper here raises because a tool
is missing or its output is odd. Every fact is a value, or null with the reason:

    {"value": "535.54.03", "reason": None}
    {"value": None, "reason": "nvidia-smi not found on PATH"}

Plain values (not facts) are used only where the answer cannot be unknown: whether we are root,
environment variables that are set. GPU facts come from nvidia-smi, read in `nvsmi` with this
module's fact helpers and probe runner.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from triage.capture.process_tree import run_ended

FACTS_VERSION = 1
PYTHON_TIMEOUT_S = 10
NVIDIA_PARAMS = "/proc/driver/nvidia/params"
ADMIN_ONLY_ADVICE = ("GPU performance counters are admin-only (RmProfilingAdminOnly: 1): run "
                     "ncu as root, or load the nvidia module with "
                     "NVreg_RestrictProfilingToAdminUsers=0")
DCGM_ADVICE = ("nv-hostengine (DCGM) may hold the GPU profiling counters; pause it with "
               "`dcgmi profile --pause` before profiling and `dcgmi profile --resume` after")

SCHEDULER_VARIABLES = (
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_SIZE", "LOCAL_RANK", "RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID",
)
SCHEDULERS = {"SLURM_JOB_ID": "slurm", "PBS_JOBID": "pbs", "LSB_JOBID": "lsf",
              "FLUX_JOB_ID": "flux"}
# The one rank table (`rank_of` and report names tagged by rank read it): innermost launcher
# first, because under `srun torchrun` RANK is the worker's and SLURM_PROCID only its task's.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK",
                  "SLURM_PROCID")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID")
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                        "SLURM_NTASKS")
CONTAINER_FILES = ("/.dockerenv", "/run/.containerenv")
CONTAINER_VARIABLES = ("KUBERNETES_SERVICE_HOST", "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER",
                       "container")
CGROUP_WORDS = ("docker", "kubepods", "containerd", "libpod", "lxc", "crio")

# Distribution names per framework, first installed wins: nightlies and CUDA-specific wheels
# are published under other names.
FRAMEWORKS = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton"),
    "jax": ("jax",),
    "jaxlib": ("jaxlib",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"),
}
_VERSIONS_SCRIPT = """\
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]   # a json.py in the cwd must not win
import json
from importlib import metadata
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except Exception:
        pass
print(json.dumps(found))
"""
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?$")
NO_PYTHON = "no python in the command line"


def known(value) -> dict:
    return {"value": value, "reason": None}


def unknown(reason: str) -> dict:
    return {"value": None, "reason": reason}


class Probe(NamedTuple):
    stdout: str | None
    reason: str | None
    exited: bool                # the tool started and exited, even with a failure status


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> Probe:
    """Run a read-only probe; a missing, hung or failing tool costs one fact, never the capture."""
    name = Path(argv[0]).name
    try:
        done = run_ended(list(argv), timeout, text=True, errors="replace",
                         env=None if env is None else dict(env))
    except FileNotFoundError:
        where = "on PATH" if os.sep not in argv[0] else "at that path"
        return Probe(None, f"{name} not found {where}", False)
    except subprocess.TimeoutExpired:
        return Probe(None, f"{name} timed out after {timeout:g} s", False)
    except OSError as error:
        return Probe(None, f"{name} could not run: {error.strerror or error}", False)
    if done.returncode != 0:
        detail = _first_line(done.stderr) or _first_line(done.stdout) or "no output"
        return Probe(None, f"{name} exited with status {done.returncode}: {detail}", True)
    return Probe(done.stdout, None, True)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# --- profiling permissions and DCGM ------------------------------------------------------------

def parse_profiling_admin_only(params_text: str) -> dict:
    """Fact: True when the driver lets only administrators read GPU performance counters."""
    match = re.search(r"^RmProfilingAdminOnly:\s*(\d+)\s*$", params_text, re.MULTILINE)
    if match is None:
        return unknown("no RmProfilingAdminOnly line in the driver parameters")
    return known(match.group(1) != "0")


def profiling_restriction(params_path: str | Path = NVIDIA_PARAMS) -> dict:
    """Whether counter collection (ncu) needs admin rights here, and whether we have them."""
    try:
        admin_only = parse_profiling_admin_only(Path(params_path).read_text(errors="replace"))
    except FileNotFoundError:
        admin_only = unknown(f"{params_path} not found (NVIDIA kernel driver not loaded)")
    except OSError as error:
        admin_only = unknown(f"{params_path} unreadable: {error.strerror or error}")
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    advice = ADMIN_ONLY_ADVICE if admin_only["value"] and not is_root else None
    return {"admin_only": admin_only, "is_root": is_root, "advice": advice}


def processes_named(name: str, proc: str | Path = "/proc") -> list[int]:
    """PIDs whose /proc/<pid>/comm is `name` (the kernel keeps 15 characters of it)."""
    pids = []
    for comm in Path(proc).glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name[:15]:
                pids.append(int(comm.parent.name))
        except (OSError, ValueError):
            continue                            # the process exited while we looked
    return sorted(pids)


def dcgm_hostengine(proc: str | Path = "/proc") -> dict:
    """Whether a DCGM host engine runs here: it holds the counters ncu needs.

    Inside a container a host engine outside its PID namespace is invisible; False means "not seen".
    """
    if not Path(proc).is_dir():
        return {"running": unknown(f"{proc} not available"), "pids": [], "advice": None}
    pids = processes_named("nv-hostengine", proc)
    return {"running": known(bool(pids)), "pids": pids, "advice": DCGM_ADVICE if pids else None}


# --- scheduler, launcher and container ---------------------------------------------------------

def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _first_int(environ: Mapping[str, str], names: Sequence[str]) -> int | None:
    for name in names:
        try:
            return int(environ[name])
        except (KeyError, ValueError):
            continue
    return None


def rank_of(environ: Mapping[str, str] | None = None) -> int | None:
    """This process's global rank, from the innermost launcher that set one; None outside jobs."""
    return _first_int(_env(environ), RANK_VARIABLES)


def scheduler_context(environ: Mapping[str, str] | None = None) -> dict:
    """Batch scheduler, ranks and visible devices: what tags and explains a per-rank report."""
    env = _env(environ)
    return {"scheduler": next((s for var, s in SCHEDULERS.items() if var in env), None),
            "rank": rank_of(env),
            "local_rank": _first_int(env, LOCAL_RANK_VARIABLES),
            "world_size": _first_int(env, WORLD_SIZE_VARIABLES),
            "variables": {name: env[name] for name in SCHEDULER_VARIABLES if name in env}}


def container_context(environ: Mapping[str, str] | None = None, root: str | Path = "/") -> dict:
    """Whether we run in a container, with the evidence: GPU visibility and counter rights differ.

    False means no evidence was found (cgroup v2 hides the runtime from /proc/self/cgroup).
    """
    env, root = _env(environ), Path(root)
    hints = [f"{name} exists" for name in CONTAINER_FILES if (root / name.lstrip("/")).exists()]
    hints += [f"${name} is set" for name in CONTAINER_VARIABLES if name in env]
    try:
        cgroup = (root / "proc/self/cgroup").read_text(errors="replace")
    except OSError:
        cgroup = ""
    hints += [f"cgroup names {word}" for word in CGROUP_WORDS if word in cgroup]
    return {"in_container": bool(hints), "hints": hints}


# --- host ---------------------------------------------------------------------------------------

def parse_os_release(text: str) -> dict:
    """Fact: PRETTY_NAME from /etc/os-release text."""
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "PRETTY_NAME" and value.strip().strip("\"'"):
            return known(value.strip().strip("\"'"))
    return unknown("no PRETTY_NAME in os-release")


def parse_cpu_model(text: str) -> dict:
    """Fact: the first "model name" of /proc/cpuinfo text (absent on most ARM kernels)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "model name" and value.strip():
            return known(value.strip())
    return unknown("no 'model name' in /proc/cpuinfo")


def _file_fact(path: str, parse) -> dict:
    try:
        return parse(Path(path).read_text(errors="replace"))
    except OSError as error:
        return unknown(f"{path} unreadable: {error.strerror or error}")


def _reported(value: str) -> dict:
    return known(value) if value else unknown("not reported by the platform module")


def host_facts(os_release: str = "/etc/os-release", cpuinfo: str = "/proc/cpuinfo") -> dict:
    """Hostname, OS, kernel, CPU and this Python: what a number measured here depends on."""
    cpus = os.cpu_count()
    return {"hostname": _reported(platform.node()), "os": _reported(platform.platform()),
            "os_release": _file_fact(os_release, parse_os_release),
            "kernel": _reported(platform.release()),
            "cpu_model": _file_fact(cpuinfo, parse_cpu_model),
            "cpu_count": known(cpus) if cpus else unknown("os.cpu_count() could not tell"),
            "python_version": _reported(platform.python_version()),
            "python_executable": _reported(sys.executable or "")}


# --- framework versions of the profiled program ------------------------------------------------

def interpreter_of(argv: Sequence[str] | None, environ: Mapping[str, str] | None = None
                   ) -> tuple[str | None, str]:
    """The Python a profiled command line runs, and how it was found.

    Wrappers (env, srun, mpirun -n 4, numactl ..., nsys profile ..., ncu ...) are not parsed: the
    first word named python, python3 or python3.X is the interpreter; failing that, the first word
    that is a script with a python shebang (torchrun, accelerate and deepspeed are console
    scripts pointing at their environment's python). Returns (None, NO_PYTHON) when neither.
    """
    path = _env(environ).get("PATH")
    for word in argv or ():
        if _PYTHON_NAME.match(Path(word).name):
            found = shutil.which(word, path=path)
            return found, f"command word {word!r}" + ("" if found else " (not found on PATH)")
    for word in argv or ():
        python = _shebang_python(word, path)
        if python:
            return python, f"shebang of {word!r}"
    return None, NO_PYTHON


def _shebang_python(word: str, path: str | None) -> str | None:
    """The python a script's `#!` line names (directly or through /usr/bin/env), if any."""
    script = None if word.startswith("-") or "=" in word else shutil.which(word, path=path)
    if script is None:
        return None
    try:
        with open(script, "rb") as stream:
            first = stream.readline(256).decode(errors="replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":             # env [-S] [NAME=value] python3 [-u]
        program = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), "")
        words = [shutil.which(program, path=path) or ""] if program else []
    return words[0] if words and _PYTHON_NAME.match(Path(words[0]).name) else None


def framework_versions(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
                       timeout: float = PYTHON_TIMEOUT_S) -> dict:
    """Versions of torch, triton, jax, jaxlib, cupy, tensorflow as the profiled program sees them.

    Read from package metadata by that program's interpreter, never by importing them (an import
    can take seconds, touch the GPU, or fail). With no python in argv, this interpreter is asked.
    """
    python, chosen_by = interpreter_of(argv, environ)
    if chosen_by == NO_PYTHON:
        python, chosen_by = sys.executable, f"this interpreter ({NO_PYTHON})"
    if python:
        found, reason = _installed_versions(python, timeout, environ)
    else:
        found, reason = None, f"no interpreter: {chosen_by}"
    versions, distributions, installed = {}, {}, found or {}
    for framework, names in FRAMEWORKS.items():
        dist = next((name for name in names if name in installed), None)
        versions[framework] = known(installed[dist]) if dist else unknown(reason or "not installed")
        if dist:
            distributions[framework] = dist
    return {"interpreter": python, "chosen_by": chosen_by, "versions": versions,
            "distributions": distributions}


def _installed_versions(python: str, timeout: float, environ: Mapping[str, str] | None
                        ) -> tuple[dict | None, str | None]:
    names = [name for names in FRAMEWORKS.values() for name in names]
    probe = run_command([python, "-c", _VERSIONS_SCRIPT, *names], timeout, environ)
    if probe.stdout is None:
        return None, probe.reason
    try:
        found = json.loads(probe.stdout.strip().splitlines()[-1])   # after any sitecustomize noise
    except (ValueError, IndexError):
        found = None
    return (found, None) if isinstance(found, dict) else (None, f"unexpected output from {python}")


# --- everything ---------------------------------------------------------------------------------

def early_facts(environ: Mapping[str, str] | None = None) -> dict:
    """The facts a capture decides on before the profiler starts (the rank guard, the counter
    and DCGM warnings): files and environment variables only, no program run."""
    return {"profiling_counters": profiling_restriction(), "dcgm": dcgm_hostengine(),
            "scheduler": scheduler_context(environ)}


def collect_machine_facts(argv: Sequence[str] | None = None,
                          environ: Mapping[str, str] | None = None,
                          early: dict | None = None) -> dict:
    """All machine facts for the run manifest and `triage env`; argv is the profiled command,
    `early` what `early_facts` found already (a capture's guard and warnings decided on it)."""
    # Imported here, not at the top: nvsmi builds on this module's facts and probe runner.
    from triage.capture.nvsmi import gpu_facts

    early = early if early is not None else early_facts(environ)
    return {"facts_version": FACTS_VERSION,
            "host": host_facts(),
            "gpu": gpu_facts(),
            "profiling_counters": early["profiling_counters"],
            "dcgm": early["dcgm"],
            "scheduler": early["scheduler"],
            "container": container_context(environ),
            "frameworks": framework_versions(argv, environ)}
