"""GPU facts from nvidia-smi: the GPUs, the driver and the CUDA driver version of a capture.

GPU facts come from `nvidia-smi -q -x` first: one call gives the GPUs, the driver and the CUDA
driver version, and an element an old driver does not know is merely absent, whereas a single
unknown `--query-gpu` field fails the whole query. `--query-gpu` (field names checked against
`nvidia-smi --help-query-gpu` of driver 580) is the fallback when the XML is unusable. NVML's
Python bindings are not used: nvidia-smi is NVML's own front end and reports the same fields.

Per-GPU records stay flat for readability: a field nvidia-smi reports as N/A (or that a driver
does not know) is None, and its reason sits in the record's "unavailable" map, e.g.
{"mig_mode": "N/A"}. As everywhere in machine facts, a missing or failing nvidia-smi costs the
GPU facts (null with the reason), never the capture.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import NamedTuple

from triage.capture.machine import known, run_command, unknown

NVIDIA_SMI_TIMEOUT_S = 30


class Field(NamedTuple):
    kind: str                   # "text", "int", "float" or "flag" (Enabled/Disabled)
    xml: tuple[str, ...]        # paths under <gpu>, first present wins (names vary by driver)
    csv: tuple[str, ...]        # --query-gpu names, short alias first, as the header echoes them


GPU_FIELDS = {
    "name": Field("text", ("product_name",), ("name",)),
    "uuid": Field("text", ("uuid",), ("uuid",)),
    "driver_version": Field("text", (), ("driver_version",)),
    "sm_clock_mhz": Field("int", ("clocks/sm_clock",), ("clocks.sm", "clocks.current.sm")),
    "max_sm_clock_mhz": Field("int", ("max_clocks/sm_clock",), ("clocks.max.sm",)),
    "mem_clock_mhz": Field("int", ("clocks/mem_clock",), ("clocks.mem", "clocks.current.memory")),
    "max_mem_clock_mhz": Field("int", ("max_clocks/mem_clock",), ("clocks.max.mem",
                                                                   "clocks.max.memory")),
    "persistence_mode": Field("flag", ("persistence_mode",), ("persistence_mode",)),
    # power.limit is the software ("requested") limit; schema v12 moved it out of power_readings.
    "power_limit_w": Field("float", ("gpu_power_readings/requested_power_limit",
                                     "power_readings/power_limit"), ("power.limit",)),
    "ecc_mode": Field("flag", ("ecc_mode/current_ecc",), ("ecc.mode.current",)),
    "mig_mode": Field("flag", ("mig_mode/current_mig",), ("mig.mode.current",)),
    "compute_mode": Field("text", ("compute_mode",), ("compute_mode",)),
    "bus_id": Field("text", ("pci/pci_bus_id",), ("pci.bus_id",)),
    "memory_mib": Field("int", ("fb_memory_usage/total",), ("memory.total",)),
}
QUERY_FIELDS = ("name", "uuid", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem",
                "clocks.max.mem", "persistence_mode", "power.limit", "ecc.mode.current",
                "mig.mode.current", "compute_mode", "pci.bus_id", "memory.total")
_UNAVAILABLE = {"", "N/A", "Not Supported", "Unknown Error", "Insufficient Permissions",
                "Requested functionality has been deprecated"}


def gpu_facts(nvidia_smi: str = "nvidia-smi", timeout: float = NVIDIA_SMI_TIMEOUT_S) -> dict:
    """GPUs, driver and CUDA driver version: nvidia-smi's XML report, else its CSV query.

    The CSV query is tried only when nvidia-smi ran (a missing or hung tool would fail it too).
    """
    probe = run_command([nvidia_smi, "-q", "-x"], timeout)
    facts = (parse_smi_xml(probe.stdout) if probe.stdout is not None
             else _no_gpus(probe.reason or "nvidia-smi printed nothing"))
    if facts["gpus"]["value"] is not None or not probe.exited:
        return facts
    query = [nvidia_smi, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,nounits"]
    fallback, xml_reason = run_command(query, timeout), facts["gpus"]["reason"]
    if fallback.stdout is None:
        same = fallback.reason == xml_reason
        both = f"-q -x: {xml_reason}; --query-gpu: {fallback.reason}"
        return _no_gpus(xml_reason if same else both)
    return _csv_facts(parse_smi_csv(fallback.stdout), xml_reason)


def _no_gpus(reason: str) -> dict:
    return {"source": None, "driver_version": unknown(reason),
            "cuda_driver_version": unknown(reason), "gpus": unknown(reason)}


def parse_smi_xml(text: str) -> dict:
    """The gpu_facts() shape from `nvidia-smi -q -x` output."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        return _no_gpus(f"nvidia-smi -q -x output is not XML ({error})")
    if root.tag != "nvidia_smi_log":
        return _no_gpus(f"nvidia-smi -q -x output has root <{root.tag}>, not <nvidia_smi_log>")
    driver, cuda = root.findtext("driver_version"), root.findtext("cuda_version")
    gpus = [_gpu_record(_xml_raw(gpu, driver)) for gpu in root.findall("gpu")]
    return {"source": "nvidia-smi -q -x",
            "driver_version": _text_fact(driver, "no driver_version in nvidia-smi -q -x"),
            "cuda_driver_version": _text_fact(cuda, "no cuda_version in nvidia-smi -q -x "
                                                    "(older drivers omit it)"),
            "gpus": known(gpus)}


