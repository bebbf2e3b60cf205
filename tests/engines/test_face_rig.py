"""The face rig on a clip made from a real photo: a neutral face calibrated for two seconds, then the product's
own smile edit, eyelids warped shut, one eye winked, and the head turned on its own mesh depth each way
(the landmarker and the blendshapes network are the real ones). Measured on this clip after calibration:
mouthSmile 0.48 / 0.33 from 0.00, eyeBlink 0.17 / 0.16 from 0.00 (a wink 0.11 against 0.02), yaw +4.9
and -6.3 degrees for the turns to the person's left and right."""

from __future__ import annotations

import numpy as np
import pytest

from engines.backends import select_backend
from engines.face_rig import (ARKIT_NAMES, MIRROR_ORDER, FaceRig, Neutral, RigConfig, angles_of, gaze_degrees,
                              iris_offsets, matrix_of, mirrored_name, pick_face, quaternion_of,
                              quaternion_of_angles, _rotation)
from engines.faces import LandmarkerConfig
from tests.face_scenes import scenes as scenes_of
from tests.faceclips import add_noise

FPS = 30


@pytest.fixture(scope="module")
def landmarker():
    det = select_backend().landmarker(LandmarkerConfig(mode="image", blendshapes=False))
    yield det
    det.close()


@pytest.fixture(scope="module")
def scenes(grace_hopper, landmarker):
    """Named still frames of one person: neutral, smiling, eyes shut, left eye shut, head turned each way."""
    return scenes_of(grace_hopper, landmarker.detect(grace_hopper, 0)[0].landmarks)


@pytest.fixture(scope="module")
def played(scenes, landmarker):
    """A clip at 30 fps with sensor noise through a calibrated rig: 2 s of neutral (calibrating), then 12
    frames of each scene with neutral between; the rig's frames per scene."""
    rng = np.random.default_rng(3)
    rig = FaceRig()
    rig.calibrate()
    out: dict[str, list] = {}
    t = 0.0
    order = ["neutral"] * 70
    for name in ("smile", "blink", "wink_left", "turn_left", "turn_right"):
        order += [name] * 12 + ["neutral"] * 12
    for name in order:
        image = add_noise(scenes[name], 3.0, rng)
        faces = landmarker.detect(image, int(t * 1000))
        frame = rig(pick_face(faces), t, (image.shape[1], image.shape[0]))
        out.setdefault(name, []).append(frame)
        t += 1.0 / FPS
    return rig, out


def _late(frames, n=6):
    """The scene's last frames: the smoothing has settled on them."""
    return frames[-n:]


def _mean(frames, name):
    return float(np.mean([f.scores[ARKIT_NAMES.index(name)] for f in frames]))


def test_all_52_names_values_in_unit_range_and_calibrated(played):
    rig, out = played
    assert len(ARKIT_NAMES) == 52 == len(set(ARKIT_NAMES))
    assert rig.neutral is not None and not rig.calibrating
    for frames in out.values():
        for f in frames:
            assert f.found and f.scores.shape == (52,)
            assert np.all(f.scores >= 0.0) and np.all(f.scores <= 1.0)
    after = out["smile"][-1]
    assert after.calibrated and set(after.as_json()["blendshapes"]) == set(ARKIT_NAMES)
    # calibrated on the neutral face: the neutral face after calibration reads near zero everywhere
    settled = _late(out["neutral"][70:82])
    assert max(float(np.max(f.scores)) for f in settled) < 0.2
    assert all(abs(f.yaw) < 2.0 and abs(f.pitch) < 3.0 and abs(f.roll) < 2.0 for f in settled)


def test_smile_raises_mouth_smile(played):
    _, out = played
    neutral = _late(out["neutral"][70:82])
    smile = _late(out["smile"])
    for side in ("mouthSmileLeft", "mouthSmileRight"):
        assert _mean(smile, side) > _mean(neutral, side) + 0.2, side


def test_blink_raises_eye_blink_and_a_wink_only_its_own_eye(played):
    _, out = played
    neutral = _late(out["neutral"][70:82])
    blink, wink = _late(out["blink"]), _late(out["wink_left"])
    for side in ("eyeBlinkLeft", "eyeBlinkRight"):
        assert _mean(blink, side) > _mean(neutral, side) + 0.1, side
    # a wink: the winking eye rises, the open one stays (measured 0.11 against 0.02)
    assert _mean(wink, "eyeBlinkLeft") > _mean(neutral, "eyeBlinkLeft") + 0.07
    assert _mean(wink, "eyeBlinkLeft") > _mean(wink, "eyeBlinkRight") + 0.05


def test_yaw_follows_the_head_turn_with_its_sign(played):
    _, out = played
    left = np.mean([f.yaw for f in _late(out["turn_left"])])
    right = np.mean([f.yaw for f in _late(out["turn_right"])])
    assert left > 2.0 and right < -2.0, (left, right)
    # the quaternion carries the same rotation
    f = _late(out["turn_left"])[-1]
    assert np.allclose(angles_of(matrix_of(np.array(f.quaternion))), (f.yaw, f.pitch, f.roll), atol=1e-3)


