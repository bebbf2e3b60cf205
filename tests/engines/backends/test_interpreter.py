"""LiteRT's interpreter under the tracking graph (the `interpreter` face backend, the default) on real photos.

Tolerances (measured values in brackets): each network in LiteRT against its torch port on the same
input: landmarks within 0.05 px [2e-4], detector regressors within 0.02 [1e-4], blendshapes within 1e-3
[1e-5]. The whole path against MediaPipe's graph in IMAGE mode: landmarks 0.1 px mean [0.03], blendshapes
0.01 [0.002], pose 1 degree [0.8], transform rotation 0.03 [0.013], translation 2 % [0.8 %] (the same
perspective geometry pipeline, on landmarks that differ a little). On a clip with known motion, the mean
landmark error against where the motion puts them: median under 1.2 px and worst frame under 2 px
[0.57 / 0.71 astronaut, 0.89 / 1.18 Grace Hopper], where MediaPipe's graph on the same frames gives
[0.79 / 3.4 and 1.35 / 5.4].
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from engines.backends import BackendSettings, select_backend
from engines.backends.interpreter import InterpreterBackend, InterpreterRunner
from engines.faces import LandmarkerConfig, MediaPipeLandmarker
from engines.landmarks.networks import (BLENDSHAPE_LANDMARKS, BLENDSHAPES_MEMBER, DETECTOR_MEMBER, LANDMARKS_MEMBER,
                                         BlendshapeNet, FaceDetectorNet, crop, load_network, read_task_member,
                                         roi_from_landmarks)
from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, apply, face_tile, place


@pytest.fixture(scope="module")
def backend():
    return select_backend(BackendSettings())


def _image_mode(make, photo):
    lm = make(LandmarkerConfig(max_faces=2, mode="image"))
    try:
        return lm.detect(photo, 0)
    finally:
        lm.close()


def test_it_is_the_default_and_finds_one_face_in_each_portrait(backend, astronaut, grace_hopper, face_free_images):
    assert backend.name == "interpreter"
    for photo in (astronaut, grace_hopper):
        faces = _image_mode(backend.landmarker, photo)
        assert len(faces) == 1
        f = faces[0]
        assert f.landmarks.shape == (478, 3) and len(f.blendshapes) == 52 and f.transform.shape == (4, 4)
    for name, photo in face_free_images.items():
        assert _image_mode(backend.landmarker, photo) == [], name


def test_each_network_in_litert_matches_its_torch_port(astronaut):
    frame, _ = place(astronaut)
    ref = _image_mode(MediaPipeLandmarker, frame)[0].landmarks
    tile, _ = crop(frame, roi_from_landmarks(ref), 256)
    x = torch.from_numpy(tile[None].astype(np.float32) / 255.0)
    got = InterpreterRunner(read_task_member(LANDMARKS_MEMBER))(x)
    want = load_network(LANDMARKS_MEMBER)(x)
    assert np.abs(got[0].numpy() - want[0].numpy()).max() < 0.05

    boxed, _ = FaceDetectorNet().letterbox(frame)
    x = torch.from_numpy(boxed[None].astype(np.float32) / 127.5 - 1.0)
    got = InterpreterRunner(read_task_member(DETECTOR_MEMBER))(x)
    want = load_network(DETECTOR_MEMBER)(x)
    assert np.abs(got[0].numpy() - want[0].numpy()).max() < 0.02

    pts = np.ascontiguousarray(ref[list(BLENDSHAPE_LANDMARKS), :2], np.float32)[None]
    got = InterpreterRunner(read_task_member(BLENDSHAPES_MEMBER))(pts)[0]
    want = BlendshapeNet().net(torch.from_numpy(pts))[0].numpy()
    assert got.shape == (52,) and np.abs(got - want).max() < 1e-3


def test_whole_path_matches_mediapipe_in_image_mode(backend, astronaut, grace_hopper):
    for photo in (astronaut, place(astronaut, angle=-25)[0], grace_hopper):
        ref, got = _image_mode(MediaPipeLandmarker, photo), _image_mode(backend.landmarker, photo)
        assert len(ref) == len(got) == 1
        err = np.linalg.norm(got[0].landmarks[:, :2] - ref[0].landmarks[:, :2], axis=1)
        assert err.mean() < 0.1, err.mean()
        assert max(abs(got[0].blendshapes[k] - v) for k, v in ref[0].blendshapes.items()) < 0.01
        assert np.allclose(got[0].pose, ref[0].pose, atol=1.0), (got[0].pose, ref[0].pose)
        g, r = got[0].transform, ref[0].transform
        assert np.abs(g[:3, :3] - r[:3, :3]).max() < 0.03
        assert np.linalg.norm(g[:3, 3] - r[:3, 3]) < 0.02 * np.linalg.norm(r[:3, 3])


@pytest.mark.parametrize("photo_name", ["astronaut", "grace_hopper"])
def test_video_mode_follows_known_motion_closely(backend, photo_name, request):
    """Sway, roll and a slow zoom: landmarks must land where the motion puts the still-frame ones."""
    photo = request.getfixturevalue(photo_name)
    still, m0 = place(photo)
    ref = _image_mode(backend.landmarker, still)[0].landmarks[:, :2]
    in_photo = apply(np.linalg.inv(np.vstack([m0, [0, 0, 1]]))[:2], ref)
    lm = backend.landmarker(LandmarkerConfig(max_faces=1))
    errors = []
    try:
        for i in range(40):
            frame, m = place(photo, shift=(40 * np.sin(i / 4), 2 * i), angle=8 * np.sin(i / 6), scale=1.0 + 0.01 * i)
            faces = lm.detect(frame, i * 33)
            assert len(faces) == 1, i
            errors.append(np.linalg.norm(faces[0].landmarks[:, :2] - apply(m, in_photo), axis=1).mean())
    finally:
        lm.close()
    assert np.median(errors) < 1.2 and max(errors) < 2.0, (np.median(errors), max(errors))


def test_a_lost_face_is_found_again(backend, astronaut):
    frame, _ = place(astronaut)
    blank = np.full_like(frame, 118)
    lm = backend.landmarker(LandmarkerConfig(max_faces=1))
    try:
        counts = [len(lm.detect(f, i * 33)) for i, f in enumerate([frame, frame, blank, blank, frame])]
    finally:
        lm.close()
    assert counts == [1, 1, 0, 0, 1]


def test_a_second_face_is_found_within_the_search_interval_without_detecting_every_frame(
        backend, astronaut, grace_hopper):
    left = face_tile(astronaut, ASTRONAUT_FACE)
    alone = np.concatenate([left, np.full_like(left, 118)], axis=1)
    both = np.concatenate([left, face_tile(grace_hopper, GRACE_HOPPER_FACE)], axis=1)
    lm = backend.landmarker(LandmarkerConfig(max_faces=2, search_interval_ms=250))
    runs = []
    detect = lm.detector.detect
    lm.detector.detect = lambda image: runs.append(1) or detect(image)
    try:
        counts = [len(lm.detect(alone if i < 20 else both, i * 33)) for i in range(32)]
    finally:
        lm.close()
    assert counts[:20] == [1] * 20
    found = counts.index(2, 20)
    assert found - 20 <= 8 and counts[found:] == [2] * (32 - found)   # within 250 ms at 30 fps
    assert len(runs) <= 32 // 7 + 2                                    # not on every frame


def test_a_batch_runs_item_by_item_or_spread_over_threads_and_a_batchless_network_refuses_one():
    runner = InterpreterRunner(read_task_member(LANDMARKS_MEMBER))
    x = np.random.default_rng(0).random((3, 256, 256, 3), dtype=np.float32)
    together = runner(x)
    one = [runner(x[i:i + 1]) for i in range(3)]
    assert np.array_equal(together[0], np.concatenate([o[0] for o in one]))
    spread = InterpreterRunner(read_task_member(LANDMARKS_MEMBER), parallel=2)   # faces over two threads
    try:
        out = spread(x)
        assert all(np.array_equal(a, b) for a, b in zip(out, together))      # same answers, same order
    finally:
        spread.close()
    blend = InterpreterRunner(read_task_member(BLENDSHAPES_MEMBER))
    with pytest.raises(ValueError, match="one item at a time"):
        blend(np.zeros((2, 146, 2), np.float32))


def test_a_gpu_request_falls_back_to_mediapipe_with_the_reason_logged(caplog):
    settings = BackendSettings(preference=("interpreter", "litert"), device="cuda")
    assert "CPU only" in InterpreterBackend.unavailable_reason(settings)
    with caplog.at_level(logging.INFO, logger="engines.backends"):
        assert select_backend(settings).name == "litert"
    assert "interpreter" in caplog.text and "CPU only" in caplog.text
