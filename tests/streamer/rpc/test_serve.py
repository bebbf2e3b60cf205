"""`livefuse serve --grpc-port` as a user runs it: one process serving HTTPS and gRPC over TLS with the same
certificate and the same tokens file; health turns SERVING once the models have loaded, a photo is fused
through livefuse.client over grpcs://, a call without a token is refused, and SIGTERM ends it with 0."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from livefuse.client import Client, LiveFuseError
from tests.streamer.web.api.conftest import encode

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem"


def health(target: str, ca: bytes, service: str = "") -> int | None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.secure_channel(target, grpc.ssl_channel_credentials(ca)) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status
        except grpc.RpcError:
            return None


def test_serve_with_grpc_port_over_tls(tmp_path, astronaut, grace_hopper):
    from grpc_health.v1 import health_pb2

    from streamer.safety.auth import TokenStore

    cert, key = self_signed(tmp_path)
    store = TokenStore()
    token = store.issue("alice")
    store.save(tmp_path / "tokens.json")
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "LIVEFUSE_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "streamer.app.cli", "serve", "--port", str(port),
                             "--grpc-port", str(grpc_port), "--cert", str(cert), "--key", str(key),
                             "--tokens", str(tmp_path / "tokens.json"), "--results", str(tmp_path / "results")],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target, ca = f"localhost:{grpc_port}", cert.read_bytes()
    try:
        deadline = time.monotonic() + 180
        while health(target, ca) != health_pb2.HealthCheckResponse.SERVING:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "gRPC health never said SERVING"
            time.sleep(0.5)
        assert health(target, ca, "liveness") == health_pb2.HealthCheckResponse.SERVING
        ctx = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(f"https://localhost:{port}/readyz", context=ctx, timeout=10) as r:
            assert r.status == 200                                   # HTTPS from the same process, same cert
        with Client(f"grpcs://{target}", token=token, ca=str(cert)) as lf:
            out = lf.fuse(encode(astronaut), encode(grace_hopper), consent=True)
        assert out.faces == 1 and out.media_type == "image/png" and len(out.watermark) == 16
        with Client(f"grpcs://{target}", ca=str(cert)) as anonymous, pytest.raises(LiveFuseError) as info:
            anonymous.fuse(encode(astronaut), encode(grace_hopper), consent=True)
        assert info.value.status == "UNAUTHENTICATED"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
