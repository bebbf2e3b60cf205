"""The worker runs the pipeline off the event loop, newest frame first, keeping each frame's pts, time
base and size; every failure of a frame (a stage's, a conversion's) reaches its one error hook and the
stats once, and the stream goes on."""

from __future__ import annotations

import time

import numpy as np
from av import VideoFrame

from streamer.pipeline.stats import StreamStats
from streamer.pipeline.pipeline import Pipeline
from bench._probe import CODE_ROWS_PX, read_index
from streamer.session.session import Session
from streamer.pipeline.worker import CONVERSION, FrameWorker
from tests.streaming_helpers import Boom, InvertBelowCode, Sleep, indexed_frame, mean_abs


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


class GreyOn:
    """Hands back a one-channel picture on the frames named: one the encoders' conversion cannot take."""

    name = "grey"

    def __init__(self, *pts: int) -> None:
        self.pts = set(pts)

    def __call__(self, state, session):
        if state.pts in self.pts:
            state.image = np.ascontiguousarray(state.image[..., 0])
        return state


def _run_one_by_one(worker: FrameWorker, frames: list[VideoFrame], reported: list) -> list[VideoFrame]:
    """Submit each frame once the last one came out or failed, so nothing is dropped."""
    outs = _collect(worker)
    worker.start()
    try:
        for f in frames:
            done = len(outs) + len(reported)
            worker.submit(f)
            deadline = time.monotonic() + 5
            while len(outs) + len(reported) == done and time.monotonic() < deadline:
                time.sleep(0.005)
    finally:
        worker.stop()
    return outs


def test_a_conversion_failure_reaches_the_error_hook_and_the_stats_and_the_stream_goes_on():
    reported: list[tuple[str, str]] = []
    stats = StreamStats()
    worker = FrameWorker(Session(), Pipeline([GreyOn(3000)]), stats,
                         on_error=lambda stage, message: reported.append((stage, message)))
    outs = _run_one_by_one(worker, [indexed_frame(i) for i in range(3)], reported)
    assert [f.pts for f in outs] == [0, 6000]                     # the frame that failed is lost, no more
    assert read_index(outs[-1].to_ndarray(format="rgb24")) == 2
    ((stage, message),) = reported
    assert stage == CONVERSION and message.startswith("ValueError: expected HxWx3 uint8 RGB")
    assert stats.errors == 1 and stats.snapshot()["errors"] == 1 and stats.frames_out == 2
    assert not worker.alive and worker.outbox.closed


def test_a_stage_failure_is_reported_once_per_frame_and_the_frame_goes_on():
    reported: list[tuple[str, str]] = []
    stats = StreamStats()
    worker = FrameWorker(Session(), Pipeline([Boom(), InvertBelowCode()]), stats,
                         on_error=lambda stage, message: reported.append((stage, message)))
    outs = _collect(worker)
    worker.start()
    try:
        for i in range(2):
            worker.submit(indexed_frame(i))
            deadline = time.monotonic() + 5
            while len(outs) <= i and time.monotonic() < deadline:
                time.sleep(0.005)
    finally:
        worker.stop()
    assert [f.pts for f in outs] == [0, 3000]
    assert reported == [("boom", "RuntimeError: boom stage failed on purpose")] * 2
    assert stats.errors == 2
