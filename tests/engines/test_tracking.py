"""Track ids over sequences of real faces (the astronaut's and Grace Hopper's landmarks) moved by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engines.faces import Face, LandmarkerConfig, MediaPipeLandmarker
from engines.tracking import FaceTracker, TrackerConfig, iou


@pytest.fixture(scope="module")
def two_faces(astronaut, grace_hopper) -> list[Face]:
    out = []
    for photo in (astronaut, grace_hopper):
        lm = MediaPipeLandmarker(LandmarkerConfig(max_faces=1))
        try:
            out.append(lm.detect(photo, 0)[0])
        finally:
            lm.close()
    return out


def moved(face: Face, dx: float, dy: float = 0.0) -> Face:
    pts = face.landmarks + np.array([dx, dy, 0.0], np.float32)
    x0, y0, x1, y1 = face.bbox
    return replace(face, landmarks=pts, bbox=(x0 + dx, y0 + dy, x1 + dx, y1 + dy))


def test_iou():
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == pytest.approx(1.0)
    assert iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)
    assert iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0


def test_ids_follow_faces_not_list_order(two_faces):
    a, b = two_faces[0], moved(two_faces[1], 600)
    tracker = FaceTracker()
    first = tracker.update([a, b])
    ids = {"a": first[0].track_id, "b": first[1].track_id}
    assert ids["a"] != ids["b"]
    for step in range(1, 10):  # both walk right, and the landmarker lists them in the other order
        out = tracker.update([moved(b, 4 * step), moved(a, 4 * step)])
        assert (out[0].track_id, out[1].track_id) == (ids["b"], ids["a"])


def test_fast_motion_keeps_the_id(two_faces):
    a = two_faces[0]
    width = a.bbox[2] - a.bbox[0]
    tracker = FaceTracker()
    tid = tracker.update([a])[0].track_id
    # a jump of 0.9 face widths between frames: the boxes barely overlap, the centre rule keeps the id
    assert tracker.update([moved(a, 0.9 * width)])[0].track_id == tid


def test_lost_face_comes_back_with_its_id_within_the_grace_period(two_faces):
    a = two_faces[0]
    tracker = FaceTracker(TrackerConfig(max_missed_frames=5))
    tid = tracker.update([a])[0].track_id
    for _ in range(5):
        assert tracker.update([]) == []
    assert tracker.update([moved(a, 5)])[0].track_id == tid
    for _ in range(6):
        tracker.update([])
    assert tracker.dropped == [tid]
    new = tracker.update([a])[0].track_id
    assert new != tid and new > tid  # ids are never reused


def test_new_face_gets_a_new_id_and_the_old_one_keeps_its_own(two_faces):
    a, b = two_faces[0], moved(two_faces[1], 600)
    tracker = FaceTracker()
    ta = tracker.update([a])[0].track_id
    out = tracker.update([moved(a, 2), b])
    assert out[0].track_id == ta and out[1].track_id not in (ta, -1)
