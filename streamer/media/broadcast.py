"""The newest processed frame of a stream, for any number of consumers, and the copy each extra one gets."""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import Callable, NamedTuple

from av import VideoFrame


class Published(NamedTuple):
    """One processed frame and its timing as it was when published. The timing is kept apart because the
    first consumer's encoder rewrites the frame object itself (PyAV rebases `pts` and `time_base` to the
    codec's own clock as it encodes): a later reader of `frame.pts` would see another clock."""

    frame: VideoFrame
    arrived: float
    pts: int | None
    time_base: Fraction | None

    @property
    def seconds(self) -> Fraction | None:
        return None if self.pts is None or self.time_base is None else self.pts * self.time_base


class Broadcast:
    """The newest processed frame, numbered, for any number of FusedTracks (the peer, WHEP viewers, sinks).
    Each consumer takes the newest frame it has not seen; nobody queues."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: Published | None = None
        self.seq = 0
        self.closed = False
        self._wakers: set[Callable[[], None]] = set()

    def publish(self, frame: VideoFrame, arrived: float) -> None:
        item = Published(frame, arrived, frame.pts, frame.time_base)
        with self._lock:
            self._item = item
            self.seq += 1
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def latest(self) -> tuple[int, Published | None]:
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
    encode (pict_type; PyAV rebases pts and time_base) from their own threads, so two encoders must never
    share one frame object (and a copy takes its timing from `Published`, not from the shared frame)."""
    if frame.format.name == "yuv420p" and frame.width % 2 == 0 and frame.height % 2 == 0:
        out = VideoFrame.from_ndarray(frame.to_ndarray(), format="yuv420p")
    else:
        out = VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
    out.pts = frame.pts
    if frame.time_base is not None:
        out.time_base = frame.time_base
    return out
