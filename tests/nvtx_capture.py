"""Building the NVTX test program and capturing it with nsys: real reports made here, no GPU.

`programs/nvtx_steps.c` is compiled with gcc against the NVTX v3 headers of the `nvidia-nvtx`
wheel and run under `nsys profile --trace=nvtx,osrt --sample=none --cpuctxsw=none`. Used by the
tests, the demo data script and the benchmark. Missing tools raise `ToolUnavailable`; tests turn
that into a skip, or a failure when TRIAGE_REQUIRE_TOOLS=1 (CI, where the tools must be there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "programs" / "nvtx_steps.c"
CAPTURE_OPTIONS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none"]


class ToolUnavailable(Exception):
    """gcc, nsys or the NVTX headers are not installed here."""


class ProfilerFailedByItself(Exception):
    """nsys ended with an error of its own and left no report (nsys 2022.4 does, now and then,
    on a loaded machine: `End of file`, or `sem_open` ENOENT at start). Not triage's doing, so
    the test is run again from the start, twice at most (pyproject.toml's `only_rerun`); a
    failure that repeats still fails."""


# How `triage capture` says nsys failed by itself (capture/session.py `no_report_notice`).
NSYS_FAILED = re.compile(r"no report was produced: nsys exited [1-9]")


def profiler_failed(output: str) -> None:
    """Raise ProfilerFailedByItself when triage's `output` says nsys failed by itself."""
    if NSYS_FAILED.search(output):
        raise ProfilerFailedByItself(output)


def require_tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise ToolUnavailable(f"{name} is not on PATH")
    return found


def nvtx_include_dir() -> Path:
    """The `nvidia-nvtx` wheel's headers, found under site-packages (not via `import nvidia`):
    this interpreter's, then any other on sys.path (a venv made with --system-site-packages)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    places = dict.fromkeys([purelib, *(Path(p) for p in sys.path if p.endswith("-packages"))])
    for place in places:
        for include in sorted(place.glob("nvidia/*/include")):
            if (include / "nvtx3" / "nvToolsExt.h").is_file():
                return include
    raise ToolUnavailable(f"nvtx3/nvToolsExt.h not found under {purelib}/nvidia; "
                          "pip install nvidia-nvtx")


def build_program(directory: Path, source: Path = SOURCE) -> Path:
    """Compile nvtx_steps (or a variant's `source`) into `directory` (NVTX v3 is header-only;
    it dlopens the injection)."""
    gcc = require_tool("gcc")
    program = Path(directory) / "nvtx_steps"
    subprocess.run([gcc, "-O2", f"-I{nvtx_include_dir()}", "-o", str(program), str(source),
                    "-ldl"], check=True, capture_output=True, text=True)
    return program


def capture(program: Path, args: list, output: Path, env: dict | None = None,
            nsys: str | None = None) -> Path:
    """`nsys profile` the program; returns OUTPUT.nsys-rep (next to `output`)."""
    nsys = nsys or require_tool("nsys")
    output = Path(output)
    command = [nsys, "profile", *CAPTURE_OPTIONS, "-o", str(output), "--force-overwrite", "true",
               str(program), *[str(a) for a in args]]
    done = subprocess.run(command, cwd=output.parent, env=env, capture_output=True)
    report = output.with_name(output.name + ".nsys-rep")
    if not report.is_file():
        stream_left = output.with_name(output.name + ".qdstrm").exists()
        if done.returncode != 0 and not stream_left:
            raise ProfilerFailedByItself(f"nsys profile exited {done.returncode}: "
                                         f"{done.stderr.decode(errors='replace')[-500:]}")
        hint = (" (.qdstrm left behind: Debian's nsys needs the QdstrmImporter symlink in "
                "/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64)"
                if stream_left else "")
        raise RuntimeError(f"nsys profile made no report{hint}: rc={done.returncode} "
                           f"{done.stderr.decode(errors='replace')[-500:]}")
    return report


def export_sqlite(report: Path, output: Path, nsys: str | None = None) -> Path:
    """`nsys export --type sqlite` the way a user would."""
    nsys = nsys or require_tool("nsys")
    subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
                    str(output), str(report)], check=True, capture_output=True)
    return Path(output)


def nsys_version(nsys: str | None = None) -> str:
    """'2022.4.2.1' from `nsys --version`."""
    import re

    out = subprocess.run([nsys or require_tool("nsys"), "--version"], capture_output=True,
                         text=True).stdout
    return re.search(r"\d{4}\.\d+(\.\d+)*", out).group(0)


def require_or_skip(exc: Exception):
    """In a test: skip for a missing tool, unless TRIAGE_REQUIRE_TOOLS=1 makes it a failure."""
    import pytest

    if os.environ.get("TRIAGE_REQUIRE_TOOLS") == "1":
        pytest.fail(f"TRIAGE_REQUIRE_TOOLS=1 but {exc}")
    pytest.skip(str(exc))
