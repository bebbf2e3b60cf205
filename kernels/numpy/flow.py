"""Smooth backward maps for cv2.remap: output pixel p samples the input at p - d(p), d a sum of
Gaussian-weighted translations and zooms, so the map fades to the identity away from its control points.

The map is evaluated on a coarse grid and interpolated; it is small, so both pixel paths draw it here and
the torch path uploads it.
"""

from __future__ import annotations

import cv2
import numpy as np


# The warps sample at 1/WARP_SUBPIXEL of a pixel: both twins round the map's positions there (cv2.convertMaps'
# fixed-point maps, which cv2.remap reads in 0.53 ms where it takes 0.84 ms over a float map, a 432 x 360 face
# region, 2026-12-07, the shared 2-core VM). A position less than half a step from its own pixel gives that
# pixel back exactly; STILL_OFFSET is under that with room for float32's rounding of the positions.
WARP_SUBPIXEL = 32
STILL_OFFSET = 1.0 / 128.0


def moving_map(
    shape: tuple[int, int],
    step: int,
    *,
    anchors: np.ndarray,
    shifts: np.ndarray,
    sigmas: np.ndarray,
    zoom_centres: np.ndarray,
    zoom_axes: np.ndarray,
    zoom_gains: np.ndarray,
    zoom_sigmas: np.ndarray,
    offsets: np.ndarray | None = None,
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """(h, w, 2) float32 sample positions for an (h, w) image, and the (y0, y1, x0, x1) part of it where
    they move a pixel by STILL_OFFSET or more (empty when nowhere): outside it a remap at WARP_SUBPIXEL
    gives every pixel back unchanged, so it need only run there.

    Translations: float32 (K, 2) `anchors` (x, y), (K, 2) `shifts` and (K,) `sigmas`, each shift weighted by
    a Gaussian about its anchor. Zooms: float32 (Z, 2) `zoom_centres`, (Z, 2, 2) `zoom_axes` (identity: a
    round zoom; an outer product u u^T: a stretch along u), float64 (Z,) `zoom_gains` and `zoom_sigmas`; a
    zoom moves p by gain * axes (p - centre), Gaussian-weighted about its centre. `offsets`: (rows, cols, 2)
    float32 moves a caller drew on the same grid (nodes at 0, step, 2 step, ... to the first at or past the
    image's edge on each axis), added before the one interpolation to every pixel. `step` is the grid's
    spacing in pixels."""
    h, w = shape
    xs = np.arange(0, w + step, step, dtype=np.float32)
    ys = np.arange(0, h + step, step, dtype=np.float32)
    gx, gy = xs[None, :], ys[:, None]   # the grid's node positions, broadcast rows against columns
    d = np.zeros((len(ys), len(xs), 2), np.float32)
    # A 2-D Gaussian on a grid is the outer product of two 1-D ones, so the sum over anchors is one small
    # matrix product (anchors x rows) @ (anchors x cols) per component instead of grid x anchors exponentials.
    if len(anchors):
        a = np.asarray(anchors, np.float32)
        v = np.asarray(shifts, np.float32)
        inv = 1.0 / (2.0 * np.asarray(sigmas, np.float32) ** 2)
        ey = np.exp(-(ys[None] - a[:, 1:2]) ** 2 * inv[:, None])   # (K, rows)
        ex = np.exp(-(xs[None] - a[:, 0:1]) ** 2 * inv[:, None])   # (K, cols)
        for j in range(2):
            d[..., j] += (ey * v[:, j:j + 1]).T @ ex
    for c, axes, k, sigma in zip(zoom_centres, zoom_axes, np.asarray(zoom_gains).tolist(), np.asarray(zoom_sigmas).tolist()):
        inv = 1.0 / (2.0 * sigma * sigma)
        g = np.exp(-(ys - c[1]) ** 2 * inv)[:, None] * np.exp(-(xs - c[0]) ** 2 * inv)[None, :]
        rx, ry = gx - c[0], gy - c[1]
        d[..., 0] += k * g * (axes[0, 0] * rx + axes[0, 1] * ry)
        d[..., 1] += k * g * (axes[1, 0] * rx + axes[1, 1] * ry)
    if offsets is not None:
        d += offsets
    # Sample positions on the coarse grid, interpolated to every pixel. Positions are linear in p, so the
    # interpolation is exact for them; the -0.5 undoes the half-cell shift of resizing step-wide cells.
    coarse = np.empty_like(d)
    np.subtract(gx, d[..., 0], out=coarse[..., 0])
    np.subtract(gy, d[..., 1], out=coarse[..., 1])
    coarse -= 0.5
    full = cv2.resize(coarse, (len(xs) * step, len(ys) * step), interpolation=cv2.INTER_LINEAR)
    off = step // 2
    # pixel p interpolates grid nodes floor(p / step) and the next one, so a node's move reaches the
    # cells on either side of it and nothing further (an interpolated offset is never larger than its nodes')
    moved = np.maximum(np.abs(d[..., 0]), np.abs(d[..., 1])) >= STILL_OFFSET
    rows, cols = np.flatnonzero(moved.any(axis=1)), np.flatnonzero(moved.any(axis=0))
    box = (0, 0, 0, 0)
    if len(rows):
        box = (max(0, (int(rows[0]) - 1) * step), min(h, (int(rows[-1]) + 1) * step),
               max(0, (int(cols[0]) - 1) * step), min(w, (int(cols[-1]) + 1) * step))
    return full[off:off + h, off:off + w], box   # a view: cv2.remap reads strided rows, no copy needed


def warp(image: np.ndarray, map_xy: np.ndarray) -> np.ndarray:
    """`image` sampled bilinearly at the (h, w, 2) positions `map_xy`, rounded to 1/WARP_SUBPIXEL of a pixel
    (cv2.remap over fixed-point maps, replicated borders)."""
    fixed, fraction = cv2.convertMaps(map_xy, None, cv2.CV_16SC2)
    return cv2.remap(image, fixed, fraction, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
