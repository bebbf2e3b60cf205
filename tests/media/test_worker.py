"""The worker runs the pipeline off the event loop, newest frame first, keeping each frame's pts, time
base and size."""

from __future__ import annotations

import time

from av import VideoFrame

from streamer.media.stats import StreamStats
from streamer.pipeline import Pipeline
from streamer.probe import CODE_ROWS_PX, read_index
from streamer.session import Session
from streamer.tracks import FrameWorker
from tests.streaming_helpers import InvertBelowCode, Sleep, indexed_frame, mean_abs


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
        worker.submit(indexed_frame(i))
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
    src = indexed_frame(7)
    worker.submit(src)
    deadline = time.monotonic() + 5
    while not outs and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    out = outs[0]
    assert (out.pts, out.time_base, out.width, out.height) == (src.pts, src.time_base, 318, 238)
    a, b = src.to_ndarray(format="rgb24"), out.to_ndarray(format="rgb24")
    assert mean_abs(255 - a[2 * CODE_ROWS_PX:], b[2 * CODE_ROWS_PX:]) < 3
