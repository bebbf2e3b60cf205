"""FusedTrack hands each consumer the newest processed frame (private ones get copies); two real aiortc
peers in one process get the clip back in order, processed, with the pts they sent."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from streamer.config import ServerConfig
from streamer.media.broadcast import Broadcast
from streamer.media.tracks import FusedTrack
from streamer.rtc.peer import PeerSession
from streamer.pipeline.pipeline import Pipeline
from bench._probe import CODE_ROWS_PX, ClipTrack, ProbeClient, clip_background, paint_index, read_index
from streamer.services import NullServices
from streamer.session.session import Session
from tests.streaming_helpers import InvertBelowCode, indexed_frame, mean_abs


async def test_private_fused_tracks_get_their_own_frames():
    source = Broadcast()
    first, viewer = FusedTrack(source), FusedTrack(source, private=True)
    f = indexed_frame(3)
    threading.Thread(target=source.publish, args=(f, time.monotonic())).start()
    a = await asyncio.wait_for(first.recv(), 2)
    b = await asyncio.wait_for(viewer.recv(), 2)
    assert a is f and b is not f and b.pts == f.pts and b.time_base == f.time_base
    assert read_index(b.to_ndarray(format="rgb24")) == 3
    source.close()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(first.recv(), 2)


async def test_a_viewer_gets_every_frame_whatever_the_first_consumers_encoder_did_to_it():
    """aiortc's encoder (PyAV) rebases the frame it encodes to its own clock (pts and time_base change in
    place). A viewer that copied one frame after that and the next before it compared pts of two clocks
    and then dropped every later frame: WHEP viewers froze after a frame or two, about one in a hundred."""
    from fractions import Fraction

    from aiortc.codecs import get_encoder
    from aiortc.rtcrtpparameters import RTCRtpCodecParameters

    encoder = get_encoder(RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000))
    source = Broadcast()
    first, viewer = FusedTrack(source), FusedTrack(source, private=True)
    got = []
    for k in range(1, 7):
        f = indexed_frame(k)
        f.pts, f.time_base = 3000 * k, Fraction(1, 90000)
        source.publish(f, time.monotonic())
        if k % 2:                                   # the viewer copies it after the encoder had it ...
            encoder.encode(await asyncio.wait_for(first.recv(), 2), False)
            got.append(await asyncio.wait_for(viewer.recv(), 2))
        else:                                       # ... or before
            got.append(await asyncio.wait_for(viewer.recv(), 2))
            encoder.encode(await asyncio.wait_for(first.recv(), 2), False)
    assert [read_index(g.to_ndarray(format="rgb24")) for g in got] == [1, 2, 3, 4, 5, 6]
    assert [(g.pts, g.time_base) for g in got] == [(3000 * k, Fraction(1, 90000)) for k in range(1, 7)]
    source.close()


async def test_two_real_peers_frames_return_processed_in_order(astronaut):
    bg = clip_background(astronaut, 320, 240)
    server = PeerSession(ServerConfig(idle_timeout_s=30), NullServices(make_pipeline=lambda s: Pipeline([InvertBelowCode()])),
                         Session())
    client = ProbeClient(ClipTrack(bg, fps=30, frames=75), keep_images=200)
    await client.accept((await server.accept((await client.offer()).sdp)).sdp)
    try:
        await client.wait_frames(40, timeout=20)
    finally:
        await client.close()
        await server.close("test over")
    back = [r for r in client.received if r.index is not None]
    idx = [r.index for r in back]
    assert idx == sorted(idx) and len(set(idx)) == len(idx), f"out of order: {idx}"
    assert len(back) >= 40 and back[0].size == (320, 240)
    # the client's receiver rebuilds pts from RTP time: 3000 ticks (90 kHz at 30 fps) per index, within
    # a few ticks (aiortc's encoder rounds through its own clock)
    steps = [(b.pts - a.pts) / (b.index - a.index) for a, b in zip(back, back[1:])]
    assert all(abs(s - 3000) <= 5 for s in steps), steps
    # the returned pixels are what the pipeline made: the photo, inverted below the code band
    r = next(r for r in back if r.image is not None and r.index > 5)
    sent = paint_index(np.roll(bg, int(2 * np.sin(r.index / 15.0)), axis=1), r.index)
    assert mean_abs(255 - sent[2 * CODE_ROWS_PX:], r.image[2 * CODE_ROWS_PX:]) < 12
    assert mean_abs(sent[2 * CODE_ROWS_PX:], r.image[2 * CODE_ROWS_PX:]) > 60
    assert server.stats.frames_out >= 40 and "invert" in server.stats.snapshot()["stages_ms"]
    assert not server.worker.alive
