"""Background kernels: the guided upsampling puts the mask's edge on the frame's edge, the steadying damps
a still mask and follows a moving one, compositing keeps the person's pixels exactly, the blur keeps the
person's colours out of the room, and the torch twins agree with the NumPy ones."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from kernels.numpy import background as nb
from kernels.numpy.color import rgb_to_i420
from kernels.torch import background as tb


@pytest.fixture()
def frame(grace_hopper):
    """A 1280x720 frame: the portrait on the right of a real room photo."""
    import skimage.data

    room = nb.cover(skimage.data.coffee(), (1280, 720))
    room[120:720, 700:1212] = grace_hopper
    return room


def _t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def test_guided_alpha_puts_the_edge_where_the_frame_has_it():
    h, w = 144, 256
    luma = np.full((720, 1280), 40, np.uint8)
    luma[:, 643:] = 200                                  # the person's bright side starts at x = 643
    guide = nb.thumbnail_guide(np.repeat(cv2.resize(luma, (w, h), interpolation=cv2.INTER_AREA)[..., None], 3, 2))
    mask = np.zeros((h, w), np.float32)
    mask[:, 129:] = 1.0
    mask = cv2.GaussianBlur(mask, (0, 0), 2.0)           # the network's soft, coarse edge
    alpha = nb.guided_alpha(nb.guided_coefficients(mask, guide), luma)
    row = alpha[360]
    assert row[:630].max() == 0.0 and row[656:].min() == 1.0
    naive = cv2.resize(mask, (1280, 720), interpolation=cv2.INTER_LINEAR)[360]
    soft = lambda r: int(((r > 0.02) & (r < 0.98)).sum())   # noqa: E731
    assert soft(row) <= 4 < soft(naive)                  # a hard edge, on the frame's


def _portrait_coefficients(frame):
    """The guided filter's coefficients for the portrait in `frame` (its box, softened as the network's
    mask is), fitted to the frame's thumbnail."""
    guide = nb.thumbnail_guide(nb.rgb_thumbnail(frame, (256, 144)))
    mask = np.zeros((144, 256), np.float32)
    mask[24:, 140:243] = 1.0
    return nb.guided_coefficients(cv2.GaussianBlur(mask, (0, 0), 2.0), guide)


