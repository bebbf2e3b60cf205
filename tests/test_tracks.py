"""FrameSlot keeps the newest frame; the worker runs the pipeline off the event loop; two real aiortc
peers in one process get the clip back in order, processed, with the pts they sent."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from av import VideoFrame

from streamer.config import ServerConfig
from streamer.peer import PeerSession
from streamer.pipeline import Pipeline
from streamer.probe import CODE_ROWS_PX, ClipTrack, ProbeClient, clip_background, paint_index, read_index
from streamer.services import Services
from streamer.session import Session
from aiortc.mediastreams import MediaStreamError

from streamer.tracks import Broadcast, FrameSlot, FrameWorker, FusedTrack, StreamStats
from tests.streaming_helpers import InvertBelowCode, Sleep, mean_abs


def test_slot_keeps_newest_and_counts_drops():
    slot: FrameSlot[int] = FrameSlot()
    assert slot.put(1) is False
    assert slot.put(2) is True
    assert slot.put(3) is True
    assert slot.take(timeout=0) == 3
    assert slot.take(timeout=0.01) is None
    assert (slot.puts, slot.dropped) == (3, 2)


def test_slot_take_wakes_on_put_from_another_thread_and_on_close():
    slot: FrameSlot[str] = FrameSlot()
    threading.Timer(0.05, slot.put, args=("x",)).start()
    t0 = time.monotonic()
    assert slot.take(timeout=2) == "x"
    assert time.monotonic() - t0 < 1.0
    threading.Timer(0.05, slot.close).start()
    assert slot.take(timeout=2) is None
    assert slot.closed and slot.put("late") is False


def _frame(index: int, w: int = 318, h: int = 238) -> VideoFrame:
    img = paint_index(np.full((h, w, 3), 90, np.uint8), index)
    f = VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
    f.pts = index * 3000
    import fractions

    f.time_base = fractions.Fraction(1, 90000)
    return f


def _collect(worker: FrameWorker) -> list[VideoFrame]:
    """Every frame the worker publishes (the waker runs in the worker thread right after each publish)."""
    outs: list[VideoFrame] = []
    seen = [0]

    def wake() -> None:
        seq, item = worker.outbox.latest()
        if seq != seen[0] and item is not None:
            seen[0] = seq
            outs.append(item[0])

    worker.outbox.subscribe(wake)
    return outs


def test_worker_with_slow_stage_processes_newest_and_drops_the_rest():
    """A 40 ms stage fed at ~200 fps: most frames are dropped, the last one is always processed."""
    stats = StreamStats()
    worker = FrameWorker(Session(), Pipeline([Sleep(40)]), stats)
    outs = _collect(worker)
    worker.start()
    for i in range(40):
        worker.submit(_frame(i))
        time.sleep(0.005)
    deadline = time.monotonic() + 3
    while (not outs or outs[-1].pts != 39 * 3000) and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.stop()
    assert not worker.alive and worker.outbox.closed
    pts = [f.pts for f in outs]
    assert pts[-1] == 39 * 3000, "the newest frame must be processed"
    assert pts == sorted(pts) and len(set(pts)) == len(pts)
    assert stats.dropped >= 20 and stats.frames_in == 40 and stats.frames_out == len(outs)
    assert outs[-1].width == 318 and outs[-1].height == 238
    assert read_index(outs[-1].to_ndarray(format="rgb24")) == 39


def test_worker_keeps_pts_and_odd_size_through_a_real_stage():
    worker = FrameWorker(Session(), Pipeline([InvertBelowCode()]), StreamStats())
    outs = _collect(worker)
    worker.start()
    src = _frame(7)
    worker.submit(src)
    deadline = time.monotonic() + 5
    while not outs and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    out = outs[0]
    assert (out.pts, out.time_base, out.width, out.height) == (src.pts, src.time_base, 318, 238)
    a, b = src.to_ndarray(format="rgb24"), out.to_ndarray(format="rgb24")
    assert mean_abs(255 - a[2 * CODE_ROWS_PX:], b[2 * CODE_ROWS_PX:]) < 3


async def test_private_fused_tracks_get_their_own_frames():
    source = Broadcast()
    first, viewer = FusedTrack(source), FusedTrack(source, private=True)
    f = _frame(3)
    threading.Thread(target=source.publish, args=(f, time.monotonic())).start()
    a = await asyncio.wait_for(first.recv(), 2)
    b = await asyncio.wait_for(viewer.recv(), 2)
    assert a is f and b is not f and b.pts == f.pts and b.time_base == f.time_base
    assert read_index(b.to_ndarray(format="rgb24")) == 3
    source.close()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(first.recv(), 2)


async def _connect(pipeline_stages, track, keep_images=0):
    config = ServerConfig(idle_timeout_s=30)
    services = Services(make_pipeline=lambda s: Pipeline(list(pipeline_stages)))
    server = PeerSession(config, services, Session())
    client = ProbeClient(track, keep_images=keep_images)
    offer = await client.offer()
    answer = await server.accept(offer.sdp)
    await client.accept(answer.sdp)
    return server, client


async def test_two_real_peers_frames_return_processed_in_order(astronaut):
    bg = clip_background(astronaut, 320, 240)
    track = ClipTrack(bg, fps=30, frames=75)
    server, client = await _connect([InvertBelowCode()], track, keep_images=200)
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


async def test_loopback_answer_has_only_127_candidates(astronaut):
    server, client = await _connect([], ClipTrack(clip_background(astronaut, 160, 120), frames=5))
    try:
        cands = [l for l in server.pc.localDescription.sdp.splitlines() if l.startswith("a=candidate")]
        assert cands and all(" 127.0.0.1 " in c for c in cands), cands
        assert not any(" srflx " in c or " relay " in c for c in cands)
    finally:
        await client.close()
        await server.close()
