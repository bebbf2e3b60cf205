"""The swap stage (neural fusion) with tiny ONNX models that tint the face by the source vector, on real
photos with real landmarks: only the face changes and everything outside stays bit-exact, strength 0 and
the geometric mode are bit-exact, kept eyes stay live, colour matching takes the tint back to the live
skin, several faces wear their own sources in one model call, the result is smoothed per track and reset
on a new track, and a model that raises lets the frame through while the client is told."""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from bench import _swap_models as sm
from engines.face_masks import region_mask
from engines.faces import MediaPipeLandmarker
from engines.swappers.swapper import NeuralSwapper, SwapperConfig
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.worker import FrameWorker
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.pipeline.stages.fusion import FusionStage
from streamer.pipeline.stages.swap import SwapStage, SwapStageConfig
from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame
from tests.streamer.pipeline.stages.test_fusion import detect, frame640, session_with, sources  # noqa: F401 - sources is a fixture

FLAT = SwapStageConfig(colour_match=0.0, smoothing=0.0)   # the model's tint shows as it is


@pytest.fixture(scope="module")
def swapper(swap_files):
    s = NeuralSwapper(SwapperConfig(swapper=str(swap_files["inswapper_128"]), embedder=str(swap_files["embedder"]),
                                    window_ms=0.0))
    yield s
    s.close()


@pytest.fixture(scope="module")
def hopper_frame(grace_hopper):
    img = frame640(grace_hopper)
    faces = detect(img)
    assert len(faces) == 1
    faces[0].track_id = 1
    return img, faces


def run(stage, img, faces, session):
    return stage(FrameState(image=img, faces=list(faces)), session.frame_context())


