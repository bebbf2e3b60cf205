"""Newest frame wins: a FuseStream holds at most one frame waiting for the pipeline. A frame that arrives
while another waits replaces it (the older one is skipped and counted), so a caller that sends faster than
the server fuses, or than it reads the fused frames back, gets the newest picture with a bounded delay
instead of a growing queue. Frames come out in the order they were sent (seq only grows)."""

from __future__ import annotations

import asyncio
from typing import Any


class FrameSlot:
    """On the event loop only."""

    def __init__(self) -> None:
        self._frame: Any = None
        self._changed = asyncio.Event()
        self._closed = False
        self.skipped = 0

    def put(self, frame: Any) -> bool:
        """Hold `frame` for the next `take`; True when it replaced one that was waiting."""
        replaced = self._frame is not None
        if replaced:
            self.skipped += 1
        self._frame = frame
        self._changed.set()
        return replaced

    def close(self) -> None:
        """No more frames: `take` hands out the one waiting (if any), then None."""
        self._closed = True
        self._changed.set()

    async def take(self) -> tuple[Any, int] | None:
        """The newest waiting frame and the skipped count so far, or None once closed and empty."""
        while self._frame is None:
            if self._closed:
                return None
            self._changed.clear()
            await self._changed.wait()
        frame, self._frame = self._frame, None
        return frame, self.skipped
