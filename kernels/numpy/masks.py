"""Soft masks from polygons and points: float32 in [0, 1], H x W. Masks are small and cheap to draw, so
both pixel paths draw them here and the torch path uploads them."""

from __future__ import annotations

from typing import Iterable, Sequence

import cv2
import numpy as np


def feather(mask: np.ndarray, sigma: float) -> np.ndarray:
    """A Gaussian of `sigma` pixels over the mask's edge (a kernel 3 sigma wide each way); under 0.3 px
    the mask is returned as it is."""
    if sigma <= 0.3:
        return mask
    k = int(sigma * 3) * 2 + 1
    return cv2.GaussianBlur(mask, (k, k), sigma)


def in_channels(m: np.ndarray) -> np.ndarray:
    """(h, w) weights -> (h, w, 3) float32, the value in each channel. NumPy's (h, w, 1) broadcasting against
    three channels, and a (3,) colour's against an image, run a 3-long inner loop per pixel: 16 and 23 us at
    88 x 68, where a same-shaped product takes 3 and this expansion 1.5."""
    return cv2.cvtColor(np.ascontiguousarray(m, np.float32), cv2.COLOR_GRAY2RGB)


def ramp(x: np.ndarray) -> np.ndarray:
    """Smoothstep of x clipped to [0, 1]: a soft edge from a distance map."""
    t = np.clip(x, 0.0, 1.0).astype(np.float32)
    return t * t * (3.0 - 2.0 * t)


def inner_ramp(mask: np.ndarray, start: float, width: float) -> np.ndarray:
    """0 at the edge of the binary `mask` and everywhere outside it, rising (smoothstep) from `start` px
    inside the edge to 1 at `start + width` px: a feathered, pulled-in mask that never leaves the original,
    in linear time (one distance transform)."""
    d = cv2.distanceTransform((np.asarray(mask) > 0).astype(np.uint8), cv2.DIST_L2, 3)
    return ramp((d - start) / max(width, 1e-3))


def polygon_coverage(shape: tuple[int, int], polygons: Iterable[np.ndarray]) -> np.ndarray:
    """Each (N, 2) pixel polygon filled, antialiased: uint8 coverage, 255 inside (a test against half
    coverage is `>= 128`, with no float mask made)."""
    h, w = shape
    mask = np.zeros((h, w), np.uint8)
    for poly in polygons:
        pts = np.round(np.asarray(poly, np.float32)[:, :2] * 16).astype(np.int32)  # 4 fractional bits
        cv2.fillPoly(mask, [pts], 255, lineType=cv2.LINE_AA, shift=4)
    return mask


def polygon_mask(shape: tuple[int, int], polygons: Iterable[np.ndarray], feather_px: float = 0.0) -> np.ndarray:
    """Fill each (N, 2) pixel polygon, then feather the edge with a Gaussian of sigma `feather_px`."""
    return feather(polygon_coverage(shape, polygons).astype(np.float32) * (1.0 / 255.0), feather_px)


def gaussian_blobs(shape: tuple[int, int], centres: Sequence[np.ndarray], sigma: float) -> np.ndarray:
    """Sum of Gaussian blobs of `sigma` px at (x, y) `centres`, clipped to 1, at every pixel. A 2-D Gaussian
    is the outer product of two 1-D ones, so K blobs are one (rows x K) @ (K x cols) product: exact, and
    cheaper than K exponentials over the image."""
    h, w = shape
    c = np.asarray(centres, np.float32).reshape(-1, 2)
    inv = np.float32(1.0 / (2.0 * sigma * sigma))
    ey = np.exp(-(np.arange(h, dtype=np.float32)[None] - c[:, 1:2]) ** 2 * inv)   # (K, rows)
    ex = np.exp(-(np.arange(w, dtype=np.float32)[None] - c[:, 0:1]) ** 2 * inv)   # (K, cols)
    # one blob is an outer product (NumPy's matmul takes 3-4 times as long over a single row)
    blobs = np.multiply.outer(ey[0], ex[0]) if len(c) == 1 else ey.T @ ex
    return np.minimum(blobs, np.float32(1.0))


def limb_mask(shape: tuple[int, int], points: np.ndarray, outlines: Iterable[Sequence[int]],
              segments: Iterable[tuple[int, int]], width: float, grow: float = 0.0, soft: float = 0.0) -> np.ndarray:
    """A jointed shape (a hand) as a soft mask: each `outlines` polygon of `points` (N, 2 pixels) filled and
    each (i, j) segment stroked `width` px wide with round ends, grown by `grow` px, feathered with a
    Gaussian of sigma `soft`. Points may lie off the mask; what falls outside is clipped."""
    h, w = shape
    mask = np.zeros((h, w), np.uint8)
    p = np.round(np.asarray(points, np.float32)[:, :2] * 16).astype(np.int64)
    lim = 1 << 26          # OpenCV's drawing takes int32 coordinates: keep far-off points representable
    p = np.clip(p, -lim, lim).astype(np.int32)
    for outline in outlines:
        cv2.fillPoly(mask, [p[list(outline)]], 255, lineType=cv2.LINE_8, shift=4)
    thick = max(1, int(round(width + 2 * grow)))
    for i, j in segments:
        cv2.line(mask, tuple(int(v) for v in p[i]), tuple(int(v) for v in p[j]), 255, thick, cv2.LINE_8, shift=4)
    if grow > 0.5:
        k = int(round(grow)) * 2 + 1
        mask = cv2.dilate(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
    return feather(mask.astype(np.float32) * (1.0 / 255.0), soft)
