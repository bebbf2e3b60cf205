"""The newest-frame-wins handoff between two threads.

aiortc's receive queue is unbounded, so a filter slower than the camera would build seconds of delay; a
slot holds one item instead, and an item replaced before anybody took it is a drop.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class FrameSlot(Generic[T]):
    """Holds one item: a put replaces what nobody took yet (a drop). Thread-safe; `take` blocks."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: T | None = None
        self._full = False
        self._closed = False
        self.puts = 0
        self.dropped = 0

    def put(self, item: T) -> bool:
        """Store `item`; True when it replaced one that was never taken."""
        with self._cond:
            if self._closed:
                return False
            dropped = self._full
            self._item, self._full = item, True
            self.puts += 1
            self.dropped += dropped
            self._cond.notify_all()
        return dropped

    def take(self, timeout: float | None = None) -> T | None:
        """The newest item, waiting up to `timeout` s; None on timeout or once closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._full or self._closed, timeout):
                return None
            if not self._full:
                return None
            item, self._item, self._full = self._item, None, False
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
