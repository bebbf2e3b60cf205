"""The torch port against LiteRT (MediaPipe) on the same inputs, real photos.

Tolerances (measured values in brackets): detector score within 1e-4 [1e-7], keypoints within 0.5 px
[<0.1], box origin and size within 1 px [MediaPipe truncates both to whole pixels]; landmarks from the same crop within
0.25 px mean and 0.6 px max [0.06 / 0.19], z within 3 px [1.9]; the whole detect -> crop -> landmarks
path within 0.1 px mean [0.01]; pose from the landmarks: roll 2, yaw 3, pitch 7 degrees [0.6, 1.6, 5.6]; blendshapes from the same landmarks within 1e-4 [6e-6], from the whole
torch path within 0.01.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engines.faces import LandmarkerConfig, MediaPipeLandmarker
from engines.landmarks.geometry import canonical_face, face_transform, pose_from_landmarks
from engines.landmarks.graph import LandmarkGraph
from engines.landmarks.networks import (BLENDSHAPES_MEMBER, DETECTOR_MEMBER, RotatedRect, BlendshapeNet,
                                         FaceDetectorNet, LandmarkNet, crop, read_task_member,
                                         roi_from_landmarks, ssd_anchors)
from engines.landmarks.tflite_graph import UnsupportedModel, load_graph, parse_tflite
from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, apply, face_tile, place

CLIPS = {"plain": dict(), "rolled": dict(angle=20, scale=1.3), "hd": dict(size=(1280, 720), scale=2.0)}


@pytest.fixture(scope="module")
def litert_detector(tmp_path_factory):
    """MediaPipe's FaceDetector task running the bundle's own face_detector.tflite: the LiteRT reference."""
    from mediapipe.tasks.python import BaseOptions, vision

    path = tmp_path_factory.mktemp("models") / DETECTOR_MEMBER
    path.write_bytes(read_task_member(DETECTOR_MEMBER))
    det = vision.FaceDetector.create_from_options(vision.FaceDetectorOptions(
        base_options=BaseOptions(model_asset_path=str(path)), running_mode=vision.RunningMode.IMAGE,
        min_detection_confidence=0.5))
    yield det
    det.close()


@pytest.fixture(scope="module")
def torch_detector():
    return FaceDetectorNet("cpu")


@pytest.fixture(scope="module")
def torch_net():
    return LandmarkNet("cpu")


def _litert_detect(det, frame):
    import mediapipe as mp

    h, w = frame.shape[:2]
    out = []
    for d in det.detect(mp.Image(image_format=mp.ImageFormat.SRGB, data=frame)).detections:
        b = d.bounding_box
        box = np.array([b.origin_x, b.origin_y, b.origin_x + b.width, b.origin_y + b.height], np.float32)
        kps = np.array([(k.x * w, k.y * h) for k in d.keypoints], np.float32)
        out.append((box, kps, d.categories[0].score))
    return out


@pytest.mark.parametrize("name", list(CLIPS))
def test_detector_matches_litert(litert_detector, torch_detector, astronaut, name):
    frame, _ = place(astronaut, **CLIPS[name])
    ref = _litert_detect(litert_detector, frame)
    got = torch_detector.detect(frame)
    assert len(ref) == len(got) == 1
    (box, kps, score), d = ref[0], got[0]
    assert d.score == pytest.approx(score, abs=1e-4)
    assert np.abs(d.keypoints - kps).max() < 0.5
    # MediaPipe reports the box as whole-pixel origin and size (each truncated)
    assert np.abs(d.box[:2] - box[:2]).max() < 1.0
    assert np.abs((d.box[2:] - d.box[:2]) - (box[2:] - box[:2])).max() < 1.0


def test_detector_finds_two_faces_and_none_in_face_free_photos(litert_detector, torch_detector, astronaut,
                                                              grace_hopper, face_free_images):
    two = np.concatenate([face_tile(astronaut, ASTRONAUT_FACE), face_tile(grace_hopper, GRACE_HOPPER_FACE)], axis=1)
    assert len(torch_detector.detect(two)) == len(_litert_detect(litert_detector, two)) == 2
    for name, photo in face_free_images.items():
        assert torch_detector.detect(photo) == [] and _litert_detect(litert_detector, photo) == [], name


def test_canonical_face_reads_from_the_bundle():
    canon = canonical_face()
    assert canon.vertices.shape == (468, 3) and len(canon.basis) == len(canon.weights) > 20
    assert np.all(canon.weights > 0) and canon.basis.max() < 468
    # a face model: symmetric about x = 0, a few cm across
    assert abs(canon.vertices[:, 0].mean()) < 0.1 and 10 < np.ptp(canon.vertices[:, 0]) < 20


def test_anchors_cover_both_grids():
    a = ssd_anchors()
    assert a.shape == (896, 2)
    assert np.allclose(a[0], (0.5 / 16, 0.5 / 16)) and np.allclose(a[512], (0.5 / 8, 0.5 / 8))


@pytest.mark.parametrize("name", ["plain", "rolled"])
def test_landmark_net_matches_litert_on_the_same_crop(torch_net, astronaut, name):
    frame, _ = place(astronaut, **CLIPS[name])
    # Feed MediaPipe the still frame until its tracking ROI settles: then the ROI it used for its last
    # answer is the one its landmarks give, and the torch net can be run on exactly that crop.
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1))
    try:
        for i in range(15):
            faces = lm.detect(frame, i * 33)
    finally:
        lm.close()
    ref = faces[0].landmarks
    got = torch_net.landmarks(frame, [roi_from_landmarks(ref)])[0]
    err = np.linalg.norm(got.landmarks[:, :2] - ref[:, :2], axis=1)
    assert err.mean() < 0.25 and err.max() < 0.6, (err.mean(), err.max())
    assert np.abs(got.landmarks[:, 2] - ref[:, 2]).max() < 3.0
    assert got.presence > 0.99


def test_presence_is_low_on_a_face_free_crop(torch_net, face_free_images):
    from engines.landmarks.networks import RotatedRect

    coffee = face_free_images["coffee"]
    got = torch_net.landmarks(coffee, [RotatedRect(300, 200, 256, 256, 0.0)])[0]
    assert got.presence < 0.01


def test_full_path_matches_mediapipe_image_mode(astronaut, grace_hopper):
    torch_lm = LandmarkGraph(LandmarkerConfig(max_faces=2, mode="image"))
    mp_lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=2, mode="image"))
    try:
        for photo in (astronaut, place(astronaut, angle=-25)[0], grace_hopper):
            ref, got = mp_lm.detect(photo, 0), torch_lm.detect(photo, 0)
            assert len(ref) == len(got) == 1
            err = np.linalg.norm(got[0].landmarks[:, :2] - ref[0].landmarks[:, :2], axis=1)
            assert err.mean() < 0.1 and err.max() < 0.3, (err.mean(), err.max())
            assert np.allclose(got[0].pose, ref[0].pose, atol=1.0), (got[0].pose, ref[0].pose)
            shapes_err = max(abs(got[0].blendshapes[k] - v) for k, v in ref[0].blendshapes.items())
            assert shapes_err < 0.01, shapes_err
    finally:
        mp_lm.close()
        torch_lm.close()


def test_batch_of_faces_equals_one_by_one(torch_net, astronaut, grace_hopper):
    a, _ = crop(astronaut, roi_from_landmarks(_landmarks(astronaut)), 256)
    g, _ = crop(grace_hopper, roi_from_landmarks(_landmarks(grace_hopper)), 256)
    both, p_both = torch_net.run(np.stack([a, g]))
    for i, single in enumerate((a, g)):
        one, p_one = torch_net.run(single[None])
        assert np.abs(both[i] - one[0]).max() < 1e-3 and abs(p_both[i] - p_one[0]) < 1e-5
    assert np.abs(both[0] - both[1]).max() > 5.0  # two different faces really went through


@pytest.mark.parametrize("rect", [RotatedRect(300, 200, 240, 240, 0.3), RotatedRect(20, 30, 300, 260, -0.5),
                                  RotatedRect(-400, -400, 100, 100, 0.2), RotatedRect(256, 256, 700, 700, 0.1)],
                         ids=["inside", "over the corner", "off the frame", "most of the frame"])
def test_crop_from_a_copied_region_equals_the_crop_from_the_whole_frame(astronaut, rect):
    """crop() warps from a copy of the region it reads (cache-friendly); edges must still replicate the
    frame's own pixels and the pixels match a warp of the whole frame, up to fixed-point rounding."""
    import cv2

    out, m = crop(astronaut, rect, 256)
    whole = cv2.warpAffine(astronaut, rect.matrix(256, 256), (256, 256), flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
    assert np.array_equal(m, rect.matrix(256, 256))
    diff = np.abs(out.astype(int) - whole)
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).mean())


