"""engines/edit_plan.py: what a face's plan holds (ROI, detail level, regions, warp) for given edits."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from engines.edit_plan import EditConfig, active, face_width, plan_face
from engines.edit_vocabulary import EDIT_NAMES, GEOMETRY
from tests.faceclips import landmarks_of


@pytest.fixture(scope="module")
def closeup(astronaut):
    """A webcam-like close-up at 640x480 (face ~ 180 px wide): twice the detail cap, so level 2."""
    img = cv2.resize(astronaut[20:260, 130:450], (640, 480), interpolation=cv2.INTER_CUBIC)
    return img, landmarks_of(img)


def test_coarse_work_stops_growing_past_the_detail_cap(closeup):
    """Masks (the colour work) are no larger for a big face than for the same face at the cap."""
    img, lm = closeup
    edits = {n: 0.6 for n in EDIT_NAMES}
    big = plan_face(img.shape[:2], lm, edits)
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    cfg = EditConfig()
    assert big.level == int(fw // cfg.detail_cap_px) >= 2
    # the same face at the cap's size, level 1
    k = cfg.detail_cap_px / fw
    small_img = cv2.resize(img, (int(640 * k), int(480 * k)), interpolation=cv2.INTER_AREA)
    small = plan_face(small_img.shape[:2], lm * k, edits)
    assert small.level == 1
    assert big.brightness.mask.size <= 1.1 * small.brightness.mask.size   # the face mask
    # and turning the cap off gives full detail (4x the mask pixels at level 2)
    full = plan_face(img.shape[:2], lm, edits, EditConfig(detail_cap_px=0))
    assert full.level == 1 and full.brightness.mask.size > 3 * big.brightness.mask.size


def test_each_edit_plans_only_its_own_work(closeup):
    img, lm = closeup
    for name in EDIT_NAMES:
        plan = plan_face(img.shape[:2], lm, {name: 0.5})
        assert plan is not None, name
        assert (plan.map_xy is not None) == (name in GEOMETRY), name
        assert (plan.appearance or bool(plan.liners)) == (name not in GEOMETRY), name
        assert bool(plan.liners) == (name == "eyeliner"), name     # the liner is the eyeliner's alone
        y0, y1, x0, x1 = plan.roi
        assert (y1 - y0) % (4 * plan.level) == 0 and (x1 - x0) % (4 * plan.level) == 0
        if plan.map_xy is not None:
            assert plan.map_xy.shape == (y1 - y0, x1 - x0, 2) and plan.map_xy.dtype == np.float32
    smooth = plan_face(img.shape[:2], lm, {"skin_smooth": -1.0})
    assert smooth.smooth.amount == -EditConfig().sharpen and smooth.smooth_radius >= 1
    blush = plan_face(img.shape[:2], lm, {"blush": -1.0}).blush
    assert blush.amount == -EditConfig().blush_less and 0.0 <= blush.mask.min() and blush.mask.max() <= 1.0


def test_nothing_to_do_gives_no_plan(closeup):
    img, lm = closeup
    assert plan_face(img.shape[:2], lm, {n: 0.0 for n in EDIT_NAMES}) is None
    assert plan_face(img.shape[:2], lm, {"teleport": 1.0}) is None
    assert plan_face(img.shape[:2], np.full_like(lm, np.nan), {"smile": 1.0}) is None
    assert plan_face(img.shape[:2], lm * 0.01, {"smile": 1.0}) is None   # a face a few pixels wide
    assert active({"smile": 3.0, "blush": -0.0001, "teleport": 1.0}) == {"smile": 1.0}
    assert face_width(lm) == pytest.approx(float(np.linalg.norm(lm[454, :2] - lm[234, :2])))
