"""Getting a catalogue model onto disk: the licence gate, the download, the check, the move into place.

The transfer uses the standard library's urllib (no extra dependency: one GET per try, an HTTP Range header
to go on from the bytes already fetched) and tqdm (already a dependency) for the progress bar. Bytes go
to `<models>/.partial/<file>.part`, hashed as they arrive; a cut transfer is retried with exponential
backoff and resumed from where it stopped (on the same URL, or on the next mirror, since every URL serves
the same bytes); a server that ignores the Range starts the file over. Only after the whole file's sha256
matches is it moved (one rename on the same filesystem) into the models folder, so a reader never sees
half a file. Any failure (a wrong hash, a full disk, every mirror down, Ctrl-C) removes the partial file:
nothing is left behind.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import IO, Callable, Iterable

from engines.catalogue.entries import (PARTIAL_DIR, PINS_FILE, Catalogue, CatalogueError, Entry, expected_sha256,
                                       installed_path, load, models_dir, write_pin, _sha_cached)

USER_AGENT = "livefuse-models/1 (+https://github.com/livefuse)"
DISK_MARGIN = 16 << 20     # bytes kept free beyond the file itself


class ModelsError(RuntimeError):
    """A model could not be installed; the message says why and what to do."""


class LicenceNotAccepted(ModelsError):
    pass


class HashUnknown(ModelsError):
    pass


class HashMismatch(ModelsError):
    pass


class DiskFull(ModelsError):
    pass


class DownloadFailed(ModelsError):
    pass


class _Permanent(Exception):
    """This URL will not serve the file (404, 403, a bad scheme): go to the next one."""


class _Transient(Exception):
    """A cut, a timeout, a 5xx: try again after a pause, going on from the bytes already here."""


@dataclass(frozen=True, slots=True)
class Retry:
    attempts: int = 4          # tries per URL
    backoff_s: float = 1.0     # first pause; doubles each time
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0    # per connection and per read


def accepted(entry: Entry, accept: Iterable[str]) -> bool:
    """A commercial-use licence needs nothing; another needs --accept-licence with its key or the model's name."""
    if entry.commercial:
        return True
    names = {a.strip().lower() for a in accept}
    return entry.licence.key.lower() in names or entry.name.lower() in names


def licence_refusal(entry: Entry) -> str:
    return (f"{entry.name} is licensed under {entry.licence.name} ({entry.licence.url}), which does not allow "
            f"commercial use. Read it; to download it for a use that licence allows, run again with "
            f"--accept-licence {entry.licence.key}")


def _urls(entry: Entry, mirror: str | None) -> list[str]:
    out = [mirror.rstrip("/") + "/" + entry.file] if mirror else []
    return out + [u for u in entry.urls if u not in out]


