"""Seam blending: extremes give one image or the other, the multi-band seam is softer than a hard cut
and no wider than it must be, and the torch twin agrees on odd sizes."""

import cv2
import numpy as np
import pytest
import torch

from kernels.numpy import blend as nb
from kernels.torch import blend as tb


@pytest.fixture()
def pair(astronaut, grace_hopper):
    return astronaut[:238, :318].astype(np.float32), grace_hopper[100:338, 100:418].astype(np.float32)


def test_alpha_extremes_give_one_image(pair):
    fg, bg = pair
    ones = np.ones(fg.shape[:2], np.float32)
    np.testing.assert_allclose(nb.multiband_blend(fg, bg, ones), fg, atol=1e-3)
    np.testing.assert_allclose(nb.multiband_blend(fg, bg, 0 * ones), bg, atol=1e-3)
    np.testing.assert_allclose(nb.alpha_blend(fg, bg, 0.25 * ones), 0.25 * fg + 0.75 * bg, atol=1e-3)


def test_multiband_seam_is_softer_than_a_hard_cut(pair):
    fg, bg = pair
    bright = np.clip(fg + 60, 0, 255)           # a strong tone step across the seam
    alpha = np.zeros(fg.shape[:2], np.float32)
    alpha[:, 159:] = 1
    hard = nb.alpha_blend(bright, bg, alpha)
    soft = nb.multiband_blend(bright, bg, alpha, levels=4)
    step_hard = np.abs(hard[:, 159] - hard[:, 158]).mean()
    step_soft = np.abs(soft[:, 159] - soft[:, 158]).mean()
    assert step_soft < 0.5 * step_hard
    # far from the seam each side is itself
    np.testing.assert_allclose(soft[:, :100], bg[:, :100], atol=1.0)
    np.testing.assert_allclose(soft[:, 220:], bright[:, 220:], atol=1.0)


@pytest.mark.parametrize("shape", [(238, 318), (37, 53), (9, 9)])
def test_torch_twin_agrees_on_odd_sizes(pair, shape):
    fg, bg = (x[: shape[0], : shape[1]] for x in pair)
    rng = np.random.default_rng(0)
    alpha = np.clip(rng.random(shape).astype(np.float32) * 2 - 0.5, 0, 1)
    a = nb.multiband_blend(fg, bg, alpha, levels=4)
    b = tb.multiband_blend(torch.from_numpy(fg), torch.from_numpy(bg), torch.from_numpy(alpha), levels=4).numpy()
    assert a.shape == fg.shape
    np.testing.assert_allclose(b, a, atol=1e-3)


@pytest.mark.parametrize("shape", [(38, 54), (37, 53), (38, 53)])
def test_pyr_up_is_the_zero_stuffed_five_tap_filter_at_twice_the_size_cropped(pair, shape):
    """What pyr_up states, written out: the low level's pixels on the even grid of twice its size, zeros
    between, the binomial 5-tap (x2) along each axis with reflect-101 borders, then cut to `shape`."""
    low = pair[0][: (shape[0] + 1) // 2, : (shape[1] + 1) // 2]
    h, w = low.shape[:2]
    stuffed = np.zeros((2 * h, 2 * w, 3), np.float32)
    stuffed[::2, ::2] = low
    k = np.array([1, 4, 6, 4, 1], np.float32) / 8.0
    want = cv2.sepFilter2D(stuffed, -1, k, k, borderType=cv2.BORDER_REFLECT_101)[: shape[0], : shape[1]]
    got = nb.pyr_up(low, shape)
    assert got.shape[:2] == shape
    np.testing.assert_allclose(got, want, atol=1e-3)
    t = tb.pyr_up(torch.from_numpy(np.ascontiguousarray(low.transpose(2, 0, 1))), shape).numpy().transpose(1, 2, 0)
    np.testing.assert_allclose(t, want, atol=1e-3)


def test_keep_patch_gives_the_original_back_under_the_mask_and_the_twin_agrees():
    rng = np.random.default_rng(3)
    out = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    original = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    mask = np.zeros((20, 30), np.float32)
    mask[5:15, 5:25] = 1.0
    mask[0:5] = 0.5
    t_out = torch.from_numpy(out.copy())
    n_out = out.copy()
    nb.keep_patch(n_out, original, 40, 25, mask)       # runs past the right and bottom edges: clipped
    tb.keep_patch(t_out, torch.from_numpy(original), 40, 25, torch.from_numpy(mask))
    assert np.array_equal(n_out, t_out.numpy())
    assert np.array_equal(n_out[30:37, 45:53], original[30:37, 45:53])   # mask 1 -> the original exactly
    assert np.array_equal(n_out[:25], out[:25]) and np.array_equal(n_out[:, :40], out[:, :40])  # outside untouched
    half = (out[25:30, 40:53].astype(np.float32) + original[25:30, 40:53]) / 2
    assert np.abs(n_out[25:30, 40:53] - half).max() <= 0.5 + 1e-6
    before = n_out.copy()
    nb.keep_patch(n_out, original, 100, 100, mask)      # wholly off the frame: nothing happens
    assert np.array_equal(before, n_out)


def test_detail_blend_keeps_full_detail_where_alpha_is_zero_and_the_twin_agrees(astronaut):
    from kernels.numpy.warp import area_resize

    bg = np.ascontiguousarray(astronaut[:240, :320])
    low = area_resize(bg, (96, 128))
    change = np.zeros_like(low)
    change[30:60, 40:90] = 25.0
    alpha = np.zeros((120, 160), np.float32)
    alpha[40:120, 60:160] = 1.0                   # the right-hand lower part takes the low-resolution result
    out = nb.detail_blend(bg, low, change, alpha)
    assert out.shape == bg.shape and out.dtype == np.uint8
    out = out.astype(np.float32)
    np.testing.assert_array_equal(out[:60, :100], bg[:60, :100])      # alpha 0, no change: bg exactly
    up = lambda x: cv2.resize(x, (320, 240), interpolation=cv2.INTER_LINEAR)  # noqa: E731
    inner = (slice(100, 230), slice(140, 310))
    np.testing.assert_allclose(out[inner], np.clip(up(low + change)[inner], 0, 255), atol=0.51)  # alpha 1: the low-res result
    assert np.abs(np.diff(out[inner].astype(np.float32), axis=1)).mean() < np.abs(np.diff(bg[inner].astype(np.float32), axis=1)).mean()
    t = tb.detail_blend(torch.from_numpy(bg), torch.from_numpy(low), torch.from_numpy(change), torch.from_numpy(alpha)).numpy()
    assert t.dtype == np.uint8 and np.abs(t.astype(np.float32) - out).max() <= 1   # float rounding near .5
