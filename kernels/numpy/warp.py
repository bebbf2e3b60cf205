"""Piecewise-affine warping over a triangle mesh, done as one dense remap.

Per-triangle `cv2.warpAffine` calls cost a frame-sized pass each; instead the destination triangles are
rasterised once into an id map (which triangle covers each pixel), every pixel's source coordinate comes
from its triangle's affine matrix, and a single `cv2.remap` samples any number of images with the same map.
Everything is sized to the face crop, never the frame.
"""

from __future__ import annotations

import cv2
import numpy as np

_SHIFT = 4  # fractional bits for the rasteriser: vertices land on 1/16 pixel


def affine_tables(src_pts: np.ndarray, dst_pts: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """(T, 2, 3) float32 matrices mapping each destination triangle onto its source triangle.

    Degenerate destination triangles get a zero matrix; they cover no pixel, so it is never read."""
    d = np.asarray(dst_pts, np.float64)[:, :2][tris]            # T,3,2
    s = np.asarray(src_pts, np.float64)[:, :2][tris]            # T,3,2
    dm = np.concatenate([d, np.ones(d.shape[:2] + (1,))], axis=2)  # T,3,3 rows [x y 1]
    det = np.linalg.det(dm)
    ok = np.abs(det) > 1e-9
    out = np.zeros((len(tris), 2, 3), np.float64)
    if ok.any():
        # dm @ A^T = s  ->  A^T = solve(dm, s)
        out[ok] = np.transpose(np.linalg.solve(dm[ok], s[ok]), (0, 2, 1))
    return out.astype(np.float32)


def rasterize_triangles(shape: tuple[int, int], dst_pts: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """H x W int32 map of the index (into `tris`) of the triangle covering each pixel, -1 where none.

    Triangles are drawn in order, so later ones win where they overlap: pass them far to near."""
    ids = np.full(shape, -1, np.int32)
    pts = np.round(np.asarray(dst_pts, np.float32)[:, :2] * (1 << _SHIFT)).astype(np.int32)
    polys = pts[tris]
    fill = cv2.fillConvexPoly
    for k in range(len(tris)):
        fill(ids, polys[k], k, 8, _SHIFT)
    return ids


def triangle_maps(ids: np.ndarray, tables: np.ndarray, origin: tuple[float, float] = (0.0, 0.0),
                  identity: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel source coordinates (map_x, map_y) from an id map and its (T, 2, 3) affine tables.

    `origin` is where the id map's pixel (0, 0) sits in destination coordinates. Uncovered pixels map to
    their own destination position when `identity` (the image is left as it is there), else to -1."""
    h, w = ids.shape
    ox, oy = origin
    xs = np.arange(w, dtype=np.float32) + np.float32(ox)
    ys = np.arange(h, dtype=np.float32) + np.float32(oy)
    if identity:
        map_x = np.broadcast_to(xs[None, :], (h, w)).copy()
        map_y = np.broadcast_to(ys[:, None], (h, w)).copy()
    else:
        map_x = np.full((h, w), -1.0, np.float32)
        map_y = np.full((h, w), -1.0, np.float32)
    yy, xx = np.nonzero(ids >= 0)
    a = tables[ids[yy, xx]]                       # n,2,3
    px = xs[xx]
    py = ys[yy]
    map_x[yy, xx] = a[:, 0, 0] * px + a[:, 0, 1] * py + a[:, 0, 2]
    map_y[yy, xx] = a[:, 1, 0] * px + a[:, 1, 1] * py + a[:, 1, 2]
    return map_x, map_y


def remap(image: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """Bilinear sampling of `image` at (map_x, map_y); coordinates outside repeat the edge pixel."""
    return cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def piecewise_affine(image: np.ndarray, src_pts: np.ndarray, dst_pts: np.ndarray, tris: np.ndarray,
                     out_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Warp `image` so that mesh `src_pts` lands on `dst_pts`; returns (warped, covered mask bool)."""
    ids = rasterize_triangles(out_shape, dst_pts, tris)
    mx, my = triangle_maps(ids, affine_tables(src_pts, dst_pts, tris))
    return remap(image, mx, my), ids >= 0
