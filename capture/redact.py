"""Redaction of secrets in recorded environments and command lines.

Captures embed the profiled process's whole environment (nsys `DeviceEnvironment`,
`PROCESS_n:ENVIRONMENT_VARIABLE`; ncu UI launch settings), and command lines carry tokens. Tables
and manifests keep such values only after the values of secret-looking names are replaced. The raw
report blob is the user's own file and is stored unchanged.

Extra name patterns (regular expressions) come from `--redact PATTERN` or `$TRIAGE_REDACT`
(comma-separated).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

MARKER = "<redacted>"
SECRET_WORDS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "SESSION",
    "COOKIE", "PRIVATE", "API_KEY", "APIKEY", "ACCESS_KEY", "_KEY", "KEY_", "SIGNATURE",
    "PMI_SHARED_SECRET", "CERT",
)
_BASE = re.compile("|".join(re.escape(w) for w in SECRET_WORDS), re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<cred>[^/@\s:]+(:[^/@\s]*)?)@",
                              re.IGNORECASE)


def user_patterns(given: tuple[str, ...] | list[str] = (),
                  environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The user's patterns: --redact arguments plus $TRIAGE_REDACT (comma-separated), resolved
    once per run so that the redaction, the run's dedup key and its manifest agree."""
    words = [*given, *(p for p in environ.get("TRIAGE_REDACT", "").split(",") if p)]
    return tuple(sorted(set(words)))


def extra_patterns(patterns: tuple[str, ...] | list[str] = ()) -> list[re.Pattern]:
    """The user's patterns (`user_patterns`), compiled."""
    return [re.compile(p, re.IGNORECASE) for p in patterns]


def is_secret_name(name: str, extra: list[re.Pattern] = ()) -> bool:
    upper = name.upper()
    return upper == "KEY" or bool(_BASE.search(upper)) or any(p.search(name) for p in extra)


def redact_value(value: str) -> str:
    """Strip credentials embedded in URLs (https://user:pass@host)."""
    return _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + MARKER + "@", value)


def redact_mapping(env: dict[str, str], extra: list[re.Pattern] = ()) -> dict[str, str]:
    return {k: (MARKER if is_secret_name(k, extra) else redact_value(v)) for k, v in env.items()}


def parse_environment_text(text: str | None) -> dict[str, str] | None:
    """'A=1;B=2' or one NAME=VALUE per line -> dict; None when empty."""
    if not text:
        return None
    sep = "\n" if "\n" in text else ";"
    out = {}
    for item in text.split(sep):
        name, eq, value = item.strip().partition("=")
        if eq and name:
            out[name] = value.strip('"')
    return out or None


def redact_argv(argv: list[str], extra: list[re.Pattern] = ()) -> list[str]:
    """Hide values of secret-looking options (--token X, --password=X, TOKEN=X env prefixes)."""
    out, hide_next = [], False
    for word in argv:
        if hide_next:
            out.append(MARKER)
            hide_next = False
            continue
        name, eq, _value = word.lstrip("-").partition("=")
        if eq and is_secret_name(name, extra):
            out.append(word[: len(word) - len(_value)] + MARKER)
        elif word.startswith("-") and not eq and is_secret_name(name, extra):
            out.append(word)
            hide_next = True
        else:
            out.append(redact_value(word))
    return out


def redact_command_line(text: str | None, extra: list[re.Pattern] = ()) -> str | None:
    """Redact a recorded one-string command line, keeping its spacing otherwise."""
    if not text:
        return text
    from triage.capture.profiler_args import split_command_line

    words = split_command_line(text)
    redacted = redact_argv(words, extra)
    if redacted == words:
        return text
    return " ".join(redacted)