def _check_room(folder: Path, need: int | None) -> None:
    if need is None or need <= 0:
        return
    free = shutil.disk_usage(folder).free
    if need + DISK_MARGIN > free:
        raise DiskFull(f"not enough free disk in {folder}: the file needs {_mb(need)}, {_mb(free)} is free; "
                       "free some room or point LIVEFUSE_MODELS at another disk")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class _Transfer:
    """The partial file and the running hash of its bytes, kept across tries and mirrors."""

    def __init__(self, part: Path, progress: Callable[[int, int | None], None]) -> None:
        self.part = part
        self.progress = progress
        self.hasher = hashlib.sha256()
        self.have = 0
        if part.is_file():                 # left by a process that was killed: go on from it
            with part.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    self.hasher.update(block)
                    self.have += len(block)

    def restart(self) -> None:
        self.hasher = hashlib.sha256()
        self.have = 0
        self.part.write_bytes(b"")

    def fetch(self, url: str, opener: urllib.request.OpenerDirector, retry: Retry) -> int | None:
        """One GET from `self.have` on. Returns the file's total size when known; raises _Transient on a cut."""
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if self.have:
            headers["Range"] = f"bytes={self.have}-"
        req = urllib.request.Request(url, headers=headers)
        try:
            resp = opener.open(req, timeout=retry.timeout_s)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and self.have:      # the range is past the end: the part is not this file's start
                self.restart()
                raise _Transient("the server refused the resume range; starting over") from None
            if exc.code in (408, 425, 429) or exc.code >= 500:
                raise _Transient(f"HTTP {exc.code}") from None
            raise _Permanent(f"HTTP {exc.code} {exc.reason}") from None
        except ValueError as exc:                  # unknown url type
            raise _Permanent(str(exc)) from None
        except (urllib.error.URLError, OSError, HTTPException) as exc:
            raise _Transient(_reason(exc)) from None
        with resp:
            status = getattr(resp, "status", 200)
            length = resp.headers.get("Content-Length")
            if self.have and status == 206:
                start = _range_start(resp.headers.get("Content-Range", ""))
                if start != self.have:
                    self.restart()
                    raise _Transient(f"the server resumed at byte {start}, not {self.have}; starting over")
            elif self.have:                        # 200: the server sent the whole file again
                self.restart()
            total = self.have + int(length) if length is not None and length.isdigit() else None
            self.progress(self.have, total)
            try:
                with self.part.open("ab") as out:
                    while True:
                        try:
                            block = resp.read(1 << 16)
                        except (OSError, HTTPException) as exc:
                            raise _Transient(f"cut after {self.have} bytes ({_reason(exc)})") from None
                        if not block:
                            break
                        out.write(block)
                        self.hasher.update(block)
                        self.have += len(block)
                        self.progress(self.have, total)
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFull(f"the disk holding {self.part.parent.parent} filled up after {_mb(self.have)}; "
                                   "free some room or point LIVEFUSE_MODELS at another disk") from None
                raise
        if total is not None and self.have < total:
            raise _Transient(f"cut at {self.have} of {total} bytes")
        return total


def _reason(exc: BaseException) -> str:
    r = getattr(exc, "reason", None)
    return str(r if r is not None else exc) or type(exc).__name__


