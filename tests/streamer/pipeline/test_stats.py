"""StreamStats counts what a stream did, in its own fields and in the app's Prometheus figures alike."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.pipeline.stats import StreamStats
from streamer.ops.metrics import Metrics
from streamer.pipeline.pipeline import FrameState


def test_drops_and_failures_reach_the_snapshot_and_the_metrics():
    metrics = Metrics()
    stats = StreamStats(metrics)
    stats.frame_in(dropped=False)
    stats.frame_in(dropped=True)          # replaced in the inbox
    stats.frame_dropped()                 # replaced between two of the worker's stages
    stats.stage_error("faces")
    stats.stage_error("convert")
    snap = stats.snapshot()
    assert (snap["frames_in"], snap["dropped"], snap["errors"]) == (2, 2, 2)
    value = metrics.registry.get_sample_value
    assert value("livefuse_frames_in_total") == 2 and value("livefuse_frames_dropped_total") == 2
    assert value("livefuse_stage_errors_total", {"stage": "faces"}) == 1
    assert value("livefuse_stage_errors_total", {"stage": "convert"}) == 1


def test_stage_times_and_delay_come_from_the_frames():
    clock = iter([1.0, 1.05])
    stats = StreamStats(clock=lambda: next(clock))
    stats.processed(FrameState(image=None, timings={"faces": 4.0, "fusion": 6.0}))
    stats.frame_out(arrived=0.99, size=(640, 480))       # clock 1.0: 10 ms in the server
    snap = stats.snapshot()                              # clock 1.05
    assert snap["stages_ms"] == {"faces": 4.0, "fusion": 6.0}
    assert snap["server_delay_ms"] == pytest.approx(10.0) and snap["size"] == [640, 480]
    assert snap["frames_out"] == 1 and stats.delay_ms() == pytest.approx(10.0)


def test_budget_used_is_pipeline_time_over_the_frame_interval():
    now = [0.0]
    stats = StreamStats(clock=lambda: now[0])
    assert stats.budget_used() is None
    for i in range(10):
        now[0] = i / 30.0
        stats.frame_in(dropped=False)
        stats.processed(FrameState(image=np.zeros((2, 2, 3), np.uint8), pts=i, timings={"a": 10.0, "b": 6.5}))
    assert abs(stats.budget_used() - 16.5 / (1000 / 30)) < 1e-6
    now[0] += 10.0   # the sender went quiet: no figure rather than a stale one
    assert stats.budget_used() is None
