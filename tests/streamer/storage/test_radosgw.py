"""S3Store against Ceph RadosGW (a strict S3 implementation, unlike moto): multipart uploads, presigned
GETs fetched with plain HTTP and refused once expired, wrong credentials refused at once with a clear
reason."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import pytest

from streamer.storage import StoreError
from streamer.storage.s3 import S3Settings, S3Store
from tests.radosgw import ACCESS_KEY, SECRET_KEY, radosgw  # noqa: F401 - the fixture

MiB = 1 << 20


@pytest.fixture
def aws_env(radosgw, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", radosgw.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    store = S3Store("results", "livefuse", S3Settings(part_size=5 * MiB))
    try:
        store.client.create_bucket(Bucket="results")
    except store.client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return store


def test_multipart_presigned_and_expiry(aws_env, tmp_path):
    data = os.urandom(11 * MiB)
    (tmp_path / "clip.mp4").write_bytes(data)
    got = aws_env.put_file("jobs/1/result.mp4", tmp_path / "clip.mp4", "video/mp4")
    assert got.parts == 3
    url = aws_env.presigned_url("jobs/1/result.mp4", expires_s=2)
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == data and r.headers["Content-Type"] == "video/mp4"
    time.sleep(3)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403   # expired
    tampered = url.replace("jobs/1/result.mp4", "jobs/1/other.mp4")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=10)
    assert refused.value.code == 403   # the signature covers the key


def test_wrong_credentials_are_refused_at_once(aws_env, monkeypatch, tmp_path):
    (tmp_path / "x.bin").write_bytes(b"x" * 1000)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = S3Store("results", "livefuse", S3Settings(attempts=5, backoff_s=1.0))
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"s3://results/livefuse: uploading livefuse/x.bin refused: SignatureDoesNotMatch"):
        store.put_file("x.bin", tmp_path / "x.bin")
    assert time.monotonic() - t0 < 1.0   # a refusal is not retried
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEY")
    with pytest.raises(StoreError, match="refused: InvalidAccessKeyId"):
        S3Store("results", "livefuse").put_file("x.bin", tmp_path / "x.bin")
