"""Seams: feathered alpha blending and multi-band (Laplacian pyramid) blending.

Multi-band blending mixes each frequency band over a transition as wide as that band, so low-frequency
differences (tone, light) fade over a wide zone while fine texture switches over a narrow one: no halo,
no visible edge. The pyramid is OpenCV's (cv2.pyrDown / cv2.pyrUp: 5-tap binomial, reflect-101 borders),
each step stated here in the terms the torch twin reproduces (an odd-sized level is the even-sized
upsample cropped).
"""

from __future__ import annotations

from typing import Any, Iterable

import cv2
import numpy as np

from kernels.numpy.masks import in_channels


def alpha_blend(fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """float32 fg * alpha + bg * (1 - alpha); alpha H x W in [0, 1]."""
    bgf = bg.astype(np.float32, copy=False)
    return bgf + _weighted(fg.astype(np.float32, copy=False) - bgf, alpha)


def keep_patch(out: np.ndarray, original: np.ndarray, x0: int, y0: int, mask: np.ndarray) -> None:
    """In place: over out[y0:y0+h, x0:x0+w] (h x w = mask's shape, clipped to the frame) the pixels go back
    toward `original`'s by `mask` (1 = the original exactly, 0 = out as it is); uint8 H x W x C, rounded."""
    h, w = out.shape[:2]
    mh, mw = mask.shape
    ya, xa, yb, xb = max(0, y0), max(0, x0), min(h, y0 + mh), min(w, x0 + mw)
    if yb <= ya or xb <= xa:
        return
    m = mask[ya - y0:yb - y0, xa - x0:xb - x0, None].astype(np.float32, copy=False)
    o = out[ya:yb, xa:xb].astype(np.float32)
    res = o + (original[ya:yb, xa:xb].astype(np.float32) - o) * m
    out[ya:yb, xa:xb] = np.clip(res + 0.5, 0, 255).astype(np.uint8)


def keep_patches(out: np.ndarray, original: np.ndarray, patches: Iterable[Any]) -> None:
    """`keep_patch` for each patch (anything with `x0`, `y0` and a float32 `mask`; None entries skipped):
    what is in front of a face (a hand, an occluder) gets its own pixels back after a stage drew the face."""
    for p in patches:
        if p is not None:
            keep_patch(out, original, p.x0, p.y0, p.mask)


def copy_where(dst: np.ndarray, src: np.ndarray, where: np.ndarray) -> None:
    """In place: dst takes src where `where` (all three the same shape)."""
    np.copyto(dst, src, where=where)


def write_where(dst: np.ndarray, src: np.ndarray, where: np.ndarray) -> None:
    """In place: dst (uint8 H x W x C, a view into a frame) takes src where `where` (H x W bool); a float src
    is rounded to uint8 first."""
    if src.dtype != np.uint8:
        src = np.clip(src + 0.5, 0, 255).astype(np.uint8)
    cv2.copyTo(src, where.view(np.uint8), dst)


def pyr_down(x: np.ndarray) -> np.ndarray:
    """5-tap binomial blur, then every second pixel (cv2.pyrDown computes exactly that, only where kept)."""
    return cv2.pyrDown(x, borderType=cv2.BORDER_REFLECT_101)


def pyr_up(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Zeros between the pixels to twice the size, the 5-tap binomial (x2) over it with reflect-101
    borders, cropped to `shape` (each side 2n or 2n - 1 of x's n). cv2.pyrUp computes exactly that and
    skips the zeros' products: a third of the time of writing the zeros out and filtering them."""
    h, w = x.shape[:2]
    up = cv2.pyrUp(x, dstsize=(2 * w, 2 * h), borderType=cv2.BORDER_REFLECT_101)
    return up if up.shape[:2] == tuple(shape) else up[:shape[0], :shape[1]]


def pyramid_levels(shape: tuple[int, int], levels: int, min_size: int = 8) -> int:
    """How many levels fit: each level halves the smaller side, which stays >= min_size."""
    n, side = 0, min(shape)
    while n < levels and side // 2 >= min_size:
        side //= 2
        n += 1
    return n


def _weighted(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """x (H x W x C float32) times the (H x W) weights m in every channel (three channels through
    kernels.numpy.masks.in_channels)."""
    if x.ndim == 3 and x.shape[2] == 3:
        return x * in_channels(m)
    return x * (m[..., None] if x.ndim == 3 else m)


def multiband_delta(fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray, levels: int = 4) -> np.ndarray:
    """What a Laplacian-pyramid blend of fg over bg by alpha adds to bg (float32 H x W x C): blending the
    difference fg - bg needs one pyramid instead of two. Odd sizes are fine (ceil halving per level)."""
    diff = fg.astype(np.float32) - bg.astype(np.float32)
    n = pyramid_levels(alpha.shape, levels)
    a = alpha.astype(np.float32, copy=False)
    if n == 0:
        return _weighted(diff, a)
    g = [diff]
    m = [a]
    for _ in range(n):
        g.append(pyr_down(g[-1]))
        m.append(pyr_down(m[-1]))
    out = _weighted(g[n], m[n])
    for i in range(n - 1, -1, -1):
        shape = g[i].shape[:2]
        lap = g[i] - pyr_up(g[i + 1], shape)
        out = pyr_up(out, shape) + _weighted(lap, m[i])
    return out


def detail_blend(bg: np.ndarray, bg_low: np.ndarray, change: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """A change made at low resolution brought back to `bg`'s (H x W x 3 uint8) size without losing bg's
    detail where the change does not replace it: bg + up(change) - up(alpha) (bg - up(bg_low)), rounded to
    uint8.

    `bg_low` is bg area-averaged to the low size, `change` what the low-resolution work adds to it, and
    `alpha` (h x w, any size) how much of bg the change replaces: where it is 1 the result is up(bg_low +
    change), where 0 it is bg plus up(change), so bg's finer detail stays there. Full-size work is five
    OpenCV passes on same-shaped arrays (NumPy's (h, w, 1) broadcasting is several times slower), the last
    one adding bg and rounding to uint8 at once (round half to even, so a value at exactly .5 may land one
    level from the torch twin's)."""
    h, w = bg.shape[:2]
    up = lambda x: cv2.resize(np.ascontiguousarray(x, np.float32), (w, h), interpolation=cv2.INTER_LINEAR)  # noqa: E731
    out = up(bg_low)
    cv2.subtract(out, bg, dst=out, dtype=cv2.CV_32F)
    a = up(alpha)
    cv2.multiply(out, in_channels(a), dst=out)   # alpha (up(bg_low) - bg)
    cv2.add(out, up(change), dst=out)
    return cv2.add(out, bg, dtype=cv2.CV_8U)


def multiband_blend(fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray, levels: int = 4) -> np.ndarray:
    """Laplacian-pyramid blend of two H x W x C images by alpha (H x W); float32 out, same scale as in."""
    return bg.astype(np.float32) + multiband_delta(fg, bg, alpha, levels)
