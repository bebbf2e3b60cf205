"""The edit targets at full scale, judged on real portraits by dlib's 68-point predictor (bench/evals/edits.py),
a landmarker the product does not use; and the harness's measures, each shown to catch what it is for.

Scenes: the astronaut in the 640x480 framing and in the 1280x720 close-up (face 300 px wide), and Grace
Hopper, Barack Obama and Joe Biden in the 640x480 framing (tests/photos.py: light and dark skin, glasses,
grey-white brows, a head turned and lit from one side; their close-ups add no figure the judge reads that
these lack, and cost seconds). A shape target is asserted only where the judge reads a known change of that
figure on that face (`readability`), and that gate is itself asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.evals import edits as ev
from engines.edit_plan import EditConfig

SCENES = ("astronaut@640", "astronaut@close", "hopper@640", "obama@640", "biden@640")
CONFIG = EditConfig()


def _cases(which):
    """Case names as test parameters."""
    return [c.name for c in ev.CASES if which(c)]


@pytest.fixture(scope="module")
def judge():
    return ev.Judge()


@pytest.fixture(scope="module")
def scenes(judge):
    frames = ev.frames(tuple(dict.fromkeys(n.split("@")[0] for n in SCENES)))
    return {n: ev.scene(n, frames[n], judge) for n in SCENES}


@pytest.fixture(scope="module")
def embedder():
    from engines.identity import IdentityEmbedder

    return IdentityEmbedder()


@pytest.fixture(scope="module")
def figures(scenes, judge, embedder):
    """Every case's figures on every scene, measured once."""
    return {(c.name, n): ev.measure(sc, c, judge, CONFIG, embedder) for c in ev.CASES for n, sc in scenes.items()}


@pytest.fixture(scope="module")
def flicker(scenes):
    """Per case, the flicker the edit adds on the still 640x480 astronaut (8 noisy frames)."""
    return ev.flicker_figures(scenes["astronaut@640"].image, list(ev.CASES), CONFIG, n=8)


def test_the_judge_reads_known_changes_where_it_counts_and_not_through_glasses(scenes):
    """The gate that decides where a shape figure counts: on the astronaut, Obama and Biden the judge
    reads every known change within 35 %; Hopper's eyes behind her glasses it does not read, so they are left out."""
    for n in ("astronaut@640", "astronaut@close", "obama@640", "biden@640"):
        assert all(v["readable"] for v in scenes[n].readable.values()), (n, scenes[n].readable)
    hopper = scenes["hopper@640"].readable
    assert not hopper["eye_opening"]["readable"], hopper["eye_opening"]
    assert hopper["mouth_width"]["readable"] and hopper["jaw_width"]["readable"]


# Where the tuned strengths stay short of a target, each measured (`livefuse eval edits --json`):
# - face_slim's jaw as the judge reads it on the astronaut (-5.9 %), Hopper (-3.8 %) and Obama (-2.5 %): the
#   warp narrows their lower jaws by 10.6 %, 10.9 % and 11.3 % in the pixels under the judge's own jaw points
#   (fig["warp"]), and the judge, which ties its jaw points to the rest of the face, reads back less than
#   half of that on Obama's broad smile (it reads a known 6 % squeeze of his whole frame as 5.0 %). It ties
#   them to the mouth too: with the mouth squeezed along (6-10 % narrower in the pixels) it read the
#   astronaut's jaw -6.2 %; the squeeze keeps the mouth's corners now (a slimmer face is not a narrower
#   smile). A stronger squeeze bends the background and stretches it past 2.2x on the close-ups.
# - brow_tint on Hopper, Obama and Biden (L* -3.5, -3.5, -1.5 against -5): the tint moves the brows toward
#   their shade (a brown of L* 37), and theirs are already near it in lightness (Hopper's grey brows half
#   behind her glasses' frames, Obama's dark ones, Biden's pale ones in his brow's shadow: the dlib band
#   reads L* 43 there). A stronger tint takes the astronaut past dlib's 0.2 identity bound (0.21 at L* -7).
# - lip_gloss on the astronaut (the lips' 90th percentile of L* +5.1 and +5.6 against +8): her open smile
#   shows thin lips, already the lightest in the set, and the highlight is kept to the lips' middle; on the
#   closed lips of the others it reads +8.6 to +24.
KNOWN_SHORT = {("face_slim", "jaw_width", "astronaut@640"), ("face_slim", "jaw_width", "hopper@640"),
               ("face_slim", "jaw_width", "obama@640"),
               ("brow_tint", "brow_dL", "hopper@640"), ("brow_tint", "brow_dL", "obama@640"),
               ("brow_tint", "brow_dL", "biden@640"),
               ("lip_gloss", "lip_hi_dL", "astronaut@640"), ("lip_gloss", "lip_hi_dL", "astronaut@close")}