def test_neutral_round_trips_through_json_and_refuses_bad_input(played):
    rig, _ = played
    back = Neutral.from_json(rig.neutral.as_json())
    assert np.allclose(back.scores, rig.neutral.scores, atol=1e-4)
    assert np.allclose(back.rotation, rig.neutral.rotation, atol=1e-5)
    for bad in (None, [], {"blendshapes": {"notAName": 0.1}, "rotation": [0, 0, 0, 1], "position": [0, 0, 0], "gaze": [0] * 4},
                {"blendshapes": {}, "rotation": [0, 0, 0, 0], "position": [0, 0, 0], "gaze": [0] * 4},
                {"blendshapes": {}, "rotation": [0, 0, 0, 1], "position": [0, 0], "gaze": [0] * 4}):
        with pytest.raises(ValueError):
            Neutral.from_json(bad)


def test_no_face_before_any_says_not_found_with_neutral_values():
    rig = FaceRig(RigConfig(smoothing=False))
    first = rig(None, 0.0, (640, 480))
    assert not first.found and first.quaternion == (0.0, 0.0, 0.0, 1.0)
    assert np.all(first.scores == 0.0)


def test_gaze_and_rotation_helpers():
    # an iris at the eye's centre looks straight ahead; toward the person's left gives gaze yaw > 0
    assert np.allclose(gaze_degrees(np.zeros(4)), 0.0)
    assert gaze_degrees(np.array([0.3, 0, 0.3, 0]))[0] > 20.0
    for ypr in ((10.0, -5.0, 3.0), (-30.0, 20.0, -15.0)):
        r = _rotation(*ypr)
        assert np.allclose(angles_of(r), ypr, atol=1e-6)
        assert np.allclose(matrix_of(quaternion_of(r)), r, atol=1e-9)
        assert np.allclose(quaternion_of_angles(*ypr), quaternion_of(r), atol=1e-12)   # the frame's float path
    assert mirrored_name("eyeBlinkLeft") == "eyeBlinkRight" and mirrored_name("jawOpen") == "jawOpen"
    assert sorted(MIRROR_ORDER) == list(range(52))


def test_iris_offsets_follow_the_iris(grace_hopper, landmarker):
    lm = landmarker.detect(grace_hopper, 0)[0].landmarks.astype(np.float64)
    base = iris_offsets(lm)
    moved = lm.copy()
    ex = lm[263, :2] - lm[33, :2]
    moved[[468, 473], :2] += 0.1 * ex / np.linalg.norm(ex) * np.linalg.norm(lm[263, :2] - lm[362, :2])
    d = iris_offsets(moved) - base
    assert d[0] > 0.1 and d[2] > 0.1 and abs(d[1]) < 0.02 and abs(d[3]) < 0.02


def test_a_face_frame_as_json_text_is_the_event_body_rounded_and_strict(played):
    """What a face-data client reads: every field of the rig's frame, at the documented precision, in text
    any JSON parser takes; a frame holding a NaN is refused rather than sent as invalid JSON."""
    import dataclasses
    import json
    import math

    _, out = played
    frame = dataclasses.replace(out["smile"][-1], extra={"source": "src-1"})
    body = json.loads(frame.json_text())
    assert body["blendshapes"] == {n: round(float(v), 4) for n, v in zip(ARKIT_NAMES, frame.scores)}
    assert body["head"] == {"yaw": round(frame.yaw, 2), "pitch": round(frame.pitch, 2), "roll": round(frame.roll, 2),
                            "quaternion": [round(q, 5) for q in frame.quaternion],
                            "position": [round(p, 4) for p in frame.position]}
    assert body["gaze"] == {"left": {"yaw": round(frame.gaze[0], 2), "pitch": round(frame.gaze[1], 2)},
                            "right": {"yaw": round(frame.gaze[2], 2), "pitch": round(frame.gaze[3], 2)}}
    assert (body["t"], body["found"], body["track_id"], body["calibrated"], body["source"]) == (
        round(frame.t, 4), True, frame.track_id, True, "src-1")
    assert frame.as_json() == body
    with pytest.raises(ValueError, match="not finite"):
        dataclasses.replace(frame, yaw=math.nan).json_text()


def test_the_network_runs_only_when_the_landmarks_change_and_the_outputs_read_the_same_floats():
    """A still face (the same landmarks, or a copy of them) keeps its scores without the network; moved
    landmarks run it again. The frame's plain floats, which the outputs read, are its scores array's."""
    from engines.faces import Face

    runs = []

    def net(pts):
        runs.append(1)
        return {n: min(0.9, 0.01 * i + float(pts[0, 0]) * 1e-3) for i, n in enumerate(ARKIT_NAMES[:-1])}

    rig = FaceRig(blendshapes=net)
    pts = np.random.default_rng(0).uniform(100, 300, (478, 3)).astype(np.float32)
    transform = np.eye(4, dtype=np.float32)
    for i, lm in enumerate((pts, pts, pts.copy(), pts + 1.0, pts + 1.0)):
        frame = rig(Face(landmarks=lm, bbox=(0, 0, 1, 1), transform=transform, track_id=1), i / 30, (640, 480))
        assert frame.score_floats() == tuple(frame.scores.tolist()) and frame.blendshapes["tongueOut"] == 0.0
    assert len(runs) == rig.network_runs == 2
