"""Redaction of secrets in recorded environments, command lines and program output.

Captures embed the profiled process's whole environment (nsys `DeviceEnvironment`,
`PROCESS_n:ENVIRONMENT_VARIABLE`; ncu UI launch settings), and command lines carry tokens. Tables
and manifests keep such values only after the values of secret-looking names are replaced, and
after values shaped like secrets (token prefixes, bearer headers, connection-string keys, URL
credentials) are replaced whatever their name. The raw report blob is the user's own file and is
stored unchanged.

Extra name patterns (regular expressions) come from `--redact PATTERN` or `$TRIAGE_REDACT`
(comma-separated).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

MARKER = "<redacted>"
# A name holding one of these anywhere is secret. Substrings, as since the first release: a
# narrower rule would hide less of runs archived before, and change their ids.
SECRET_WORDS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "SESSION",
    "COOKIE", "PRIVATE", "APIKEY", "_KEY", "KEY_", "SIGNATURE", "CERT",
)
# Short words that are secret only as whole words of a name split at `_ - .` and camelCase humps
# (`MY_PASS`, `apiKey`), not inside others (COMPASS, MONKEY, PASSAGE, GIT_ASKPASS: a program).
SECRET_TOKENS = frozenset({"PASS", "SSHPASS", "KEY", "CREDS", "DSN", "WEBHOOK", "JWT", "BEARER"})
# Secret only as the last word of a longer name: GITHUB_PAT but PAT_RT_* (CrayPat, the profiler),
# MYSQL_PWD but PWD and OLDPWD (the working directory: provenance), DB_PW but PW_* (Playwright).
SECRET_SUFFIXES = frozenset({"PAT", "PWD", "PW"})
# In `a=1;Pwd=x` and `?sv=1&sig=x` (connection strings, signed URLs) these are secrets too.
_PARAMETER_SECRETS = frozenset({"PWD", "SIG"})
# Clients whose `-pVALUE` is a password (mysql -phunter2); elsewhere -p is a port or a process.
_PASSWORD_CLIENTS = frozenset({
    "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump",
    "mariadb", "mariadb-dump", "mariadb-admin",
})
_OPTION_WORDS = frozenset({w.strip("_") for w in SECRET_WORDS} | SECRET_TOKENS | SECRET_SUFFIXES)

_SUBSTRINGS = re.compile("|".join(re.escape(w) for w in SECRET_WORDS), re.IGNORECASE)
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z][a-z])(?=[A-Z])")
_OPTION_SPELLING = re.compile(r"[A-Za-z]+(?:[-_][A-Za-z]+)*")
_NAME = re.compile(r"[A-Za-z_][\w.-]*")
# After `Authorization:` (a header split into words) the scheme stays and the word after it goes.
_SCHEME = re.compile(r"Bearer|Basic|Digest|Token", re.IGNORECASE)
_PRIVATE_KEY = re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE "
                          r"KEY-----|$)")
# A private key spans lines: what redacts line by line (a patch) follows its BEGIN and END.
KEY_DELIMITER = re.compile(r"-----(BEGIN|END)[A-Z ]*PRIVATE KEY-----")
_URL_CREDENTIALS = re.compile(r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<cred>[^/@\s]+)@",
                              re.IGNORECASE)  # a scheme starts a word: linear, not quadratic
_KNOWN_TOKENS = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join((
    r"gh[pousr]_[A-Za-z0-9]{20,}", r"github_pat_\w{20,}",  # GitHub
    r"glpat-[\w-]{20,}",  # GitLab
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"xox[abeoprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key ids
    r"sk-[\w-]{20,}", r"[rs]k_live_[A-Za-z0-9]{16,}",  # OpenAI, Anthropic, Stripe
    r"npm_[A-Za-z0-9]{36}", r"pypi-[\w-]{50,}", r"AIza[\w-]{35}",  # npm, PyPI, Google
    r"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]+",  # JSON web tokens
    r"(?<=hooks\.slack\.com/services/)[\w/-]+", r"(?<=discord\.com/api/webhooks/)[\w/-]+",
)) + ")")
# NAME=value, NAME: value (headers, YAML, JSON), with an optional auth scheme before the value.
# The value is looked at, not consumed: in `--header=X-Api-Key: v` the pair after `header=` counts.
_PAIR = re.compile(r"(?<![\w])(?P<name>[A-Za-z][\w.-]*)[\"']?(?:\s*=\s*|:\s+)[\"']?"
                   r"(?=(?:(?:" + _SCHEME.pattern + r")\s+)?(?P<value>[^\s\"',;&]+))",
                   re.IGNORECASE)
_BEARER = re.compile(r"(?<![\w-])(?P<scheme>Bearer\s+)(?P<value>[\w.~+/=-]{8,})", re.IGNORECASE)
# `mysql ... -pPASSWORD` written inside a value: one password per invocation.
_CLIENT_PASSWORD = re.compile(r"(?<![\w-])(?:" + "|".join(sorted(_PASSWORD_CLIENTS, reverse=True))
                              + r")(?:\.exe)?\s[^\n;&|]*?(?<=\s)-p(?P<value>[^\s-]\S*)")
# --token VALUE and -pVALUE written inside a value (a program's output, an OMPI_ARGV).
_OPTION = re.compile(r"(?<!\S)(?P<option>--?[A-Za-z][\w-]*)(?=\s|$)(?:\s+(?P<value>[^\s-]\S*))?")


def user_patterns(given: tuple[str, ...] | list[str] = (),
                  environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The user's patterns: --redact arguments plus $TRIAGE_REDACT (comma-separated), resolved
    once per run so that the redaction, the run's dedup key and its manifest agree."""
    words = [*given, *(p for p in environ.get("TRIAGE_REDACT", "").split(",") if p)]
    return tuple(sorted(set(words)))


