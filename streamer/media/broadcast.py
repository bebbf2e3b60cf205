"""The newest processed frame of a stream, for any number of consumers, and the copy each extra one gets."""

from __future__ import annotations

import threading
from typing import Callable

from av import VideoFrame


class Broadcast:
    """The newest processed frame, numbered, for any number of FusedTracks (the peer, WHEP viewers, sinks).
    Each consumer takes the newest frame it has not seen; nobody queues."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[VideoFrame, float] | None = None
        self.seq = 0
        self.closed = False
        self._wakers: set[Callable[[], None]] = set()

    def publish(self, frame: VideoFrame, arrived: float) -> None:
        with self._lock:
            self._item = (frame, arrived)
            self.seq += 1
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def latest(self) -> tuple[int, tuple[VideoFrame, float] | None]:
        with self._lock:
            return self.seq, self._item

    def close(self) -> None:
        with self._lock:
            self.closed = True
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def subscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.add(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.discard(wake)


def copy_frame(frame: VideoFrame) -> VideoFrame:
    """An independent frame with the same pixels and timing. aiortc's encoders write into the frame they
    encode (pict_type) from their own threads, so two encoders must never share one frame object."""
    if frame.format.name == "yuv420p" and frame.width % 2 == 0 and frame.height % 2 == 0:
        out = VideoFrame.from_ndarray(frame.to_ndarray(), format="yuv420p")
    else:
        out = VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
    out.pts = frame.pts
    if frame.time_base is not None:
        out.time_base = frame.time_base
    return out
