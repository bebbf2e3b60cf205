"""Lab colour matching: statistics move where asked, shading carries over, and the torch twin agrees."""

import numpy as np
import torch

from kernels.numpy import color as nc
from kernels.torch import color as tc


def test_lab_round_trip_is_lossless_to_a_level(astronaut):
    back = nc.lab_to_rgb(nc.rgb_to_lab(astronaut))
    assert np.abs(back - astronaut).max() <= 1.5


def test_transfer_moves_masked_statistics_to_the_target(astronaut, grace_hopper):
    src = nc.rgb_to_lab(astronaut[100:300, 150:350])
    dst = nc.rgb_to_lab(grace_hopper[150:350, 150:350])
    mask = np.ones(src.shape[:2], np.float32)
    s, d = nc.lab_stats(src, mask), nc.lab_stats(dst, mask)
    moved = nc.transfer_stats(src, s, d)
    m, sd = nc.lab_stats(moved, mask)
    np.testing.assert_allclose(m, d[0], atol=0.05)
    ratio = np.clip(d[1] / s[1], *nc.RATIO_LIMITS)
    np.testing.assert_allclose(sd, s[1] * ratio, rtol=1e-3)
    half = nc.lab_stats(nc.transfer_stats(src, s, d, amount=0.5), mask)[0]
    np.testing.assert_allclose(half, (s[0] + d[0]) / 2, atol=0.05)


def test_lab_stats_refuse_an_empty_mask(astronaut):
    lab = nc.rgb_to_lab(astronaut[:50, :50])
    try:
        nc.lab_stats(lab, np.zeros((50, 50), np.float32))
    except ValueError as exc:
        assert "skin pixels" in str(exc)
    else:
        raise AssertionError("empty mask accepted")