def _landmarks(photo):
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        return lm.detect(photo, 0)[0].landmarks
    finally:
        lm.close()


@pytest.mark.parametrize("kw", [dict(), dict(angle=25), dict(mirror=True), dict(angle=-20, scale=0.9),
                                dict(shift=(150, 60)), dict(size=(1280, 720), scale=2.0)], ids=str)
def test_face_transform_reproduces_mediapipes_geometry_pipeline(astronaut, grace_hopper, kw):
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        for photo in (astronaut, grace_hopper):
            frame = place(photo, **kw)[0]
            face = lm.detect(frame, 0)[0]
            size = (frame.shape[1], frame.shape[0])
            # measured: the same 4x4 to < 1e-3 and the same angles to < 0.01 degrees
            assert np.abs(face_transform(face.landmarks, size) - face.transform).max() < 0.01
            assert np.allclose(pose_from_landmarks(face.landmarks, size), face.pose, atol=0.05)
            # without the frame size: an orthographic fit, measured within 2.5 / 7.1 / 8.2 degrees (roll, yaw, pitch)
            yaw, pitch, roll = pose_from_landmarks(face.landmarks)
            assert roll == pytest.approx(face.pose[2], abs=3.0)
            assert yaw == pytest.approx(face.pose[0], abs=8.0)
            assert pitch == pytest.approx(face.pose[1], abs=9.0)
    finally:
        lm.close()


