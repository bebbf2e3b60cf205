"""The results store seam. A store takes a finished file under a key and says where a client fetches it;
an upload either completes whole or leaves nothing under the key (never a truncated object), and a store
that cannot be reached fails with a `StoreError` that says which store and why."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class StoreError(RuntimeError):
    """The store refused or could not be reached (after its retries); the message names it and says why."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str           # the key under the store's prefix, as given
    url: str           # where it lives: s3://bucket/prefix/key or a file path
    size: int
    parts: int = 1     # upload parts it took (multipart uploads > 1)


class ResultStore(Protocol):
    """Thread-safe; every call blocks (run it off the event loop)."""

    description: str

    def put_file(self, key: str, path: str | os.PathLike, content_type: str = "application/octet-stream") -> StoredObject:
        """Store the file at `path` under `key`: whole, or not at all (StoreError)."""

    def get_file(self, key: str, dest: str | os.PathLike) -> Path:
        """Copy the object under `key` to `dest` (written beside it, then renamed: never half a file)."""

    def presigned_url(self, key: str, expires_s: int = 3600) -> str:
        """A URL a client (or a CDN) fetches the object by with a plain GET, valid for `expires_s`."""

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...


def split_s3_url(url: str) -> tuple[str, str]:
    """s3://bucket/some/prefix -> ("bucket", "some/prefix"); ValueError for anything else."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}; write s3://BUCKET/PREFIX")
    return bucket, prefix.strip("/")


def media_type(path: str | os.PathLike) -> str:
    """The HTTP media type of a result file, by its suffix."""
    return {".mp4": "video/mp4", ".mov": "video/quicktime", ".mkv": "video/x-matroska", ".webm": "video/webm",
            ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}.get(Path(path).suffix.lower(),
                                                                                 "application/octet-stream")
