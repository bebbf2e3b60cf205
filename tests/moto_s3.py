"""A real S3-compatible server for the storage, process and job tests: moto's server mode on loopback (its state lives in
this process, so a stopped server that starts again on the same port finds its buckets)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoS3:
    port: int
    server: object = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        """Down for real: the listening socket closes too, so clients see connection refused."""
        if self.server is not None:
            self.server.stop()
            self.server._server.server_close()
            self.server = None

    def client(self, **kw):
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                              config=Config(signature_version="s3v4", s3={"addressing_style": "path"}), **kw)


@pytest.fixture
def moto_s3(monkeypatch):
    """moto on 127.0.0.1 with a bucket `results`; the standard AWS variables point at it."""
    s3 = MotoS3(free_port())
    s3.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{s3.endpoint}/moto-api/reset", method="POST"), timeout=10).close()
    s3.client().create_bucket(Bucket="results")   # moto's state is per process: each test starts from none
    try:
        yield s3
    finally:
        s3.stop()
