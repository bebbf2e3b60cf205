"""Hands in front of a face, on a real portrait: MediaPipe's palm detector and hand landmark network
(LiteRT) find an open hand pasted over Grace Hopper's face, the hand's mask covers it, and bad input
(a hand filling the frame, a tiny hand, a hand with no face) gives answers, not crashes.

No photo of a real hand ships in any package found on this machine (scikit-image, matplotlib, the
mediapipe wheel, hand-tracking wheels on PyPI were searched), so the hand is `tests.faceclips.skin_hand`:
a hand silhouette textured with real skin cut from the astronaut photo, pasted over the real portrait."""

import numpy as np
import pytest

from engines.faces import Face
from engines.landmarks.hands import (HandConfig, HandGuard, hand_patch, open_hand_finder, palm_anchors,
                                     roi_from_hand)
from tests.faceclips import ASTRONAUT_SKIN, skin_hand
from tests.streamer.pipeline.stages.test_fusion import frame640

pytestmark = pytest.mark.timeout(120)
SKIN = ASTRONAUT_SKIN


@pytest.fixture(scope="module")
def finder():
    return open_hand_finder()


@pytest.fixture(scope="module")
def hand_over_face(grace_hopper, astronaut):
    """Grace Hopper at 640x480 with an open hand over her lower left cheek and chin, and its coverage."""
    img = frame640(grace_hopper)
    return skin_hand(astronaut, SKIN, centre=(290, 330), scale=0.7, frame=img)


def test_palm_anchors_follow_mediapipes_scheme():
    a = palm_anchors()
    assert a.shape == (2016, 2)                              # 24x24x2 + 12x12x6
    assert np.allclose(a[0], (0.5 / 24, 0.5 / 24)) and np.allclose(a[1152], (0.5 / 12, 0.5 / 12))


def test_hand_over_a_real_face_is_found_and_masked(finder, hand_over_face):
    frame, cover = hand_over_face
    hands = finder.find(frame)
    assert len(hands) == 1
    hand = hands[0]
    assert hand.presence > 0.7
    # the fingertips (4, 8, 12, 16, 20) and the wrist lie on the painted hand
    ys, xs = np.nonzero(cover > 0.5)
    for i in (0, 4, 8, 12, 16, 20):
        x, y = hand.landmarks[i, :2]
        assert xs.min() - 8 <= x <= xs.max() + 8 and ys.min() - 8 <= y <= ys.max() + 8, i
    patch = hand_patch(hand, (0, 0, frame.shape[1], frame.shape[0]))
    assert patch is not None
    m = patch.mask
    assert (m[cover > 0.99] > 0.99).mean() > 0.97           # the hand is covered ...
    assert (m[cover < 0.01] > 0.5).mean() < 0.08            # ... and not much more
    # the next frame's crop from its own landmarks finds it again (the tracking rule)
    again = finder.landmarker.landmarks(frame, roi_from_hand(hand.landmarks))
    assert again.presence > 0.7
    assert np.abs(again.landmarks[:, :2] - hand.landmarks[:, :2]).mean() < 6


def test_no_hand_on_real_portraits(finder, grace_hopper, astronaut):
    for photo in (grace_hopper, astronaut):
        assert finder.find(frame640(photo)) == []


def test_bad_input_gives_answers(finder, astronaut):
    huge, _ = skin_hand(astronaut, SKIN, centre=(320, 330), scale=4.0)     # fills the frame and beyond
    tiny, _ = skin_hand(astronaut, SKIN, centre=(320, 300), scale=0.08)
    for img in (huge, tiny, np.zeros((5, 7, 3), np.uint8), np.zeros((480, 640, 3), np.uint8)):
        hands = finder.find(img)
        assert isinstance(hands, list)
        for h in hands:
            assert np.isfinite(h.landmarks).all()
    guard = HandGuard(finder)
    assert guard(huge, [], {}, 0.0) == {}                                  # a hand with no face: nothing to keep


def test_guard_checks_at_the_interval_and_follows_between(finder, hand_over_face):
    frame, cover = hand_over_face
    lm = np.zeros((478, 3), np.float32)
    rng = np.random.default_rng(0)
    lm[:, 0] = rng.uniform(250, 400, 478)
    lm[:, 1] = rng.uniform(110, 270, 478)
    face = Face(landmarks=lm, bbox=(250.0, 110.0, 400.0, 270.0), track_id=3, score=0.95)
    guard = HandGuard(finder, HandConfig(check_interval_ms=250.0))
    first = guard(frame, [face], {3: lm}, 0.0)
    assert guard.report.checked and guard.report.reason == "interval" and guard.report.hands == 1
    assert 3 in first
    second = guard(frame, [face], {3: lm}, 33.0)
    assert not guard.report.checked and guard.report.tracked == 1
    a, b = first[3].mask, second[3].mask
    assert np.abs(a - b).mean() < 0.02                                     # a still hand stays put under flow
    moved = lm.copy()
    moved[:, 0] += 30.0                                                    # the face's landmarks jump
    guard(frame, [face], {3: moved}, 66.0)
    assert guard.report.checked and guard.report.reason == "jump"
    guard(frame, [face], {3: moved}, 400.0)
    assert guard.report.checked and guard.report.reason == "interval"