# face_slim beside Biden's turned head: the line drawn 8 % of a face width outside his jaw on his near side
# crosses his ear, which the squeeze's ease (slim_reach outside the mesh's jaw line, here 7 % of a face width
# outside it) takes along: bent 2.0 px. His background's stretch is within MAX_STRETCH (2.13).
LINES_SHORT = {("face_slim", "biden@640")}


# (case, figure, bound with the test's margin): the targets, a little inside them
MARGINS = {"eye_opening": 0.03, "mouth_width": 0.005, "lip_height": 0.01, "corner_lift": 0.005, "cheek_da": 0.5, "lip_da": 0.5, "jaw_width": 0.0,
           "skin_dL": 0.5, "skin_db": 0.5, "brow_dL": 0.5, "lid_dL": 0.5, "lash_dL": 0.5, "chin_length": 0.01, "nose_length": 0.01, "lip_hi_dL": 0.5,
           "lip_shine": 0.002, "high_dL": 0.3, "skin_shine": 0.005, "forehead_height": 0.01, "skin_tone_spread": 0.01,
           "skin_texture": 0.01}


@pytest.mark.parametrize("case,figure", [(c.name, t.figure) for c in ev.CASES for t in c.targets])
def test_full_scale_edit_meets_its_target_as_the_judge_reads_it(figures, scenes, case, figure):
    target = next(t for t in ev.CASES_BY_NAME[case].targets if t.figure == figure)
    margin = MARGINS[figure]
    judged = 0
    for n, sc in scenes.items():
        fig = figures[(case, n)]
        if figure in fig["unreadable"]:     # the scene's gate, and a figure's own (lash_dL: ev.measure)
            continue
        if (case, figure, n) in KNOWN_SHORT:
            continue
        judged += 1
        value = fig[figure]
        ok = value >= target.bound + margin if target.op == ">=" else value <= target.bound - margin
        assert ok, f"{case} on {n}: {figure} = {value:.4f}, target {target.op} {target.bound} (margin {margin})"
    assert judged >= 2, f"{case}: {figure} is judged on only {judged} scenes"


@pytest.mark.xfail(strict=True, reason="the judge reads -5.9 % / -3.8 % / -2.5 % of the astronaut's / Hopper's / Obama's "
                   "jaw for an 11 % narrower jaw in the pixels")
@pytest.mark.parametrize("scene", ["astronaut@640", "hopper@640", "obama@640"])
def test_face_slim_jaw_as_the_judge_reads_it_on_hopper_and_obama(figures, scene):
    assert figures[("face_slim", scene)]["jaw_width"] <= -0.06


@pytest.mark.xfail(strict=True, reason="face_slim beside Biden's turned head: the line over his ear bent 2.0 px")
def test_face_slim_keeps_the_lines_straight_beside_a_turned_head(figures):
    assert figures[("face_slim", "biden@640")]["lines_px"] <= ev.LINE_MAX_PX


def test_face_slim_narrows_the_jaw_in_the_pixels_on_every_face(figures):
    """What the warp did to the judge's own jaw points, whatever the judge reads back."""
    for n in SCENES:
        assert figures[("face_slim", n)]["warp"]["jaw_width"] <= -0.08, (n, figures[("face_slim", n)]["warp"])


def test_face_slim_keeps_the_smiles_width(figures):
    """A slimmer face, the same smile: what the warp did to the judge's own mouth corners (dlib's 48 and 54,
    a little outside the product's 61 and 291), measured -1.0 to -4.2 % on these scenes against -6.4 to
    -9.7 % when the squeeze took the mouth along."""
    for n in SCENES:
        fig = figures[("face_slim", n)]
        assert fig["warp"]["mouth_width"] >= -0.05, (n, fig["warp"])


@pytest.mark.parametrize("case", _cases(lambda c: c.geometry))
def test_geometry_keeps_the_background_straight_and_the_map_monotonic(figures, case):
    for n in SCENES:
        fig = figures[(case, n)]
        assert fig["lines_input_px"] <= 0.3, (n, fig["lines_input_px"])   # the finder itself reads drawn lines as straight
        if (case, n) not in LINES_SHORT:
            assert fig["lines_px"] <= ev.LINE_MAX_PX, (case, n, fig["lines_px"])
        f = fig["fold"]
        assert min(f["min_dx"], f["min_dy"], f["min_det"]) >= ev.MIN_JACOBIAN, (case, n, f)
        assert f["max_stretch"] <= ev.MAX_STRETCH, (case, n, f)
    if case == "eye_size":   # the zoom that enlarges the eye must not smear it
        assert max(figures[(case, n)]["fold"]["max_stretch"] for n in SCENES) <= 1.5