def extra_patterns(patterns: tuple[str, ...] | list[str] = ()) -> list[re.Pattern]:
    """The user's patterns (`user_patterns`), compiled."""
    return [re.compile(p, re.IGNORECASE) for p in patterns]


def _words(name: str) -> list[str]:
    """'GITHUB_PAT' -> ['GITHUB', 'PAT']; 'apiKey' -> ['API', 'KEY']; 'pSECRET' stays whole."""
    return [w.upper() for w in _WORD_BREAK.split(name) if w]


def is_secret_name(name: str, extra: Sequence[re.Pattern] = ()) -> bool:
    """Whether a variable, option or parameter name says its value is a secret."""
    if _SUBSTRINGS.search(name) or any(p.search(name) for p in extra):
        return True
    words = _words(name)
    return (not SECRET_TOKENS.isdisjoint(words)
            or (len(words) > 1 and words[-1] in SECRET_SUFFIXES))


def _spells_option(name: str) -> bool:
    """`-password`, `-api_token`, `-apiKey` name an option whose value comes next (Go and Java
    style); `-pSECRET`, `-pmysql_SECRET6` are a one-letter option with its value attached."""
    return bool(_OPTION_SPELLING.fullmatch(name)) and any(
        w in _OPTION_WORDS or w[:-1] in _OPTION_WORDS for w in _words(name))


def _is_secret_pair(match: re.Match, extra: Sequence[re.Pattern]) -> bool:
    """A secret name, or PWD/SIG as a parameter of a connection string or URL (not PWD=/home)."""
    name, start = match["name"], match.start()
    parameter = start > 0 and match.string[start - 1] in ";&?"
    return is_secret_name(name, extra) or (parameter and name.upper() in _PARAMETER_SECRETS)


def _redact_pairs(value: str, extra: Sequence[re.Pattern]) -> str:
    """Hide the values of secret `NAME=value` and `Name: value` pairs."""
    out, done = [], 0
    for match in _PAIR.finditer(value):
        if match.start() >= done and _is_secret_pair(match, extra):
            out += [value[done:match.start("value")], MARKER]
            done = match.end("value")
    return "".join(out) + value[done:]


