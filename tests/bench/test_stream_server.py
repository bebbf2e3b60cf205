"""The stream bench's server log says what share of the work still faces skipped, over exactly the
frames of the window asked for."""

from __future__ import annotations

import time
from types import SimpleNamespace

from bench._stream_server import TimingLog
from streamer.pipeline.pipeline import FrameState


def test_the_window_counts_reused_fusion_and_kept_landmarks():
    log = TimingLog()
    detector = SimpleNamespace(landmark_runs={"fresh": 10, "kept": 5})   # counts from before the window
    stages = [SimpleNamespace(name="faces", detector=detector)]
    log.add({"faces": 1.0}, 1.0, FrameState(image=None, fused=[{"reused": False}]), stages)
    t0 = time.monotonic()
    for n in range(8):                   # 1 fresh then 3 kept, twice; fusion reuses the kept ones
        if n % 4 == 0:
            detector.landmark_runs["fresh"] += 1
        else:
            detector.landmark_runs["kept"] += 1
        log.add({"faces": 1.0}, 1.0, FrameState(image=None, fused=[{"reused": n % 4 != 0}]), stages)
    t1 = time.monotonic()
    log.add({"faces": 1.0}, 1.0, FrameState(image=None, fused=[{"reused": True}]), stages)
    s = log.summary(t0, t1)
    assert s["frames"] == 8
    assert s["fusion_reused_share"] == 0.75
    assert s["landmarks_kept_share"] == 0.75
    assert log.summary(t1, time.monotonic())["landmarks_kept_share"] is None   # the last row ran no network
    assert log.summary(t1 + 1, t1 + 2)["fusion_reused_share"] is None
