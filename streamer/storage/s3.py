"""Results in S3-compatible object storage (AWS S3, Ceph RadosGW, MinIO, moto), through boto3.

Endpoint, region and credentials come from the standard AWS settings chain (environment, shared config
and credentials files, instance roles), `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` included, so any
S3-compatible store works without a setting of ours. With an endpoint of one's own, path-style addressing
is the default (a self-hosted store rarely has wildcard DNS for bucket names).

A file larger than one part goes up as a multipart upload, one part in memory at a time (`part_size`),
each request retried with exponential backoff on connection errors, timeouts and 5xx replies; a refusal
(wrong credentials, no such bucket) fails at once. An upload that fails is aborted, so the key never holds
a truncated object (S3 shows an object only once its upload completes); where the abort itself cannot
reach the store, the upload id is kept and aborted on the store's next successful call.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from streamer.storage.base import StoredObject, StoreError

log = logging.getLogger(__name__)

RETRYABLE_CODES = {"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown",
                   "RequestTimeout", "RequestTimeTooSkewed", "Throttling"}
MIN_PART = 5 << 20   # S3's smallest part but the last


@dataclass(frozen=True, slots=True)
class S3Settings:
    part_size: int = 8 << 20           # bytes per part, and the most a put holds in memory
    attempts: int = 5                  # tries per request
    backoff_s: float = 0.25            # first wait between tries, doubling ...
    max_backoff_s: float = 8.0         # ... up to this
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 60.0
    addressing_style: str = ""         # "path" / "virtual" / "auto"; "" = path with a custom endpoint, else auto

    def __post_init__(self) -> None:
        if self.part_size < MIN_PART:
            raise ValueError(f"part_size must be at least {MIN_PART} bytes (S3's smallest part)")
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")


def _custom_endpoint() -> bool:
    return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))


class S3Store:
    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings = S3Settings(), *, client: Any = None) -> None:
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix, self.settings = bucket, prefix.strip("/"), settings
        self.description = f"s3://{bucket}/{self.prefix}".rstrip("/")
        style = settings.addressing_style or ("path" if _custom_endpoint() else "auto")
        config = Config(signature_version="s3v4", s3={"addressing_style": style},
                        retries={"total_max_attempts": 1},   # the retries are ours, with their backoff and message
                        connect_timeout=settings.connect_timeout_s, read_timeout=settings.read_timeout_s)
        self.client = client or boto3.session.Session().client("s3", config=config)
        self._stale: list[tuple[str, str]] = []   # (key, upload id) whose abort could not reach the store
        self._lock = threading.Lock()

    # -- keys ------------------------------------------------------------------------------------
    def full_key(self, key: str) -> str:
        key = key.lstrip("/")
        if not key or ".." in key.split("/"):
            raise ValueError(f"bad key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    # -- requests with retries --------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., Any], **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        s = self.settings
        last: Exception | None = None
        for attempt in range(s.attempts):
            try:
                return fn(**kw)
            except ClientError as exc:
                err = exc.response.get("Error", {})
                code = str(err.get("Code", ""))
                status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
                if code not in RETRYABLE_CODES and status not in RETRYABLE_CODES:
                    raise StoreError(f"{self.description}: {what} refused: {code or status} "
                                     f"{err.get('Message') or ''}".rstrip()) from None
                last = exc
            except BotoCoreError as exc:   # connection refused or reset, timeouts, bad endpoint
                last = exc
            if attempt + 1 < s.attempts:
                time.sleep(min(s.max_backoff_s, s.backoff_s * (2 ** attempt)))
        raise StoreError(f"{self.description}: {what} failed after {s.attempts} tries: {last}")

    def _abort(self, key: str, upload_id: str) -> bool:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            return True
        except Exception as exc:   # noqa: BLE001 - the store may be the thing that is down
            log.warning("aborting upload %s of %s failed (%s); it is retried on the next call", upload_id, key, exc)
            with self._lock:
                self._stale.append((key, upload_id))
            return False

    def abort_stale(self) -> int:
        """Abort the uploads whose abort could not reach the store earlier; how many are left."""
        with self._lock:
            stale, self._stale = self._stale, []
        for key, upload_id in stale:
            self._abort(key, upload_id)
        with self._lock:
            return len(self._stale)

    # -- the store --------------------------------------------------------------------------------
    def put_file(self, key: str, path: str | os.PathLike, content_type: str = "application/octet-stream",
                 *, on_part: Callable[[int, int], None] | None = None) -> StoredObject:
        """`on_part(part_number, bytes_sent)` after each part (progress; tests stop the store there)."""
        full = self.full_key(key)
        src = Path(path)
        size = src.stat().st_size
        part = self.settings.part_size
        if self._stale:
            self.abort_stale()
        if size <= part:   # one request: the object appears whole or not at all
            data = src.read_bytes()
            self._call(f"uploading {full}", self.client.put_object, Bucket=self.bucket, Key=full, Body=data,
                       ContentType=content_type)
            if on_part is not None:
                on_part(1, size)
            return StoredObject(key=key, url=f"s3://{self.bucket}/{full}", size=size)
        upload = self._call(f"starting the upload of {full}", self.client.create_multipart_upload,
                            Bucket=self.bucket, Key=full, ContentType=content_type)
        upload_id = upload["UploadId"]
        parts: list[dict[str, Any]] = []
        try:
            with src.open("rb") as f:
                sent = 0
                while chunk := f.read(part):
                    n = len(parts) + 1
                    reply = self._call(f"uploading part {n} of {full}", self.client.upload_part, Bucket=self.bucket,
                                       Key=full, UploadId=upload_id, PartNumber=n, Body=chunk)
                    parts.append({"PartNumber": n, "ETag": reply["ETag"]})
                    sent += len(chunk)
                    del chunk
                    if on_part is not None:
                        on_part(n, sent)
            self._call(f"completing the upload of {full}", self.client.complete_multipart_upload, Bucket=self.bucket,
                       Key=full, UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException as exc:
            aborted = self._abort(full, upload_id)
            if isinstance(exc, StoreError):
                raise StoreError(f"{exc}; the upload was {'aborted' if aborted else 'left incomplete (no object was written; its abort is retried)'}") from None
            raise
        return StoredObject(key=key, url=f"s3://{self.bucket}/{full}", size=size, parts=len(parts))

    def get_file(self, key: str, dest: str | os.PathLike) -> Path:
        from botocore.exceptions import ClientError

        full = self.full_key(key)
        dst = Path(dest)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.partial")

        def fetch() -> None:
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=full)["Body"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise FileNotFoundError(f"no object {self.bucket}/{full}") from None
                raise
            with tmp.open("wb") as f:
                for chunk in body.iter_chunks(1 << 20):
                    f.write(chunk)

        try:
            self._call(f"downloading {full}", fetch)
            os.replace(tmp, dst)
        finally:
            tmp.unlink(missing_ok=True)
        return dst

    def presigned_url(self, key: str, expires_s: int = 3600) -> str:
        return self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": self.full_key(key)},
                                                  ExpiresIn=int(expires_s))

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._call(f"looking up {key}", self.client.head_object, Bucket=self.bucket, Key=self.full_key(key))
            return True
        except StoreError as exc:
            if "404" in str(exc) or "Not Found" in str(exc) or "NoSuchKey" in str(exc):
                return False
            raise
        except ClientError:
            return False

    def delete(self, key: str) -> None:
        self._call(f"deleting {key}", self.client.delete_object, Bucket=self.bucket, Key=self.full_key(key))


class GrowingUpload:
    """A file that is still being written (a live recording), uploaded while it grows: each time `poll()`
    finds a whole part's worth of new bytes past what is sent, that part goes up; `finish()` sends the
    rest as the last part and completes the upload; `abort()` (or a failure) leaves no object. The file
    must only grow by appending (a fragmented MP4 does). Memory: one part at a time."""

    def __init__(self, store: S3Store, key: str, path: str | os.PathLike, content_type: str = "video/mp4") -> None:
        self.store, self.key, self.path = store, store.full_key(key), Path(path)
        self.content_type = content_type
        self.sent = 0
        self.parts: list[dict[str, Any]] = []
        self.upload_id: str | None = None
        self.done = False

    def _start(self) -> str:
        if self.upload_id is None:
            s = self.store
            self.upload_id = s._call(f"starting the upload of {self.key}", s.client.create_multipart_upload,
                                     Bucket=s.bucket, Key=self.key, ContentType=self.content_type)["UploadId"]
        return self.upload_id

    def _send(self, data: bytes) -> None:
        s = self.store
        n = len(self.parts) + 1
        reply = s._call(f"uploading part {n} of {self.key}", s.client.upload_part, Bucket=s.bucket, Key=self.key,
                        UploadId=self._start(), PartNumber=n, Body=data)
        self.parts.append({"PartNumber": n, "ETag": reply["ETag"]})
        self.sent += len(data)

    def poll(self) -> int:
        """Send every whole part written since the last call; how many went."""
        part, count = self.store.settings.part_size, 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        while size - self.sent >= part:
            with self.path.open("rb") as f:
                f.seek(self.sent)
                data = f.read(part)
            try:
                self._send(data)
            except BaseException:
                self.abort()
                raise
            count += 1
        return count

    def finish(self) -> StoredObject:
        """The file is complete: the rest goes up (as the last part, or as one object when it is small)."""
        try:
            self.poll()
            with self.path.open("rb") as f:
                f.seek(self.sent)
                rest = f.read()
            if self.upload_id is None:   # never reached one part: one plain upload, whole or not at all
                s = self.store
                s._call(f"uploading {self.key}", s.client.put_object, Bucket=s.bucket, Key=self.key, Body=rest,
                        ContentType=self.content_type)
                self.sent += len(rest)
            else:
                if rest:
                    self._send(rest)
                s = self.store
                s._call(f"completing the upload of {self.key}", s.client.complete_multipart_upload, Bucket=s.bucket,
                        Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": self.parts})
        except BaseException:
            self.abort()
            raise
        self.done = True
        return StoredObject(key=self.key, url=f"s3://{self.store.bucket}/{self.key}", size=self.sent,
                            parts=max(1, len(self.parts)))

    def abort(self) -> None:
        if self.upload_id is not None and not self.done:
            self.store._abort(self.key, self.upload_id)
            self.upload_id = None
