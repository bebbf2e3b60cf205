"""The sender's audio for viewers, held back by as long as the video spends in the pipeline.

The fused video keeps its capture timestamps but leaves the server later than it arrived (decode, the
stages, the newest-frame slot); untouched audio would leave at once. aiortc stamps each stream's RTCP
sender reports with the moment it sends, so a player lining the two streams up by those reports would
hear every word before the lips move. Sending each audio frame as much later as the video currently is
behind keeps them together. The delay follows the video's, smoothed over a couple of seconds, so a
change in load stretches the audio's timing a little instead of cutting it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from aiortc.mediastreams import MediaStreamTrack


class DelayedAudioTrack(MediaStreamTrack):
    """`source`'s frames, each sent `delay_ms()` after its capture time (None: no video yet, no delay).

    Capture times come from the frames' pts, anchored to the clock at the first frame, so frames that
    waited in a queue are not delayed twice; a jump in pts (a stalled or restarted sender) re-anchors."""

    kind = "audio"

    def __init__(self, source: MediaStreamTrack, delay_ms: Callable[[], float | None], *,
                 max_delay_ms: float = 400.0, smoothing_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._source = source
        self._delay_ms = delay_ms
        self._max_s = max_delay_ms / 1000.0
        self._smoothing_s = smoothing_s
        self._clock = clock
        self._delay_s: float | None = None
        self._anchor: tuple[float, float] | None = None   # (clock, capture time in s) of one frame

    @property
    def delay_s(self) -> float:
        """The delay applied to the last frame, in seconds."""
        return self._delay_s or 0.0

    async def recv(self):
        frame = await self._source.recv()
        now = self._clock()
        target = min(max((self._delay_ms() or 0.0) / 1000.0, 0.0), self._max_s)
        step = (frame.samples / frame.sample_rate) if frame.sample_rate else 0.02
        if self._delay_s is None:
            self._delay_s = target
        else:
            self._delay_s += (target - self._delay_s) * min(1.0, step / self._smoothing_s)
        if frame.pts is None or frame.time_base is None:
            await asyncio.sleep(self._delay_s)
            return frame
        captured = float(frame.pts * frame.time_base)
        if self._anchor is None or abs((now - self._anchor[0]) - (captured - self._anchor[1])) > 1.0:
            self._anchor = (now, captured)
        due = self._anchor[0] + (captured - self._anchor[1]) + self._delay_s
        wait = due - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)
        return frame

    def stop(self) -> None:
        super().stop()
        self._source.stop()
