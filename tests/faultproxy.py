"""A flaky network for the tests and benchmarks: an HTTP proxy on 127.0.0.1 in front of the
suite's S3 server (tests/s3server.py) that fails a seeded fraction of the requests it is sent.

Each request it fails is failed one of four ways, as a real bad day does: a 500 or a 503 with
S3's own error document, or the connection dropped (reset) before the request reaches the server
or after the server acted on it (the client never sees the reply of a write that happened).

Which request fails is decided by a hash of (seed, method, path without the bucket, how many
times that method and path were asked before), not by the order requests arrive in nor by the
bucket's name (each test makes a new one): the same command against the same seed meets the
same faults, whatever threads the client uses (a lease's key, which names the writer's process,
is the exception). A retry of a failed request is a new draw. `only` limits faults to requests
whose "METHOD path" matches a regular expression (`^GET .*/objects/`: data reads alone), and
`faults` to some of the four kinds; `counts` says what was asked and what was failed.

    with FaultProxy(server.endpoint, rate=0.1, seed=1) as proxy:
        ... AWS_ENDPOINT_URL=proxy.endpoint ...
"""

from __future__ import annotations

import hashlib
import http.client
import re
import socket
import struct
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

FAULTS = ("500", "503", "drop-before", "drop-after")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}
ERROR_DOCUMENT = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                  "<Message>injected by faultproxy</Message></Error>")


class FaultProxy:
    """The proxy, serving on a free loopback port from `start` (or `with`) until `stop`."""

    def __init__(self, upstream: str, rate: float, seed: int = 0, only: str | None = None,
                 faults: tuple[str, ...] = FAULTS):
        self.upstream = urlparse(upstream).netloc
        self.rate, self.seed, self.faults = rate, seed, faults
        self.only = re.compile(only) if only else None
        self.counts: Counter[str] = Counter()  # "requests", "failed", and each fault's name
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def fault_for(self, method: str, path: str) -> str | None:
        """The fault this request meets (None: forwarded as it is), drawn from the seed."""
        what = f"{method} {path}"
        drawn = f"{method} {path.lstrip('/').partition('/')[2]}"  # the bucket's name aside
        with self._lock:
            self.counts["requests"] += 1
            nth = self._seen[drawn]
            self._seen[drawn] += 1
        if self.only is not None and not self.only.search(what):
            return None
        digest = _digest(self.seed, drawn, nth)
        if draw(self.seed, drawn, nth) >= self.rate:
            return None
        fault = self.faults[digest[8] % len(self.faults)]
        with self._lock:
            self.counts["failed"] += 1
            self.counts[fault] += 1
        return fault


def draw(seed: int, drawn: str, nth: int) -> float:
    """The number in [0, 1) that decides whether the `nth` earlier-asked request `drawn`
    ("METHOD path", the bucket's name aside) fails: it does below the rate. For a test that
    needs a seed failing one given request and not its retry."""
    return struct.unpack(">Q", _digest(seed, drawn, nth)[:8])[0] / 2**64


def _digest(seed: int, drawn: str, nth: int) -> bytes:
    return hashlib.sha256(f"{seed}|{drawn}|{nth}".encode()).digest()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: the tests' output is the CLI's
            pass

        def _any(self) -> None:
            body = self._body()
            fault = proxy.fault_for(self.command, self.path)
            if fault == "drop-before":
                return self._drop()
            if fault in ("500", "503"):
                code = "InternalError" if fault == "500" else "SlowDown"
                return self._reply(int(fault), [("Content-Type", "application/xml")],
                                   ERROR_DOCUMENT.format(code=code).encode())
            status, headers, data = self._forward(body)
            if fault == "drop-after":
                return self._drop()
            self._reply(status, headers, data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                return self.rfile.read(length)
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return self._chunked()
            return b""

        def _chunked(self) -> bytes:
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            connection = http.client.HTTPConnection(proxy.upstream, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_BY_HOP and k.lower() != "expect"}
                chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
                if chunked:  # as it came: S3's streaming uploads (aws-chunked) are chunked
                    headers["Transfer-Encoding"] = "chunked"
                else:
                    headers["Content-Length"] = str(len(body))
                connection.request(self.command, self.path, body=iter([body]) if chunked
                                   else body, headers=headers, encode_chunked=chunked)
                answer = connection.getresponse()
                data = answer.read()
                kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in HOP_BY_HOP]
                return answer.status, kept, data
            finally:
                connection.close()

        def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response(status)
            for key, value in headers:
                if key.lower() != "content-length" or self.command == "HEAD":
                    self.send_header(key, value)
            if self.command != "HEAD":  # a HEAD's length is the object's, sent as it came
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _drop(self) -> None:
            """Reset the connection: no reply at all (SO_LINGER 0 sends an RST)."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

    return Handler


class SilentServer:
    """A server that accepts connections and never answers: the time a client takes to give up
    is its own timeout's."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            self._held.append(conn)

    def stop(self) -> None:
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self._socket.close()
        for conn in self._held:
            conn.close()
        self._thread.join(timeout=5)