def _range_start(content_range: str) -> int | None:
    # "bytes 100-199/200"
    try:
        return int(content_range.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def download(entry: Entry, folder: Path, sha256: str, *, mirror: str | None = None, retry: Retry = Retry(),
             progress: IO[str] | None = None, opener: urllib.request.OpenerDirector | None = None,
             sleep: Callable[[float], None] = time.sleep) -> Path:
    """Fetch `entry` into `folder` and return the installed path. Raises a ModelsError naming the cause;
    leaves no partial file behind."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / PARTIAL_DIR
    partial.mkdir(exist_ok=True)
    part = partial / (entry.file + ".part")
    target = folder / entry.file
    opener = opener or urllib.request.build_opener()
    bar = _bar(entry, progress)
    errors: list[str] = []
    try:
        transfer = _Transfer(part, bar)
        _check_room(folder, (entry.size - transfer.have) if entry.size else None)
        done = False
        for url in _urls(entry, mirror):
            for attempt in range(1, retry.attempts + 1):
                try:
                    transfer.fetch(url, opener, retry)
                    done = True
                    break
                except _Permanent as exc:
                    errors.append(f"{url}: {exc}")
                    break
                except _Transient as exc:
                    errors.append(f"{url}: {exc} (try {attempt} of {retry.attempts})")
                    if attempt < retry.attempts:
                        sleep(min(retry.max_backoff_s, retry.backoff_s * 2 ** (attempt - 1)))
            if done:
                break
        if not done:
            raise DownloadFailed(f"{entry.name}: no URL served the file:\n  " + "\n  ".join(errors))
        got = transfer.hasher.hexdigest()
        if got != sha256:
            raise HashMismatch(f"{entry.name}: the downloaded file has sha256 {got}, expected {sha256}; it was "
                               f"not installed (nothing was kept). The mirror may serve another version or a "
                               f"damaged file.")
        os.replace(part, target)
        _fsync_dir(folder)
        return target
    finally:
        bar.close()
        part.unlink(missing_ok=True)
        try:
            partial.rmdir()
        except OSError:
            pass


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Bar:
    """A tqdm progress bar fed with (bytes so far, total or None); silent without a stream."""

    def __init__(self, desc: str, stream: IO[str] | None, size: int | None) -> None:
        self._bar = None
        if stream is not None:
            from tqdm import tqdm

            self._bar = tqdm(total=size, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=stream,
                             mininterval=0.2, ascii=not getattr(stream, "isatty", lambda: False)(), leave=True)

    def __call__(self, have: int, total: int | None) -> None:
        if self._bar is None:
            return
        if total is not None and self._bar.total != total:
            self._bar.total = total
        self._bar.n = have
        self._bar.refresh() if have == total else self._bar.update(0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _bar(entry: Entry, stream: IO[str] | None) -> _Bar:
    return _Bar(entry.name, stream, entry.size)


@dataclass(frozen=True, slots=True)
class GetResult:
    path: Path
    entry: Entry
    downloaded: bool          # False: it was installed and verified already


def get(name: str, *, folder: Path | None = None, accept: Iterable[str] = (), sha256: str | None = None,
        mirror: str | None = None, retry: Retry = Retry(), progress: IO[str] | None = None,
        catalogue: Catalogue | None = None, opener: urllib.request.OpenerDirector | None = None,
        sleep: Callable[[float], None] = time.sleep) -> GetResult:
    """`livefuse models get NAME`: the licence gate, the hash to check against, then the download."""
    cat = catalogue or load()
    try:
        entry = cat.get(name)
    except CatalogueError as exc:
        raise ModelsError(str(exc)) from None
    folder = folder or models_dir()
    if not accepted(entry, accept):
        raise LicenceNotAccepted(licence_refusal(entry))
    given = sha256.strip().lower() if sha256 else None
    if given is not None and (len(given) != 64 or any(c not in "0123456789abcdef" for c in given)):
        raise ModelsError(f"--sha256 must be 64 hex digits, got {sha256!r}")
    if entry.sha256 and given and given != entry.sha256:
        raise HashMismatch(f"{entry.name}: --sha256 {given} differs from the catalogue's {entry.sha256}; "
                           "the catalogue's hash is the one checked")
    want = entry.sha256 or given
    if want is None:
        raise HashUnknown(f"{entry.name}: no sha256 of this file is published ({entry.sha256_source}); LiveFuse "
                          f"installs no model it cannot check. If you have the file's sha256 from a source you "
                          f"trust, run again with --sha256 HEX")
    have = installed_path(entry, folder)
    if have is not None and _sha_cached(have) == want:
        if given and not entry.sha256:
            write_pin(folder, entry.name, given)
        return GetResult(have, entry, downloaded=False)
    path = download(entry, folder, want, mirror=mirror, retry=retry, progress=progress, opener=opener, sleep=sleep)
    if not entry.sha256:
        write_pin(folder, entry.name, want)
    return GetResult(path, entry, downloaded=True)


def remove(name: str, *, folder: Path | None = None, catalogue: Catalogue | None = None) -> Path | None:
    """Delete an installed model (and its pin); returns the path removed, None when it was not installed."""
    cat = catalogue or load()
    try:
        entry = cat.get(name)
    except CatalogueError as exc:
        raise ModelsError(str(exc)) from None
    folder = folder or models_dir()
    path = installed_path(entry, folder)
    if path is not None:
        path.unlink()
    if (folder / PINS_FILE).is_file():
        write_pin(folder, entry.name, None)
    return path


__all__ = ["DiskFull", "DownloadFailed", "GetResult", "HashMismatch", "HashUnknown", "LicenceNotAccepted",
           "ModelsError", "Retry", "accepted", "download", "expected_sha256", "get", "remove"]