# A lipstick's edge is the lip line, which lipstick is worn to define: its colour contrast there is the
# makeup, not a seam (1.63 x the input's CIELAB gradient on the 640x480 astronaut, whose lips are 5 px
# tall; 1.06 on the close-up). Where its colour reaches is tested in tests/kernels/test_edits.py. An
# eyeliner is a line: its edge is the line itself (test_the_liners_edge_is_soft holds it to a soft one).
SEAM_EXEMPT = ("lip_tint", "eyeliner")


# The gloss's highlight on Joe Biden's thin closed lips at 640x480 (a lip 3-4 px tall, the highlight's
# L* +22 on his dark lips): its own fade is the edge the measure reads, 0.27 over the inside's gradient.
SEAM_SHORT = {("lip_gloss", "biden@640")}


@pytest.mark.parametrize("case", _cases(lambda c: c.name not in SEAM_EXEMPT))
def test_no_seam(figures, case):
    for n in SCENES:
        if (case, n) in SEAM_SHORT:
            continue
        assert figures[(case, n)]["seam"]["excess"] <= ev.SEAM_MARGIN, (case, n, figures[(case, n)]["seam"])


def test_the_liners_edge_is_soft(figures, scenes, judge):
    """The liner's edge is a Gaussian a twenty-fifth of the eye's width (2 px at least): its gradient over the
    input's at the edge stays within 0.25 of the inside's (0.18 at most, the astronaut's close-up), where the
    same line drawn with an antialiased edge alone reads 0.36 and 0.63 on the astronaut."""
    from dataclasses import replace

    for n in SCENES:
        assert figures[("eyeliner", n)]["seam"]["excess"] <= 0.25, (n, figures[("eyeliner", n)]["seam"])
    hard = replace(CONFIG, liner_soft=0.0, liner_soft_px=0.3)
    case = ev.CASES_BY_NAME["eyeliner"]
    for n in ("astronaut@640", "astronaut@close"):
        assert ev.measure(scenes[n], case, judge, hard)["seam"]["excess"] > 0.3, n


@pytest.mark.xfail(strict=True, reason="the gloss's highlight on Biden's 3-4 px lips at 640x480: seam excess 0.27")
def test_gloss_has_no_seam_on_thin_lips(figures):
    assert figures[("lip_gloss", "biden@640")]["seam"]["excess"] <= ev.SEAM_MARGIN


@pytest.mark.xfail(strict=True, reason="the astronaut's thin, light lips in an open smile: L* p90 +5.1 / +5.6 for +8")
@pytest.mark.parametrize("scene", ["astronaut@640", "astronaut@close"])
def test_gloss_highlight_on_the_astronauts_open_smile(figures, scene):
    assert figures[("lip_gloss", scene)]["lip_hi_dL"] >= 8.0


@pytest.mark.parametrize("case", _cases(lambda c: c.skin))
def test_makeup_keeps_the_identity(figures, case):
    worst = max(figures[(case, n)]["identity"] for n in SCENES)
    assert worst <= ev.IDENTITY_MAX, (case, worst)


@pytest.mark.parametrize("case", _cases(lambda c: True))
def test_no_flicker_on_a_still_face(flicker, case):
    f = flicker[case]
    assert f["frames"] == 8
    assert f["excess"] <= ev.FLICKER_MAX, (case, f)


# -- the measures catch what they are for ---------------------------------------------------------------
def test_seam_measure_catches_a_hard_edged_blush(scenes):
    """The same blush with its soft blob cut hard where it falls to a third: a ring on the cheek that the
    measure sees, where the soft one adds nothing on its edge."""
    from dataclasses import replace

    from engines.edit_plan import plan_face
    from engines.edit_render import render_edits
    from kernels.numpy.edits import apply_plan

    sc = scenes["astronaut@close"]
    edit = {"blush": 1.0}
    plan = plan_face(sc.image.shape[:2], sc.landmarks, edit, CONFIG)
    m = plan.blush.mask
    hard = replace(plan, blush=replace(plan.blush, mask=(m > m.max() / 3).astype(np.float32) * float(m.max())))
    weight = ev.edit_weight(sc.image.shape[:2], sc.landmarks, edit, CONFIG)
    hard_weight = np.where(weight > weight.max() / 3, weight.max(), 0.0).astype(np.float32)
    soft = ev.seam(sc.image, render_edits(sc.image, [sc.landmarks], edit, CONFIG), weight)
    cut = ev.seam(sc.image, apply_plan(sc.image.copy(), hard), hard_weight)
    assert soft["excess"] <= ev.SEAM_MARGIN < cut["excess"], (soft, cut)


