"""A still face reuses fusion's and edits' previous result on the planes path (streamer/pipeline/stages/still.py):
on a real portrait with sensor noise and the landmarks the face stage gives it, the stage's work is
skipped and the output stays within the stated tolerance of a fresh result; motion, a changed control, a
hand, `max_run`, another track or another session each force a fresh result."""

from __future__ import annotations

import dataclasses

import av
import numpy as np
import pytest

from engines.faces import LandmarkerConfig, MaskPatch
from engines.sources import SourceRegistry
from streamer.pipeline.convert import frame_to_rgb, frame_to_state, state_to_frame
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.session.session import Session
from streamer.pipeline.stages.edits import EditsStage
from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig
from streamer.pipeline.stages.fusion import FusionStage
from streamer.pipeline.stages.still import StillConfig, StillFaces, moved
from tests.faceclips import add_noise, place

pytestmark = pytest.mark.timeout(300)

# How close a reused frame stays to a fresh one over the face's box (landmark box grown by a quarter of
# its width), a still face with sigma-2 sensor noise: the reused delta carries the made frame's noise
# where the stage replaced the live pixels, and the fresh stage's colour memory moved on meanwhile.
# `livefuse bench pipeline --still` measures the same on 60 frames (docs/fusion.md, Still faces).
REUSED_PSNR_MIN = 40.0
REUSED_MEAN_ABS_MAX = 1.5


@pytest.fixture(scope="module")
def sources(astronaut):
    reg = SourceRegistry()
    return {"astronaut": reg.register(astronaut), "mirrored": reg.register(np.ascontiguousarray(astronaut[:, ::-1]))}


def _decoded(img: np.ndarray, n: int) -> av.VideoFrame:
    f = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
    f.pts = n * 3000
    return f


SETTLE = 8   # a new track's smoothed landmarks settle over its first frames (2.5 % of the face width here)


def _clip(grace_hopper, shifts) -> list[tuple[av.VideoFrame, list]]:
    """Decoded noisy frames of the portrait at each shift, with the faces the face stage finds on their
    planes (tracked and smoothed, as the stream gives them), after SETTLE still frames of the same track.
    The landmark network runs on every frame (the stream's face stage would keep a still face's landmarks,
    tests/engines/landmarks/test_still.py), so what is reused here comes from fusion's and edits' own rule."""
    rng = np.random.default_rng(3)
    stage = FaceStage(FaceStageConfig(landmarker=LandmarkerConfig(blendshapes=False)))
    out = []
    try:
        for n, dx in enumerate([shifts[0]] * SETTLE + list(shifts)):
            img, _ = place(grace_hopper, scale=0.55, shift=(dx, 0.0))
            frame = _decoded(add_noise(img, 2.0, rng), n)
            state = stage(frame_to_state(frame, planes=True))
            assert len(state.faces) == 1
            if n >= SETTLE:
                out.append((frame, list(state.faces)))
    finally:
        stage.close()
    return out


@pytest.fixture(scope="module")
def still_clip(grace_hopper):
    return _clip(grace_hopper, [0.0] * 8)


@pytest.fixture(scope="module")
def moving_clip(grace_hopper):
    return _clip(grace_hopper, [6.0 * n for n in range(5)])


def session_with(*srcs, session_id: str = "s1", **controls) -> Session:
    s = Session(session_id)
    for src in srcs:
        s.add_source(src.id, src, activate=False)
    s.update(source_id=srcs[0].id, **controls)
    return s


def step(pipe: Pipeline, frame: av.VideoFrame, faces: list, session: Session, planes: bool = True) -> tuple[FrameState, np.ndarray]:
    state = frame_to_state(frame, planes=planes)
    state.faces = list(faces)
    state = pipe(state, session.frame_context())
    assert not state.errors
    if planes:
        assert state.planes is not None
        return state, frame_to_rgb(state_to_frame(state, frame))
    return state, np.asarray(state.image)


def face_box(faces, shape) -> tuple[slice, slice]:
    lm = faces[0].landmarks[:, :2]
    (x0, y0), (x1, y1) = lm.min(axis=0), lm.max(axis=0)
    m = 0.25 * (x1 - x0)
    h, w = shape[:2]
    return np.s_[max(0, int(y0 - m)):min(h, int(y1 + m)), max(0, int(x0 - m)):min(w, int(x1 + m))]


