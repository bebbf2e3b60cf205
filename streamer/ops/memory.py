"""Giving a finished session's memory back to the system, without a pause any stream can see.

A session's objects (its peer connection, tracks, pipeline and their native buffers) sit in reference
cycles, which only Python's cyclic collector frees, and a busy server may go many sessions between two
full collections: memory then climbs with every session opened and closed. The models loaded at start
make a full collection long enough to stall frames (docs/safety.md), so the
startup heap is frozen out of the collector's view (`gc.freeze`) once the shared models are loaded, and
a full collection after a session ends walks only what was made since. Memory freed that way
goes back to the allocator; `malloc_trim` (glibc) then hands free pages back to the system, so RSS
follows the open sessions instead of their peak.

Between frames the other way round: each frame makes and drops arrays of the same few sizes (a face's
region as float32 is 1-2 MB), and glibc gives the free top of the main thread's heap back once it passes its
trim threshold (128 KiB at first, raised only by freed mmap'd blocks), so on the main thread the next
frame's arrays fault their pages in again; worker threads' arenas keep theirs. Every edit at once on a face
242 px wide (`livefuse bench edits`' near face) took 1,529 page faults a frame on the main thread, 8.40 ms
median; with `keep_freed_memory`, 0.1 faults and 6.75 ms; on a worker thread, 0 faults either way
(2026-12-07, the shared 2-core x86-64 VM, 100 frames). The server runs frames on worker threads;
`livefuse process` and the benchmarks run them on the main thread, and the command line sets this at start so
they run as the server does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

# glibc's malloc.h
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (its own symbol answers), else None (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return None
    return libc


def _malloc_trim() -> Callable[[], Any] | None:
    """glibc's malloc_trim(0), or None where the C library has none."""
    libc = _glibc()
    if libc is None:
        return None
    trim = libc.malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    mmap_threshold: int = 32 << 20   # blocks below this come from the heap, so a freed one is reused
    trim_threshold: int = 128 << 20  # free memory at the heap's top kept up to this (malloc_trim still returns it)


def keep_freed_memory(config: AllocatorConfig = AllocatorConfig()) -> bool:
    """Sets glibc's mmap and trim thresholds for this process (one call, at start); True when they were set.
    A user who sets glibc's own `MALLOC_*_` variables has chosen, and is left alone."""
    if any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ):
        return False
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success
    return bool(mallopt(M_MMAP_THRESHOLD, config.mmap_threshold)) and bool(mallopt(M_TRIM_THRESHOLD, config.trim_threshold))


class HeapKeeper:
    """One per server. `settle()` once the shared models are loaded; `session_ended()` after each peer
    (session or viewer) is gone, from the event loop: it returns at once, and one collection runs on a
    thread of its own however many peers ended meanwhile."""

    def __init__(self, on_collected: Callable[[float], None] | None = None) -> None:
        self._trim = _malloc_trim()
        self._on_collected = on_collected
        self._lock = threading.Lock()
        self._due = False
        self._running = False

    def settle(self) -> None:
        """Collect what start-up left, then freeze the rest (the models, the libraries) out of later
        collections. Runs once, off the event loop (it is the one full walk of the startup heap)."""
        gc.collect()
        gc.freeze()

    def session_ended(self) -> None:
        with self._lock:
            self._due = True
            if self._running:
                return          # the running pass collects again before it stops
            self._running = True
        threading.Thread(target=self._run, name="heap-keeper", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._due:
                    self._running = False
                    return
                self._due = False
            t0 = time.perf_counter()
            try:
                gc.collect()
                if self._trim is not None:
                    self._trim()
            except Exception:   # never let a clean-up pass take anything down with it
                log.exception("releasing memory after a session failed")
            if self._on_collected is not None:
                self._on_collected(time.perf_counter() - t0)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """True once no pass is running or due (tests and benchmarks read RSS after it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._running and not self._due:
                    return True
            time.sleep(0.01)
        return False
