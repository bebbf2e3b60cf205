"""Decoding uploaded images off the event loop, within a memory budget shared by everything a photo or
clip frame holds in flight.

A small compressed file can decode to tens of megabytes, so the budget counts what decoding will hold
(width x height x 3 from the header, times the copies the caller's work makes of it), not the bytes
received. A request holds a `Lease` on the budget: its body's bytes as they arrive, then each decode's
share, all given back at once when the request ends. Requests beyond the budget are refused at once
(503 + Retry-After) instead of queueing: a client that floods the server gets "busy", and everyone
else's uploads and frames keep their memory and CPU. The pool is the decoder's own, so a flood of
uploads cannot take the loop's default executor away from the work that also runs there (model
loading, source registration).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from engines.sources import SourceConfig, SourceRefused, decode_image, probe_image
from streamer.config import DEFAULT_MAX_PENDING_BYTES

# the image types every upload route accepts (a source, a target, a background picture); the decoder
# checks the bytes themselves
IMAGE_TYPES = ("image/jpeg", "image/png", "image/webp")


class DecoderBusy(SourceRefused):
    """The decoder's memory budget is taken by uploads in flight; the client should retry shortly."""

    def __init__(self, needed: int, pending: int, budget: int) -> None:
        super().__init__("busy", f"the server's memory for images in flight is taken ({pending} of {budget} bytes "
                                 f"in use); this needs {needed} more: try again shortly")
        self.needed, self.pending, self.budget = needed, pending, budget


class MemoryBudget:
    """Bytes that requests in flight may hold, shared by the whole server; thread-safe."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"a memory budget must be >= 1 byte, got {total}")
        self.total = total
        self._lock = threading.Condition()
        self._used = 0

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def lease(self) -> "Lease":
        return Lease(self)

    def take(self, needed: int) -> None:
        """Now or DecoderBusy (never waits)."""
        with self._lock:
            if self._used + needed > self.total:
                raise DecoderBusy(needed, self._used, self.total)
            self._used += needed

    def wait_take(self, needed: int, timeout: float | None = None) -> bool:
        """For work that may wait its turn (a queued clip job's frames, on its own thread): True once taken."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._used + needed <= self.total, timeout):
                return False
            self._used += needed
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n
            self._lock.notify_all()


class Lease:
    """What one request holds of the budget: grown as it takes memory, given back whole by `release`
    (idempotent; also on leaving a `with` block)."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.held = 0
        self._lock = threading.Lock()

    def grow(self, n: int) -> None:
        if n <= 0:
            return
        self.budget.take(n)
        with self._lock:
            self.held += n

    def release(self) -> None:
        with self._lock:
            n, self.held = self.held, 0
        if n:
            self.budget.give(n)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class UploadDecoder:
    """`await decode(data, config)` -> H x W x 3 uint8 RGB, run on `max_workers` threads of its own.

    Refusals are SourceRefused: from the header, before any decoding (not an image, too large, wrong
    shape), or DecoderBusy (budget full). Without a lease, the budget is returned when the decode ends,
    however it ends: success, an error, or the caller cancelled (a decode already running holds its
    memory until it ends). With one, the decode's share (times `hold`: the copies the caller's work will
    make of the image) stays in the lease until the caller releases it.
    """

    def __init__(self, max_workers: int = 2, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        if max_workers < 1 or max_pending_bytes < 1:
            raise ValueError(f"max_workers and max_pending_bytes must be >= 1, got {max_workers}, {max_pending_bytes}")
        self.max_workers = max_workers
        self.max_pending_bytes = max_pending_bytes
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="upload-decode")
        self.budget = MemoryBudget(max_pending_bytes)

    @property
    def pending_bytes(self) -> int:
        """Bytes of the budget held now (decodes queued or running, requests' leases)."""
        return self.budget.used

    async def decode(self, data: bytes | bytearray | memoryview, config: SourceConfig = SourceConfig(),
                     lease: Lease | None = None, hold: float = 1.0) -> np.ndarray:
        if not isinstance(data, (bytes, bytearray, memoryview)):  # a str would be read as a file path
            raise SourceRefused("bad_image", f"upload data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        width, height = probe_image(data, config)
        needed = int(width * height * 3 * max(1.0, hold))
        if needed > self.max_pending_bytes:
            raise SourceRefused("too_large", f"image: {width}x{height} needs {needed} bytes to decode and work on, "
                                             f"more than the server's memory budget of {self.max_pending_bytes}")
        if lease is not None:
            lease.grow(needed)
            return await asyncio.wrap_future(self._pool.submit(decode_image, data, config))
        self.budget.take(needed)
        try:
            job: Future[np.ndarray] = self._pool.submit(decode_image, data, config)
        except BaseException:
            self.budget.give(needed)
            raise
        job.add_done_callback(lambda _: self.budget.give(needed))  # runs on finish and on cancel-before-start
        return await asyncio.wrap_future(job)

    def close(self, wait: bool = True) -> None:
        """Stop taking work; queued decodes are cancelled, running ones finish (waited for when `wait`)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
