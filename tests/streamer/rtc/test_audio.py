"""Viewers' audio held back by the video's delay: frames leave at capture time + the delay, queued frames
are not delayed twice, the delay follows the video's smoothly, and no video means no delay."""

from __future__ import annotations

import asyncio
import fractions
import time

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from streamer.rtc.audio import DelayedAudioTrack
from streamer.pipeline.stats import StreamStats

RATE, SAMPLES = 48000, 960      # 20 ms frames


def _frame(i: int) -> AudioFrame:
    frame = AudioFrame.from_ndarray(np.zeros((1, SAMPLES), np.int16), format="s16", layout="mono")
    frame.sample_rate, frame.pts, frame.time_base = RATE, i * SAMPLES, fractions.Fraction(1, RATE)
    return frame


class QueuedSource(MediaStreamTrack):
    """`n` frames, all ready at once (as if they waited in a queue), then the end of the stream."""

    kind = "audio"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.frames = [_frame(i) for i in range(n)]

    async def recv(self):
        if not self.frames:
            raise MediaStreamError
        return self.frames.pop(0)


async def _drain(track: DelayedAudioTrack) -> list[tuple[float, float]]:
    """(seconds since start, capture time) of every frame the track lets out."""
    out, t0 = [], time.monotonic()
    try:
        while True:
            frame = await track.recv()
            out.append((time.monotonic() - t0, float(frame.pts * frame.time_base)))
    except MediaStreamError:
        return out


async def test_frames_leave_at_capture_time_plus_the_delay_and_queued_ones_are_not_delayed_twice():
    track = DelayedAudioTrack(QueuedSource(10), lambda: 120.0)
    sent = await _drain(track)
    assert [c for _, c in sent] == pytest.approx([i * 0.02 for i in range(10)])
    for at, captured in sent:
        assert at >= captured + 0.120 - 0.003            # never early
        assert at <= captured + 0.120 + 0.250            # and late only by the machine's scheduling
    assert track.delay_s == pytest.approx(0.120)


async def test_the_delay_follows_the_videos_smoothly_and_is_capped():
    delays = iter([40.0] * 5 + [240.0] * 200)
    track = DelayedAudioTrack(QueuedSource(60), lambda: next(delays), smoothing_s=0.5, max_delay_ms=200.0)
    seen = []
    try:
        while True:
            await track.recv()
            seen.append(track.delay_s)
    except MediaStreamError:
        pass
    steps = np.diff(seen)
    assert seen[0] == pytest.approx(0.040)
    assert steps.max() <= (0.200 - 0.040) * 0.02 / 0.5 + 1e-9   # one frame moves it a frame's share
    assert 0.150 < seen[-1] <= 0.200                            # towards the video's, never past the cap


async def test_no_video_yet_means_no_delay_and_stop_reaches_the_source():
    source = QueuedSource(5)
    track = DelayedAudioTrack(source, StreamStats().delay_ms)      # no frame has gone through yet
    t0 = time.monotonic()
    sent = await _drain(track)
    assert len(sent) == 5 and track.delay_s == 0.0
    assert time.monotonic() - t0 < 0.35                          # paced by capture time only (80 ms)
    track.stop()
    assert source.readyState == "ended"
    await asyncio.sleep(0)


async def test_the_hold_evens_out_what_each_stream_waited_before_the_server_saw_it():
    """aiortc hands video on a frame interval late and audio four frames late: audio that already waited
    47 ms longer than the video (80 against 33) is held that much less, and never below zero."""
    track = DelayedAudioTrack(QueuedSource(3), lambda: 120.0, video_wait_ms=lambda: 33.0, audio_wait_frames=4)
    await _drain(track)
    assert track.delay_s == pytest.approx(0.120 + 0.033 - 0.080)
    fast = DelayedAudioTrack(QueuedSource(3), lambda: 5.0, video_wait_ms=lambda: 33.0, audio_wait_frames=4)
    await _drain(fast)
    assert fast.delay_s == 0.0


def test_frame_interval_is_the_median_gap_between_arrivals():
    clock = iter([10.0, 10.033, 10.066, 10.2, 10.233])      # one late frame among 30 fps arrivals
    stats = StreamStats(clock=lambda: next(clock))
    assert stats.frame_interval_ms() is None
    for _ in range(5):
        stats.frame_in(dropped=False)
    assert stats.frame_interval_ms() == pytest.approx(33.0)
