"""Decoding uploaded images off the event loop, within a memory budget.

A small compressed file can decode to tens of megabytes, so the budget counts what decoding will hold
(width x height x 3 from the header), not the bytes received. Uploads beyond the budget are refused at
once instead of queueing: a client that floods the server gets "busy", and everyone else's uploads and
frames keep their memory and CPU. The pool is the decoder's own, so a flood of uploads cannot take the
loop's default executor away from the work that also runs there (model loading, source registration).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from engines.sources import SourceConfig, SourceRefused, decode_image, probe_image

DEFAULT_MAX_PENDING_BYTES = 256 << 20   # about five 4096 x 4096 decodes at once


class DecoderBusy(SourceRefused):
    """The decoder's memory budget is taken by uploads in flight; the client should retry shortly."""

    def __init__(self, needed: int, pending: int, budget: int) -> None:
        super().__init__("busy", f"the server is decoding other images ({pending} of {budget} bytes in use); "
                                 f"this one needs {needed} bytes: try again shortly")
        self.needed, self.pending, self.budget = needed, pending, budget


class UploadDecoder:
    """`await decode(data, config)` -> H x W x 3 uint8 RGB, run on `max_workers` threads of its own.

    Refusals are SourceRefused: from the header, before any decoding (not an image, too large, wrong
    shape), or DecoderBusy (budget full). The budget is returned when the decode ends, however it ends:
    success, an error, or the caller cancelled (a decode already running holds its memory until it ends).
    """

    def __init__(self, max_workers: int = 2, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        if max_workers < 1 or max_pending_bytes < 1:
            raise ValueError(f"max_workers and max_pending_bytes must be >= 1, got {max_workers}, {max_pending_bytes}")
        self.max_workers = max_workers
        self.max_pending_bytes = max_pending_bytes
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="upload-decode")
        self._lock = threading.Lock()
        self._pending = 0

    @property
    def pending_bytes(self) -> int:
        """Decoded bytes reserved by decodes queued or running now."""
        with self._lock:
            return self._pending

    async def decode(self, data: bytes | bytearray | memoryview, config: SourceConfig = SourceConfig()) -> np.ndarray:
        if not isinstance(data, (bytes, bytearray, memoryview)):  # a str would be read as a file path
            raise SourceRefused("bad_image", f"upload data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        width, height = probe_image(data, config)
        needed = width * height * 3
        if needed > self.max_pending_bytes:
            raise SourceRefused("too_large", f"image: {width}x{height} needs {needed} bytes to decode, more than "
                                             f"the decoder's budget of {self.max_pending_bytes}")
        self._reserve(needed)
        try:
            job: Future[np.ndarray] = self._pool.submit(decode_image, data, config)
        except BaseException:
            self._release(needed)
            raise
        job.add_done_callback(lambda _: self._release(needed))  # runs on finish and on cancel-before-start
        return await asyncio.wrap_future(job)

    def close(self, wait: bool = True) -> None:
        """Stop taking work; queued decodes are cancelled, running ones finish (waited for when `wait`)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def _reserve(self, needed: int) -> None:
        with self._lock:
            if self._pending + needed > self.max_pending_bytes:
                raise DecoderBusy(needed, self._pending, self.max_pending_bytes)
            self._pending += needed

    def _release(self, needed: int) -> None:
        with self._lock:
            self._pending -= needed
