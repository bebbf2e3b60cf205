"""Colour matching in CIE Lab (D65, sRGB gamma): statistics transfer and low-frequency relighting.

Lab separates lightness from chroma, so a source face can take the live skin's tone (a, b) and the room's
light (L) without its own texture being flattened. All work is at face-crop size.
"""

from __future__ import annotations

import cv2
import numpy as np

RATIO_LIMITS = (0.5, 2.0)   # std ratios outside this come from a bad mask, not from real skin


def half_size(rgb: np.ndarray) -> np.ndarray:
    """2x2 block mean of uint8 RGB (sides even) as float32 in [0, 1]: colour statistics and shading need no
    more than half the pixels."""
    x = rgb.astype(np.float32) * np.float32(1.0 / 255.0)
    return cv2.resize(x, (rgb.shape[1] // 2, rgb.shape[0] // 2), interpolation=cv2.INTER_AREA)


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """uint8 (or float in [0, 1]) RGB -> float32 Lab: L in [0, 100], a/b about [-128, 127]."""
    x = rgb.astype(np.float32) * (1.0 / 255.0) if rgb.dtype == np.uint8 else rgb.astype(np.float32, copy=False)
    return cv2.cvtColor(x, cv2.COLOR_RGB2Lab)


def lab_to_rgb(lab: np.ndarray) -> np.ndarray:
    """float32 Lab -> float32 RGB in [0, 255] (not rounded, so blends stay exact until the end)."""
    rgb = cv2.cvtColor(np.ascontiguousarray(lab, np.float32), cv2.COLOR_Lab2RGB)
    return np.clip(rgb * 255.0, 0.0, 255.0)


def lab_stats(lab: np.ndarray, mask: np.ndarray, step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (3,) of the Lab pixels where `mask` > 0.5, on every `step`-th row and column."""
    sel = (mask[::step, ::step] > 0.5).astype(np.uint8)
    n = int(sel.sum())
    if n < 16:
        raise ValueError(f"too few skin pixels for colour statistics ({n})")
    mean, std = cv2.meanStdDev(np.ascontiguousarray(lab[::step, ::step]), mask=sel)
    return mean.ravel().astype(np.float32), (std.ravel() + 1e-3).astype(np.float32)


def transfer_stats(lab: np.ndarray, src: tuple[np.ndarray, np.ndarray], dst: tuple[np.ndarray, np.ndarray],
                   amount: float = 1.0) -> np.ndarray:
    """Move `lab` from statistics `src` to `dst` (Reinhard transfer), by `amount` in [0, 1]."""
    ratio = np.clip(dst[1] / src[1], *RATIO_LIMITS)
    scale = 1.0 + amount * (ratio - 1.0)
    shift = amount * dst[0] - src[0] * scale + (1.0 - amount) * src[0]
    # (lab - m_s) * scale + m_s + amount * (m_d - m_s), as one per-channel affine pass
    m = np.zeros((3, 4), np.float32)
    m[[0, 1, 2], [0, 1, 2]] = scale
    m[:, 3] = shift
    return cv2.transform(np.ascontiguousarray(lab, np.float32), m)


def _box_down(x: np.ndarray, factor: int) -> np.ndarray:
    """Mean over factor x factor blocks (edge-replicated up to a multiple of factor)."""
    if factor == 1:
        return x
    h, w = x.shape[:2]
    ph, pw = (-h) % factor, (-w) % factor
    if ph or pw:
        x = cv2.copyMakeBorder(x, 0, ph, 0, pw, cv2.BORDER_REPLICATE)
    return cv2.resize(x, ((w + pw) // factor, (h + ph) // factor), interpolation=cv2.INTER_AREA)


def gaussian_kernel(sigma: float) -> np.ndarray:
    r = max(1, int(round(3.0 * sigma)))
    t = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-0.5 * (t / sigma) ** 2)
    return (k / k.sum()).astype(np.float32)


def masked_lowpass(channel: np.ndarray, mask: np.ndarray, sigma: float, factor: int = 4) -> np.ndarray:
    """Low-frequency part of `channel` inside `mask` (normalised convolution, so nothing bleeds in from
    outside the mask), computed at 1/`factor` resolution and upsampled back to the input size."""
    h, w = channel.shape
    num = _box_down(channel * mask, factor)
    den = _box_down(mask, factor)
    k = gaussian_kernel(max(sigma / factor, 0.5))
    num = cv2.sepFilter2D(num.astype(np.float32), -1, k, k, borderType=cv2.BORDER_REPLICATE)
    den = cv2.sepFilter2D(den.astype(np.float32), -1, k, k, borderType=cv2.BORDER_REPLICATE)
    low = num / np.maximum(den, 1e-3)
    return cv2.resize(low, (w, h), interpolation=cv2.INTER_LINEAR)


def relight(fg_lab: np.ndarray, bg_lab: np.ndarray, mask: np.ndarray, sigma: float, amount: float = 1.0,
            factor: int = 4, colour: float = 0.0) -> np.ndarray:
    """Give `fg_lab` the low-frequency lightness of `bg_lab` (the live face's shading) inside `mask`, and
    with `colour` > 0 its low-frequency a*, b* too (the live skin's colour across the face, so the face
    matches the ears and neck around it), keeping its own detail: X_fg + amount * (low(X_bg) - low(X_fg)),
    `colour` in place of `amount` for a*, b*. `bg_lab` and `mask` may be at 1/k of fg's size (k dividing
    `factor`, fg's sides multiples of k); every low-pass runs in one pass at 1/factor. `sigma` is in fg
    pixels."""
    h, w = fg_lab.shape[:2]
    k = h // mask.shape[0]
    n = 3 if colour else 1
    fg = fg_lab[..., :n]
    fg_small = fg if k == 1 else _box_down(np.ascontiguousarray(fg), k)
    stack = np.dstack([bg_lab[..., :n] * mask[..., None], fg_small.reshape(*mask.shape, n) * mask[..., None], mask]).astype(np.float32)
    small = _box_down(stack, factor // k)
    g = gaussian_kernel(max(sigma / factor, 0.5))
    small = cv2.sepFilter2D(small, -1, g, g, borderType=cv2.BORDER_REPLICATE)
    diff = (small[..., :n] - small[..., n:2 * n]) / np.maximum(small[..., 2 * n:], 1e-3)
    diff *= np.array([amount, colour, colour][:n], np.float32)
    out = fg_lab.copy()
    up = cv2.resize(diff, (w, h), interpolation=cv2.INTER_LINEAR)
    out[..., :n] += up.reshape(h, w, n)
    return out


def delta_e(lab_a: np.ndarray, lab_b: np.ndarray) -> float:
    """CIE76 distance between two Lab colours (e.g. skin means)."""
    return float(np.linalg.norm(np.asarray(lab_a, np.float64) - np.asarray(lab_b, np.float64)))


# -- yuv420p (I420) <-> RGB, BT.601 limited range (what aiortc's VP8/H264 decoders give and encoders take)
# OpenCV's conversion takes each chroma sample for its 2x2 block (no interpolation), so a crop on even
# coordinates converts to exactly the pixels the whole frame's conversion gives there.

def i420_to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """H x W x 3 uint8 RGB of planes Y (H x W) and U, V (H/2 x W/2), H and W even (views are fine)."""
    h, w = y.shape
    buf = np.empty((h * 3 // 2, w), np.uint8)
    buf[:h] = y
    buf[h:].reshape(-1)[: h * w // 4] = u.reshape(-1)
    buf[h:].reshape(-1)[h * w // 4:] = v.reshape(-1)
    return cv2.cvtColor(buf, cv2.COLOR_YUV2RGB_I420)


def rgb_to_i420(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Planes Y (H x W), U, V (H/2 x W/2) of H x W x 3 uint8 RGB, H and W even; each 2x2 block's chroma is
    its top-left pixel's (OpenCV's rule)."""
    h, w = rgb.shape[:2]
    buf = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2YUV_I420)
    chroma = buf[h:].reshape(2, h // 2, w // 2)
    return buf[:h], chroma[0], chroma[1]
