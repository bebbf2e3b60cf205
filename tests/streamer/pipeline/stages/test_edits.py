"""streamer/pipeline/stages/edits.py in a real Pipeline: prompt + sliders -> edits on the face, never stalling."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engines.faces import Face
from engines.prompt.model import load_prompt_model
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.session.prompts import PromptCache
from streamer.session.session import Session
from streamer.pipeline.stages.edits import EditsStage, EditsStageConfig, combine


@pytest.fixture(scope="module")
def model():
    return load_prompt_model()


@pytest.fixture(scope="module")
def face(astronaut):
    from engines.faces import MediaPipeLandmarker

    lmk = MediaPipeLandmarker()
    try:
        (f,) = lmk.detect(astronaut, 0)
    finally:
        lmk.close()
    return f


class Events(list):
    def __call__(self, event):
        self.append(event)


def _run(pipe, session, image, face):
    return pipe(FrameState(image=image.copy(), faces=[face]), session.frame_context())


class SlowModel:
    def __init__(self, model):
        self.model, self.id = model, model.id
        self.gate = threading.Event()

    def encode(self, texts):
        assert self.gate.wait(10)
        return self.model.encode(texts)


def test_new_prompt_keeps_old_edits_then_blends(model, astronaut, face):
    slow = SlowModel(model)
    cache = PromptCache(slow)
    session, events = Session(), Events()
    session.set_event_sink(events)
    stage = EditsStage(cache, EditsStageConfig(blend_frames=4))
    pipe = Pipeline([stage])
    try:
        session.update(prompt="a big grin")
        first = _run(pipe, session, astronaut, face)
        assert np.array_equal(first.image, astronaut)          # still encoding: the frame passes unchanged
        assert first.edits["smile"] == 0.0 and "edits" not in first.errors
        slow.gate.set()
        cache.wait("a big grin", timeout=10)
        smiles = [_run(pipe, session, astronaut, face).edits["smile"] for _ in range(6)]
        assert smiles[0] > 0 and all(b >= a for a, b in zip(smiles, smiles[1:]))
        assert smiles[3] == pytest.approx(smiles[-1]) and smiles[-1] > 0.5
        prompt_events = [e for e in events if e["type"] == "prompt"]
        assert prompt_events[-1]["understood"]["smile"] > 0.5 and prompt_events[-1]["cached"] is False
        assert cache.get("a big grin").edits["smile"] > 0.5
    finally:
        cache.close()


def test_cached_prompt_is_visible_on_the_next_frame(model, astronaut, face):
    cache = PromptCache(model)
    cache.wait("smoky eyes", timeout=30)
    session, events = Session(), Events()
    session.set_event_sink(events)
    pipe = Pipeline([EditsStage(cache)])
    _run(pipe, session, astronaut, face)
    session.update(prompt="smoky eyes")
    out = _run(pipe, session, astronaut, face)
    assert out.edits["eye_makeup"] > 0.1 and not np.array_equal(out.image, astronaut)
    assert events[-1]["type"] == "prompt" and events[-1]["cached"] is True
    cache.close()


def test_sliders_add_to_the_prompt_and_clip(model, astronaut, face):
    cache = PromptCache(model)
    cache.wait("a big grin", timeout=30)
    session = Session()
    session.update(prompt="a big grin", edits={"smile": 0.8, "brightness": -0.5, "teleport": 1.0, "blush": "lots"})
    pipe = Pipeline([EditsStage(cache, EditsStageConfig(blend_frames=1))])
    edits = _run(pipe, session, astronaut, face).edits
    assert edits["smile"] == 1.0 and edits["brightness"] == pytest.approx(-0.5, abs=0.1) and "teleport" not in edits
    assert combine({"smile": 0.5}, {"smile": float("nan")})["smile"] == 0.5
    cache.close()


def test_the_prompt_names_the_lipstick_colour_and_the_client_can_change_it(model, astronaut, face):
    from engines.face_masks import region_mask

    cache = PromptCache(model)
    cache.wait("coral lipstick", timeout=30)
    session, events = Session(), Events()
    session.set_event_sink(events)
    pipe = Pipeline([EditsStage(cache, EditsStageConfig(blend_frames=1))])
    lips = region_mask(astronaut.shape[:2], face.landmarks[:, :2], ["lips_outer"], ["lips_inner"]) > 0.8
    mean = lambda img: img[lips].astype(float).mean(0)  # noqa: E731
    try:
        session.update(prompt="coral lipstick")
        coral = mean(_run(pipe, session, astronaut, face).image)
        assert [e for e in events if e["type"] == "prompt"][-1]["colours"] == {"lip_tint": {"colour": "coral", "hex": "#f0715a"}}
        session.update(colours={"lip_tint": "plum"})                # the client's shade wins over the word
        plum = mean(_run(pipe, session, astronaut, face).image)
        session.update(colours={"lip_tint": None})                  # and gives it back
        again = mean(_run(pipe, session, astronaut, face).image)
    finally:
        cache.close()
    assert coral[0] > plum[0] + 30 and plum[2] > coral[2] + 20      # coral is orange-red, plum blue-red
    assert np.abs(again - coral).max() < 1.0


def test_sliders_work_and_prompts_are_reported_unavailable_without_a_model(astronaut, face):
    session, events = Session(), Events()
    session.set_event_sink(events)
    pipe = Pipeline([EditsStage(None, unavailable="encoder x is not calibrated; run: livefuse calibrate --encoder x")])
    session.update(prompt="a big grin", edits={"brightness": 0.6})
    for _ in range(3):
        out = _run(pipe, session, astronaut, face)
    assert not np.array_equal(out.image, astronaut) and out.edits["smile"] == 0
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and "livefuse calibrate --encoder" in errors[0]["message"]


def test_failing_prompt_keeps_the_previous_condition(model, astronaut, face):
    class Flaky:
        id = model.id

        def encode(self, texts):
            if "explode" in texts[0]:
                raise RuntimeError("out of memory")
            return model.encode(texts)

    cache = PromptCache(Flaky())
    cache.wait("red lips", timeout=30)
    session, events = Session(), Events()
    session.set_event_sink(events)
    pipe = Pipeline([EditsStage(cache, EditsStageConfig(blend_frames=1))])
    session.update(prompt="red lips")
    before = _run(pipe, session, astronaut, face).edits["lip_tint"]
    session.update(prompt="explode now")
    deadline = time.time() + 10
    while not any(e["type"] == "error" for e in events) and time.time() < deadline:
        out = _run(pipe, session, astronaut, face)
        time.sleep(0.01)
    out = _run(pipe, session, astronaut, face)
    assert out.edits["lip_tint"] == pytest.approx(before) and before > 0.3
    assert any(e["type"] == "error" and "out of memory" in e["message"] for e in events)
    cache.close()


def test_long_prompt_tells_the_client_it_was_cut(model, astronaut, face):
    cache = PromptCache(model)
    text = "a big grin " + "龍鳳麟" * 600    # past the 500 characters a prompt may hold
    cache.wait(text, timeout=30)
    session, events = Session(), Events()
    session.set_event_sink(events)
    session.update(prompt=text)
    _run(Pipeline([EditsStage(cache)]), session, astronaut, face)
    (event,) = [e for e in events if e["type"] == "prompt"]
    assert event["truncated"] is True and f"{model.encoder.max_length} tokens" in event["message"]
    assert model.encoder.max_length == 512
    cache.close()


def test_empty_prompt_returns_to_no_edits_and_no_faces_pass_through(model, astronaut, face):
    cache = PromptCache(model)
    cache.wait("red lips", timeout=30)
    session = Session()
    stage = EditsStage(cache, EditsStageConfig(blend_frames=2))
    pipe = Pipeline([stage])
    session.update(prompt="red lips")
    for _ in range(3):
        _run(pipe, session, astronaut, face)
    session.update(prompt="")
    for _ in range(3):
        out = _run(pipe, session, astronaut, face)
    assert np.array_equal(out.image, astronaut) and all(v == 0 for v in out.edits.values())
    session.update(prompt="red lips")
    for _ in range(3):
        no_face = pipe(FrameState(image=astronaut.copy(), faces=[]), session.frame_context())
    assert np.array_equal(no_face.image, astronaut)
    cache.close()


def test_torch_frames_go_through_the_torch_twin(model, astronaut, face):
    import torch

    session = Session()
    session.update(edits={"lip_tint": 0.8, "smile": 0.5})
    stage = EditsStage(None)
    out_t = stage(FrameState(image=torch.from_numpy(astronaut.copy()), faces=[face]), session.frame_context()).image
    out_n = stage(FrameState(image=astronaut.copy(), faces=[face]), session.frame_context()).image
    assert isinstance(out_t, torch.Tensor) and np.abs(out_t.numpy().astype(int) - out_n).max() <= 2
