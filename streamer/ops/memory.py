"""Giving a finished session's memory back to the system, without a pause any stream can see.

A session's objects (its peer connection, tracks, pipeline and their native buffers) sit in reference
cycles, which only Python's cyclic collector frees, and a busy server may go many sessions between two
full collections: memory then climbs with every session opened and closed. The models loaded at start
make a full collection long enough to stall frames (docs/safety.md), so the
startup heap is frozen out of the collector's view (`gc.freeze`) once the shared models are loaded, and
a full collection after a session ends walks only what was made since. Memory freed that way
goes back to the allocator; `malloc_trim` (glibc) then hands free pages back to the system, so RSS
follows the open sessions instead of their peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[], Any] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


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
