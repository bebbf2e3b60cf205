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


class InputRefused(ValueError):
    """An input URL this server will not read (not on the allowlist, too large, unreachable); `code` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def allowed(url: str, allow: tuple[str, ...]) -> bool:
    """Whether `url` starts with one of the allowlisted prefixes (`s3://bucket/`, `https://host/path/`).
    A prefix must end at a path boundary so `https://cdn.example` does not admit `https://cdn.example.evil`."""
    for prefix in allow:
        if url.startswith(prefix) and (prefix.endswith("/") or url[len(prefix):len(prefix) + 1] in ("", "/")):
            return True
    return False


def fetch_url(url: str, dest: str | os.PathLike, *, allow: tuple[str, ...], max_bytes: int,
              timeout_s: float = 30.0) -> Path:
    """Copy an s3:// or http(s):// input the allowlist admits to `dest`, at most `max_bytes`, never
    following a redirect (an allowlisted address must not send the server elsewhere)."""
    import urllib.error
    import urllib.request

    if not url.startswith(("s3://", "https://", "http://")):
        raise InputRefused("input_bad_url", "an input URL is s3://bucket/key or https://host/path")
    if not allowed(url, allow):
        raise InputRefused("input_not_allowed", f"this server does not read inputs from {url[:200]!r}")
    dst = Path(dest)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if url.startswith("s3://"):
        from streamer.storage.base import StoreError
        from streamer.storage.s3 import S3Store

        bucket, key = split_s3_url(url)
        store = S3Store(bucket)
        try:
            head = store.client.head_object(Bucket=bucket, Key=key)
        except Exception as exc:   # noqa: BLE001 - told to the client in words
            raise InputRefused("input_unreadable", f"cannot read {url[:200]}: {exc}") from None
        if int(head.get("ContentLength", 0)) > max_bytes:
            raise InputRefused("input_too_large", f"{url[:200]} is {head['ContentLength']} bytes, the limit is {max_bytes}")
        try:
            return store.get_file(key, dst)
        except (StoreError, FileNotFoundError) as exc:
            raise InputRefused("input_unreadable", str(exc)) from None

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):   # noqa: ANN002 - urllib's signature
            return None

    opener = urllib.request.build_opener(NoRedirect)
    tmp = dst.with_name(dst.name + ".partial")
    try:
        with opener.open(urllib.request.Request(url, headers={"User-Agent": "livefuse"}), timeout=timeout_s) as r:
            if r.status != 200:
                raise InputRefused("input_unreadable", f"{url[:200]} answered {r.status}")
            size = 0
            with tmp.open("wb") as f:
                while chunk := r.read(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise InputRefused("input_too_large", f"{url[:200]} is over the limit of {max_bytes} bytes")
                    f.write(chunk)
        os.replace(tmp, dst)
    except urllib.error.HTTPError as exc:
        raise InputRefused("input_unreadable", f"{url[:200]} answered {exc.code} (redirects are not followed)") from None
    except (urllib.error.URLError, OSError) as exc:
        raise InputRefused("input_unreadable", f"cannot read {url[:200]}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return dst