def inner_face(shape, face, shrink=0.25):
    """Cheeks and forehead well inside the oval, away from eyes, brows, nose holes and mouth."""
    oval = region_mask(shape[:2], face.landmarks, ["face_oval"]) > 0.5
    r = int(shrink * (face.bbox[2] - face.bbox[0]))
    core = cv2.erode(oval.astype(np.uint8), np.ones((2 * r + 1,) * 2, np.uint8)) > 0
    feats = region_mask(shape[:2], face.landmarks, ["left_eye", "right_eye", "lips_outer"]) > 0.01
    feats = cv2.dilate(feats.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    return core & ~feats


def unclipped(img, where):
    return where & (img > 45).all(axis=2) & (img < 210).all(axis=2)


def test_strength_zero_disabled_geometric_mode_and_no_source_are_bit_exact(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    stage = SwapStage(swapper, FLAT)
    for session in (session_with(sources["astronaut"], strength=0.0), session_with(sources["astronaut"], enabled=False),
                    session_with(sources["astronaut"], fusion="geometric"), session_with()):
        state = run(stage, img, faces, session)
        assert state.image is img and state.swapped == []


def test_only_the_face_changes_tinted_by_the_source(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    face = faces[0]
    state = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"]))
    out = state.image
    sid = sources["astronaut"].id      # session_with registers each source under its own id
    assert state.swapped == [{"track_id": 1, "source_id": sid, "source": sid, "card": "inswapper_128"}]
    oval = region_mask(img.shape[:2], face.landmarks, ["face_oval"]) > 0.01
    outside = ~(cv2.dilate(oval.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0)
    assert np.array_equal(out[outside], img[outside])          # bit-exact beyond the face
    changed = (out != img).any(axis=2)
    assert changed[oval].mean() > 0.5
    # inside, the face carries the tint the source vector asks for
    where = unclipped(img, inner_face(img.shape, face))
    shift = np.median(out[where].astype(np.float32) - img[where], axis=0)
    np.testing.assert_allclose(shift, sm.expected_tint(swapper.source_vector(sources["astronaut"])), atol=2.0)
    # a different source, a different tint
    other = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["hopper"])).image
    assert np.abs(other[where].astype(np.float32) - out[where]).mean() > 3.0


def test_strength_scales_the_change(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    where = unclipped(img, inner_face(img.shape, faces[0]))
    full = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"])).image
    half = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"], strength=0.5)).image
    d_full = np.median(full[where].astype(np.float32) - img[where], axis=0)
    d_half = np.median(half[where].astype(np.float32) - img[where], axis=0)
    np.testing.assert_allclose(d_half, d_full / 2, atol=1.0)


def test_kept_eyes_stay_live(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    eyes = region_mask(img.shape[:2], faces[0].landmarks, ["left_eye", "right_eye"]) > 0.5
    eyes = cv2.erode(eyes.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    kept = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"])).image
    swapped = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"], keep_eyes=False)).image
    d_kept = np.abs(kept[eyes].astype(np.int16) - img[eyes]).mean()
    d_swapped = np.abs(swapped[eyes].astype(np.int16) - img[eyes]).mean()
    assert d_kept < 1.5 and d_swapped > 5 * max(d_kept, 1.0)


def test_colour_matching_takes_the_skin_back_to_the_live_colour(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    where = unclipped(img, inner_face(img.shape, faces[0]))
    flat = run(SwapStage(swapper, FLAT), img, faces, session_with(sources["astronaut"])).image
    matched = run(SwapStage(swapper, SwapStageConfig(smoothing=0.0)), img, faces, session_with(sources["astronaut"])).image
    off_flat = np.abs(flat[where].astype(np.float32).mean(axis=0) - img[where].mean(axis=0)).max()
    off_matched = np.abs(matched[where].astype(np.float32).mean(axis=0) - img[where].mean(axis=0)).max()
    assert off_flat > 15.0 and off_matched < off_flat / 4


def test_several_faces_each_wear_their_own_source_in_one_model_call(swap_files, sources, astronaut, grace_hopper):
    frame, _ = group_frame([(astronaut, ASTRONAUT_FACE, 150, (380, 360)), (grace_hopper, GRACE_HOPPER_FACE, 150, (900, 360))])
    lm = MediaPipeLandmarker()
    try:
        from engines.faces import LandmarkerConfig

        lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=4))
        faces = sorted(lm.detect(frame, 0), key=lambda f: f.bbox[0])
    finally:
        lm.close()
    assert len(faces) == 2
    for i, f in enumerate(faces):
        f.track_id = 10 + i
    s = NeuralSwapper(SwapperConfig(swapper=str(swap_files["inswapper_128_batch"]), embedder=str(swap_files["embedder"]),
                                    window_ms=0.0))
    try:
        session = session_with(sources["hopper"], sources["astronaut"])
        session.update(face_sources={10: sources["hopper"].id, 11: sources["astronaut"].id})
        before = s.stats.batches
        state = run(SwapStage(s, FLAT), frame, faces, session)
        assert s.stats.batches - before == 1 and s.stats.largest == 2   # both faces, one model call
        assert [d["source_id"] for d in state.swapped] == [sources["hopper"].id, sources["astronaut"].id]
        for face, src in zip(faces, ("hopper", "astronaut")):
            where = unclipped(frame, inner_face(frame.shape, face))
            shift = np.median(state.image[where].astype(np.float32) - frame[where], axis=0)
            np.testing.assert_allclose(shift, sm.expected_tint(s.source_vector(sources[src])), atol=2.5)
        between = np.zeros(frame.shape[:2], bool)
        between[:, 560:700] = True
        assert np.array_equal(state.image[between], frame[between])
    finally:
        s.close()


def test_the_result_is_smoothed_per_track_and_reset_on_a_new_track(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    where = unclipped(img, inner_face(img.shape, faces[0])) & (img < 180).all(axis=2)
    brighter = np.clip(img.astype(np.int16) + 20, 0, 255).astype(np.uint8)
    stage = SwapStage(swapper, SwapStageConfig(colour_match=0.0, smoothing=0.5))
    session = session_with(sources["astronaut"])
    tint = sm.expected_tint(swapper.source_vector(sources["astronaut"]))
    run(stage, img, faces, session)
    second = run(stage, brighter, faces, session).image          # halfway between the two frames' swaps
    np.testing.assert_allclose(np.median(second[where].astype(np.float32) - brighter[where], axis=0), tint - 10, atol=2.0)
    faces[0].track_id = 2                                        # a new track: no memory of the old one
    try:
        fresh = run(stage, brighter, faces, session).image
    finally:
        faces[0].track_id = 1
    np.testing.assert_allclose(np.median(fresh[where].astype(np.float32) - brighter[where], axis=0), tint, atol=2.0)


def test_both_runs_geometric_then_neural_and_neural_skips_the_geometric_stage(swapper, sources, hopper_frame):
    img, faces = hopper_frame
    pipe = Pipeline([FusionStage(default_mode="neural"), SwapStage(swapper, FLAT, default_mode="neural")])
    neural = pipe(FrameState(image=img, faces=list(faces)), session_with(sources["astronaut"]).frame_context())
    assert neural.fused == [] and len(neural.swapped) == 1
    both = pipe(FrameState(image=img, faces=list(faces)), session_with(sources["astronaut"], fusion="both").frame_context())
    assert len(both.fused) == 1 and len(both.swapped) == 1
    geo = pipe(FrameState(image=img, faces=list(faces)), session_with(sources["astronaut"], fusion="geometric").frame_context())
    assert len(geo.fused) == 1 and geo.swapped == []
    assert not np.array_equal(both.image, geo.image) and not np.array_equal(both.image, neural.image)


def test_a_model_that_raises_lets_the_frame_through_and_the_client_is_told(swap_files, sources, hopper_frame):
    img, faces = hopper_frame
    s = NeuralSwapper(SwapperConfig(swapper=str(swap_files["raising"]), embedder=str(swap_files["embedder"]),
                                    warm_up=False))
    try:
        session = session_with(sources["astronaut"])
        told = []
        worker = FrameWorker(session, Pipeline([_Faces(faces), SwapStage(s, FLAT)]), StreamStats(),
                             on_error=lambda stage, message: told.append((stage, message)))
        frame = av.VideoFrame.from_ndarray(img, format="rgb24")
        out = worker.process(frame).to_ndarray(format="rgb24")
        plain = FrameWorker(session, Pipeline([_Faces(faces)]), StreamStats()).process(frame).to_ndarray(format="rgb24")
        assert np.array_equal(out, plain)                         # passed through, unfused
        assert told and told[0][0] == "swap" and "Reshape" in told[0][1]
        # and the next frame is tried again (the stream is not frozen)
        worker.process(frame)
        assert len(told) == 2
    finally:
        s.close()


class _Faces:
    """A face stage that hands out faces found once (the landmarker is not what is tested here)."""

    name = "faces"

    def __init__(self, faces):
        self.faces = faces

    def __call__(self, state, context):
        state.faces = list(self.faces)
        return state
