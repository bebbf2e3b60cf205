"""The watermark stage and its policy: every frame marked with the session's payload, the payload turns
with the time bucket without a pattern build on the frame path, and turning marking off is explicit and
audited."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import torch

from kernels.numpy import watermark as wm
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.safety.watermark_policy import WatermarkPolicy, make_payload, parse_payload, resolve_policy, session_tag
from streamer.session.session import Session
from streamer.pipeline.stages.watermark import WatermarkStage
from tests.watermark_clips import moving_clip


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_payload_layout_round_trips():
    p = make_payload(513, "sess-1", 1_800_000_123.0, 60)
    f = parse_payload(p)
    assert f["server_id"] == 513 and f["session_tag"] == f"{session_tag('sess-1'):06x}"
    assert f["bucket_start_utc"] == "2027-01-15T08:02:00Z"
    with pytest.raises(ValueError):
        WatermarkPolicy(server_id=1 << 16)


def test_stage_marks_frames_and_turns_the_bucket_off_the_frame_path(astronaut):
    clock = Clock(1_800_000_000.0)
    seen = []
    stage = WatermarkStage(WatermarkPolicy(server_id=3), on_payload=lambda s, p: seen.append(p), clock=clock)
    session = Session("s-wm")
    pipe = Pipeline([stage])
    frame = moving_clip(astronaut, n=1)[0]
    out = pipe(FrameState(image=frame.copy()), session.frame_context())
    first = stage.policy.payload("s-wm", clock.t)
    assert out.watermark == f"{first:016x}" and not out.errors
    assert wm.psnr(out.image, frame) >= 40
    assert wm.extract(out.image, stage.key).payload == first
    clock.t += 60
    second = stage.policy.payload("s-wm", clock.t)
    t0 = time.perf_counter()
    out = pipe(FrameState(image=frame.copy()), session.frame_context())
    assert (time.perf_counter() - t0) < 0.5 * 1.0  # no blocking build: the old pattern marks meanwhile
    assert out.watermark == f"{first:016x}"
    deadline = time.time() + 10
    while out.watermark != f"{second:016x}" and time.time() < deadline:
        time.sleep(0.02)
        out = pipe(FrameState(image=frame.copy()), session.frame_context())
    assert out.watermark == f"{second:016x}"
    assert wm.extract(out.image, stage.key).payload == second
    assert seen == [first, second]
    pipe.close()


def test_torch_frames_are_marked_the_same(grace_hopper):
    clock = Clock(1_800_000_000.0)
    frame = moving_clip(grace_hopper, n=1, size=(318, 238))[0]
    np_out = WatermarkStage(WatermarkPolicy(), clock=clock)(FrameState(image=frame.copy()), Session("t").frame_context())
    t_out = WatermarkStage(WatermarkPolicy(), clock=clock)(FrameState(image=torch.from_numpy(frame.copy())), Session("t").frame_context())
    assert isinstance(t_out.image, torch.Tensor)
    assert np.array_equal(t_out.image.numpy(), np_out.image)


def test_disabling_is_explicit_logged_and_audited(astronaut, caplog):
    records = []
    assert resolve_policy(audit=lambda e, **f: records.append(e)).enabled and records == []
    with caplog.at_level(logging.WARNING):
        policy = resolve_policy(disable=True, reason="lab test", audit=lambda e, **f: records.append((e, f)))
    assert not policy.enabled and "DISABLED" in caplog.text
    assert records == [("watermark_disabled", {"server_id": 0, "reason": "lab test"})]
    frame = moving_clip(astronaut, n=1)[0]
    out = WatermarkStage(policy)(FrameState(image=frame.copy()), Session().frame_context())
    assert np.array_equal(out.image, frame) and out.watermark is None
