"""Soft region masks built from landmarks (no face-parsing model is bundled anywhere, so regions come from
the mesh). Masks are small and cheap to draw, so both pixel paths draw them here and the torch path
uploads them; they are float32 in [0, 1], H x W."""

from __future__ import annotations

from typing import Iterable

import cv2
import numpy as np

from engines import mesh


def polygon_mask(shape: tuple[int, int], polygons: Iterable[np.ndarray], feather_px: float = 0.0) -> np.ndarray:
    """Fill each (N, 2) pixel polygon, then feather the edge with a Gaussian of sigma `feather_px`."""
    h, w = shape
    mask = np.zeros((h, w), np.uint8)
    for poly in polygons:
        pts = np.round(np.asarray(poly, np.float32)[:, :2] * 16).astype(np.int32)  # 4 fractional bits
        cv2.fillPoly(mask, [pts], 255, lineType=cv2.LINE_AA, shift=4)
    out = mask.astype(np.float32) * (1.0 / 255.0)
    if feather_px > 0:
        k = int(feather_px * 3) * 2 + 1
        out = cv2.GaussianBlur(out, (k, k), feather_px)
    return out


def region_mask(
    shape: tuple[int, int],
    landmarks: np.ndarray,
    include: Iterable[str],
    exclude: Iterable[str] = (),
    feather_px: float = 0.0,
) -> np.ndarray:
    """Mask of the named regions (see `engines.mesh.loops`) minus the excluded ones, feathered."""
    loops = mesh.loops()
    inc = polygon_mask(shape, [landmarks[loops[n]] for n in include])
    exc_names = list(exclude)
    if exc_names:
        inc *= 1.0 - polygon_mask(shape, [landmarks[loops[n]] for n in exc_names])
    if feather_px > 0:
        k = int(feather_px * 3) * 2 + 1
        inc = cv2.GaussianBlur(inc, (k, k), feather_px)
    return inc
