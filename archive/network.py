"""How hard requests to an S3 store try, and what a request that failed after every try means.

A flaky network is met in two layers (`Network`): each request is retried by the S3 client
itself (pyarrow's `AwsStandardS3RetryStrategy`, the AWS SDK's standard strategy: exponential
backoff with full jitter on throttling, 5xx and dropped connections, `attempts` tries of
`timeout` seconds each), and an operation the client gave up on (a read, a listing, an upload)
is run again by triage (`StoreFiles.call`), after a pause that doubles, while `retry_time`
lasts; only those second-layer retries can be counted: pyarrow does not report its own. A
server that says nothing at all, or is not there, is not run again (`Unreachable.silent`): the
client already waited its tries. What still fails is one line (`remote_error`): an
`Unreachable` (exit 6: run it again) when the network or the server's health is to blame.

The settings come from the store's URL (a remote's: `remote add --attempts --timeout
--retry-time`), then $TRIAGE_S3_ATTEMPTS / _TIMEOUT / _RETRY_TIME, then a command's own
(`--timeout`, `network_chosen`), each over the one before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

from triage.base.errors import StoreError, Unreachable, UsageError

RETRY_PAUSE, RETRY_PAUSE_MAX = 0.5, 8.0  # seconds before triage runs an operation again


@dataclass(frozen=True)
class Network:
    """How hard a remote store's requests try (module docstring): `attempts` tries of one
    request by the S3 client, `timeout` seconds for each (to connect: at most CONNECT_TIMEOUT),
    and `retry_time` seconds in which triage runs an operation again once the client gave up.
    A silent server is given up on after about attempts x timeout seconds per request."""

    attempts: int = 4
    timeout: float = 3.0
    retry_time: float = 30.0

    def with_text(self, source: str, values: dict[str, str]) -> Network:
        """These settings with `values` (a URL's, the environment's) laid over them, each
        checked; `source` names where they came from for a refusal."""
        changed: dict[str, float | int] = {}
        for name, text in values.items():
            changed[name] = network_value(source, name, text)
        return replace(self, **changed)  # type: ignore[arg-type]

    def client_options(self) -> dict:
        """The S3FileSystem options these settings are."""
        from pyarrow import fs

        return {"connect_timeout": min(CONNECT_TIMEOUT, self.timeout),
                "request_timeout": self.timeout,
                "retry_strategy": fs.AwsStandardS3RetryStrategy(max_attempts=self.attempts)}


CONNECT_TIMEOUT = 3.0  # seconds: a loopback or LAN server that is up accepts at once
# Each setting's name (in a URL's query, and $TRIAGE_S3_<NAME>) and the values it takes.
NETWORK_LIMITS = {"attempts": (1, 20), "timeout": (0.1, 600.0), "retry_time": (0.0, 3600.0)}
# A command's own --timeout and the like (the CLI sets them for the command's duration): they
# win over the environment, which wins over a URL's settings, which win over the defaults.
NETWORK_CHOSEN: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("network_chosen",
                                                                     default=())


def network_value(source: str, name: str, text: str) -> float | int:
    """One network setting, as a number within its limits, or why it is refused."""
    low, high = NETWORK_LIMITS[name]
    try:
        value = int(text) if name == "attempts" else float(text.rstrip("s"))
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        unit = "" if name == "attempts" else " seconds"
        raise UsageError(f"{source}: {name}={text!r}; give a number from {low:g} to "
                         f"{high:g}{unit}")
    return value


@contextmanager
def network_chosen(**values: float | int | None) -> Iterator[None]:
    """Stores opened inside use these settings (a command's --timeout) over any other."""
    token = NETWORK_CHOSEN.set(tuple((k, str(v)) for k, v in values.items() if v is not None))
    try:
        yield
    finally:
        NETWORK_CHOSEN.reset(token)


def network_for(source: str, settings: dict[str, str]) -> Network:
    """The settings of one store: its URL's (`settings`; `source` names it), then
    $TRIAGE_S3_ATTEMPTS / _TIMEOUT / _RETRY_TIME, then the command's own, each over the one
    before."""
    network = Network().with_text(source, settings)
    for name in NETWORK_LIMITS:
        variable = f"TRIAGE_S3_{name.upper()}"
        if os.environ.get(variable):
            network = network.with_text(f"${variable}", {name: os.environ[variable]})
    return network.with_text("option", dict(NETWORK_CHOSEN.get()))


NETWORK_SIGNS = ("NETWORK_CONNECTION", "curlCode")
# No answer at all: no reply within the timeout, or no server to connect to
SILENT_SIGNS = ("curlCode: 28", "Timeout", "timed out", "REQUEST_TIMEOUT", "curlCode: 7,",
                "Could not connect", "Couldn't resolve", "curlCode: 6,")
SERVER_SIGNS = ("HTTP status 5", "INTERNAL_FAILURE", "SERVICE_UNAVAILABLE", "SLOW_DOWN",
                "THROTTLING", "SlowDown", "InternalError")
DENIED_SIGNS = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                "INVALID_ACCESS_KEY", "SIGNATURE", "HTTP status 403")


