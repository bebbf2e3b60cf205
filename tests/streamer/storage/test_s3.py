"""S3Store against a real S3-compatible server (moto on loopback), configured only through the standard
AWS variables: uploads (one request and multipart), presigned GETs fetched with plain HTTP, a store that
goes down mid-upload (a brief outage is ridden out; a long one fails cleanly with nothing half-written,
and the next upload after it returns works and clears the abandoned upload)."""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request

import pytest

from streamer.storage import StoreError, open_store
from streamer.storage.s3 import S3Settings, S3Store

MiB = 1 << 20


def blob(path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def fast(**kw) -> S3Settings:
    return S3Settings(part_size=5 * MiB, backoff_s=0.05, max_backoff_s=0.2, connect_timeout_s=1, read_timeout_s=5, **kw)


def test_small_and_multipart_uploads_and_presigned_get(moto_s3, tmp_path):
    store = open_store("s3://results/clips/2026", part_size=5 * MiB)
    small = blob(tmp_path / "small.png", 200_000)
    big = blob(tmp_path / "big.mp4", 12 * MiB)
    a = store.put_file("a/small.png", tmp_path / "small.png", "image/png")
    b = store.put_file("b/big.mp4", tmp_path / "big.mp4", "video/mp4")
    assert (a.parts, b.parts) == (1, 3) and b.size == len(big)
    assert b.url == "s3://results/clips/2026/b/big.mp4"
    raw = moto_s3.client().get_object(Bucket="results", Key="clips/2026/b/big.mp4")
    assert raw["Body"].read() == big and raw["ContentType"] == "video/mp4"
    url = store.presigned_url("a/small.png", expires_s=300)
    assert url.startswith(moto_s3.endpoint + "/results/clips/2026/a/small.png?") and "X-Amz-Signature" in url
    with urllib.request.urlopen(url, timeout=10) as r:   # plain HTTP, no SDK
        assert r.status == 200 and r.read() == small
    assert store.get_file("b/big.mp4", tmp_path / "back.mp4").read_bytes() == big
    assert store.exists("a/small.png") and not store.exists("nope.png")
    store.delete("a/small.png")
    assert not store.exists("a/small.png")


def test_wrong_bucket_is_refused_at_once_with_a_clear_reason(moto_s3, tmp_path):
    blob(tmp_path / "x.bin", 1000)
    store = S3Store("no-such-bucket", "p", fast())
    with pytest.raises(StoreError, match="no-such-bucket.*refused: NoSuchBucket"):
        store.put_file("x.bin", tmp_path / "x.bin")


def test_a_brief_outage_mid_upload_is_ridden_out_by_the_retries(moto_s3, tmp_path):
    data = blob(tmp_path / "clip.mp4", 11 * MiB)
    store = S3Store("results", "jobs", fast(attempts=8))

    def after_part(n: int, sent: int) -> None:
        if n == 1:
            moto_s3.stop()
            threading.Timer(0.4, moto_s3.start).start()   # back while the retries still run

    got = store.put_file("clip.mp4", tmp_path / "clip.mp4", "video/mp4", on_part=after_part)
    assert got.parts == 3
    assert moto_s3.client().get_object(Bucket="results", Key="jobs/clip.mp4")["Body"].read() == data


def test_a_store_down_mid_upload_fails_cleanly_and_works_once_back(moto_s3, tmp_path):
    data = blob(tmp_path / "clip.mp4", 11 * MiB)
    store = S3Store("results", "jobs", fast(attempts=3))
    with pytest.raises(StoreError, match=r"uploading part 2 of jobs/clip.mp4 failed after 3 tries"):
        store.put_file("clip.mp4", tmp_path / "clip.mp4", "video/mp4", on_part=lambda n, _: n == 1 and moto_s3.stop())
    moto_s3.start()
    s3 = moto_s3.client()
    assert s3.list_objects_v2(Bucket="results").get("KeyCount", 0) == 0          # nothing half-written
    assert len(s3.list_multipart_uploads(Bucket="results").get("Uploads", [])) == 1   # the abandoned upload, until ...
    got = store.put_file("clip.mp4", tmp_path / "clip.mp4", "video/mp4")          # ... the retry after it returns
    assert got.parts == 3 and s3.get_object(Bucket="results", Key="jobs/clip.mp4")["Body"].read() == data
    assert s3.list_multipart_uploads(Bucket="results").get("Uploads", []) == []   # which also aborted the old one


def test_a_store_that_is_down_from_the_start_says_so(moto_s3, tmp_path):
    blob(tmp_path / "x.bin", 1000)
    moto_s3.stop()
    store = S3Store("results", "", fast(attempts=2))
    with pytest.raises(StoreError, match=r"s3://results: uploading x.bin failed after 2 tries: .*(Could not connect|Connect)"):
        store.put_file("x.bin", tmp_path / "x.bin")
    moto_s3.start()


def test_a_growing_file_goes_up_in_parts_while_it_is_written(moto_s3, tmp_path):
    from streamer.storage.s3 import GrowingUpload

    store = S3Store("results", "rec", fast())
    path = tmp_path / "live.mp4"
    up = GrowingUpload(store, "session/live.mp4", path)
    written = b""
    with path.open("ab") as f:
        for _ in range(6):   # 2 MiB at a time, as a recording grows
            chunk = os.urandom(2 * MiB)
            f.write(chunk)
            f.flush()
            written += chunk
            up.poll()
    s3 = moto_s3.client()
    uploads = s3.list_multipart_uploads(Bucket="results").get("Uploads", [])
    assert len(uploads) == 1   # parts went up while the file was still open
    assert len(s3.list_parts(Bucket="results", Key="rec/session/live.mp4", UploadId=uploads[0]["UploadId"])["Parts"]) == 2
    assert s3.list_objects_v2(Bucket="results").get("KeyCount", 0) == 0   # nothing visible until it ends
    got = up.finish()
    assert got.parts == 3 and got.size == len(written)
    assert s3.get_object(Bucket="results", Key="rec/session/live.mp4")["Body"].read() == written
    small = GrowingUpload(store, "session/short.mp4", tmp_path / "short.mp4")
    (tmp_path / "short.mp4").write_bytes(b"x" * 1000)
    assert small.finish().parts == 1