def test_relight_carries_live_shading_and_keeps_detail(astronaut):
    face = nc.rgb_to_lab(astronaut[80:240, 160:300])
    h, w = face.shape[:2]
    ramp = np.linspace(-20, 20, w, dtype=np.float32)[None, :]
    lit = face.copy()
    lit[..., 0] = np.clip(face[..., 0] + ramp, 0, 100)
    mask = np.ones((h, w), np.float32)
    out = nc.relight(face, lit, mask, sigma=12)
    left, right = out[:, : w // 4, 0].mean(), out[:, -w // 4:, 0].mean()
    l0, r0 = face[:, : w // 4, 0].mean(), face[:, -w // 4:, 0].mean()
    assert (right - left) - (r0 - l0) > 20          # the room's light now falls left to right
    detail = out[..., 0] - nc.masked_lowpass(out[..., 0], mask, 12)
    detail0 = face[..., 0] - nc.masked_lowpass(face[..., 0], mask, 12)
    assert np.corrcoef(detail.ravel(), detail0.ravel())[0, 1] > 0.95   # own texture kept


def test_colour_relight_carries_the_live_skins_colour_field(astronaut):
    """With `colour`, a* and b* take the live picture's low frequencies too: a face redder on one side in
    the room it is fused into comes out redder on that side, its own colour detail kept; without it the
    chroma is untouched."""
    face = nc.rgb_to_lab(astronaut[80:240, 160:300])
    h, w = face.shape[:2]
    live = face.copy()
    live[..., 1] += np.linspace(-8, 8, w, dtype=np.float32)[None, :]     # warmer (redder) to the right
    live[..., 2] += 5.0                                                 # and yellower everywhere
    mask = np.ones((h, w), np.float32)
    assert np.array_equal(nc.relight(face, live, mask, sigma=12)[..., 1:], face[..., 1:])
    out = nc.relight(face, live, mask, sigma=12, colour=1.0)
    left, right = out[:, : w // 4, 1].mean(), out[:, -w // 4:, 1].mean()
    l0, r0 = face[:, : w // 4, 1].mean(), face[:, -w // 4:, 1].mean()
    assert (right - left) - (r0 - l0) > 8
    assert abs((out[..., 2] - face[..., 2]).mean() - 5.0) < 0.5
    detail = out[..., 1] - nc.masked_lowpass(out[..., 1], mask, 12)
    detail0 = face[..., 1] - nc.masked_lowpass(face[..., 1], mask, 12)
    assert np.corrcoef(detail.ravel(), detail0.ravel())[0, 1] > 0.95


def test_torch_twin_agrees_on_odd_size(astronaut, grace_hopper):
    a = astronaut[:238, :318]
    b = grace_hopper[:238, :318]
    la, lb = nc.rgb_to_lab(a), nc.rgb_to_lab(b)
    ta, tb = tc.rgb_to_lab(torch.from_numpy(a)), tc.rgb_to_lab(torch.from_numpy(b))
    assert np.abs(ta.numpy() - la).max() < 0.6     # OpenCV interpolates the gamma curve
    np.testing.assert_allclose(tc.lab_to_rgb(torch.from_numpy(la)).numpy(), nc.lab_to_rgb(la), atol=0.6)
    mask = np.zeros((238, 318), np.float32)
    mask[30:200, 40:290] = 1
    s, d = nc.lab_stats(la, mask, 2), nc.lab_stats(lb, mask, 2)
    ts, td = tc.lab_stats(torch.from_numpy(la), torch.from_numpy(mask), 2), tc.lab_stats(torch.from_numpy(lb), torch.from_numpy(mask), 2)
    np.testing.assert_allclose(ts[0].numpy(), s[0], atol=1e-3)
    np.testing.assert_allclose(ts[1].numpy(), s[1], rtol=1e-3)
    moved = nc.transfer_stats(la, s, d, 0.7)
    tmoved = tc.transfer_stats(torch.from_numpy(la), s, d, 0.7).numpy()
    np.testing.assert_allclose(tmoved, moved, atol=1e-3)
    r = nc.relight(la, lb, mask, 15)
    tr = tc.relight(torch.from_numpy(la), torch.from_numpy(lb), torch.from_numpy(mask), 15).numpy()
    np.testing.assert_allclose(tr, r, atol=1e-3)
    r = nc.relight(la, lb, mask, 15, colour=0.8)
    tr = tc.relight(torch.from_numpy(la), torch.from_numpy(lb), torch.from_numpy(mask), 15, colour=0.8).numpy()
    np.testing.assert_allclose(tr, r, atol=1e-3)


def test_half_size_twin_agrees(astronaut):
    a = np.ascontiguousarray(astronaut[:238, :318])
    np.testing.assert_allclose(tc.half_size(torch.from_numpy(a)).numpy(), nc.half_size(a), atol=1e-5)


def test_i420_conversions_round_trip_and_the_torch_twin_agrees(astronaut):
    rgb = astronaut[:318, :238]
    y, u, v = nc.rgb_to_i420(rgb)
    assert y.shape == (318, 238) and u.shape == v.shape == (159, 119)
    back = nc.i420_to_rgb(y, u, v)
    assert np.abs(back.astype(int) - rgb).mean() < 4.0           # 4:2:0 loses chroma detail, not level
    ty, tu, tv = tc.rgb_to_i420(torch.from_numpy(np.ascontiguousarray(rgb)))
    for a, b in ((ty, y), (tu, u), (tv, v)):                     # OpenCV's fixed point: the same bytes
        assert np.array_equal(a.numpy(), b)
    tb = tc.i420_to_rgb(torch.from_numpy(y), torch.from_numpy(u), torch.from_numpy(v)).numpy()
    assert np.array_equal(tb, back)
    rng = np.random.default_rng(5)                               # every code value, out-of-range Y and chroma too
    planes = [rng.integers(0, 256, s, dtype=np.uint8) for s in ((318, 238), (159, 119), (159, 119))]
    assert np.array_equal(tc.i420_to_rgb(*map(torch.from_numpy, planes)).numpy(), nc.i420_to_rgb(*planes))
    noise = rng.integers(0, 256, (318, 238, 3), dtype=np.uint8)
    for a, b in zip(tc.rgb_to_i420(torch.from_numpy(noise)), nc.rgb_to_i420(noise)):
        assert np.array_equal(a.numpy(), b)
