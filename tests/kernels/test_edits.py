"""The edit renderer on real portraits: twins agree, each edit moves what it names and nothing else."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from engines.edit_plan import EditConfig, plan_face
from engines.edit_render import render_edits
from engines.edit_vocabulary import EDIT_NAMES, SPECS_BY_NAME
from kernels.numpy.edits import LUMA
from kernels.numpy.flow import warp
from bench.evals.prompts import eye_opening, lab_means, mouth_corner_lift, skin_mask
from tests.faceclips import landmarks_of


@pytest.fixture(scope="module")
def portrait(astronaut):
    return astronaut, landmarks_of(astronaut)


@pytest.fixture(scope="module")
def odd_frame(astronaut):
    """318x238: odd sizes catch stride and border bugs."""
    img = cv2.resize(astronaut, (318, 238), interpolation=cv2.INTER_AREA)
    return img, landmarks_of(img)


@pytest.mark.parametrize("name", EDIT_NAMES)
def test_numpy_and_torch_agree_on_odd_frame(odd_frame, name):
    img, lm = odd_frame
    for v in (SPECS_BY_NAME[name].clip(-1.0), 0.7):
        if v == 0.0:                                 # a one-sided edit (eye_contact) has no other direction
            continue
        a = render_edits(img, [lm], {name: v}).astype(int)
        b = render_edits(torch.from_numpy(img), [lm], {name: v}).numpy().astype(int)
        changed = np.abs(a - img.astype(int)).sum()
        assert changed > 0, f"{name}={v} changed nothing"
        diff = np.abs(a - b)
        assert diff.max() <= 2 and diff.mean() < 0.01, (name, v, diff.max(), diff.mean())


def test_twins_agree_with_all_edits_on(odd_frame):
    img, lm = odd_frame
    edits = {n: (0.8 if i % 2 else -0.6) for i, n in enumerate(EDIT_NAMES)}
    a = render_edits(img, [lm], edits).astype(int)
    b = render_edits(torch.from_numpy(img), [lm], edits).numpy().astype(int)
    assert np.abs(a - b).max() <= 2


@pytest.mark.parametrize("edits,smaller", [({"smile": 0.9, "contour": 0.3, "brightness": 0.2, "saturation": 0.1}, True),
                                           ({"skin_smooth": 0.8, "lip_tint": 0.5}, False),
                                           ({n: 1.0 for n in EDIT_NAMES}, False)])
def test_working_only_where_the_fields_and_the_warp_reach_changes_no_pixel(portrait, edits, smaller):
    """The kernels leave alone the parts of the ROI that no colour field and no warp offset reaches (the
    ROI is wider than the face for the warp's sake, and for the forehead's): against the whole ROI done,
    its masks drawn over all of it, not one pixel differs."""
    from dataclasses import replace

    from kernels.numpy import edits as ne

    img, lm = portrait
    plan = plan_face(img.shape[:2], lm, edits)
    whole = plan_face(img.shape[:2], lm, edits, whole_roi=True)
    y0, y1, x0, x1 = plan.roi
    a0, a1, b0, b1 = plan.appearance_box
    assert 0 <= a0 < a1 <= y1 - y0 and 0 <= b0 < b1 <= x1 - x0 and whole.appearance_box is None
    if "forehead" in edits:                                # the ROI grows for the hairline's move, the colour work does not
        assert a1 - a0 < y1 - y0
    whole_roi = img.copy()
    roi = whole_roi[y0:y1, x0:x1]
    if plan.appearance:                                    # every pixel of the ROI through the blend
        x = ne.apply_appearance(roi.astype(np.float32), whole)
        roi[:] = cv2.add(x, np.zeros_like(x), dtype=cv2.CV_8U)
    ne.draw_liners(roi, plan)                              # the eyeliner, drawn on its own patch either way
    if plan.map_xy is not None:                            # and through the remap
        roi[:] = warp(roi.copy(), plan.map_xy)
    got = ne.apply_plan(img.copy(), plan)
    assert np.array_equal(got, whole_roi)
    assert np.array_equal(ne.apply_plan(img.copy(), replace(plan, map_box=None)), whole_roi)
    if smaller:                                            # a smile moves the lower face only
        a0, a1, b0, b1 = plan.map_box
        assert (a1 - a0) * (b1 - b0) < 0.7 * (y1 - y0) * (x1 - x0)


def test_zero_edits_change_nothing_and_input_is_not_modified(portrait):
    img, lm = portrait
    keep = img.copy()
    out = render_edits(img, [lm], {n: 0.0 for n in EDIT_NAMES})
    assert np.array_equal(out, img)
    render_edits(img, [lm], {"brightness": 1.0, "smile": 1.0})
    assert np.array_equal(img, keep)


@pytest.mark.parametrize("edits,above", [({n: 1.0 for n in EDIT_NAMES if n != "forehead"}, 0.3),
                                          ({n: 1.0 for n in EDIT_NAMES}, 0.8)])
def test_edits_stay_on_the_face(portrait, edits, above):
    """Nothing changes further than 0.3 face widths from the face's landmarks, but above the forehead, where
    `forehead` moves the hairline: the mesh ends below it."""
    img, lm = portrait
    out = render_edits(img, [lm], edits)
    fw = np.linalg.norm(lm[454, :2] - lm[234, :2])
    x0, y0 = lm[:, :2].min(0) - np.array([0.3, above]) * fw
    x1, y1 = lm[:, :2].max(0) + 0.3 * fw
    outside = np.ones(img.shape[:2], bool)
    outside[max(0, int(y0)):int(y1) + 1, max(0, int(x0)):int(x1) + 1] = False
    assert np.array_equal(out[outside], img[outside])
    assert np.abs(out.astype(int) - img).sum() > 0


def test_no_faces_and_bad_input(face_free_images):
    img = face_free_images["coffee"]
    assert np.array_equal(render_edits(img, [], {"brightness": 1.0}), img)
    with pytest.raises(ValueError):
        render_edits(img.astype(np.float32), [], {"brightness": 1.0})
    with pytest.raises(ValueError):
        render_edits(torch.zeros(4, 4), [], {})
    # nonsense values: unknown names ignored, values clipped, NaN landmarks skipped
    lm = np.full((478, 3), np.nan, np.float32)
    assert np.array_equal(render_edits(img, [lm], {"brightness": 1.0, "teleport": 1.0}), img)


def test_brightness_and_warmth_move_skin_lab(grace_hopper):
    lm = landmarks_of(grace_hopper)
    mask = skin_mask(grace_hopper.shape[:2], lm)
    l0, b0 = lab_means(grace_hopper, mask)
    l_up, _ = lab_means(render_edits(grace_hopper, [lm], {"brightness": 0.8}), mask)
    l_dn, _ = lab_means(render_edits(grace_hopper, [lm], {"brightness": -0.8}), mask)
    _, b_up = lab_means(render_edits(grace_hopper, [lm], {"skin_warmth": 0.8}), mask)
    _, b_dn = lab_means(render_edits(grace_hopper, [lm], {"skin_warmth": -0.8}), mask)
    assert l_up > l0 + 3 and l_dn < l0 - 3
    assert b_up > b0 + 2 and b_dn < b0 - 2


def test_smile_lifts_mouth_corners_as_the_landmarker_sees_them(portrait):
    img, lm = portrait
    base = mouth_corner_lift(landmarks_of(img))
    up = mouth_corner_lift(landmarks_of(render_edits(img, [lm], {"smile": 0.8})))
    down = mouth_corner_lift(landmarks_of(render_edits(img, [lm], {"smile": -0.8})))
    assert up > base + 0.005 and down < base - 0.005, (base, up, down)


def test_eye_size_widens_the_eye_opening(portrait):
    img, lm = portrait
    base = eye_opening(landmarks_of(img))
    big = eye_opening(landmarks_of(render_edits(img, [lm], {"eye_size": 0.8})))
    assert big > base * 1.03, (base, big)


def test_lip_tint_reddens_only_the_lips(portrait):
    img, lm = portrait
    out = render_edits(img, [lm], {"lip_tint": 1.0})
    from engines.face_masks import region_mask

    lips = region_mask(img.shape[:2], lm, ["lips_outer"], ["lips_inner"]) > 0.8
    changed = np.abs(out.astype(int) - img).sum(-1) > 0
    assert changed[lips].mean() > 0.9
    redness = lambda im: (im[..., 0].astype(float) - im[..., 1])[lips].mean()  # noqa: E731
    assert redness(out) > redness(img) + 10
    fw = np.linalg.norm(lm[454, :2] - lm[234, :2])
    near = cv2.dilate((region_mask(img.shape[:2], lm, ["lips_outer"]) > 0).astype(np.uint8), np.ones((3, 3), np.uint8),
                      iterations=int(0.08 * fw)).astype(bool)  # feathered half-res mask: a few px
    assert not changed[~near].any()


@pytest.fixture(scope="module")
def closeup(astronaut):
    """A webcam-like close-up at 640x480 (face ~ 180 px wide): twice the detail cap, so level 2."""
    img = cv2.resize(astronaut[20:260, 130:450], (640, 480), interpolation=cv2.INTER_CUBIC)
    return img, landmarks_of(img)


def test_twins_agree_on_a_closeup_past_the_detail_cap(closeup):
    img, lm = closeup
    edits = {n: (0.8 if i % 2 else -0.6) for i, n in enumerate(EDIT_NAMES)}
    plan = plan_face(img.shape[:2], lm, edits)
    assert plan.level >= 2
    a = render_edits(img, [lm], edits).astype(int)
    b = render_edits(torch.from_numpy(img), [lm], edits).numpy().astype(int)
    assert np.abs(a - img.astype(int)).sum() > 0
    diff = np.abs(a - b)
    assert diff.max() <= 2 and diff.mean() < 0.01, (diff.max(), diff.mean())


def _hue(lab: np.ndarray) -> float:
    return float(np.degrees(np.arctan2(lab[..., 2].mean(), lab[..., 1].mean())))


@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_a_named_lipstick_lands_on_its_hue(request, photo):
    """The issue's lipstick shades, at full scale on two real faces: the lips' mean a*b* hue within 15 degrees
    of the swatch's (the chroma of the lips' own red is what is left to pull against)."""
    from skimage.color import rgb2lab

    from engines.colours import PALETTE
    from engines.edit_plan import colours_for
    from engines.face_masks import region_mask

    img = request.getfixturevalue(photo)
    lm = landmarks_of(img)
    lips = region_mask(img.shape[:2], lm, ["lips_outer"], ["lips_inner"]) > 0.8
    misses = {}
    for name in ("red", "nude", "pink", "berry", "coral", "plum", "dusty rose"):
        out = render_edits(img, [lm], {"lip_tint": 1.0}, colours=colours_for({"lip_tint": name}))
        got = _hue(rgb2lab(out[lips][None] / 255.0))
        want = _hue(rgb2lab(np.array(PALETTE[name], float)[None, None] / 255.0))
        misses[name] = round((got - want + 180) % 360 - 180, 1)
    assert all(abs(m) <= 15 for m in misses.values()), misses
    assert len({round(h) for h in misses.values()}) > 1     # not one hue painted for every name


def test_twins_agree_on_a_coloured_makeup(odd_frame):
    from engines.edit_plan import colours_for

    img, lm = odd_frame
    paint = colours_for({"lip_tint": "plum", "blush": "#ff9966", "eye_makeup": "gold", "eyeliner": "brown"})
    edits = {"lip_tint": 0.9, "blush": 0.8, "eye_makeup": 0.7, "eyeliner": 0.8}
    a = render_edits(img, [lm], edits, colours=paint).astype(int)
    b = render_edits(torch.from_numpy(img), [lm], edits, colours=paint).numpy().astype(int)
    assert np.abs(a - b).max() <= 2 and not np.array_equal(a, render_edits(img, [lm], edits).astype(int))


@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_a_tan_darkens_and_yellows_the_skin_as_tanning_does(request, photo):
    from skimage.color import rgb2lab

    img = request.getfixturevalue(photo)
    lm = landmarks_of(img)
    mask = skin_mask(img.shape[:2], lm)
    lab = lambda im: rgb2lab(im[mask][None] / 255.0)[0].mean(0)  # noqa: E731
    d = lab(render_edits(img, [lm], {"tan": 1.0})) - lab(img)
    assert d[0] <= -6 and d[2] >= 3, d                               # the full-scale target
    pale = lab(render_edits(img, [lm], {"tan": -1.0})) - lab(img)
    assert pale[0] >= 5 and pale[2] < 0, pale


def test_eye_makeup_darkens_the_lids_and_takes_its_shade(portrait):
    """Shadow is worn to darken: the default (black) takes the lids' lightness down visibly (the astronaut's
    light lids by about 9 L*: the shadow darkens every lid as it darkens a mid-grey one), and a gold shadow
    makes them yellower than the black one does."""
    from skimage.color import rgb2lab

    from engines.edit_plan import colours_for

    img, lm = portrait
    plan = plan_face(img.shape[:2], lm, {"eye_makeup": 1.0}, whole_roi=True)
    y0, y1, x0, x1 = plan.roi
    lids = cv2.resize(plan.lids.mask, (x1 - x0, y1 - y0)) > 0.5
    lab = lambda im: rgb2lab(im[y0:y1, x0:x1][lids][None] / 255.0)[0].mean(0)  # noqa: E731
    black = lab(render_edits(img, [lm], {"eye_makeup": 1.0})) - lab(img)
    gold = lab(render_edits(img, [lm], {"eye_makeup": 1.0}, colours=colours_for({"eye_makeup": "gold"}))) - lab(img)
    assert black[0] <= -6, black
    assert gold[2] > black[2] + 10, (gold, black)


def test_eyeliner_draws_a_winged_line_along_the_upper_lash_line(closeup):
    """Eyeliner on its own: just above each upper lid the grey drops by a line's darkness, past the outer
    corner a wing rises toward the brow's tail, and below the outer corner, on the iris and on the brows
    nothing moves."""
    from engines.edit_plan import UPPER_LIDS

    img, lm = closeup
    out = render_edits(img, [lm], {"eyeliner": 1.0})
    grey = lambda im, p: float(cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)[int(round(p[1])), int(round(p[0]))])  # noqa: E731
    up = lm[10, :2] - lm[152, :2]
    up /= np.linalg.norm(up)
    for lid in UPPER_LIDS:
        pts = lm[list(lid), :2]
        eye_w = float(np.linalg.norm(pts[-1] - pts[0]))
        above = [p + 0.03 * eye_w * up for p in pts[1:9]]             # along the lid, on the line (10-34 here)
        assert min(grey(img, p) - grey(out, p) for p in above) > 6, [grey(img, p) - grey(out, p) for p in above]
        outward = (pts[-1] - pts[0]) / eye_w
        wing = pts[-1] + 0.12 * eye_w * outward + 0.06 * eye_w * up   # 24-26 here
        below = pts[-1] + 0.12 * eye_w * outward - 0.2 * eye_w * up    # past the soft edge (3 sigma: 0.12)
        assert grey(img, wing) - grey(out, wing) > 15
        assert abs(grey(img, below) - grey(out, below)) <= 1
    for iris in (468, 473):
        assert grey(out, lm[iris, :2]) == grey(img, lm[iris, :2])
    brows = cv2.cvtColor(out, cv2.COLOR_RGB2GRAY)[int(lm[[70, 300], 1].min()) - 3:int(lm[[105, 334], 1].max()) + 3]
    assert np.array_equal(brows, cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[int(lm[[70, 300], 1].min()) - 3:int(lm[[105, 334], 1].max()) + 3])


def test_a_black_liner_never_lifts_lashes_darker_than_its_ink_and_a_light_one_only_lightens(closeup):
    """On a frame at a third of its light the lash line is darker than the black ink (L* 14): moving toward
    the ink's own grey would lighten it and the line would vanish there (Biden's lash line reads L* 13-14).
    The black line darkens or keeps every pixel (to within a level: its colour moves) and darkens the line
    where it is lighter than the ink; a gold one on the same dark lids lightens or keeps every pixel. Both
    twins."""
    from engines.edit_plan import colours_for

    img, lm = closeup
    dark = (img.astype(np.float32) * 0.45).astype(np.uint8)
    plan = plan_face(dark.shape[:2], lm, {"eyeliner": 1.0})
    (drawn,) = plan.liners
    y0, y1, x0, x1 = plan.roi
    a0, a1, b0, b1 = drawn.box
    grey = lambda im: cv2.cvtColor(np.ascontiguousarray(im), cv2.COLOR_RGB2GRAY)[y0:y1, x0:x1][a0:a1, b0:b1].astype(int)  # noqa: E731
    line = drawn.op.mask > 0.5
    assert (grey(dark)[line] < 36).mean() > 0.2          # much of the line darker than the ink's grey (36)
    room = line & (grey(dark) > 50)                       # where a black line has room to darken
    for colour, sign, where in ((None, -1, room), ("gold", 1, line)):
        paint = colours_for({"eyeliner": colour}) if colour else None
        for out in (render_edits(dark, [lm], {"eyeliner": 1.0}, colours=paint),
                    render_edits(torch.from_numpy(dark), [lm], {"eyeliner": 1.0}, colours=paint).numpy()):
            d = (grey(out) - grey(dark)) * sign               # > 0: the way the ink goes
            assert d.min() >= -1 and d[where].mean() > 5, (colour, d.min(), d[where].mean())


def test_a_shadow_darkens_a_light_and_a_dark_lid_alike(portrait):
    """The same face, and the same face at 55 % of its light (a darker skin's lids, or a dim room): the black
    shadow takes the lids' grey down by the same amount on both, where a fixed share of the way to black took
    the light lids down more than twice as far (37.7 against 15.5 levels)."""
    from dataclasses import replace

    img, lm = portrait
    dark = (img.astype(np.float32) * 0.55).astype(np.uint8)
    plan = plan_face(img.shape[:2], lm, {"eye_makeup": 1.0}, whole_roi=True)
    y0, y1, x0, x1 = plan.roi
    lids = cv2.resize(plan.lids.mask, (x1 - x0, y1 - y0)) > 0.5
    grey = lambda im: cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)[y0:y1, x0:x1][lids].astype(float).mean()  # noqa: E731

    def darkening(frame, config):
        return grey(render_edits(frame, [lm], {"eye_makeup": 1.0}, config)) - grey(frame)

    config = EditConfig()
    light, shaded = darkening(img, config), darkening(dark, config)
    assert light < -15 and shaded < -15 and abs(light - shaded) < 0.15 * abs(light), (light, shaded)
    fixed = replace(config, lid_grey=0.0)
    assert darkening(img, fixed) < 2 * darkening(dark, fixed)    # without it: -37.7 against -15.5


# -- eye contact, judged by dlib's 68-point eyes (which the product does not use) and the iris's dark pixels --
@pytest.fixture(scope="module")
def close_up(astronaut):
    """The astronaut's face at a webcam close-up's size (eyes about 57 px wide)."""
    return cv2.resize(astronaut[40:220, 130:310], None, fx=3, fy=3, interpolation=cv2.INTER_CUBIC)


def test_eye_contact_brings_a_look_aside_back_to_the_lens_and_keeps_the_lids(close_up):
    from bench.evals.edits import CONTACT_BACK_MAX, LOOK_ASIDE, Judge, dark_centre, look_aside

    judge = Judge()
    p = judge.landmarks(close_up)
    eyes = [p[36:42], p[42:48]]
    eye_w = float(np.mean([np.ptp(e[:, 0]) for e in eyes]))
    aside = look_aside(close_up, eyes, LOOK_ASIDE * eye_w)
    out = render_edits(aside, [landmarks_of(aside)], {"eye_contact": 1.0})
    for eye in eyes:
        at_lens, away, back = (dark_centre(x, eye) for x in (close_up, aside, out))
        assert np.linalg.norm(away - at_lens) >= 0.08 * eye_w                       # the look aside shows
        # back at least 30 % of the way (measured 46 % and 38 %, 2026-12-05): the move is read from the
        # product's iris landmarks, which see about 80 % of the look aside, and the judge's dark third
        # includes lashes, which stay
        assert np.linalg.norm(back - at_lens) <= CONTACT_BACK_MAX * np.linalg.norm(away - at_lens), (at_lens, away, back)
    # only the eyes' openings change: outside the outlines (grown by a few pixels) not one pixel moves
    around = np.zeros(close_up.shape[:2], np.uint8)
    for eye in eyes:
        cv2.fillPoly(around, [np.round(eye).astype(np.int32)], 1)
    around = cv2.dilate(around, np.ones((9, 9), np.uint8))
    assert np.array_equal(out[around == 0], aside[around == 0])
    # a person already looking into the lens keeps their look
    kept = render_edits(close_up, [landmarks_of(close_up)], {"eye_contact": 1.0})
    for eye in eyes:
        assert np.linalg.norm(dark_centre(kept, eye) - dark_centre(close_up, eye)) <= 0.05 * eye_w


def test_a_brown_brow_fill_never_lightens_brows_darker_than_it_and_a_blonde_one_only_lightens(closeup):
    """A brow's fill moves lightness one way, as a liner does (kernels.numpy.edits.ink_darkens): on a frame at
    60 % of its light much of the brows is darker than the brown's grey (86), and moving them toward it would
    lighten the hairs while the skin between them darkens (a dark brow, or glasses' frames under it, made
    paler by its fill). The brown darkens or keeps every pixel (to within a level: its colour moves) and
    darkens where the brows are lighter than it; a blonde (#e8d0a8) lightens or keeps every pixel. Both twins."""
    from engines.edit_plan import colours_for

    img, lm = closeup
    dark = (img.astype(np.float32) * 0.6).astype(np.uint8)
    plan = plan_face(dark.shape[:2], lm, {"brow_tint": 1.0}, whole_roi=True)
    y0, y1, x0, x1 = plan.roi
    brows = cv2.resize(plan.brows.mask, (x1 - x0, y1 - y0)) > 0.5
    grey = lambda im: cv2.cvtColor(np.ascontiguousarray(im), cv2.COLOR_RGB2GRAY)[y0:y1, x0:x1][brows].astype(int)  # noqa: E731
    assert (grey(dark) < 86).mean() > 0.2              # much of the brows darker than the brown's grey
    room = grey(dark) > 100                            # where a brown fill has room to darken
    for colour, sign, where in (("brown", -1, room), ("#e8d0a8", 1, np.ones_like(room))):
        paint = colours_for({"brow_tint": colour})
        for out in (render_edits(dark, [lm], {"brow_tint": 1.0}, colours=paint),
                    render_edits(torch.from_numpy(dark), [lm], {"brow_tint": 1.0}, colours=paint).numpy()):
            d = (grey(out) - grey(dark)) * sign            # > 0: the way the ink goes
            assert d.min() >= -1 and d[where].mean() > 2, (colour, d.min(), d[where].mean())


def test_brow_tint_fills_the_brows_in_their_shade_and_leaves_the_eyes(astronaut):
    """Judged on dlib's brow points (a band along each brow) and eye outlines, in CIE Lab."""
    from skimage.color import rgb2lab

    from bench.evals.edits import Judge, brow_band
    from engines.edit_plan import colours_for

    p = Judge().landmarks(astronaut)
    band = brow_band(astronaut.shape[:2], p)
    eyes = np.zeros(astronaut.shape[:2], np.uint8)
    for eye in (p[36:42], p[42:48]):
        cv2.fillPoly(eyes, [np.round(eye).astype(np.int32)], 1)
    lab = lambda im, m: rgb2lab(im[m > 0][None] / 255.0)[0].mean(0)  # noqa: E731
    lm = landmarks_of(astronaut)
    before = lab(astronaut, band)
    brown = render_edits(astronaut, [lm], {"brow_tint": 1.0})
    black = render_edits(astronaut, [lm], {"brow_tint": 1.0}, colours=colours_for({"brow_tint": "black"}))
    lighter = render_edits(astronaut, [lm], {"brow_tint": -1.0})
    # measured 2026-12-05: brown L* -6.5, black -11.0 (b* -4.0: toward grey-black), lighter +9.7; a darker
    # brow moves dlib's identity past 0.2 (tests/bench/test_edits_eval.py)
    assert lab(brown, band)[0] - before[0] <= -5
    assert lab(black, band)[0] - before[0] <= -9 and lab(black, band)[2] < lab(brown, band)[2]
    assert lab(lighter, band)[0] - before[0] >= 5
    for out in (brown, black, lighter):
        assert np.abs(out[eyes > 0].astype(int) - astronaut[eyes > 0].astype(int)).mean() < 1.0


def test_fuller_lips_grow_the_lips_and_keep_the_teeth(close_up, obama):
    """On open smiles (the astronaut's, Obama's): lip_fullness = 1 makes the mouth taller at its middle as
    dlib's 68 points read it (the lips' outer edges, 51 and 57; the edit eval's judge), while the white of
    the teeth between the lips keeps its area (pixels of L* over 70 and chroma under 20 in the mouth's box),
    and nothing moves at the mouth's corners nor far from the mouth."""
    from skimage.color import rgb2lab

    from bench.evals.edits import Judge, lip_height
    from engines.edit_plan import MOUTH_CORNERS

    judge = Judge()
    for img in (close_up, cv2.resize(obama, (900, 900), interpolation=cv2.INTER_AREA)):
        lm = landmarks_of(img)
        out = render_edits(img, [lm], {"lip_fullness": 1.0})
        grown = lip_height(judge.landmarks(out)) / lip_height(judge.landmarks(img)) - 1.0
        assert grown >= 0.08, grown                                     # measured +11 % and +13 % (2026-12-06)
        lips = lm[[61, 291, 0, 17], :2]
        (x0, y0), (x1, y1) = lips.min(0), lips.max(0)
        pad = 0.5 * (y1 - y0)
        box = (slice(int(y0 - pad), int(y1 + pad)), slice(int(x0 - pad), int(x1 + pad)))

        def teeth(x):
            lab = rgb2lab(x[box] / 255.0)
            return int(((lab[..., 0] > 70) & (np.hypot(lab[..., 1], lab[..., 2]) < 20)).sum())

        t0, t1 = teeth(img), teeth(out)
        assert t0 > 500 and abs(t1 - t0) <= 0.06 * t0, (t0, t1)          # the teeth keep their size (-4 %, -1 %)
        for c in MOUTH_CORNERS:                                         # the corners stay where they were
            x, y = np.round(lm[c, :2]).astype(int)
            assert np.abs(out[y - 1:y + 2, x - 1:x + 2].astype(int) - img[y - 1:y + 2, x - 1:x + 2]).max() <= 12
        far = np.ones(img.shape[:2], bool)
        far[int(y0 - 3 * pad):int(y1 + 3 * pad), int(x0 - 3 * pad):int(x1 + 3 * pad)] = False
        assert np.array_equal(out[far], img[far])


def _grey(image: np.ndarray) -> np.ndarray:
    return image.astype(np.float32) @ LUMA


def _shadow_row(image: np.ndarray, x: float, y: float, reach: float) -> float:
    """The darkest row in the column at x within `reach` rows of y: the shadow under the chin."""
    col = _grey(image)[:, int(round(x)) - 1:int(round(x)) + 2].mean(axis=1)
    y0, y1 = int(y - reach), int(y + reach)
    return float(y0 + np.argmin(col[y0:y1 + 1]))


def test_chin_and_nose_length_move_what_they_name(portrait):
    """chin = 1 draws the chin's shadow line down in the pixels (found in the picture, not from the plan);
    nose_length = -1 lifts the nose's tip as the landmarker sees it; neither moves the eyes."""
    img, lm = portrait
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    cx, cy = lm[152, :2]
    edge0 = _shadow_row(img, cx, cy, 0.1 * fw)
    edge1 = _shadow_row(render_edits(img, [lm], {"chin": 1.0}), cx, cy, 0.1 * fw)
    assert edge1 > edge0 + 0.035 * fw, (edge0, edge1, fw)

    def nose(p):
        eyes = (p[33, :2] + p[263, :2]) / 2
        return float(np.linalg.norm(p[1, :2] - eyes)), eyes

    nose0, eyes0 = nose(landmarks_of(img))
    nose2, eyes2 = nose(landmarks_of(render_edits(img, [lm], {"nose_length": -1.0})))
    assert nose2 < nose0 - 0.015 * fw, (nose0, nose2, fw)
    assert np.linalg.norm(eyes2 - eyes0) < 0.01 * fw


def _blob(shape, centre, sigma):
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float32)
    return np.exp(-((xx - centre[0]) ** 2 + (yy - centre[1]) ** 2) / (2 * sigma * sigma))


def test_matte_takes_off_a_white_shine_and_keeps_the_skins_own_light(grace_hopper):
    """A white highlight put on the forehead (a shine: the light's colour on top of the skin's) and the
    skin's own colour brightened on a cheek (light on its shape, which matte powder keeps): skin_glow = -1
    takes off a good part of the first and little of the second, and never lightens anything. (Grace Hopper:
    her cheek's red stays under 255 when lit; clipped, lit skin turns white, and white is what matte takes.)"""
    img = grace_hopper
    lm = landmarks_of(img)
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    shine, lit = _blob(img.shape[:2], lm[151, :2], 0.05 * fw), _blob(img.shape[:2], lm[50, :2], 0.05 * fw)
    x = img.astype(np.float32)
    x += 45.0 * shine[..., None]
    x *= 1.0 + 0.15 * lit[..., None]
    shiny = np.clip(x, 0, 255).astype(np.uint8)
    out = render_edits(shiny, [lm], {"skin_glow": -1.0}).astype(np.float32)
    added_shine = (_grey(shiny) - _grey(img))[shine > 0.5].mean()
    taken_shine = (_grey(shiny) - _grey(out))[shine > 0.5].mean()
    added_light = (_grey(shiny) - _grey(img))[lit > 0.5].mean()
    taken_light = (_grey(shiny) - _grey(out))[lit > 0.5].mean()
    assert taken_shine > 0.3 * added_shine, (taken_shine, added_shine)
    assert taken_light < 0.15 * added_light, (taken_light, added_light)
    assert (_grey(out) <= _grey(shiny) + 1.0).all()


def test_gloss_lights_the_lips_middle_and_nothing_off_the_mouth(portrait):
    img, lm = portrait
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    out = render_edits(img, [lm], {"lip_gloss": 1.0})
    lower = ((lm[17, :2] + lm[14, :2]) / 2).round().astype(int)
    spot = (slice(lower[1] - 1, lower[1] + 2), slice(lower[0] - 1, lower[0] + 2))
    assert (_grey(out) - _grey(img))[spot].mean() > 10.0
    yy, xx = np.mgrid[0:img.shape[0], 0:img.shape[1]]
    mouth = lm[[61, 291, 0, 17], :2].mean(axis=0)
    far = np.hypot(xx - mouth[0], yy - mouth[1]) > 0.3 * fw
    assert np.array_equal(out[far], img[far])


def test_even_tone_takes_a_red_patch_back_to_the_skins_colour_and_keeps_its_light(portrait):
    """A red blotch painted on one cheek (redder, a little darker) is mostly gone after even_tone = 1 (against
    the same edit on the photo without it: the edit evens the skin's own tone too), its grey and its texture
    kept; a dark blue mark on the other cheek, far from any skin colour (a tattoo, a frame), stays as it is."""
    img, lm = portrait
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    red, mark = _blob(img.shape[:2], lm[50, :2], 0.06 * fw), _blob(img.shape[:2], lm[280, :2], 0.03 * fw)
    x = img.astype(np.float32)
    x += red[..., None] * np.array([20.0, -8.0, -8.0], np.float32)
    x += mark[..., None] * (np.array([40.0, 60.0, 140.0], np.float32) - x)
    blotchy = np.clip(x, 0, 255).astype(np.uint8)
    out, plain = (render_edits(a, [lm], {"even_tone": 1.0}) for a in (blotchy, img))

    def redness(a):
        a = a.astype(np.float32)
        return a[..., 0] - a[..., 1]

    patch = red > 0.5
    added = (redness(blotchy) - redness(img))[patch].mean()
    left = (redness(out) - redness(plain))[patch].mean()
    assert added > 15.0 and left < 0.3 * added, (added, left)
    assert abs((_grey(out) - _grey(blotchy))[patch].mean()) < 1.0
    lap = lambda a: np.abs(cv2.Laplacian(_grey(a), cv2.CV_32F))[patch].mean()  # noqa: E731
    assert abs(lap(out) / lap(blotchy) - 1.0) < 0.1
    dot = mark > 0.7
    assert np.abs(out[dot].astype(int) - blotchy[dot]).max() <= 3


def test_forehead_moves_the_hairline_and_keeps_the_brows(portrait):
    """forehead = -1 moves a line drawn across the forehead's top down the face in the pixels (a shorter
    forehead), +1 up; the brows stay where they are."""
    img, lm = portrait
    fw = float(np.linalg.norm(lm[454, :2] - lm[234, :2]))
    top = lm[10, :2] - np.array([0.0, 0.1 * fw], np.float32)
    drawn = img.copy()
    cv2.line(drawn, (int(top[0] - 0.2 * fw), int(top[1])), (int(top[0] + 0.2 * fw), int(top[1])), (10, 10, 10), 2)
    line0 = _shadow_row(drawn, top[0], top[1], 0.08 * fw)
    brow = lm[[105, 334], :2]
    brow0 = [_shadow_row(img, x, y, 0.05 * fw) for x, y in brow]
    down, up = (render_edits(drawn, [lm], {"forehead": v}) for v in (-1.0, 1.0))
    assert _shadow_row(down, top[0], top[1], 0.12 * fw) > line0 + 0.04 * fw
    assert _shadow_row(up, top[0], top[1], 0.12 * fw) < line0 - 0.04 * fw
    for out in (down, up):
        moved = [_shadow_row(out, x, y, 0.05 * fw) - b for (x, y), b in zip(brow, brow0)]
        assert max(abs(m) for m in moved) <= max(1.0, 0.01 * fw), moved
