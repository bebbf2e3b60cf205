"""The face-out stage with the session's outputs, on a real face (a photo through the stream's face stage):
nothing runs while nothing is asked for, face events keep to their rate, a calibration ends in its event,
bad settings and a bad neutral are told and the frame goes on, a JSON-lines file gets one line a frame."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from engines.face_rig import RigConfig
from streamer.pipeline.pipeline import FrameState
from streamer.pipeline.stages.face_out import FaceOutStage
from streamer.pipeline.stages.faces import FaceStage
from streamer.session.session import Controls, frame_context
from streamer.sinks.face_outputs import FaceOutputs, OutputSettings, settings_from
from tests.faceclips import place


@pytest.fixture(scope="module")
def states(grace_hopper):
    stage = FaceStage()
    try:
        frame, _ = place(grace_hopper, size=(640, 480), scale=0.8)
        return [stage(FrameState(image=frame.copy(), pts=i * 3000), None) for i in range(45)]   # 1.5 s at 30 fps
    finally:
        stage.close()


def run(stage, states, controls, tick=None):
    events: list[dict] = []
    context = frame_context(controls, notify=events.append)
    for i, st in enumerate(states):
        if tick is not None:
            tick(i / 30.0)
        assert stage(st, context) is st
    return events


def test_nothing_asked_runs_nothing(states):
    stage = FaceOutStage(FaceOutputs())
    events = run(stage, states[:10], Controls())
    assert events == [] and stage.last is None and stage.rig.network_runs == 0


def test_face_events_keep_their_rate_and_carry_the_rig(states, monkeypatch):
    import streamer.sinks.face_outputs as fo

    clock = {"now": 0.0}       # the frames' own pace at 30 fps, whatever this machine's speed
    monkeypatch.setattr(fo.time, "monotonic", lambda: clock["now"])
    stage = FaceOutStage(FaceOutputs())
    events = run(stage, states[:30], Controls(outputs=MappingProxyType({"face_events": 10}), source_id="demo"),
                 tick=lambda t: clock.update(now=t))
    faces = [e for e in events if e["type"] == "face"]
    assert 9 <= len(faces) <= 11
    assert len(faces[-1]["blendshapes"]) == 52 and faces[-1]["found"] is True
    assert faces[-1]["source"] == "demo" and faces[-1]["track_id"] >= 0   # who it is, and what it is fused with


def test_calibration_ends_in_an_event_and_a_bad_neutral_is_told(states):
    stage = FaceOutStage(FaceOutputs(), rig_config=RigConfig(neutral_seconds=1.0))   # the clip is 1.5 s
    events = run(stage, states, Controls(calibration=1))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "face_calibrating" and "face_calibrated" in kinds
    neutral = next(e for e in events if e["type"] == "face_calibrated")["neutral"]
    assert set(neutral) == {"blendshapes", "rotation", "position", "gaze"}
    bad = run(stage, states[:2], Controls(calibration=1, face_neutral={"rotation": "no"}))
    assert bad[0]["type"] == "error" and "face_neutral" in bad[0]["message"]
    assert stage.rig.neutral is not None     # the calibrated one stays


def test_bad_settings_are_told_and_good_ones_merge():
    outputs = FaceOutputs()
    events = outputs.configure({"vmc": "not a target:99999"})
    assert events[0]["output"] == "vmc" and events[0]["state"] == "error" and not outputs.active
    assert outputs.configure({"face_events": 500})[0]["state"] == "error"
    s = settings_from({"vmc": "127.0.0.1:40000", "face_events": 5}, OutputSettings(vtube_studio="ws://localhost:8001"))
    assert (s.vmc, s.vtube_studio, s.face_events) == ("127.0.0.1:40000", "ws://localhost:8001", 5.0)
    assert settings_from({"vtube_studio": None}, s).vtube_studio == ""
    outputs.close()


def test_face_data_file_gets_a_line_a_frame(states, tmp_path):
    path = tmp_path / "face.jsonl"
    stage = FaceOutStage(FaceOutputs(OutputSettings(face_data=str(path))))
    run(stage, states[:12], Controls())
    stage.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 12 and lines[0]["t"] == 0.0 and len(lines[-1]["blendshapes"]) == 52
