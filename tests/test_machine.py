"""Machine facts: parsers on real nvidia-smi and driver outputs (tests/data/nvidia-smi, see its
README for where each came from), probes on this machine as it is, and environment-driven
helpers on explicit variable sets named as SLURM, Open MPI, MPICH/PMIx and torchrun set them.

No mocks: this machine has no GPU, so GPU parsing is tested on stored real outputs and the
missing-tool and failing-tool paths are exercised for real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triage.capture import machine as m
from triage.capture import nvsmi

DATA = Path(__file__).parent / "data" / "nvidia-smi"
FACT_KEYS = {"value", "reason"}


def read(name: str) -> str:
    return (DATA / name).read_text()


# --- nvidia-smi parsing ------------------------------------------------------------------------

def test_xml_a100_with_mig_enabled():
    facts = nvsmi.parse_smi_xml(read("a100-sxm4-80gb-535.54.03-mig.xml"))
    assert facts["source"] == "nvidia-smi -q -x"
    assert facts["driver_version"] == {"value": "535.54.03", "reason": None}
    assert facts["cuda_driver_version"] == {"value": "12.2", "reason": None}
    assert facts["gpus"] == {"reason": None, "value": [{
        "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
        "driver_version": "535.54.03", "sm_clock_mhz": 1275, "max_sm_clock_mhz": 1410,
        "mem_clock_mhz": 1593, "max_mem_clock_mhz": 1593, "persistence_mode": False,
        "power_limit_w": 500.0, "ecc_mode": True, "mig_mode": True, "compute_mode": "Default",
        "bus_id": "00000000:01:00.0", "memory_mib": 81920, "unavailable": {},
    }]}


def test_xml_t4_schema_v11_power_readings_and_no_mig():
    facts = nvsmi.parse_smi_xml(read("tesla-t4-515.105.01.xml"))
    assert facts["cuda_driver_version"]["value"] == "11.7"
    [gpu] = facts["gpus"]["value"]
    assert gpu == {
        "name": "Tesla T4", "uuid": "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
        "driver_version": "515.105.01", "sm_clock_mhz": 585, "max_sm_clock_mhz": 1590,
        "mem_clock_mhz": 5000, "max_mem_clock_mhz": 5001, "persistence_mode": False,
        "power_limit_w": 70.0, "ecc_mode": True, "mig_mode": None, "compute_mode": "Default",
        "bus_id": "00000000:00:1E.0", "memory_mib": 15360, "unavailable": {"mig_mode": "N/A"},
    }


def test_xml_two_gpus_schema_v13():
    facts = nvsmi.parse_smi_xml(read("dual-rtx-a5000-590.44.01.xml"))
    assert facts["driver_version"]["value"] == "590.44.01"
    assert facts["cuda_driver_version"]["value"] == "13.1"
    gpus = facts["gpus"]["value"]
    assert [g["bus_id"] for g in gpus] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert [g["uuid"][-2:] for g in gpus] == ["ab", "cd"]
    for gpu in gpus:
        assert (gpu["sm_clock_mhz"], gpu["max_sm_clock_mhz"]) == (210, 2100)
        assert (gpu["mem_clock_mhz"], gpu["max_mem_clock_mhz"]) == (405, 8001)
        assert (gpu["persistence_mode"], gpu["ecc_mode"], gpu["mig_mode"]) == (True, False, None)
        assert (gpu["power_limit_w"], gpu["memory_mib"]) == (230.0, 24564)
        assert gpu["unavailable"] == {"mig_mode": "N/A"}


def test_xml_that_is_not_xml():
    facts = nvsmi.parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate")
    assert facts["source"] is None
    assert facts["gpus"]["value"] is None
    assert facts["gpus"]["reason"].startswith("nvidia-smi -q -x output is not XML")


def test_xml_with_a_foreign_root():
    facts = nvsmi.parse_smi_xml('<?xml version="1.0" ?><nvidia_smi_unit_log/>')
    assert facts["gpus"]["reason"] == ("nvidia-smi -q -x output has root <nvidia_smi_unit_log>, "
                                       "not <nvidia_smi_log>")


def test_xml_without_cuda_version_and_gpus():
    """The top of the A100 report with its <cuda_version> and <gpu> elements removed."""
    lines = read("a100-sxm4-80gb-535.54.03-mig.xml").splitlines()
    head = [line for line in lines[:7] if "cuda_version" not in line]
    facts = nvsmi.parse_smi_xml("\n".join(head + ["</nvidia_smi_log>"]))
    assert facts["driver_version"]["value"] == "535.54.03"
    assert facts["cuda_driver_version"] == {
        "value": None, "reason": "no cuda_version in nvidia-smi -q -x (older drivers omit it)"}
    assert facts["gpus"] == {"value": [], "reason": None}


def test_csv_h200_capture_with_header_units_and_long_names():
    [gpu] = nvsmi.parse_smi_csv(read("h200-580.173.02-query-gpu.csv"))
    assert gpu == {
        "name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "driver_version": "580.173.02", "sm_clock_mhz": 345, "max_sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201, "max_mem_clock_mhz": 3201, "persistence_mode": True,
        "power_limit_w": 700.0, "ecc_mode": True, "mig_mode": False, "compute_mode": "Default",
        "bus_id": "00000000:83:00.0", "memory_mib": 143771, "unavailable": {},
    }


def test_csv_missing_columns_are_unavailable():
    """The H200 capture cut to its first eight columns: later fields are absent, not errors."""
    header, row = (",".join(line.split(",")[:8]) for line in read(
        "h200-580.173.02-query-gpu.csv").splitlines())
    [gpu] = nvsmi.parse_smi_csv(f"{header}\n{row}\n")
    assert (gpu["name"], gpu["bus_id"], gpu["memory_mib"]) == ("NVIDIA H200", "00000000:83:00.0",
                                                               None)
    assert gpu["unavailable"]["memory_mib"] == "not reported by this driver's nvidia-smi"


def test_csv_header_only_and_empty():
    header = read("h200-580.173.02-query-gpu.csv").splitlines()[0]
    assert nvsmi.parse_smi_csv(header + "\n") == []
    assert nvsmi.parse_smi_csv("") == []


def test_query_fields_are_all_understood():
    """Every field queried with --query-gpu maps to a record key (short aliases included)."""
    names = {name for field in nvsmi.GPU_FIELDS.values() for name in field.csv}
    assert set(nvsmi.QUERY_FIELDS) <= names


# --- running nvidia-smi on this machine --------------------------------------------------------

def test_gpu_facts_tool_not_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = "nvidia-smi not found on PATH"
    assert nvsmi.gpu_facts() == {"source": None, "driver_version": m.unknown(reason),
                             "cuda_driver_version": m.unknown(reason), "gpus": m.unknown(reason)}


def test_gpu_facts_tool_not_at_path(tmp_path):
    facts = nvsmi.gpu_facts(nvidia_smi=str(tmp_path / "nvidia-smi"))
    assert facts["gpus"] == {"value": None, "reason": "nvidia-smi not found at that path"}


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi on this machine")
def test_gpu_facts_with_this_machines_nvidia_smi():
    """Without a driver nvidia-smi exits non-zero; with a GPU every record has every field."""
    facts = nvsmi.gpu_facts()
    json.dumps(facts)
    if facts["gpus"]["value"] is None:
        assert "nvidia-smi exited with status" in facts["gpus"]["reason"]
        assert facts["source"] is None
    else:
        assert facts["source"] in ("nvidia-smi -q -x", "nvidia-smi --query-gpu")
        for gpu in facts["gpus"]["value"]:
            assert set(gpu) == set(nvsmi.GPU_FIELDS) | {"unavailable"}


def test_run_command_failure_modes(tmp_path):
    sleeper = m.run_command([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.2)
    assert sleeper.stdout is None and not sleeper.exited
    assert sleeper.reason.endswith("timed out after 0.2 s")
    failing = m.run_command([sys.executable, "-c", "import sys; sys.exit('boom')"], timeout=10)
    assert failing.exited and failing.reason.endswith("exited with status 1: boom")
    denied = tmp_path / "tool"
    denied.write_text("#!/bin/sh\n")
    assert "could not run" in m.run_command([str(denied)], timeout=10).reason


# --- profiling counters and DCGM ---------------------------------------------------------------

def test_params_admin_only_from_a_real_h100_node():
    assert m.parse_profiling_admin_only(read("proc-driver-nvidia-params-h100-580.105.08.txt")) \
        == {"value": True, "reason": None}


def test_params_open_to_users_and_without_the_line():
    text = read("proc-driver-nvidia-params-h100-580.105.08.txt")
    opened = text.replace("RmProfilingAdminOnly: 1", "RmProfilingAdminOnly: 0")
    assert m.parse_profiling_admin_only(opened)["value"] is False
    removed = "".join(line for line in text.splitlines(True) if "Profiling" not in line)
    assert m.parse_profiling_admin_only(removed) == m.unknown(
        "no RmProfilingAdminOnly line in the driver parameters")


def test_profiling_restriction_on_this_machine_and_on_a_stored_file():
    here = m.profiling_restriction()
    assert here["is_root"] == (os.geteuid() == 0)
    if not Path(m.NVIDIA_PARAMS).exists():
        assert here["admin_only"] == m.unknown(
            f"{m.NVIDIA_PARAMS} not found (NVIDIA kernel driver not loaded)")
    stored = m.profiling_restriction(DATA / "proc-driver-nvidia-params-h100-580.105.08.txt")
    assert stored["admin_only"]["value"] is True
    assert stored["advice"] == (None if stored["is_root"] else m.ADMIN_ONLY_ADVICE)


def test_processes_named_finds_this_process():
    comm = Path("/proc/self/comm").read_text().strip()
    assert os.getpid() in m.processes_named(comm)
    assert m.processes_named("no-such-process-name") == []


def test_dcgm_hostengine_here_and_without_proc(tmp_path):
    here = m.dcgm_hostengine()
    assert set(here["running"]) == FACT_KEYS and isinstance(here["running"]["value"], bool)
    assert here["advice"] == (m.DCGM_ADVICE if here["pids"] else None)
    gone = m.dcgm_hostengine(tmp_path / "proc")
    assert gone == {"running": m.unknown(f"{tmp_path / 'proc'} not available"), "pids": [],
                    "advice": None}


# --- ranks, scheduler and container ------------------------------------------------------------

SLURM_TASK = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
              "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "8",
              "CUDA_VISIBLE_DEVICES": "1", "HOME": "/home/alice"}
OPENMPI_RANK = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "16", "PMIX_RANK": "5"}
TORCHRUN_UNDER_SRUN = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
                       "RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16"}


@pytest.mark.parametrize("environ, rank", [
    (SLURM_TASK, 3), (OPENMPI_RANK, 5), (TORCHRUN_UNDER_SRUN, 9),
    ({"PMI_RANK": "2", "PMI_SIZE": "4"}, 2), ({"PMIX_RANK": "6"}, 6),
    ({"MV2_COMM_WORLD_RANK": "11"}, 11), ({"RANK": "", "SLURM_PROCID": "4"}, 4),
    ({"HOME": "/root"}, None), ({}, None),
])
def test_rank_of(environ, rank):
    assert m.rank_of(environ) == rank


def test_rank_of_reads_os_environ_by_default(monkeypatch):
    for name in m.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "7")
    assert m.rank_of() == 7


def test_scheduler_context_slurm():
    assert m.scheduler_context(SLURM_TASK) == {
        "scheduler": "slurm", "rank": 3, "local_rank": 1, "world_size": 8,
        "variables": {k: v for k, v in SLURM_TASK.items() if k != "HOME"}}


def test_scheduler_context_openmpi_and_torchrun():
    mpi = m.scheduler_context(OPENMPI_RANK)
    assert (mpi["scheduler"], mpi["rank"], mpi["local_rank"], mpi["world_size"]) == (None, 5, 1, 16)
    torch = m.scheduler_context(TORCHRUN_UNDER_SRUN)
    assert (torch["scheduler"], torch["rank"], torch["local_rank"], torch["world_size"]) == \
        ("slurm", 9, 1, 16)


def test_container_context_evidence(tmp_path):
    assert m.container_context({}, root=tmp_path) == {"in_container": False, "hints": []}
    (tmp_path / ".dockerenv").touch()
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(   # Docker's cgroup v1 layout
        "12:memory:/docker/3f9c2b1e0d4a\n0::/system.slice/containerd.service\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "APPTAINER_CONTAINER": "/img.sif"}
    assert m.container_context(env, root=tmp_path) == {"in_container": True, "hints": [
        "/.dockerenv exists", "$KUBERNETES_SERVICE_HOST is set", "$APPTAINER_CONTAINER is set",
        "cgroup names docker", "cgroup names containerd"]}


def test_container_context_here_is_well_formed():
    here = m.container_context()
    assert here["in_container"] == bool(here["hints"])


# --- host ---------------------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/etc/os-release").exists(), reason="no /etc/os-release")
def test_os_release_of_this_machine():
    import platform
    expected = platform.freedesktop_os_release().get("PRETTY_NAME")
    assert m.parse_os_release(Path("/etc/os-release").read_text())["value"] == expected


def test_os_release_and_cpuinfo_without_the_line():
    missing = m.unknown("no PRETTY_NAME in os-release")
    assert m.parse_os_release('NAME="Debian GNU/Linux"\n') == missing
    assert m.parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n")["value"] is None


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_cpu_model_of_this_machine():
    text = Path("/proc/cpuinfo").read_text()
    lines = [line.split(":", 1)[1].strip() for line in text.splitlines()
             if line.lower().startswith("model name")]
    assert m.parse_cpu_model(text)["value"] == (lines[0] if lines else None)


def test_host_facts_shape_and_unreadable_files(tmp_path):
    facts = m.host_facts(os_release=str(tmp_path / "os-release"), cpuinfo=str(tmp_path))
    assert all(set(fact) == FACT_KEYS for fact in facts.values())
    assert facts["python_executable"]["value"] == sys.executable
    assert facts["os_release"]["reason"].startswith(f"{tmp_path / 'os-release'} unreadable")
    assert facts["cpu_model"]["reason"].startswith(f"{tmp_path} unreadable")


# --- framework versions -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A real virtual environment (no pip), with pytorch-triton's dist-info as pip writes it."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    ask = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([str(root / "bin" / "python"), "-c", ask], capture_output=True,
                             text=True, check=True).stdout.strip()
    info = Path(purelib) / "pytorch_triton-3.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytorch-triton\nVersion: 3.1.0\n")
    return root


def test_interpreter_of_skips_wrappers(venv, tmp_path):
    python = str(venv / "bin" / "python")
    assert m.interpreter_of(["python3", "train.py"]) == (shutil.which("python3"),
                                                         "command word 'python3'")
    for argv in (["srun", "-n", "4", python, "-m", "train"],
                 ["mpirun", "-n", "4", "numactl", "--cpunodebind=0", python, "train.py"],
                 ["env", "NCCL_DEBUG=INFO", "nsys", "profile", "-o", "out", python, "train.py"],
                 ["ncu", "--set", "full", "-k", "regex:gemm", python, "bench.py"]):
        assert m.interpreter_of(argv) == (python, f"command word {python!r}")


def test_interpreter_of_console_script_shebang(venv, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "torchrun"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    environ = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    argv = ["nsys", "profile", "torchrun", "--nproc-per-node", "8", "train.py"]
    assert m.interpreter_of(argv, environ) == (str(venv / "bin" / "python"),
                                               "shebang of 'torchrun'")


def test_interpreter_of_env_shebang(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    assert m.interpreter_of(["nsys", "profile", str(script)])[0] == shutil.which("python3")


def test_interpreter_of_env_dash_s_shebang(tmp_path):
    script = tmp_path / "bench"
    script.write_text("#!/usr/bin/env -S PYTHONUNBUFFERED=1 python3 -u\nprint(1)\n")
    script.chmod(0o755)
    assert m.interpreter_of([str(script)])[0] == shutil.which("python3")


def test_interpreter_of_without_python(tmp_path):
    assert m.interpreter_of(["./a.out", "--size", "1024"]) == (None, m.NO_PYTHON)
    assert m.interpreter_of(None) == (None, m.NO_PYTHON)
    assert m.interpreter_of(["python3.99"], {"PATH": str(tmp_path)}) == (
        None, "command word 'python3.99' (not found on PATH)")


def test_framework_versions_in_a_venv(venv):
    facts = m.framework_versions([str(venv / "bin" / "python"), "train.py"])
    assert facts["interpreter"] == str(venv / "bin" / "python")
    assert facts["versions"]["triton"] == {"value": "3.1.0", "reason": None}
    assert facts["distributions"] == {"triton": "pytorch-triton"}
    for name in ("torch", "jax", "jaxlib", "cupy", "tensorflow"):
        assert facts["versions"][name] == {"value": None, "reason": "not installed"}


def test_framework_versions_of_this_interpreter_when_argv_has_no_python():
    facts = m.framework_versions(["./a.out"])
    assert facts["interpreter"] == sys.executable
    assert facts["chosen_by"] == f"this interpreter ({m.NO_PYTHON})"
    assert set(facts["versions"]) == set(m.FRAMEWORKS)
    assert all(set(fact) == FACT_KEYS for fact in facts["versions"].values())
    assert "triton" not in facts["distributions"] or \
        facts["distributions"]["triton"] != "pytorch-triton"    # the venv's is not ours


def test_framework_versions_ignore_a_json_module_in_the_working_directory(venv, tmp_path,
                                                                         monkeypatch):
    (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.chdir(tmp_path)
    facts = m.framework_versions([str(venv / "bin" / "python"), "train.py"])
    assert facts["versions"]["triton"]["value"] == "3.1.0"


def test_framework_versions_missing_interpreter(tmp_path):
    facts = m.framework_versions([str(tmp_path / "venv" / "bin" / "python3"), "x.py"])
    assert facts["interpreter"] is None
    reason = f"no interpreter: command word {str(tmp_path / 'venv' / 'bin' / 'python3')!r} " \
             "(not found on PATH)"
    assert facts["versions"]["torch"] == m.unknown(reason)


@pytest.mark.parametrize("body, reason", [
    ("exit 3", "python3 exited with status 3: no output"),
    ("echo not json", "unexpected output from {python}"),
])
def test_framework_versions_odd_interpreter(tmp_path, body, reason):
    """A `python3` that is really a shell script failing or printing junk."""
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    facts = m.framework_versions([str(python), "train.py"])
    assert facts["versions"]["jax"] == m.unknown(reason.format(python=python))


# --- everything ---------------------------------------------------------------------------------

def test_collect_machine_facts_is_json_and_complete(venv):
    facts = m.collect_machine_facts([str(venv / "bin" / "python"), "train.py"],
                                    environ={**os.environ, **SLURM_TASK})
    assert json.loads(json.dumps(facts)) == facts
    assert set(facts) == {"facts_version", "host", "gpu", "profiling_counters", "dcgm",
                          "scheduler", "container", "frameworks"}
    assert facts["scheduler"]["rank"] == 3
    assert facts["frameworks"]["versions"]["triton"]["value"] == "3.1.0"
    for fact in (*facts["host"].values(), facts["gpu"]["gpus"],
                 facts["profiling_counters"]["admin_only"], facts["dcgm"]["running"]):
        assert set(fact) == FACT_KEYS
        assert (fact["value"] is None) == (fact["reason"] is not None)
