"""A hand in front of a real face keeps its own pixels through fusion and edits, while the rest of the
face is fused; with no hand the stages' output is what it is without the hand check at all.

The hand is `tests.faceclips.skin_hand` (no photo of a real hand ships in any package found here): a hand
silhouette textured with real skin from the astronaut photo, pasted over Grace Hopper's real portrait."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from engines.face_masks import region_mask
from engines.landmarks.hands import HandConfig
from engines.sources import SourceRegistry
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.pipeline.stages.edits import EditsStage
from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig
from streamer.pipeline.stages.fusion import FusionStage
from tests.faceclips import ASTRONAUT_SKIN, skin_hand
from tests.streamer.pipeline.stages.test_fusion import frame640, session_with

pytestmark = pytest.mark.timeout(180)
SKIN = ASTRONAUT_SKIN


@pytest.fixture(scope="module")
def source(astronaut):
    return SourceRegistry().register(astronaut)


@pytest.fixture(scope="module")
def hand_frame(grace_hopper, astronaut):
    return skin_hand(astronaut, SKIN, centre=(290, 330), scale=0.7, frame=frame640(grace_hopper))


def faces_of(frame, hands=True, frames=1):
    stage = FaceStage(FaceStageConfig(hands=HandConfig(enabled=hands)))
    try:
        for i in range(frames):
            state = stage(FrameState(image=frame, pts=i * 3000))
        return state.faces, stage
    finally:
        stage.close()


def test_the_hands_pixels_stay_and_the_face_is_fused(hand_frame, source):
    frame, cover = hand_frame
    faces, stage = faces_of(frame)
    assert len(faces) == 1 and faces[0].keep is not None
    assert stage.hands.report.hands == 1
    session = session_with(source, edits={"smile": 0.8})
    out = Pipeline([FusionStage(), EditsStage(None)])(FrameState(image=frame, faces=list(faces)), session.frame_context())
    assert not out.errors
    face = region_mask(frame.shape[:2], faces[0].landmarks, ["face_oval"]) > 0.5
    on_hand = face & (cover > 0.99)
    assert on_hand.sum() > 1500                                       # the hand covers a good part of the face
    diff = np.abs(out.image.astype(int) - frame.astype(int)).max(axis=2)
    assert diff[on_hand].max() <= 1                                   # the hand's pixels are the input's
    # the face away from the hand (and its feathered margin) is fused
    k = faces[0].keep
    near = np.zeros(frame.shape[:2], bool)
    near[k.y0:k.y0 + k.mask.shape[0], k.x0:k.x0 + k.mask.shape[1]] = k.mask > 0.01
    free = face & ~near
    assert free.sum() > 5000 and diff[free].mean() > 8
    # the same frame without the hand check: the hand would be fused over
    plain, _ = faces_of(frame, hands=False)
    without = Pipeline([FusionStage(), EditsStage(None)])(FrameState(image=frame, faces=list(plain)), session.frame_context())
    assert np.abs(without.image.astype(int) - frame.astype(int)).max(axis=2)[on_hand].mean() > 5


def test_torch_path_keeps_the_hand_too(hand_frame, source):
    frame, cover = hand_frame
    faces, _ = faces_of(frame)
    session = session_with(source)
    out = FusionStage()(FrameState(image=torch.from_numpy(frame.copy()), faces=list(faces)), session.frame_context()).image
    face = region_mask(frame.shape[:2], faces[0].landmarks, ["face_oval"]) > 0.5
    on_hand = face & (cover > 0.99)
    assert np.abs(out.numpy().astype(int) - frame.astype(int)).max(axis=2)[on_hand].max() <= 1


def test_no_hand_leaves_the_output_as_without_the_check(grace_hopper, source):
    frame = frame640(grace_hopper)
    with_check, stage = faces_of(frame, frames=3)
    assert stage.hands.checks >= 1 and all(f.keep is None for f in with_check)
    without, _ = faces_of(frame, hands=False, frames=3)
    session = session_with(source, edits={"smile": 0.8})
    run = lambda faces: Pipeline([FusionStage(), EditsStage(None)])(  # noqa: E731
        FrameState(image=frame, faces=list(faces)), session.frame_context()).image
    assert np.array_equal(run(with_check), run([replace(f, keep=None) for f in without]))
    assert np.array_equal(run(with_check), run(without))


def test_a_hand_with_no_face_and_a_hand_filling_the_frame_do_not_crash(astronaut):
    alone, _ = skin_hand(astronaut, SKIN)
    huge, _ = skin_hand(astronaut, SKIN, centre=(320, 330), scale=4.0)
    tiny, _ = skin_hand(astronaut, SKIN, centre=(320, 300), scale=0.08)
    for img in (alone, huge, tiny):
        faces, stage = faces_of(img, frames=2)
        assert all(f.keep is None or np.isfinite(f.keep.mask).all() for f in faces)


def test_a_hand_raised_between_checks_is_caught_by_the_faces_own_signals(grace_hopper, astronaut):
    base = frame640(grace_hopper)
    raised, _ = skin_hand(astronaut, SKIN, centre=(290, 330), scale=0.7, frame=base)
    stage = FaceStage()
    try:
        for i in range(4):                                 # 0-100 ms: no hand; the first frame checks
            state = stage(FrameState(image=base, pts=i * 3000))
        assert stage.hands.checks == 1 and not stage.hands.report.checked
        state = stage(FrameState(image=raised, pts=4 * 3000))       # 133 ms: long before the next check is due
        assert stage.hands.report.checked and stage.hands.report.reason in ("skin", "jump", "presence")
        assert state.faces and state.faces[0].keep is not None
        state = stage(FrameState(image=raised, pts=5 * 3000))       # the next frame follows it by optical flow
        assert not stage.hands.report.checked and stage.hands.report.tracked == 1
        assert state.faces[0].keep is not None
    finally:
        stage.close()


def test_the_planes_path_keeps_the_hand_too(hand_frame, source):
    """The CPU stream's yuv420p path: the face stage follows the face on converted crops (its second frame),
    fusion and edits work in face regions of the planes, and the hand's pixels still come out as the input's."""
    import av

    from streamer.pipeline.convert import frame_to_state, state_to_frame

    frame, cover = hand_frame
    decoded = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p")
    the_input = decoded.to_ndarray(format="rgb24")
    stage = FaceStage(FaceStageConfig(hands=HandConfig(enabled=True)))
    session = session_with(source, edits={"smile": 0.8})
    try:
        for i in range(3):   # frame 0 searches the whole frame; then the stage reads its crops alone
            state = frame_to_state(decoded, planes=True)
            state.pts = i * 3000
            assert state.planes is not None
            state = stage(state)
        assert len(state.faces) == 1 and state.faces[0].keep is not None
        out = Pipeline([FusionStage(), EditsStage(None)])(state, session.frame_context())
    finally:
        stage.close()
    assert not out.errors and out.fused
    result = state_to_frame(out, decoded).to_ndarray(format="rgb24")
    faces = out.faces
    face = region_mask(frame.shape[:2], faces[0].landmarks, ["face_oval"]) > 0.5
    on_hand = face & (cover > 0.99)
    assert on_hand.sum() > 1500
    diff = np.abs(result.astype(int) - the_input.astype(int)).max(axis=2)
    assert np.percentile(diff[on_hand], 99) <= 2          # the hand's pixels are the input's (chroma per 2x2 block)
    k = faces[0].keep
    near = np.zeros(frame.shape[:2], bool)
    near[k.y0:k.y0 + k.mask.shape[0], k.x0:k.x0 + k.mask.shape[1]] = k.mask > 0.01
    assert diff[face & ~near].mean() > 8                  # and the rest of the face is fused


def test_on_planes_the_palm_squares_are_converted_only_when_a_check_runs(grace_hopper):
    """The hand check searches a square four face sizes wide; on the planes path its pixels are converted
    for the frames a check runs on (and for a followed hand's box), not for every frame the face is in."""
    import av

    from streamer.pipeline.convert import frame_to_state
    from streamer.media.planes import Planes

    class Counting(Planes):
        converted = 0

        def rgb_into(self, out, box):
            Counting.converted += (box[2] - box[0]) * (box[3] - box[1])
            super().rgb_into(out, box)

    frame = frame640(grace_hopper)
    decoded = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p")
    stage = FaceStage(FaceStageConfig(hands=HandConfig(enabled=True, check_interval_ms=200.0, idle_interval_ms=200.0)))
    rows = []
    try:
        for i in range(12):                       # 30 fps: a check every 6 frames while no hand is in view
            state = frame_to_state(decoded, planes=True)
            state.pts = i * 3000
            p = state.planes
            state.planes = Counting(p.buffer, p.width, p.height)
            Counting.converted = 0
            state = stage(state)
            assert len(state.faces) == 1
            rows.append((stage.hands.report.checked, Counting.converted))
    finally:
        stage.close()
    checked = [n for c, n in rows[1:] if c]       # frame 0 converts the whole frame for the search
    followed = [n for c, n in rows[1:] if not c]
    assert checked and followed and stage.hands.report.hands == 0
    square = max(checked)
    assert square >= 0.9 * frame.shape[0] * frame.shape[1]   # a close face: the square is the whole frame
    assert max(followed) < 0.5 * square                       # the other frames convert the landmark crops alone
