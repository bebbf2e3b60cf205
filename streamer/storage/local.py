"""A results store in a local folder: each file is written beside its final name and renamed into
place, so a reader never sees half of one."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from streamer.storage.base import StoredObject, StoreError


class LocalStore:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"results folder {self.root} cannot be made: {exc}") from None
        self.description = str(self.root)

    def path(self, key: str) -> Path:
        """The file for `key`, which must stay inside the folder."""
        p = (self.root / key).resolve()
        if p != self.root and self.root not in p.parents:
            raise ValueError(f"key {key!r} leaves the results folder")
        return p

    def _copy(self, src: Path, dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.partial")
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def put_file(self, key: str, path: str | os.PathLike, content_type: str = "application/octet-stream") -> StoredObject:
        dst = self.path(key)
        try:
            self._copy(Path(path), dst)
        except OSError as exc:
            raise StoreError(f"writing {key!r} to {self.root} failed: {exc}") from None
        return StoredObject(key=key, url=str(dst), size=dst.stat().st_size)

    def get_file(self, key: str, dest: str | os.PathLike) -> Path:
        src = self.path(key)
        if not src.is_file():
            raise FileNotFoundError(f"no {key!r} in {self.root}")
        self._copy(src, Path(dest))
        return Path(dest)

    def presigned_url(self, key: str, expires_s: int = 3600) -> str:
        return self.path(key).as_uri()

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