def _redact_option(match: re.Match, extra: Sequence[re.Pattern]) -> str:
    """`--token X` -> `--token <redacted>`; `-pSECRET db` -> `-p<redacted> db`."""
    option, name = match["option"], match["option"].lstrip("-")
    if not is_secret_name(name, extra):
        return match[0]
    if option.startswith("--") or _spells_option(name):
        return match[0] if match["value"] is None else \
            match[0][: match.start("value") - match.start()] + MARKER
    return option[:2] + MARKER + match[0][len(option):]


def redact_value(value: str, extra: Sequence[re.Pattern] = ()) -> str:
    """Replace what looks like a secret inside a value, an argument or a line of output:
    private keys, URL credentials (https://user:pass@host), known token prefixes (ghp_, hf_,
    xoxb-, AKIA, sk-, ...), bearer tokens, `NAME=secret`/`Name: secret` pairs and `--token X`
    (names judged with the user's `extra` patterns too, where given: a patch's lines)."""
    value = _PRIVATE_KEY.sub(MARKER, value)
    value = _URL_CREDENTIALS.sub(lambda m: m["scheme"] + MARKER + "@", value)
    value = _KNOWN_TOKENS.sub(MARKER, value)
    value = _redact_pairs(value, extra)
    value = _CLIENT_PASSWORD.sub(lambda m: m[0][: m.start("value") - m.start()] + MARKER, value)
    value = _BEARER.sub(lambda m: m["scheme"] + MARKER, value)
    return _OPTION.sub(lambda m: _redact_option(m, extra), value)


def redact_mapping(env: dict[str, str], extra: Sequence[re.Pattern] = ()) -> dict[str, str]:
    """An environment with the values of secret names hidden and the rest `redact_value`d."""
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


def _redact_word(word: str, extra: Sequence[re.Pattern], client: bool) -> tuple[str, bool]:
    """One argument redacted, and whether the next one is its (secret) value."""
    name, eq, value = word.lstrip("-").partition("=")
    if eq and _NAME.fullmatch(name) and is_secret_name(name, extra):
        return word[: len(word) - len(value)] + MARKER, False
    if word.startswith("-") and not eq and len(word) > 2:
        if client and word.startswith("-p"):
            return "-p" + MARKER, False
        if is_secret_name(name, extra):
            if word.startswith("--") or _spells_option(name):
                return word, True
            return word[:2] + MARKER, False
    if (word.endswith(":") and is_secret_name(word[:-1], extra)) or word.lower() == "bearer":
        return word, True
    return redact_value(word), False


def redact_argv(argv: list[str], extra: Sequence[re.Pattern] = ()) -> list[str]:
    """Hide values of secret-looking options (--token X, --password=X, -pX, TOKEN=X env
    prefixes, mysql's -pPASSWORD, `Authorization: Bearer X` split into words) and
    secret-shaped values (`redact_value`) in any argument."""
    out, hide_next, header, client = [], False, False, False
    for word in argv:
        if hide_next and header and _SCHEME.fullmatch(word):  # `Authorization: Bearer X`
            out.append(word)
            header = False
            continue
        if hide_next:
            out.append(MARKER)
            hide_next = header = False
            continue
        redacted, hide_next = _redact_word(word, extra, client)
        header = hide_next and word.endswith(":")
        out.append(redacted)
        client = client or os.path.basename(word).removesuffix(".exe") in _PASSWORD_CLIENTS
    return out


def redact_command_line(text: str | None, extra: Sequence[re.Pattern] = ()) -> str | None:
    """Redact a recorded one-string command line, keeping its spacing otherwise; the whole line
    is `redact_value`d too, for secrets the word split cuts apart (-H 'Authorization: ...')."""
    if not text:
        return text
    from triage.capture.profiler_args import split_command_line

    words = split_command_line(text)
    redacted = redact_argv(words, extra)
    return redact_value(text if redacted == words else " ".join(redacted))