@pytest.mark.parametrize("size", [(360, 640), (720, 1280), (238, 318)])
def test_guided_alpha_by_blocks_is_the_whole_upsample(frame, size):
    """Where the sides allow, the alpha is computed only on the blocks along the person's edge; it is the
    whole plane's upsample to float rounding, and exactly 0 or 1 elsewhere."""
    coef = _portrait_coefficients(frame)
    h, w = size
    luma = cv2.cvtColor(cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
    whole = np.clip(cv2.resize(coef[0], (w, h), interpolation=cv2.INTER_LINEAR) * luma
                    + cv2.resize(coef[1], (w, h), interpolation=cv2.INTER_LINEAR), 0, 1)
    up = nb.upsample_coefficients(coef, size)
    got = nb.apply_coefficients(up, luma)
    np.testing.assert_allclose(got, whole, atol=1e-5)
    if size == (238, 318):                                   # no block divides these sides: the whole plane
        assert nb.alpha_blocks(size, coef[0].shape) is None and up.person is None
        return
    nr, nc = up.person.shape
    computed = np.zeros((nr, nc), bool)
    computed[up.bi, up.bj] = True
    blocks = got.reshape(nr, h // nr, nc, w // nc).transpose(0, 2, 1, 3)
    assert (blocks[up.person] == 1.0).all() and (blocks[~up.person & ~computed] == 0.0).all()
    assert 0.05 < computed.mean() < 0.35                    # the edge's blocks only
    assert np.array_equal(nb.guided_alpha(coef, luma), got)
    t = tb.apply_coefficients(tb.upsample_coefficients(tuple(map(_t, coef)), size), _t(luma)).numpy()
    np.testing.assert_allclose(t, got, atol=2e-3)


@pytest.mark.parametrize("size", [(360, 640), (238, 318)])
@pytest.mark.parametrize("shift", [(13, 0), (-7, 3), (0, -5), (700, -400)])
def test_coefficients_moved_with_a_carried_person_are_the_moved_planes(frame, size, shift):
    """A carried matte: the coefficients moved by whole pixels, their edges repeated, applied to the new
    grey, by blocks (and at the frame's edge, the strip the move left) as from the whole moved planes;
    the torch twin agrees."""
    coef = _portrait_coefficients(frame)
    h, w = size
    luma = cv2.cvtColor(cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
    dx, dy = shift
    rows, cols = np.clip(np.arange(h) - dy, 0, h - 1), np.clip(np.arange(w) - dx, 0, w - 1)
    a, b = (cv2.resize(c, (w, h), interpolation=cv2.INTER_LINEAR)[rows][:, cols] for c in coef)
    want = np.clip(a * luma + b, 0, 1)
    up = nb.upsample_coefficients(coef, size)
    work: dict = {}                                                         # a stream's kept buffers
    got = nb.apply_coefficients(up, luma, shift=shift, work=work)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.array_equal(nb.apply_coefficients(up, luma, shift=shift, work=work), got) and len(work) == 2
    assert not np.array_equal(got, nb.apply_coefficients(up, luma))          # it moved
    t = tb.apply_coefficients(tb.upsample_coefficients(tuple(map(_t, coef)), size), _t(luma), shift=shift).numpy()
    np.testing.assert_allclose(t, got, atol=2e-3)


def test_a_fit_holds_while_neither_its_mask_nor_its_grey_moves():
    rng = np.random.default_rng(8)
    mask = cv2.GaussianBlur((rng.random((144, 256)) > 0.5).astype(np.float32), (0, 0), 3)
    grey = cv2.GaussianBlur(rng.random((144, 256)).astype(np.float32), (0, 0), 2)
    fit = (mask.copy(), grey.copy())
    noisy = grey + rng.normal(0, 0.5 / 255, grey.shape).astype(np.float32)    # a thumbnail's sensor noise
    assert nb.fit_holds(fit, mask + 0.015, noisy, 0.02)
    moved = mask.copy()
    moved[70, 120] += 0.03                                           # one mask value past the level
    assert not nb.fit_holds(fit, moved, noisy, 0.02)
    lit = noisy.copy()
    lit[60:70, 100:110] += 4 / 255                                   # a patch of the picture 4 levels brighter
    assert not nb.fit_holds(fit, mask, lit, 0.02)
    assert not nb.fit_holds(fit, mask[:, :-2], grey[:, :-2], 0.02)   # another size


def test_a_blurred_room_serves_a_later_frame_while_the_person_stays_within_its_reach():
    """room_within: a blur made for the person at one place serves a frame where she stepped less than its
    reach, not one where she walked past it; the torch twin agrees."""
    def weight(x0):
        alpha = np.zeros((360, 640), np.float32)
        alpha[60:, x0:x0 + 160] = 1.0
        return nb.room_weight(alpha, (160, 90))

    sigma = nb.blur_sigma(0.7, 720, 8)
    trust = nb.trusted_room(weight(200), sigma)
    assert nb.room_within(weight(200), trust, sigma) and nb.room_within(weight(210), trust, sigma)
    assert not nb.room_within(weight(260), trust, sigma)
    for x0 in (210, 260):
        assert tb.room_within(_t(weight(x0)), tb.trusted_room(_t(weight(200)), sigma), sigma) == \
            nb.room_within(weight(x0), trust, sigma)
    np.testing.assert_allclose(tb.trusted_room(_t(weight(200)), sigma).numpy(), trust, atol=1e-5)


def test_composite_keeps_the_person_exactly(frame):
    alpha = np.zeros(frame.shape[:2], np.float32)
    alpha[200:500, 800:1000] = 1.0
    alpha[100:150] = 0.5
    out = nb.composite(frame, (0, 255, 0), alpha)
    assert np.array_equal(out[200:500, 800:1000], frame[200:500, 800:1000])
    assert (out[600:] == np.array([0, 255, 0], np.uint8)).all()
    np.testing.assert_allclose(out[120].astype(int), (frame[120].astype(int) + np.array([0, 255, 0])) / 2, atol=1)


def test_blur_keeps_the_person_out_of_the_room():
    plane = np.full((720, 1280), 30, np.uint8)
    plane[200:720, 500:800] = 230                        # a bright person in a dark room
    alpha = (plane > 100).astype(np.float32)
    bl = nb.background_blur(plane, alpha, nb.blur_sigma(1.0, 720, 4))
    assert np.abs(bl[400, 400:495] - 30).max() < 3       # right beside the person the room stays dark
    plain = cv2.GaussianBlur(plane.astype(np.float32), (0, 0), 28)
    assert plain[400, 480] > 60                          # where a plain blur smears the person out
    rng = np.random.default_rng(1)
    room = rng.integers(0, 256, (720, 1280), np.uint8)
    assert nb.background_blur(room, np.zeros_like(alpha), 6.0).std() < 0.2 * room.std()


def test_steady_damps_a_still_mask_and_follows_a_moving_one():
    rng = np.random.default_rng(0)
    guide = rng.random((144, 256)).astype(np.float32)
    prev = np.zeros((144, 256), np.float32)
    flicker = prev.copy()
    flicker[50:60, 50:60] = 1.0
    still = nb.steady(prev, flicker, guide, guide + 0.002)
    assert still[55, 55] == pytest.approx(0.25)
    moved = guide.copy()
    moved[40:70, 40:70] = 1.0 - moved[40:70, 40:70]
    assert nb.steady(prev, flicker, guide, moved)[55, 55] == pytest.approx(1.0)
    assert np.array_equal(nb.steady(None, flicker, None, guide), flicker)


def test_a_person_moved_over_a_still_room_is_told_from_a_changed_picture(frame, grace_hopper):
    """The portrait slid 13 px right over the room (6.5 half-size pixels): explained by that shift (the strip
    it uncovered not counted), not by no shift, a wrong one, or the light changing too; its coefficients
    move with it."""
    room = nb.cover(__import__("skimage").data.coffee(), (1280, 720))
    mask = np.zeros((144, 256), np.float32)
    mask[24:144, 140:242] = 1.0                            # the portrait at 700..1212, 120..720, mask's size
    moved = room.copy()
    moved[120:720, 713:1225] = grace_hopper
    grey = [nb.half_plane(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY)) for f in (frame, moved)]
    assert nb.person_moved_share(grey[0], mask, grey[1], (6.5, 0.0)) < 0.03      # measured 0.019; the matte's bar 0.05
    for wrong in ((0.0, 0.0), (-6.5, 0.0), (3.0, 0.0), (6.5, 3.0)):              # measured 0.075 .. 0.134
        assert nb.person_moved_share(grey[0], mask, grey[1], wrong) > 0.06, wrong
    relit = cv2.convertScaleAbs(grey[1], alpha=1.3)
    assert nb.person_moved_share(grey[0], mask, relit, (6.5, 0.0)) > 0.5


def test_cover_fills_and_keeps_aspect(astronaut, grace_hopper):
    out = nb.cover(grace_hopper, (1280, 720))
    assert out.shape == (720, 1280, 3)
    small = nb.cover(astronaut, (64, 36))
    assert small.shape == (36, 64, 3)
    # a square scaled to cover 16:9 keeps its middle band: the centre row of the photo stays in the centre
    np.testing.assert_allclose(nb.cover(astronaut, (512, 288))[144].astype(float),
                               astronaut[256].astype(float), atol=40)


def test_torch_twins_agree(frame):
    y, u, v = rgb_to_i420(frame)
    th_n = nb.i420_thumbnail(y, u, v, (256, 144))
    th_t = tb.i420_thumbnail(_t(y), _t(u), _t(v), (256, 144)).numpy()
    assert np.abs(th_n.astype(int) - th_t).max() <= 2
    assert np.array_equal(nb.rgb_thumbnail(frame, (256, 144)).shape, tb.rgb_thumbnail(_t(frame), (256, 144)).shape)
    g_n = nb.thumbnail_guide(th_n)
    np.testing.assert_allclose(tb.thumbnail_guide(_t(th_n)).numpy(), g_n, atol=1e-5)

    rng = np.random.default_rng(0)
    mask = cv2.GaussianBlur((rng.random((144, 256)) > 0.5).astype(np.float32), (0, 0), 3)
    prev = cv2.GaussianBlur((rng.random((144, 256)) > 0.5).astype(np.float32), (0, 0), 3)
    g2 = np.clip(g_n + rng.normal(0, 0.05, g_n.shape).astype(np.float32), 0, 1)
    np.testing.assert_allclose(tb.steady(_t(prev), _t(mask), _t(g_n), _t(g2)).numpy(),
                               nb.steady(prev, mask, g_n, g2), atol=1e-5)

    c_n = nb.guided_coefficients(mask, g_n)
    c_t = tb.guided_coefficients(_t(mask), _t(g_n))
    for a, b in zip(c_n, c_t):
        np.testing.assert_allclose(b.numpy(), a, atol=1e-3)
    a_n = nb.guided_alpha(c_n, y)
    a_t = tb.guided_alpha(c_t, _t(y)).numpy()
    np.testing.assert_allclose(a_t, a_n, atol=2e-3)
    np.testing.assert_allclose(tb.half_alpha(_t(a_n)).numpy(), nb.half_alpha(a_n), atol=1e-5)

    comp_n = nb.composite(frame, (0, 177, 64), a_n)
    comp_t = tb.composite(_t(frame), (0, 177, 64), _t(a_n)).numpy()
    assert np.abs(comp_n.astype(int) - comp_t).max() <= 1
    assert np.abs(nb.composite(y, 16.0, a_n).astype(int) - tb.composite(_t(y), 16.0, _t(a_n)).numpy()).max() <= 1

    for plane in (y, frame):
        bl_n = nb.background_blur(plane, a_n, 5.0)
        bl_t = tb.background_blur(_t(plane), _t(a_n), 5.0).numpy()
        np.testing.assert_allclose(bl_t, bl_n, atol=0.5)   # cv2 rounds its uint8 area means

    cv_n = nb.cover(frame, (640, 480))
    cv_t = tb.cover(_t(frame), (640, 480)).numpy()
    assert cv_n.shape == cv_t.shape and np.abs(cv_n.astype(int) - cv_t).mean() < 2.0


def test_keep_polygons_raise_the_person_inside_them_and_the_twin_agrees():
    alpha = np.zeros((100, 160), np.float32)
    alpha[:, :20] = 0.5
    poly = np.array([[10.2, 10.0], [80.0, 12.0], [60.0, 70.0], [-5.0, 60.0]])
    n = nb.keep_polygons(alpha.copy(), [poly])
    t = tb.keep_polygons(_t(alpha.copy()), [poly]).numpy()
    assert np.array_equal(n, t)
    assert n[30, 40] == 1.0 and n[90, 150] == 0.0 and n[95, 5] == 0.5


def test_composite_in_place_and_shared_room_weight(frame):
    y = rgb_to_i420(frame)[0]
    rng = np.random.default_rng(3)
    alpha = np.clip(rng.random(y.shape).astype(np.float32) * 2 - 0.5, 0, 1)
    want = nb.composite(y, 16.0, alpha)
    plane = y.copy()
    assert nb.composite(plane, 16.0, alpha, out=plane) is plane and np.array_equal(plane, want)
    t = _t(y.copy())
    tb.composite(t, 16.0, _t(alpha), out=t)
    assert np.abs(t.numpy().astype(int) - want).max() <= 1
    room = nb.room_weight(nb.half_alpha(alpha), (160, 90))
    np.testing.assert_allclose(tb.room_weight(_t(nb.half_alpha(alpha)), (160, 90)).numpy(), room, atol=1e-5)
    shared = nb.background_blur(y, alpha, 3.0, 8, room)
    own = nb.background_blur(y, alpha, 3.0, 8)
    assert np.abs(shared - own).mean() < 0.5                  # the chroma-sized weight stands in for Y's own


def test_half_plane_and_upsample_twins(frame):
    y = rgb_to_i420(frame)[0]
    assert np.abs(nb.half_plane(y).astype(int) - tb.half_plane(_t(y)).numpy()).max() <= 1
    a = np.clip(np.random.default_rng(4).random((360, 640)).astype(np.float32), 0, 1)
    np.testing.assert_allclose(tb.upsample_alpha(_t(a), (1280, 720)).numpy(), nb.upsample_alpha(a, (1280, 720)), atol=1e-5)


def _person_alpha(h: int, w: int) -> np.ndarray:
    """A half-size alpha like the matte's: exactly 1 inside a person-shaped blob, exactly 0 far from it,
    a soft band between (and the person cut by the frame's bottom edge)."""
    m = np.zeros((h, w), np.float32)
    cv2.ellipse(m, (w // 3, h), (w // 6, h * 2 // 3), 0, 0, 360, 1.0, -1)
    cv2.circle(m, (w // 3, h // 3), h // 6, 1.0, -1)
    return np.clip((cv2.GaussianBlur(m, (0, 0), 3.0) - 0.3) * 3.0, 0.0, 1.0)


def test_composite_i420_blends_only_the_edge_and_gives_the_whole_planes_pixels(frame):
    y, u, v = rgb_to_i420(frame)
    alpha = _person_alpha(*u.shape)
    rng = np.random.default_rng(5)
    hull = np.array([[300.0, 150.0], [520.0, 170.0], [480.0, 330.0], [280.0, 300.0]])   # crosses the person's edge
    full = nb.keep_polygons(nb.upsample_alpha(alpha, (1280, 720)), [hull])
    assert ((alpha > 0) & (alpha < 1)).mean() < 0.1 and (full[150:330, 280:520] == 1).mean() > 0.9
    picture = rgb_to_i420(nb.cover(frame[::-1].copy(), (1280, 720)))
    blurred = tuple(rng.random(p.shape).astype(np.float32) * 255 for p in (y, u, v))
    for bgs in ((81.6, 54.5, 34.5), picture, blurred):
        want = tuple(nb.composite(p, b, a) for p, b, a in zip((y, u, v), bgs, (full, alpha, alpha)))
        got = nb.composite_i420((y, u, v), bgs, alpha, [hull])
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
        planes = tuple(p.copy() for p in (y, u, v))
        fills = tuple(nb.room_fill(b, p.shape) for b, p in zip(bgs, planes))
        assert nb.composite_i420(planes, bgs, alpha, [hull], out=planes, fills=fills) == planes
        assert all(np.array_equal(g, w) for g, w in zip(planes, want))
        t = tb.composite_i420(tuple(map(_t, (y, u, v))), tuple(_t(b) if isinstance(b, np.ndarray) else b for b in bgs),
                              _t(alpha), [hull])
        assert all(np.abs(a.numpy().astype(int) - w).max() <= 1 for a, w in zip(t, want))
    # a ragged matte (edge nearly everywhere): the planes composed whole, the same pixels
    ragged = np.clip(alpha + rng.random(alpha.shape).astype(np.float32) * 0.01, 0, 1)
    assert (~np.logical_or(*nb.tile_classes(ragged, 8))).mean() > nb.EDGE_SHARE
    f3 = nb.keep_polygons(nb.upsample_alpha(ragged, (1280, 720)), [hull])
    got = nb.composite_i420((y, u, v), (81.6, 54.5, 34.5), ragged, [hull])
    assert all(np.array_equal(g, nb.composite(p, b, a)) for g, p, b, a in
               zip(got, (y, u, v), (81.6, 54.5, 34.5), (f3, ragged, ragged)))
    # sides no tile divides: the planes composed whole, the same pixels
    y2, u2, v2 = y[:718, :1278], u[:359, :639], v[:359, :639]
    a2 = np.ascontiguousarray(alpha[:359, :639])
    f2 = nb.keep_polygons(nb.upsample_alpha(a2, (1278, 718)), [hull])
    got = nb.composite_i420((y2, u2, v2), (81.6, 54.5, 34.5), a2, [hull])
    assert all(np.array_equal(g, nb.composite(p, b, a)) for g, p, b, a in
               zip(got, (y2, u2, v2), (81.6, 54.5, 34.5), (f2, a2, a2)))


def test_shrink_halves_in_steps_and_the_twin_agrees(frame):
    y, u, _ = rgb_to_i420(frame)
    assert nb.halvings((1280, 720), (160, 90)) == 3 and nb.halvings((1280, 720), (256, 144)) == 0
    small = nb.shrink(y, (160, 90))
    exact = cv2.resize(y.astype(np.float32), (160, 90), interpolation=cv2.INTER_AREA)
    once = cv2.resize(y, (160, 90), interpolation=cv2.INTER_AREA)       # one 8 x 8 pass, rounded
    assert small.dtype == np.float32 and np.abs(small - exact).max() <= 0.5
    assert np.abs(small - exact).mean() < np.abs(once - exact).mean()
    for plane, size in ((y, (160, 90)), (u, (160, 90)), (frame, (160, 90)), (y, (256, 144))):
        np.testing.assert_allclose(tb.shrink(_t(plane), size).numpy(), nb.shrink(plane, size), atol=0.51)


def test_the_three_planes_blurred_as_one_image_are_each_planes_blur(frame):
    y, u, v = rgb_to_i420(frame)
    alpha = _person_alpha(*u.shape)
    room = nb.room_weight(alpha, (160, 90))
    np.testing.assert_allclose(room, 1.0 - cv2.resize(alpha, (160, 90), interpolation=cv2.INTER_AREA), atol=1e-5)
    s = nb.blur_sigma(0.7, 720, 8)
    together = nb.background_blur_i420((y, u, v), room, s, 8)
    alone = [nb.background_blur(p, None, s, f, room) for p, f in ((y, 8), (u, 4), (v, 4))]
    for a, b in zip(together, alone):                    # uint8, rounded at the small size and brought up
        assert a.dtype == np.uint8 and np.abs(a - b).max() <= 1.5   # measured 1.2
    for a, b in zip(tb.background_blur_i420(tuple(map(_t, (y, u, v))), _t(room), s, 8), together):
        assert a.dtype == torch.uint8 and np.abs(a.numpy().astype(int) - b).max() <= 1
    # Y shrunk from its 2 x 2 means (the stream's matte has them): U and V the same, Y as near the float blur
    halved = nb.background_blur_i420((y, u, v), room, s, 8, y_half=nb.half_plane(y))
    assert np.array_equal(halved[1], together[1]) and np.array_equal(halved[2], together[2])
    assert np.abs(halved[0] - alone[0]).max() <= 1.5                             # measured 1.1
    assert np.abs(halved[0].astype(int) - together[0]).mean() < 0.2              # measured 0.12


def test_area_down_is_opencvs_area_mean(frame):
    rng = np.random.default_rng(6)
    for f in (2, 3, 4, 5, 7, 8, 16):
        for plane in (rng.integers(0, 256, (f * 23, f * 41), dtype=np.uint8), np.full((f * 5, f * 9), 255, np.uint8)):
            size = (plane.shape[1] // f, plane.shape[0] // f)
            assert np.array_equal(nb.area_down(plane, size), cv2.resize(plane, size, interpolation=cv2.INTER_AREA)), f
    y = rgb_to_i420(frame)[0]
    assert np.array_equal(nb.area_down(y, (256, 144)), cv2.resize(y, (256, 144), interpolation=cv2.INTER_AREA))
    assert np.array_equal(nb.area_down(y, (300, 200)), cv2.resize(y, (300, 200), interpolation=cv2.INTER_AREA))


def test_an_island_far_from_every_face_is_dropped_with_its_fringe_and_a_near_or_seeded_one_stays():
    h, w = 144, 256
    mask = np.zeros((h, w), np.float32)
    cv2.circle(mask, (60, 50), 12, 1.0, -1)              # a head
    cv2.rectangle(mask, (35, 62), (85, 143), 1.0, -1)     # and shoulders
    cv2.circle(mask, (200, 40), 6, 1.0, -1)               # a lamp, far off in the room
    cv2.circle(mask, (105, 90), 4, 1.0, -1)               # a hand held out beside the body: near
    cv2.circle(mask, (220, 110), 10, 1.0, -1)             # a second face, far off too
    mask = cv2.GaussianBlur(mask, (0, 0), 1.5)            # the network's soft edges
    seeds = np.zeros((h, w), np.uint8)
    cv2.circle(seeds, (60, 50), 8, 1, -1)
    cv2.circle(seeds, (220, 110), 5, 1, -1)
    parts = nb.mask_parts(mask)
    out, dropped = nb.drop_islands(mask, parts, seeds, reach=30.0)
    assert dropped == 1
    assert out[28:53, 187:214].max() < 0.1                # the lamp and its fringe are gone: what is left of
                                                          # the blur's tail lies far under the fit's `low`
    lamp = np.zeros((h, w), bool)
    lamp[28:53, 187:214] = True
    np.testing.assert_array_equal(out[~lamp], mask[~lamp])   # everything else is as the network read it
    assert out[90, 105] > 0.5 and out[110, 220] > 0.5
    # nothing known to be the person, or one part only: the mask as it is
    assert nb.drop_islands(mask, parts, np.zeros_like(seeds), 30.0) == (mask, 0)
    assert nb.drop_islands(mask, parts, seeds, 200.0)[1] == 0
    assert nb.drop_islands(mask, parts, seeds, 30.0, max_area=120.0)[1] == 1      # the lamp covers 109 pixels:
    assert nb.drop_islands(mask, parts, seeds, 30.0, max_area=100.0)[1] == 0      # a part larger stays wherever it is
    one = (mask > 0.5) & ~lamp
    alone = np.where(one, mask, 0).astype(np.float32)
    assert nb.drop_islands(alone, nb.mask_parts(alone), seeds, 5.0)[1] == 1   # only the hand is farther
    assert nb.mask_parts(np.where(mask > 0.5, 0, mask).astype(np.float32))[0] == 1       # no part: the room alone
