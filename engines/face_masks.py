"""Soft masks of a face's named regions (the loops of engines/mesh.py), drawn from its landmarks: no
face-parsing model is bundled anywhere, so regions come from the mesh."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from engines import mesh
from kernels.numpy.masks import feather, polygon_mask


def region_mask(
    shape: tuple[int, int],
    landmarks: np.ndarray,
    include: Iterable[str],
    exclude: Iterable[str] = (),
    feather_px: float = 0.0,
) -> np.ndarray:
    """float32 (H, W) mask in [0, 1] of the named regions minus the excluded ones, feathered by a Gaussian
    of sigma `feather_px`."""
    loops = mesh.loops()
    inc = polygon_mask(shape, [landmarks[loops[n]] for n in include])
    exc_names = list(exclude)
    if exc_names:
        inc *= 1.0 - polygon_mask(shape, [landmarks[loops[n]] for n in exc_names])
    return feather(inc, feather_px)