def counted(stage) -> list[int]:
    """Wraps the stage's geometry (the fusion work a reused face skips) to count its calls."""
    calls = [0]
    inner = stage._geometry

    def geometry(*a, **k):
        calls[0] += 1
        return inner(*a, **k)

    stage._geometry = geometry
    return calls


def reused_flags(state: FrameState) -> list[bool]:
    return [d["reused"] for d in state.fused]


def test_a_still_noisy_face_reuses_within_tolerance(still_clip, sources):
    session = session_with(sources["astronaut"], edits={"smile": 0.6, "brightness": 0.3})
    fusion, edits = FusionStage(still=StillFaces()), EditsStage(None, still=StillFaces())
    calls = counted(fusion)
    reuse, fresh = Pipeline([fusion, edits]), Pipeline([FusionStage(), EditsStage(None)])
    flags, psnrs, means = [], [], []
    for frame, faces in still_clip[:4]:
        state, out = step(reuse, frame, faces, session)
        _, ref = step(fresh, frame, faces, session)
        flags.append(reused_flags(state))
        box = face_box(faces, out.shape)
        d = out[box].astype(np.float32) - ref[box]
        psnrs.append(10 * np.log10(255.0 ** 2 / max(float((d ** 2).mean()), 1e-9)))
        means.append(float(np.abs(d).mean()))
        assert np.abs(ref[box].astype(int) - frame_to_rgb(frame)[box]).mean() > 3   # the face is fused and edited
    assert flags == [[False], [True], [True], [True]]
    assert calls[0] == 1                                            # fusion's work ran on the first frame only
    assert (edits.still.fresh, edits.still.reused) == (1, 3)
    assert psnrs[0] > 90                                            # the made frame is the fresh result
    assert min(psnrs[1:]) >= REUSED_PSNR_MIN and max(means[1:]) <= REUSED_MEAN_ABS_MAX, (psnrs, means)
    # the landmarks did jitter: reuse came from the threshold, not from identical input
    assert moved(still_clip[2][1][0].landmarks[:, :2], still_clip[0][1][0].landmarks[:, :2]) > 1e-4


def test_max_run_forces_a_fresh_result(still_clip, sources):
    session = session_with(sources["astronaut"])
    fusion = FusionStage(still=StillFaces(StillConfig(max_run=2)))
    flags = [reused_flags(step(Pipeline([fusion]), frame, faces, session)[0]) for frame, faces in still_clip[:7]]
    assert flags == [[False], [True], [True], [False], [True], [True], [False]]


def test_a_moving_face_is_fresh(moving_clip, sources):
    session = session_with(sources["astronaut"], edits={"smile": 0.6})
    fusion, edits = FusionStage(still=StillFaces()), EditsStage(None, still=StillFaces())
    pipe = Pipeline([fusion, edits])
    flags = [reused_flags(step(pipe, frame, faces, session)[0]) for frame, faces in moving_clip]
    assert flags == [[False]] * len(moving_clip)                    # 6 px a frame on a ~190 px face
    assert edits.still.reused == 0 and edits.still.fresh == len(moving_clip)


@pytest.mark.parametrize("change", ["source", "strength", "shape", "keep_mouth", "keep_eyes"])
def test_a_changed_fusion_control_is_fresh(still_clip, sources, change):
    session = session_with(sources["astronaut"], sources["mirrored"])
    fusion = FusionStage(still=StillFaces())
    calls = counted(fusion)
    pipe = Pipeline([fusion])
    (f0, faces0), (f1, faces1), (f2, faces2) = still_clip[:3]
    assert reused_flags(step(pipe, f0, faces0, session)[0]) == [False]
    assert reused_flags(step(pipe, f1, faces1, session)[0]) == [True]
    session.update(**{"source": {"source_id": sources["mirrored"].id}, "strength": {"strength": 0.7},
                      "shape": {"shape": 1.0}, "keep_mouth": {"keep_mouth": False},
                      "keep_eyes": {"keep_eyes": False}}[change])
    state, out = step(pipe, f2, faces2, session)
    assert reused_flags(state) == [False] and calls[0] == 2
    _, ref = step(Pipeline([FusionStage()]), f2, faces2, session)
    box = face_box(faces2, out.shape)
    assert np.abs(out[box].astype(int) - ref[box]).mean() < 1.0     # the new control's fresh result


