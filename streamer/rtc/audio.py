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


# aiortc's audio receiver (rtcrtpreceiver.py: JitterBuffer(capacity=16, prefetch=4)) hands each audio frame
# on only once four more have arrived behind it
AIORTC_AUDIO_PREFETCH = 4


class DelayedAudioTrack(MediaStreamTrack):
    """`source`'s frames, each sent `delay_ms()` after its capture time (None: no video yet, no delay).

    Capture times come from the frames' pts, anchored to the clock at the first frame, so frames that
    waited in a queue are not delayed twice; a jump in pts (a stalled or restarted sender) re-anchors."""

    kind = "audio"

    def __init__(self, source: MediaStreamTrack, delay_ms: Callable[[], float | None], *,
                 video_wait_ms: Callable[[], float | None] = lambda: None, audio_wait_frames: int = 0,
                 max_delay_ms: float = 400.0, smoothing_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        """`video_wait_ms()` and `audio_wait_frames`: how long each stream waited before the server saw
        it, which the hold evens out too (aiortc's receiver hands a video frame on when the next one
        starts, one frame interval, and an audio frame once `AIORTC_AUDIO_PREFETCH` more are behind it)."""
        super().__init__()
        self._source = source
        self._delay_ms = delay_ms
        self._video_wait_ms = video_wait_ms
        self._audio_wait_frames = audio_wait_frames
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
        step = (frame.samples / frame.sample_rate) if frame.sample_rate else 0.02
        video = self._delay_ms()
        hold_s = 0.0 if video is None else (video + (self._video_wait_ms() or 0.0)) / 1000.0 - self._audio_wait_frames * step
        target = min(max(hold_s, 0.0), self._max_s)
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
