"""Redaction: planted secrets of every form are hidden, common provenance survives unchanged.

The planted forms are redacted the way the callers do: environments with `redact_mapping`,
argv with `redact_argv`, recorded command lines with `redact_command_line`, program output line
by line with `redact_value`. The end-to-end test captures the NVTX test program with the real
nsys through `triage capture`, secrets planted in its environment, argv and output, and reads
every file of the store but the raw report for them. The corpus test reads the environments real
captures recorded (its nsys SQLite exports).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import CORPUS, strings_in
from triage.capture.profiler_args import NCU_VALUE_OPTIONS, NSYS_VALUE_OPTIONS
from triage.capture.redact import (
    MARKER, is_secret_name, redact_argv, redact_command_line, redact_mapping, redact_value,
)

GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
HF = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"
SLACK = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
OPENAI = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0"
GITLAB = "glpat-" + "xY7zQ2wE9rT4uI1oP6aS"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJoNyJ9.c2lnbmF0dXJlX2g3"


@dataclass(frozen=True)
class Planted:
    """One secret in one form; `redact` is how the callers redact that form."""

    form: str
    given: object
    secret: str
    redact: Callable[[object], object]


def env(name: str, value: str, secret: str | None = None) -> Planted:
    return Planted(f"env {name}", {name: value}, secret or value, redact_mapping)


def argv(*words: str, secret: str) -> Planted:
    return Planted("argv " + " ".join(words), list(words), secret, redact_argv)


def command(text: str, secret: str) -> Planted:
    return Planted("command " + text, text, secret, redact_command_line)


def output(line: str, secret: str) -> Planted:
    return Planted("output " + line, line, secret, redact_value)


PLANTED = [
    # secret names
    env("GITHUB_PAT", "h7-pat-0001"), env("GH_TOKEN", "h7-tok-0002"),
    env("MY_PASS", "h7-pass-0003"), env("DOCKER_PASS", "h7-pass-0004"),
    env("SLACK_WEBHOOK", "h7-hook-0005"), env("MYSQL_PWD", "h7-pwd-0006"),
    env("SENTRY_DSN", "h7-dsn-0007"), env("AWS_SECRET_ACCESS_KEY", "h7-aws-0008"),
    env("OPENAI_API_KEY", "h7-key-0009"), env("DB_PASSWORD", "h7-pw-0010"),
    env("SSHPASS", "h7-ssh-0011"), env("DB_PW", "h7-pw-0012"),
    env("azureStorageKey", "h7-key-0013"), env("PMI_SHARED_SECRET", "h7-pmi-0014"),
    # secret shapes under innocent names
    env("STORAGE", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=h7AzUrEkEy15==;"
        "EndpointSuffix=core.windows.net", "h7AzUrEkEy15=="),
    env("DATABASE", "Server=db;Uid=sa;Pwd=h7-ado-0016;", "h7-ado-0016"),
    env("BLOB", "https://acct.blob.core.windows.net/c?sv=2022&sig=h7SaSsIg17%3D", "h7SaSsIg17"),
    env("REMOTE", "https://alice:h7-url-0018@git.example.com/r.git", "h7-url-0018"),
    env("CACHE", "redis://:h7-redis-0019@cache:6379/0", "h7-redis-0019"),
    env("NOTIFY", "https://hooks.slack.com/services/T0H7/B0H7/h7slackpath20", "h7slackpath20"),
    env("HEADER", "Authorization: Bearer h7bearer0021xyz", "h7bearer0021xyz"),
    env("GIT_CONFIG_VALUE_0", GHP), env("UPLOAD", GITHUB_PAT), env("HUB", HF),
    env("CHAT", SLACK), env("CLOUD", AWS), env("LLM", OPENAI), env("LAB", GITLAB),
    env("IDENTITY", JWT),
    env("DEPLOY", "-----BEGIN OPENSSH PRIVATE KEY-----\nh7PrivKeyBody31\n"
        "-----END OPENSSH PRIVATE KEY-----", "h7PrivKeyBody31"),
    env("OMPI_ARGV", "./train --token h7-argtok-0032 --steps 5", "h7-argtok-0032"),
    # argv forms
    argv("./app", "--api-key=h7-arg-0033", secret="h7-arg-0033"),
    argv("./app", "--pass=h7-arg-0034", secret="h7-arg-0034"),
    argv("./app", "--pass", "h7-arg-0035", secret="h7-arg-0035"),
    argv("./app", "--password", "h7-arg-0036", secret="h7-arg-0036"),
    argv("./app", "-pSECRET37", "db", secret="SECRET37"),
    argv("./app", "-pmysql_SECRET6", "db", secret="mysql_SECRET6"),
    argv("mysql", "-u", "root", "-ph7mysql39", "db", secret="h7mysql39"),
    argv("./app", "-password", "h7-arg-0040", secret="h7-arg-0040"),
    argv("./app", "-apiToken", "h7-arg-0041", secret="h7-arg-0041"),
    argv("curl", "-H", "Authorization: Bearer h7-hdr-0042", "https://x", secret="h7-hdr-0042"),
    argv("curl", "--header=X-Api-Key: h7-hdr-0043", "https://x", secret="h7-hdr-0043"),
    argv("GITHUB_PAT=h7-arg-0044", "./app", secret="h7-arg-0044"),
    argv("git", "clone", "https://bob:h7-arg-0045@example.com/r", secret="h7-arg-0045"),
    argv("./app", "--hub", HF, secret=HF),
    argv("sh", "-c", "curl", "-H", "Authorization:", "Basic", "h7-arg-0047", secret="h7-arg-0047"),
    # recorded command lines
    command("curl -H 'Authorization: Bearer h7-cmd-0047' https://x", "h7-cmd-0047"),
    command('./app --secret "h7 cmd 0048"', "h7 cmd 0048"),
    command("./app --db postgres://u:h7-cmd-0049@db/x", "h7-cmd-0049"),
    # program output
    output("export GITHUB_PAT=h7-out-0050", "h7-out-0050"),
    output("password: h7-out-0051", "h7-out-0051"),
    output('{"api_key": "h7-out-0052", "steps": 3}', "h7-out-0052"),
    output("> Authorization: Bearer h7-out-0053", "h7-out-0053"),
    output(f"logged in with {GHP}", GHP),
    output("connecting to postgres://u:h7-out-0055@db:5432/x", "h7-out-0055"),
    output("mysql -u root -pmysql_h7out56 db", "mysql_h7out56"),
]


@pytest.mark.parametrize("planted", PLANTED, ids=[p.form[:60] for p in PLANTED])
def test_every_planted_secret_is_redacted(planted):
    redacted = json.dumps(planted.redact(planted.given))
    assert planted.secret not in redacted and MARKER in redacted
    assert planted.redact(planted.redact(planted.given)) == planted.redact(planted.given)


def test_the_planted_forms_are_many():
    assert len(PLANTED) >= 50 and len({p.form for p in PLANTED}) == len(PLANTED)


INNOCENT_ENVIRONMENT = {
    "HOME": "/home/ada", "USER": "ada", "PATH": "/usr/local/cuda/bin:/usr/bin:/opt/session/bin",
    "PWD": "/home/ada/work", "OLDPWD": "/home/ada", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "CUDA_VISIBLE_DEVICES": "GPU-8f2e6a3c-1d4b-4e5f-9a7b-0c1d2e3f4a5b",
    "CUDA_HOME": "/usr/local/cuda",
    "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0:1",
    "NCCL_P2P_DISABLE": "1", "OMP_NUM_THREADS": "8", "SLURM_JOB_ID": "4242",
    "KEYBOARD": "us", "MONKEY": "1", "PASSAGE": "2", "COMPASS": "north", "PATCH": "3",
    "SPATIAL_DIMS": "3", "NUM_PASSES": "4", "BYPASS": "0",
    "PAT_RT_PERFCTR_DISABLE_COMPONENTS": "nvml", "CRAYPAT_ROOT": "/opt/cray/perftools",
    "GIT_ASKPASS": "/usr/lib/code/askpass.sh", "LESSKEY": "/etc/lesskey", "HF_HOME": "/data/hf",
    "TORCH_CUDA_ARCH_LIST": "8.0;9.0", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "LS_COLORS": "rs=0:di=01;34:ln=01;36:*.tar=01;31", "LESSOPEN": "| /usr/bin/lesspipe %s",
    "http_proxy": "http://proxy.example.com:3128", "GIT_REMOTE": "https://github.com/o/r.git",
    "GIT_SSH_REMOTE": "git@github.com:o/r.git", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
    "WORLD_SIZE": "8", "RANK": "0", "CI_COMMIT_SHA": "9df3f55a0c1e2b3d4f5a6b7c8d9e0f1a2b3c4d5e",
    "XLA_FLAGS": "--xla_gpu_autotune_level=2 --xla_dump_to=/tmp/xla", "DISPLAY": ":0",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility", "CONDA_PREFIX": "/opt/conda/envs/sk-learn",
    "PROMPT": "user: ada", "MAKEFLAGS": "-j8 -pthread",
}

INNOCENT_ARGV = [
    ["ncu", "--pm-sampling-interval", "1000", "--set", "full", "-k", "regex:gemm", "-c", "5",
     "-p", "49152", "--nvtx-include", "train@step/", "-o", "prof", "./app"],
    ["nsys", "profile", "-t", "cuda,nvtx", "-p", "range@domain", "--stats=true", "-o", "r", "./a"],
    ["gcc", "-pthread", "-pg", "-pipe", "-pie", "-pedantic", "-O2", "-o", "a", "a.c"],
    ["./server", "-p", "8080", "-p4", "--port=8080", "--keyboard", "us", "--passes", "3",
     "--num-passes=2", "--patch", "fix.diff", "--path", "/x", "--compass", "north"],
    ["python", "train.py", "--lr", "3e-4", "--batch-size", "64", "PWD=/x",
     "CUDA_VISIBLE_DEVICES=0"],
]

INNOCENT_OUTPUT = [
    "==PROF== Connected to process 1234 (/tmp/app)",
    '==PROF== Profiling "gemm" - 0: 0%....50%....100% - 9 passes',
    "Generating '/tmp/nsys-report-1a2b.qdstrm'",
    "[1/1] [========================100%] steps.nsys-rep",
    "Generated:", "    /tmp/steps.nsys-rep", "step 3: loss 0.25 (lr=3e-4)",
    "WARNING: CPU context switch tracing not supported, disabling.",
    "Using sk-learn style API for https://github.com/o/r.git at 9df3f55a",
]


def test_common_variables_survive_unchanged():
    assert redact_mapping(INNOCENT_ENVIRONMENT) == INNOCENT_ENVIRONMENT


@pytest.mark.parametrize("words", INNOCENT_ARGV, ids=[w[0] for w in INNOCENT_ARGV])
def test_common_arguments_survive_unchanged(words):
    assert redact_argv(words) == words
    assert redact_command_line(" ".join(words)) == " ".join(words)


def test_no_profiler_option_looks_secret():
    options = sorted(NCU_VALUE_OPTIONS | NSYS_VALUE_OPTIONS - {"--session", "--session-new"})
    assert [o for o in options if is_secret_name(o.lstrip("-"))] == []
    words = [w for option in options for w in (option, "1")]
    assert redact_argv(words) == words


def test_common_output_survives_unchanged():
    assert [redact_value(line) for line in INNOCENT_OUTPUT] == INNOCENT_OUTPUT


def test_a_value_attached_to_a_short_option_is_hidden_not_the_next_argument():
    assert redact_argv(["./app", "-pmysql_SECRET6", "mydb"]) == ["./app", "-p" + MARKER, "mydb"]
    assert redact_argv(["./app", "--token", "t", "mydb"]) == ["./app", "--token", MARKER, "mydb"]
    assert redact_argv(["./app", "-p", "4", "-pthread"]) == ["./app", "-p", "4", "-pthread"]


def _corpus_environments() -> Iterator[tuple[str, dict[str, str]]]:
    from triage.capture.nsys import PreparedNsys

    for path in sorted((CORPUS / "nsys").glob("*.sqlite")):
        prepared = PreparedNsys.open(path, "sqlite")
        try:
            variables = (prepared.provenance().get("environment") or {}).get("variables")
        finally:
            prepared.close()
        yield path.name, variables or {}


def test_real_recorded_environments_lose_only_what_earlier_rules_hid(corpus):
    """Every value the word and shape rules added would hide in a corpus capture: none. The
    names hidden are those hidden since the first release (SESSION, AUTH, CERT substrings)."""
    hidden, reshaped, seen = set(), [], 0
    for name, variables in _corpus_environments():
        seen += len(variables)
        hidden |= {k for k in variables if is_secret_name(k)}
        reshaped += [(name, k) for k, v in variables.items()
                     if not is_secret_name(k) and redact_value(v) != v]
    assert seen > 500 and reshaped == []
    assert hidden == {
        "DBUS_SESSION_BUS_ADDRESS", "DESKTOP_SESSION", "GDMSESSION", "GNOME_DESKTOP_SESSION_ID",
        "GNOME_SHELL_SESSION_MODE", "ICEAUTHORITY", "KDE_FULL_SESSION", "KDE_SESSION_UID",
        "KDE_SESSION_VERSION", "LDAPTLS_REQCERT", "SESSION_MANAGER", "SSH_AUTH_SOCK", "WT_SESSION",
        "XAUTHORITY", "XDG_SESSION_CLASS", "XDG_SESSION_DESKTOP", "XDG_SESSION_ID",
        "XDG_SESSION_PATH", "XDG_SESSION_TYPE"}


# -- end to end: a real nsys capture through `triage capture` --------------------------------------

CAPTURE_ENVIRONMENT = {
    "GITHUB_PAT": "h7e2e-pat-01", "MY_PASS": "h7e2e-pass-02", "DOCKER_PASS": "h7e2e-pass-03",
    "SLACK_WEBHOOK": "https://hooks.slack.com/services/T1/B1/h7e2ehook04",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=a;"
                                       "AccountKey=h7e2eAccountKey05==;EndpointSuffix=x",
    "H7_REMOTE": "https://carol:h7e2e-url-06@git.example.com/r.git",
    "H7_UPLOAD": GHP, "H7_HUB": HF, "H7_CHAT": SLACK, "H7_CLOUD": AWS, "H7_LLM": OPENAI,
    "H7_HEADER": "Authorization: Bearer h7e2ebearer07",
}
CAPTURE_SECRETS = [
    "h7e2e-pat-01", "h7e2e-pass-02", "h7e2e-pass-03", "h7e2ehook04", "h7e2eAccountKey05",
    "h7e2e-url-06", "h7e2ebearer07", GHP, HF, SLACK, AWS, OPENAI,
    "h7e2e-arg-08", "h7e2e-arg-09", "mysql_SECRETe2e10", "h7e2e-arg-11", "h7e2e-arg-12",
]
CAPTURE_ARGS = ["--api-key=h7e2e-arg-08", "--pass", "h7e2e-arg-09", "-pmysql_SECRETe2e10",
                "-H", "Authorization: Bearer h7e2e-arg-11", "https://dave:h7e2e-arg-12@example.com"]
# The shell prints the arguments and secret-bearing lines (so the output tail holds them too),
# then runs the NVTX program with the arguments, which it ignores past the third.
SCRIPT = ('echo "$@"; echo "GITHUB_PAT=$GITHUB_PAT"; echo "password: $MY_PASS"; '
          'echo "$H7_HEADER"; echo "token $H7_UPLOAD"; exec "$0" 3 50 50 "$@"')




def _leaks(store: Path, raw: str) -> tuple[list[tuple[str, str]], int]:
    """(secret, file) for every planted secret found in the store's files but the raw report,
    reading Parquet tables and catalog segments decoded; and how many files were read."""
    leaks, read = [], 0
    for path in (p for p in sorted(store.rglob("*")) if p.is_file()):
        if path.parent.name == raw[:2] and path.name == raw[2:]:
            continue
        data = path.read_bytes()
        text = "\n".join(strings_in(pq.read_table(path).to_pylist())) if data[:4] == b"PAR1" \
            else data.decode(errors="replace")
        leaks += [(s, str(path.relative_to(store))) for s in CAPTURE_SECRETS if s in text]
        read += 1
    return leaks, read


def test_a_real_capture_keeps_no_planted_secret_but_in_the_raw_report(
        triage, store_dir, tmp_path, monkeypatch, nsys_exe, nvtx_program):
    for name, value in CAPTURE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    argv = ["nsys", "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", "-o", "h7",
            "sh", "-c", SCRIPT, str(nvtx_program), *CAPTURE_ARGS]
    run = json.loads(triage("capture", "--json", "--", *argv).stdout)
    shown = triage.json("show", run["id"])
    raw = shown["reports"][0]["sha256"]
    capture = shown["capture"]
    assert "h7e2e-pass-02" not in json.dumps(capture) and "password: " + MARKER in \
        capture["output_tail"]
    assert capture["environment"]["CUDA_VISIBLE_DEVICES"] == "0"  # provenance kept
    assert shown["environment"]["variables"]["MY_PASS"] == MARKER
    assert shown["environment"]["variables"]["PWD"] == str(tmp_path)
    leaks, read = _leaks(store_dir, raw)
    assert leaks == [] and read >= 10
