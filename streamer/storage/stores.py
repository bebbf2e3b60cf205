"""Stores by name: `open_store("s3://bucket/prefix")` or a folder, and the s3:// URL helpers `livefuse
process` uses for its input and output."""

from __future__ import annotations

import os
from pathlib import Path

from streamer.storage.base import ResultStore, StoredObject, split_s3_url


def open_store(spec: str, **settings: object) -> ResultStore:
    """`s3://bucket/prefix` -> an S3Store (endpoint, region and credentials from the standard AWS chain,
    AWS_ENDPOINT_URL included); anything else is a local folder (made if missing)."""
    if spec.startswith("s3://"):
        from streamer.storage.s3 import S3Settings, S3Store

        bucket, prefix = split_s3_url(spec)
        return S3Store(bucket, prefix, S3Settings(**settings))  # type: ignore[arg-type]
    from streamer.storage.local import LocalStore

    return LocalStore(spec)


def fetch_input(url: str, folder: str | os.PathLike) -> Path:
    """A local path for an input named by path or by s3://bucket/key (downloaded into `folder`)."""
    if not url.startswith("s3://"):
        return Path(url)
    from streamer.storage.s3 import S3Store

    bucket, key = split_s3_url(url)
    return S3Store(bucket).get_file(key, Path(folder) / Path(key).name)


def store_output(local: str | os.PathLike, url: str, content_type: str = "application/octet-stream") -> StoredObject:
    """Put a finished local file at s3://bucket/key (multipart, retried; whole or not at all)."""
    from streamer.storage.s3 import S3Store

    bucket, key = split_s3_url(url)
    return S3Store(bucket).put_file(key, local, content_type)
