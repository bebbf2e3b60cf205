"""Putting an aligned crop back into its frame: the crop and its mask are warped through the inverse of the
frame -> crop transform over the mask's bounding box only, and blended there (kernels.numpy.blend). Every
pixel where the warped mask is 0 keeps its value exactly."""

from __future__ import annotations

import math

import cv2
import numpy as np

from engines.align import invert
from kernels.numpy import blend as np_blend


def paste_box(shape: tuple[int, int], mask: np.ndarray, m: np.ndarray) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1): the frame box the crop-space `mask` (> 0) lands in, clipped; None when outside."""
    ys, xs = np.nonzero(mask > 0)
    if len(xs) == 0:
        return None
    inv = invert(m)
    corners = np.array([[xs.min(), ys.min()], [xs.max() + 1, ys.min()], [xs.min(), ys.max() + 1],
                        [xs.max() + 1, ys.max() + 1]], np.float32)
    pts = corners @ inv[:, :2].T + inv[:, 2]
    h, w = shape
    x0, y0 = (max(0, int(math.floor(v)) - 1) for v in pts.min(axis=0))
    x1, y1 = (int(math.ceil(v)) + 2 for v in pts.max(axis=0))
    x1, y1 = min(w, x1), min(h, y1)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1, y1


def warp_to_frame(crop_space: np.ndarray, m: np.ndarray, box: tuple[int, int, int, int], *,
                  replicate: bool = False) -> np.ndarray:
    """A crop-space array (image or mask) brought to the frame `box` (bilinear)."""
    x0, y0, x1, y1 = box
    shifted = invert(m).copy()
    shifted[:, 2] -= (x0, y0)
    border = cv2.BORDER_REPLICATE if replicate else cv2.BORDER_CONSTANT
    return cv2.warpAffine(crop_space, shifted, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR, borderMode=border,
                          borderValue=0.0)


def blend_box(out: np.ndarray, fg: np.ndarray, alpha: np.ndarray, box: tuple[int, int, int, int]) -> None:
    """In place: `fg` (float32 RGB 0..255, the box's size) blended into `out`'s box by `alpha`; pixels
    where alpha is 0 keep their value exactly."""
    x0, y0, x1, y1 = box
    region = out[y0:y1, x0:x1]
    blended = np.clip(np_blend.alpha_blend(fg, region, alpha) + 0.5, 0, 255).astype(np.uint8)
    out[y0:y1, x0:x1] = np.where((alpha > 0)[..., None], blended, region)


def paste_crop(out: np.ndarray, crop: np.ndarray, mask: np.ndarray, m: np.ndarray) -> bool:
    """In place: blend `crop` (float32 RGB 0..255, crop space) into `out` (uint8 RGB frame) by `mask` (crop
    space, 0..1). False (and `out` untouched) when the mask lands outside the frame."""
    box = paste_box(out.shape[:2], mask, m)
    if box is None:
        return False
    x0, y0, x1, y1 = box
    fg = warp_to_frame(np.asarray(crop, np.float32), m, box, replicate=True)
    alpha = warp_to_frame(np.asarray(mask, np.float32), m, box)
    region = out[y0:y1, x0:x1]
    blended = np.clip(np_blend.alpha_blend(fg, region, alpha) + 0.5, 0, 255).astype(np.uint8)
    out[y0:y1, x0:x1] = np.where((alpha > 0)[..., None], blended, region)
    return True
