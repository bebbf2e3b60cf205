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


def affine_tables(src_pts: np.ndarray | list[np.ndarray], dst_pts: np.ndarray, tris: np.ndarray):
    """(T, 2, 3) float32 matrices mapping each destination triangle onto its source triangle; a list of
    source meshes gives a list of tables (the destination system is solved once for all of them).

    Degenerate destination triangles get a zero matrix; they cover no pixel, so it is never read."""
    many = isinstance(src_pts, (list, tuple))
    srcs = list(src_pts) if many else [src_pts]
    d = np.asarray(dst_pts, np.float32)[:, :2][tris]              # T,3,2
    e1, e2 = d[:, 1] - d[:, 0], d[:, 2] - d[:, 0]
    det = e1[:, 0] * e2[:, 1] - e2[:, 0] * e1[:, 1]
    ok = np.abs(det) > 1e-6
    r = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0).astype(np.float32)
    # inverse of the 2x2 edge matrix [e1 e2] (columns), row by row
    i00, i01 = e2[:, 1] * r, -e2[:, 0] * r
    i10, i11 = -e1[:, 1] * r, e1[:, 0] * r
    out = []
    for sp in srcs:
        s = np.asarray(sp, np.float32)[:, :2][tris]
        f1, f2 = s[:, 1] - s[:, 0], s[:, 2] - s[:, 0]
        tab = np.empty((len(tris), 2, 3), np.float32)
        for row in range(2):                                       # A = [f1 f2] @ inv([e1 e2])
            tab[:, row, 0] = f1[:, row] * i00 + f2[:, row] * i10
            tab[:, row, 1] = f1[:, row] * i01 + f2[:, row] * i11
            tab[:, row, 2] = s[:, 0, row] - tab[:, row, 0] * d[:, 0, 0] - tab[:, row, 1] * d[:, 0, 1]
        tab[~ok] = 0.0
        out.append(tab)
    return out if many else out[0]


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


def triangle_maps(ids: np.ndarray, tables: np.ndarray | list[np.ndarray], origin: tuple[float, float] = (0.0, 0.0),
                  identity: bool | list[bool] = False, step: float = 1.0):
    """Per-pixel source coordinates (map_x, map_y) from an id map and its (T, 2, 3) affine tables; a list
    of tables gives a list of map pairs from one pass over the covered pixels.

    `origin` is where the id map's pixel (0, 0) sits in destination coordinates, `step` the spacing of its
    pixels there (2 for a half-resolution map). Uncovered pixels map to
    their own destination position when `identity` (the image is left as it is there), else to -1."""
    many = isinstance(tables, (list, tuple))
    tabs = list(tables) if many else [tables]
    idents = identity if isinstance(identity, (list, tuple)) else [identity] * len(tabs)
    h, w = ids.shape
    ox, oy = origin
    xs = np.arange(w, dtype=np.float32) * np.float32(step) + np.float32(ox)
    ys = np.arange(h, dtype=np.float32) * np.float32(step) + np.float32(oy)
    flat = ids.ravel()
    sel = np.flatnonzero(flat >= 0)
    tri = flat[sel]
    px = xs[sel % w]
    py = ys[sel // w]
    out = []
    for tab, ident in zip(tabs, idents):
        if ident:
            map_x = np.broadcast_to(xs[None, :], (h, w)).copy()
            map_y = np.broadcast_to(ys[:, None], (h, w)).copy()
        else:
            map_x = np.full((h, w), -1.0, np.float32)
            map_y = np.full((h, w), -1.0, np.float32)
        a = tab.reshape(-1, 6)[tri]                                # n,6
        map_x.ravel()[sel] = a[:, 0] * px + a[:, 1] * py + a[:, 2]
        map_y.ravel()[sel] = a[:, 3] * px + a[:, 4] * py + a[:, 5]
        out.append((map_x, map_y))
    return out if many else out[0]


def remap(image: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """Bilinear sampling of `image` at (map_x, map_y); coordinates outside repeat the edge pixel."""
    return cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def piecewise_affine(image: np.ndarray, src_pts: np.ndarray, dst_pts: np.ndarray, tris: np.ndarray,
                     out_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Warp `image` so that mesh `src_pts` lands on `dst_pts`; returns (warped, covered mask bool)."""
    ids = rasterize_triangles(out_shape, dst_pts, tris)
    mx, my = triangle_maps(ids, affine_tables(src_pts, dst_pts, tris))
    return remap(image, mx, my), ids >= 0


def resize_to(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a map or mask (H x W or H x W x C float32) to `shape` (pixel-centre aligned)."""
    return cv2.resize(x, (shape[1], shape[0]), interpolation=cv2.INTER_LINEAR)


def area_resize(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Area-average downscale of an H x W (x C) float32 image to `shape` (each side no larger): every output
    pixel is the mean of the input over its footprint, fractional footprints weighted by their overlap
    (cv2.INTER_AREA), so detail finer than the new grid averages out instead of aliasing."""
    return cv2.resize(np.ascontiguousarray(x, np.float32), (shape[1], shape[0]), interpolation=cv2.INTER_AREA)
