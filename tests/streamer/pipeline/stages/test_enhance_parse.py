"""The enhance and parse stages with tiny ONNX models (bench/_catalogue_models.py) on a real photo with real
landmarks, on both pixel paths (RGB frames as photos and clips have them, yuv420p planes as streams do):
the enhancer changes the face and nothing outside it, by the session's enhance strength or the stage's
default (off on a live CPU stream); the parser's occluder (a green patch over the cheek) and the mouth
interior stay live through fusion and the enhancer, and a face with nothing in front keeps no mask."""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from bench import _catalogue_models as cm
from engines.enhancer import FaceEnhancer
from engines.face_masks import region_mask
from engines.face_nets import FaceNetConfig
from engines.face_parser import FaceParser
from streamer.pipeline.convert import frame_to_state, state_to_frame
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.pipeline.stages.enhance import EnhanceStage, EnhanceStageConfig
from streamer.pipeline.stages.fusion import FusionStage
from streamer.pipeline.stages.parse import ParseStage, merge_keep
from streamer.session.session import Session
from tests.streamer.pipeline.stages.test_fusion import detect, frame640, session_with, sources  # noqa: F401 - fixture

pytest.importorskip("onnxruntime")
GREEN = (20, 220, 30)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("stage_models")
    enh = FaceEnhancer(FaceNetConfig(str(cm.enhancer(d / "gfpgan_1.4.onnx", 512, batch="N")), window_ms=0.0))
    par = FaceParser(FaceNetConfig(str(cm.bisenet(d / "bisenet_resnet_34.onnx", batch="N")), window_ms=0.0))
    yield enh, par
    enh.close()
    par.close()


@pytest.fixture(scope="module")
def scene(grace_hopper):
    img = frame640(grace_hopper)
    faces = detect(img)
    assert len(faces) == 1
    faces[0].track_id = 1
    return img, faces


def with_occluder(img, face):
    """The photo with a green 'microphone' over the subject's cheek (inside the face oval)."""
    out = img.copy()
    lm = face.landmarks[:, :2]
    cx, cy = ((lm[234] * 0.55 + lm[1] * 0.45)).astype(int)       # between the cheek edge and the nose tip
    out[cy - 12:cy + 12, cx - 12:cx + 12] = GREEN
    mask = np.zeros(img.shape[:2], bool)
    mask[cy - 12:cy + 12, cx - 12:cx + 12] = True
    return out, mask


def oval(shape, face, grow=0):
    m = (region_mask(shape[:2], face.landmarks[:, :2], ["face_oval"]) > 0.5).astype(np.uint8)
    return (cv2.dilate(m, np.ones((2 * grow + 1,) * 2, np.uint8)) if grow else m) > 0


def planes_state(img, faces):
    frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
    state = frame_to_state(frame)
    assert state.planes is not None
    state.faces = list(faces)
    return state, frame


def rgb_of(state, frame):
    return state_to_frame(state, frame).to_ndarray(format="rgb24")


@pytest.mark.parametrize("path", ["rgb", "planes"])
def test_enhance_changes_the_face_only_by_its_strength(models, scene, path):
    enh, _ = models
    img, faces = scene
    stage = EnhanceStage(enh)
    outs = {}
    for strength in (None, 0.5, 0.0):
        session = Session()
        if strength is not None:
            session.update(enhance=strength)
        if path == "rgb":
            state = stage(FrameState(image=img.copy(), faces=list(faces)), session.frame_context())
            out, before = state.image, img
        else:
            state, frame = planes_state(img, faces)
            before = rgb_of(frame_to_state(frame), frame)
            state = stage(state, session.frame_context())
            state.planes.flush()
            out = rgb_of(state, frame)
        diff = np.abs(out.astype(int) - before.astype(int)).max(axis=2)
        assert not diff[~oval(img.shape, faces[0], grow=6)].any()        # nothing outside the (grown) oval
        outs[strength] = (out.astype(int) - before.astype(int)), state.enhanced
    core = cv2.erode(oval(img.shape, faces[0]).astype(np.uint8), np.ones((41, 41), np.uint8)) > 0
    full = float(np.median(outs[None][0][core]))
    assert full == pytest.approx(cm.DELTA * 127.5, abs=4)                # default strength 1 off the live CPU stream
    assert float(np.median(outs[0.5][0][core])) == pytest.approx(full / 2, abs=3)
    assert not outs[0.0][0].any() and outs[0.0][1] == []
    assert outs[None][1] == [{"track_id": 1, "model": "gfpgan_1.4", "strength": 1.0}]