def test_unsupported_ops_are_named():
    # the NCHW port refuses the blendshapes network's reductions by name (ExactGraph runs them)
    with pytest.raises(UnsupportedModel, match="MEAN is not supported by the NCHW graph port"):
        load_graph(read_task_member(BLENDSHAPES_MEMBER))
    graph = parse_tflite(read_task_member(BLENDSHAPES_MEMBER))
    assert {op.kind for op in graph.ops} >= {"MEAN", "TRANSPOSE", "STRIDED_SLICE", "RSQRT"}


def test_blendshapes_match_litert_from_the_same_landmarks(astronaut, grace_hopper):
    port = BlendshapeNet("cpu")
    lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1, mode="image"))
    try:
        for photo in (astronaut, grace_hopper, place(astronaut, angle=30, scale=0.9)[0]):
            face = lm.detect(photo, 0)[0]
            got = port(face.landmarks)
            assert list(got) == list(face.blendshapes)  # same 52 names, same order
            err = max(abs(got[k] - face.blendshapes[k]) for k in got)
            assert err < 1e-4, err  # measured 6e-6
    finally:
        lm.close()
    assert got["mouthSmileLeft"] > 0.5  # the astronaut smiles; the port says so too


def test_graph_runs_any_batch_and_keeps_tflite_layout():
    g = load_graph(read_task_member(DETECTOR_MEMBER))
    with torch.inference_mode():
        reg, cls = g(torch.zeros(3, 128, 128, 3))
    assert reg.shape == (3, 896, 16) and cls.shape == (3, 896, 1)


def test_video_mode_follows_a_moving_face_and_redetects_after_a_gap(astronaut):
    lm = LandmarkGraph(LandmarkerConfig(max_faces=1))
    clip = [place(astronaut, shift=(6 * i, 3 * i), angle=i) for i in range(5)]
    frames = [frame for frame, _ in clip]
    blank = np.full_like(frames[0], 118)
    seen = []
    try:
        for i, frame in enumerate(frames + [blank] + frames[:1]):
            seen.append(lm.detect(frame, i * 33))
    finally:
        lm.close()
    assert [len(f) for f in seen] == [1, 1, 1, 1, 1, 0, 1]
    # landmarks follow the motion: where frame 0's landmarks land under frame 4's transform
    to_photo = np.linalg.inv(np.vstack([clip[0][1], [0, 0, 1]]))[:2]
    predicted = apply(clip[4][1], apply(to_photo, seen[0][0].landmarks))
    err = np.linalg.norm(seen[4][0].landmarks[:, :2] - predicted, axis=1)
    assert err.mean() < 1.5, err.mean()
    assert seen[6][0].landmarks[33, :2] == pytest.approx(seen[0][0].landmarks[33, :2], abs=1.0)


def test_blendshapes_off_skips_their_network_and_keeps_the_rest(astronaut):
    """The stream's setting: no blendshapes (and no blendshapes network loaded); landmarks, transform and
    pose are the same as with them on."""
    on = LandmarkGraph(LandmarkerConfig(max_faces=1, mode="image"))
    off = LandmarkGraph(LandmarkerConfig(max_faces=1, mode="image", blendshapes=False))
    try:
        (a,), (b,) = on.detect(astronaut), off.detect(astronaut)
    finally:
        on.close()
        off.close()
    assert off.blendshapes is None and b.blendshapes == {}
    assert len(a.blendshapes) == 52 and a.blendshapes["eyeBlinkLeft"] >= 0.0
    assert np.array_equal(a.landmarks, b.landmarks) and np.array_equal(a.transform, b.transform) and a.pose == b.pose