def test_changed_edits_are_fresh(still_clip, sources):
    session = session_with(sources["astronaut"], strength=0.0, edits={"smile": 0.6})   # edits alone
    edits = EditsStage(None, still=StillFaces())
    pipe = Pipeline([edits])
    for (frame, faces), sliders in zip(still_clip[:4], [{"smile": 0.6}, {"smile": 0.6}, {"smile": 0.7}, {"smile": 0.7}]):
        session.update(edits=sliders)
        step(pipe, frame, faces, session)
    assert (edits.still.fresh, edits.still.reused) == (2, 2)        # fresh, reused, fresh (0.7), reused


def test_a_hand_in_front_of_the_face_is_fresh(still_clip, sources):
    session = session_with(sources["astronaut"], edits={"smile": 0.6})
    fusion, edits = FusionStage(still=StillFaces()), EditsStage(None, still=StillFaces())
    pipe = Pipeline([fusion, edits])
    (f0, faces0), (f1, faces1) = still_clip[:2]
    step(pipe, f0, faces0, session)
    x0, y0, x1, y1 = (int(v) for v in faces1[0].bbox)
    hand = MaskPatch(x0 & ~1, ((y0 + y1) // 2) & ~1, np.ones(((y1 - y0) // 2 & ~1, (x1 - x0) // 2 & ~1), np.float32))
    state, out = step(pipe, f1, [dataclasses.replace(faces1[0], keep=hand)], session)
    assert reused_flags(state) == [False] and edits.still.reused == 0
    patch = np.s_[hand.y0:hand.y0 + hand.mask.shape[0], hand.x0:hand.x0 + hand.mask.shape[1]]
    assert np.abs(out[patch].astype(int) - frame_to_rgb(f1)[patch]).max() <= 1   # the hand's own pixels


def test_reuse_never_crosses_tracks_or_sessions(still_clip, sources):
    session = session_with(sources["astronaut"])
    other = session_with(sources["astronaut"], session_id="s2")
    fusion = FusionStage(still=StillFaces())
    pipe = Pipeline([fusion])
    (f0, faces0), (f1, faces1), (f2, faces2), (f3, faces3) = still_clip[:4]
    step(pipe, f0, faces0, session)
    renamed = [dataclasses.replace(faces1[0], track_id=faces1[0].track_id + 7)]
    assert reused_flags(step(pipe, f1, renamed, session)[0]) == [False]                  # another track
    assert reused_flags(step(pipe, f2, renamed, other)[0]) == [False]                     # another session
    assert reused_flags(step(pipe, f3, renamed, other)[0]) == [True]                     # its own result, once made
    untracked = [dataclasses.replace(faces3[0], track_id=-1)]
    stage = FusionStage(still=StillFaces())
    flags = [reused_flags(step(Pipeline([stage]), f, untracked, session)[0]) for f, _ in still_clip[:3]]
    assert flags == [[False]] * 3                                                        # no track: never reused


def test_the_rgb_path_never_reuses(still_clip, sources):
    session = session_with(sources["astronaut"], edits={"smile": 0.6})
    fusion, edits = FusionStage(still=StillFaces()), EditsStage(None, still=StillFaces())
    pipe = Pipeline([fusion, edits])
    flags = [reused_flags(step(pipe, frame, faces, session, planes=False)[0]) for frame, faces in still_clip[:3]]
    assert flags == [[False]] * 3 and edits.still.reused == 0


def test_a_face_not_worked_on_for_a_frame_starts_fresh(still_clip, sources):
    session = session_with(sources["astronaut"])
    pipe = Pipeline([FusionStage(still=StillFaces())])
    (f0, faces0), (f1, faces1), (f2, faces2) = still_clip[:3]
    step(pipe, f0, faces0, session)
    session.update(strength=0.0)
    step(pipe, f1, faces1, session)                                  # not fused: nothing to reuse from
    session.update(strength=1.0)
    assert reused_flags(step(pipe, f2, faces2, session)[0]) == [False]


def test_still_config_refuses_nonsense():
    with pytest.raises(ValueError):
        StillConfig(max_move=-0.1)
    with pytest.raises(ValueError):
        StillConfig(max_run=-1)