def remote_error(exc: BaseException, where: str, bucket: str, doing: str,
                 endpoint: str | None = None) -> StoreError:
    """One line for a failed S3 request: what failed, at which endpoint, and the fix, with the
    client's whole reason. The network's or the server's health (after every retry) is an
    `Unreachable`: run the command again; a reply that is not S3's says so."""
    text = " ".join(str(exc).split())
    known = any(k in text for k in DENIED_SIGNS + NETWORK_SIGNS + SILENT_SIGNS + SERVER_SIGNS)
    if endpoint is not None and not known and not speaks_s3(endpoint):
        return StoreError(f"cannot {doing} store {where}: {endpoint} is not an S3 endpoint "
                          "(its reply is not S3's); check AWS_ENDPOINT_URL or the remote's "
                          "--endpoint")
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return StoreError(f"cannot {doing} store {where}: bucket {bucket} does not exist; "
                          f"create it (e.g. `aws s3 mb s3://{bucket}`) or fix the URL")
    if any(k in text for k in DENIED_SIGNS):
        return StoreError(f"cannot {doing} store {where}: access denied; check "
                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
    silent = any(k in text for k in SILENT_SIGNS)
    if silent or any(k in text for k in NETWORK_SIGNS + SERVER_SIGNS):
        fault = Unreachable(f"cannot {doing} store {where}: {_unreachable_why(text)} ({text}); "
                            "run the command again (a push or pull resumes where it stopped)")
        fault.silent = silent
        return fault
    return StoreError(f"cannot {doing} store {where}: {text or type(exc).__name__}; run the "
                      "command again, `triage verify` checks the store")


def _unreachable_why(text: str) -> str:
    if any(k in text for k in ("curlCode: 28", "Timeout", "timed out", "REQUEST_TIMEOUT")):
        return ("no answer within the timeout, after every try (--timeout, $TRIAGE_S3_TIMEOUT); "
                "check the server is up")
    if any(k in text for k in SERVER_SIGNS):
        return "the server kept failing (5xx or throttling) after every try"
    return ("cannot reach the server after every try; check AWS_ENDPOINT_URL, that the server "
            "is up, and the network")


def speaks_s3(endpoint: str) -> bool:
    """Whether the server at `endpoint` answers as S3 does (an unsigned GET of its root gets an
    S3 error or listing document, or x-amz-* headers); asked only once a request has failed
    for a reason S3 would not give. True when it cannot be asked (the failure says more)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(endpoint + "/", timeout=CONNECT_TIMEOUT) as answer:
            headers, body = answer.headers, answer.read(4096)
    except urllib.error.HTTPError as refused:
        headers, body = refused.headers, refused.read(4096)
    except (OSError, ValueError):
        return True
    amz = any(name.lower().startswith("x-amz-") for name in headers.keys())
    return amz or b"<Error>" in body or b"ListAllMyBucketsResult" in body


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