def test_line_and_fold_measures_catch_a_warp_that_reaches_the_background(scenes):
    """The jaw line moved by broad Gaussians (the shape a slimming warp had before) bends the lines
    beside the face; an eye zoom past 1 folds the map over."""
    import cv2

    sc = scenes["astronaut@close"]
    p = sc.judge
    fw = float(np.linalg.norm(p[16] - p[0]))
    h, w = sc.image.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    dx = np.zeros((h, w), np.float32)
    for i in range(3, 14):          # the lower jaw points, pulled 4 % of the face width toward the midline
        side = np.sign(p[i, 0] - p[8, 0])
        dx += -side * 0.04 * fw * np.exp(-((xs - p[i, 0]) ** 2 + (ys - p[i, 1]) ** 2) / (2 * (0.1 * fw) ** 2))
    bent = []
    for lines in ev.background_lines(p):
        drawn = ev.draw_lines(sc.image, lines)
        warp = lambda img: cv2.remap(img, xs - dx, ys, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)  # noqa: E731
        bent += ev.line_deviation(warp(drawn), warp(sc.image), lines)
    assert max(bent) > 2 * ev.LINE_MAX_PX, bent
    folded = ev.warp_fold(sc.landmarks, sc.image.shape[:2], {"eye_size": 1.0}, EditConfig(eye_zoom=1.5))
    assert folded["min_det"] < 0 or folded["min_dx"] < 0, folded


def test_colour_figures_read_a_known_change(scenes):
    """Cheeks reddened by a known a* step in CIELAB read back as that step; the lips untouched read zero."""
    from skimage.color import lab2rgb, rgb2lab

    sc = scenes["astronaut@close"]
    cheeks = ev.cheek_mask(sc.image.shape[:2], sc.judge)
    lab = rgb2lab(sc.image)
    lab[..., 1][cheeks] += 8.0
    out = (np.clip(lab2rgb(lab), 0, 1) * 255).round().astype(np.uint8)
    out[~cheeks] = sc.image[~cheeks]
    fig = ev.colour_figures(sc.image, out, sc.judge)
    assert abs(fig["cheek_da"] - 8.0) < 0.6 and abs(fig["lip_da"]) < 0.2, fig


def test_verdict_fails_an_unmeasured_target_and_a_missed_bound():
    case = ev.CASES_BY_NAME["smile"]
    fig = {"mouth_width": 0.05, "corner_lift": 0.02, "seam": {"excess": 0.0}, "lines_px": 0.1,
           "fold": {"min_dx": 0.9, "min_dy": 0.9, "min_det": 0.8, "max_stretch": 1.2}, "unreadable": []}
    v = ev.verdict(case, {"a": fig}, 0.0)
    assert not v["pass"] and not v["mouth_width >= 0.08"] and v["corner_lift >= 0.01"]
    unread = dict(fig, mouth_width=0.2, unreadable=["mouth_width", "corner_lift"])
    v = ev.verdict(case, {"a": unread}, 0.0)
    assert not v["pass"] and not v["mouth_width >= 0.08"]   # read on no scene: unmeasured, not passed


def test_highlight_figures_read_a_known_shine(scenes):
    """The judge's highlight regions lightened by a known L* step read back as that step; the skin's light
    above its median halved reads as its shine halved; the lips untouched read zero."""
    from skimage.color import lab2rgb, rgb2lab

    sc = scenes["astronaut@close"]
    high = ev.high_points(sc.image.shape[:2], sc.judge)
    skin = ev.skin_region(sc.image.shape[:2], sc.judge)
    lab = rgb2lab(sc.image)
    lab[..., 0][high] += 6.0
    out = (np.clip(lab2rgb(lab), 0, 1) * 255).round().astype(np.uint8)
    fig = ev.colour_figures(sc.image, out, sc.judge)
    assert abs(fig["high_dL"] - 6.0) < 0.6 and abs(fig["lip_hi_dL"]) < 0.2, fig
    lab = rgb2lab(sc.image)
    light = lab[..., 0]
    med = float(np.median(light[skin]))
    light[skin] = np.where(light[skin] > med, med + 0.5 * (light[skin] - med), light[skin])
    out = (np.clip(lab2rgb(lab), 0, 1) * 255).round().astype(np.uint8)
    fig = ev.colour_figures(sc.image, out, sc.judge)
    assert -0.6 < fig["skin_shine"] < -0.4 and abs(fig["lip_shine"]) < 0.05, fig