def _xml_raw(gpu: ET.Element, driver: str | None) -> dict[str, str | None]:
    raw = {key: next((gpu.findtext(p) for p in field.xml if gpu.find(p) is not None), None)
           for key, field in GPU_FIELDS.items()}
    raw["driver_version"] = driver
    return raw


def _text_fact(text: str | None, missing: str) -> dict:
    if text is None:
        return unknown(missing)
    return unknown(text.strip() or "empty") if _is_unavailable(text) else known(text.strip())


def parse_smi_csv(text: str) -> list[dict]:
    """GPU records from `nvidia-smi --query-gpu=... --format=csv[,nounits]` output, header included.

    Columns are found by header name, so the parse also reads captures made with other field
    lists, long field names ("clocks.current.sm") or units ("1980 MHz").
    """
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = [re.sub(r"\s*\[[^\]]*\]$", "", cell.strip()) for cell in next(rows, [])]
    records = []
    for row in rows:
        if any(cell.strip() for cell in row):
            cells = dict(zip(header, (cell.strip() for cell in row), strict=False))
            records.append(_gpu_record({key: next((cells[n] for n in f.csv if n in cells), None)
                                        for key, f in GPU_FIELDS.items()}))
    return records


def _csv_facts(records: list[dict], xml_reason: str) -> dict:
    driver = next((r["driver_version"] for r in records if r["driver_version"]), None)
    return {"source": "nvidia-smi --query-gpu",
            "driver_version": known(driver) if driver else unknown("no GPU reported a driver"),
            "cuda_driver_version": unknown(f"only nvidia-smi -q -x reports it, and that failed: "
                                           f"{xml_reason}"),
            "gpus": known(records)}


def _gpu_record(raw: Mapping[str, str | None]) -> dict:
    """One GPU's fields from nvidia-smi text; N/A and absent fields are None, reason noted."""
    record, unavailable = {}, {}
    for key, field in GPU_FIELDS.items():
        record[key], reason = _convert(field.kind, raw.get(key))
        if reason:
            unavailable[key] = reason
    record["unavailable"] = unavailable
    return record


def _convert(kind: str, text: str | None) -> tuple[object, str | None]:
    if text is None:
        return None, "not reported by this driver's nvidia-smi"
    text = text.strip()
    if _is_unavailable(text):
        return None, text or "empty"
    if kind == "flag":
        flag = {"enabled": True, "disabled": False}.get(text.lower())
        return (flag, None) if flag is not None else (None, f"unexpected value {text!r}")
    if kind in ("int", "float"):
        number = re.match(r"-?\d+(\.\d+)?", text)
        if number is None:
            return None, f"not a number: {text!r}"
        return (int(float(number.group())) if kind == "int" else float(number.group())), None
    return text, None


def _is_unavailable(text: str) -> bool:
    """nvidia-smi's ways of saying "no value": N/A, [N/A], [Not Supported], deprecated, empty."""
    text = text.strip()
    return text.startswith("[") or text in _UNAVAILABLE