def test_enhance_is_off_by_default_on_the_live_cpu_stream(models, scene):
    enh, _ = models
    img, faces = scene
    stage = EnhanceStage(enh, EnhanceStageConfig(), live=True)
    state = stage(FrameState(image=img.copy(), faces=list(faces)), Session().frame_context())
    assert np.array_equal(state.image, img) and state.enhanced == []
    session = Session()
    session.update(enhance=1.0)                                          # the session turns it on
    state = stage(FrameState(image=img.copy(), faces=list(faces)), session.frame_context())
    assert state.enhanced and not np.array_equal(state.image, img)


@pytest.mark.parametrize("path", ["rgb", "planes"])
def test_parser_occluder_stays_live_through_fusion_and_the_enhancer(models, scene, sources, path):  # noqa: F811
    enh, par = models
    img, faces = scene
    occluded, green = with_occluder(img, faces[0])
    session = session_with(sources["astronaut"], enhance=1.0)
    with_parse = Pipeline([ParseStage(par), FusionStage(), EnhanceStage(enh)])
    without = Pipeline([FusionStage(), EnhanceStage(enh)])
    results = {}
    for name, pipe in (("parsed", with_parse), ("plain", without)):
        if path == "rgb":
            state = pipe(FrameState(image=occluded.copy(), faces=list(faces)), session.frame_context())
            out = state.image
        else:
            state, frame = planes_state(occluded, faces)
            state = pipe(state, session.frame_context())
            state.planes.flush()
            out = rgb_of(state, frame)
            occluded_in = rgb_of(frame_to_state(frame), frame)
        assert not state.errors, state.errors
        results[name] = (out, state)
    ref = occluded if path == "rgb" else occluded_in
    inner = cv2.erode(green.astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    out, state = results["parsed"]
    assert state.parsed and state.parsed[0]["kept_px"] > 0 and state.faces[0].keep is not None
    assert np.abs(out[inner].astype(int) - ref[inner].astype(int)).max() <= 2      # the occluder is live
    face_core = cv2.erode(oval(img.shape, faces[0]).astype(np.uint8), np.ones((41, 41), np.uint8)) > 0
    face_core &= ~green
    assert np.abs(out[face_core].astype(int) - ref[face_core].astype(int)).mean() > 5   # the rest of the face changed
    plain, _ = results["plain"]
    assert np.abs(plain[inner].astype(int) - ref[inner].astype(int)).mean() > 10     # without the parser it is painted over
    assert not np.abs(out.astype(int) - ref.astype(int)).max(axis=2)[~oval(img.shape, faces[0], grow=8)].any()
    assert faces[0].keep is None                                          # the shared face objects are not touched


def test_a_face_with_nothing_in_front_keeps_no_mask_and_the_mouth_follows_keep_mouth(models, scene):
    _, par = models
    img, faces = scene
    stage = ParseStage(par)
    state = stage(FrameState(image=img.copy(), faces=list(faces)), Session().frame_context())
    assert state.parsed[0]["model"] == "bisenet_resnet_34"
    # an open, dark mouth: kept while the session keeps its mouth, not when it does not
    lm = faces[0].landmarks[:, :2]
    mouth = np.zeros(img.shape[:2], np.uint8)
    centre = tuple(int(v) for v in (lm[13] + lm[14]) / 2)
    cv2.ellipse(mouth, centre, (int(0.3 * np.linalg.norm(lm[61] - lm[291])), 6), 0, 0, 360, 1, -1)
    dark = img.copy()
    dark[mouth > 0] = (25, 15, 15)
    kept = stage(FrameState(image=dark, faces=list(faces)), Session().frame_context())
    s = Session()
    s.update(keep_mouth=False)
    not_kept = stage(FrameState(image=dark.copy(), faces=list(faces)), s.frame_context())
    assert kept.parsed[0]["kept_px"] > not_kept.parsed[0]["kept_px"] + 0.5 * (mouth > 0).sum() - 1


def test_merge_keep_is_the_union():
    from engines.faces import MaskPatch

    a = MaskPatch(10, 10, np.full((4, 4), 0.5, np.float32))
    b = MaskPatch(12, 8, np.ones((4, 4), np.float32))
    m = merge_keep(a, b)
    assert (m.x0, m.y0, m.mask.shape) == (10, 8, (6, 6))
    assert m.mask[2, 0] == 0.5 and m.mask[2, 3] == 1.0 and m.mask[0, 0] == 0.0
    assert merge_keep(None, b) is b


def test_planes_on_a_torch_device_give_what_host_planes_give(models, scene, sources):  # noqa: F811
    """The stages bring a device region down once, work on it in host memory and put it back: the stream
    on a torch device (here torch's CPU device; CUDA takes the same path) gives the host stream's frame,
    up to fusion's torch twin."""
    pytest.importorskip("torch")
    enh, par = models
    img, faces = scene
    occluded, green = with_occluder(img, faces[0])
    session = session_with(sources["astronaut"], enhance=1.0)
    frame = av.VideoFrame.from_ndarray(occluded, format="rgb24").reformat(format="yuv420p")
    outs = []
    for device in (None, "cpu"):
        pipe = Pipeline([ParseStage(par), FusionStage(), EnhanceStage(enh, live=True)])
        state = frame_to_state(frame, device=device)
        assert (state.planes.device is None) == (device is None)
        state.faces = list(faces)
        state = pipe(state, session.frame_context())
        assert not state.errors, state.errors
        assert state.enhanced and state.parsed[0]["kept_px"] > 0
        outs.append(state_to_frame(state, frame).to_ndarray(format="rgb24").astype(int))
    diff = np.abs(outs[0] - outs[1])
    assert diff.mean() < 0.5 and diff.max() <= 6
    # on a device the enhancer's default is on (a GPU stream), on host planes of a live stream off
    stage = EnhanceStage(enh, live=True)
    assert stage.default(frame_to_state(frame, device="cpu")) == 1.0 and stage.default(frame_to_state(frame)) == 0.0


MAGENTA = (230, 20, 230)


def test_edits_follow_the_parsed_lips_not_the_landmark_polygon(models, scene):
    """A magenta patch on the chin is what the tiny parser calls lips: with the parse stage, lip tint goes
    there; without it, to the landmark lips. The parse of a class-giving parser reaches the edits through
    `Face.regions` on both pixel paths."""
    from streamer.pipeline.stages.edits import EditsStage, EditsStageConfig

    _, par = models
    img, faces = scene
    lm = faces[0].landmarks[:, :2]
    chin = (lm[152] * 0.7 + lm[17] * 0.3).astype(int)          # MediaPipe 152: chin tip, 17: lower lip's centre
    painted = img.copy()
    painted[chin[1] - 6:chin[1] + 6, chin[0] - 14:chin[0] + 14] = MAGENTA
    patch = np.zeros(img.shape[:2], bool)
    patch[chin[1] - 6:chin[1] + 6, chin[0] - 14:chin[0] + 14] = True
    lips = (region_mask(img.shape[:2], lm, ["lips_outer"]) > 0.5) & ~(region_mask(img.shape[:2], lm, ["lips_inner"]) > 0.5)
    session = Session()
    session.update(edits={"lip_tint": 1.0})
    for path in ("rgb", "planes"):
        outs = {}
        for name, stages in (("parsed", [ParseStage(par)]), ("plain", [])):
            pipe = Pipeline([*stages, EditsStage(None, EditsStageConfig(blend_frames=1))])
            if path == "rgb":
                state = pipe(FrameState(image=painted.copy(), faces=list(faces)), session.frame_context())
                out, ref = state.image.astype(int), painted.astype(int)
            else:
                state, frame = planes_state(painted, faces)
                state = pipe(state, session.frame_context())
                state.planes.flush()
                out, ref = rgb_of(state, frame).astype(int), rgb_of(frame_to_state(frame), frame).astype(int)
            assert not state.errors, state.errors
            outs[name] = np.abs(out - ref).max(axis=2)
        inner = cv2.erode(patch.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        core_lips = cv2.erode(lips.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        assert outs["parsed"][inner].mean() > 3 * max(outs["plain"][inner].mean(), 1.0), path   # tinted where parsed
        assert outs["plain"][core_lips].mean() > 3 * max(outs["parsed"][core_lips].mean(), 1.0), path  # not the polygon
    assert state.faces[0].regions is None                       # the plain run's faces carry no parse


def test_plan_face_takes_a_parsed_region_in_place_of_the_polygon(scene):
    from engines.edit_render import render_edits
    from engines.faces import MaskPatch

    img, faces = scene
    lm = faces[0].landmarks
    rect = np.zeros((20, 40), np.float32)
    rect[:] = 1.0
    x0, y0 = int(lm[152, 0]) - 20, int(lm[152, 1]) - 30
    parsed = render_edits(img, [lm], {"lip_tint": 1.0}, regions=[{"lips": MaskPatch(x0, y0, rect)}])
    plain = render_edits(img, [lm], {"lip_tint": 1.0})
    d_parsed = np.abs(parsed.astype(int) - img).max(axis=2)
    d_plain = np.abs(plain.astype(int) - img).max(axis=2)
    inside = np.zeros(img.shape[:2], bool)
    inside[y0 + 5:y0 + 15, x0 + 5:x0 + 35] = True
    assert d_parsed[inside].mean() > 3 and d_plain[inside].mean() < 1
    far = np.ones(img.shape[:2], bool)
    far[y0 - 10:y0 + 30, x0 - 10:x0 + 50] = False
    assert d_parsed[far].max() <= 1                             # nothing else is tinted
