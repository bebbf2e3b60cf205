"""Whether a followed face still looks as it did on the frame its landmarks were computed on.

Why: the landmark network is most of the face stage's cost (docs/faces.md), and a face that keeps still
in front of a camera gives the same landmarks frame after frame, give or take the network's own jitter.
So the tracking graph keeps, with each face's landmarks, a signature of the face's box on that frame, and
on a later frame a face whose box gives nearly the same signature keeps its landmarks instead of running
the network again (the idea of StreamDiffusion's similarity filter, per face, on the input side).

The signature is the box in grey, area-averaged to 32 x 32 (each sample averages many pixels, so sensor
noise mostly cancels); the change between two is the largest mean absolute difference over a 4 x 4 grid
of its blocks, in grey levels, so a local change (an eye closing, the mouth opening, a hand coming in)
counts in full rather than diluted by the rest of the face. Signatures are always compared over the same
box, the one the landmarks were computed from: slow drift adds up until it shows.

Only settled landmarks are kept: the crop region a face's landmarks give for the next frame (centre and
size) must lie within `SETTLED_MOVE` and `SETTLED_SCALE` of its width of the region they were computed
from. A face's first frames, whose crop came from a detector box, converge over a few frames (the
region's size changes by 2 %, 0.9 %, 0.6 % of its width; 0.1-0.45 % once settled), and keeping one of
them would hold the landmarks off by up to 0.7 px.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import cv2
import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from engines.landmarks.networks import RotatedRect

SIGNATURE_PX = 32
GRID = 4
SETTLED_MOVE = 0.003    # of the crop region's width: its centre's move to the next frame's
SETTLED_SCALE = 0.005   # ... and its size's change

Box = tuple[int, int, int, int]


def face_box(landmarks: np.ndarray, shape: tuple[int, ...]) -> Box | None:
    """The landmarks' bounding box in whole pixels, clipped to a frame of `shape`; None when too small
    for a signature (narrower or shorter than 8 px)."""
    h, w = shape[:2]
    lo = np.floor(landmarks[:, :2].min(axis=0)).astype(int)
    hi = np.ceil(landmarks[:, :2].max(axis=0)).astype(int)
    x0, y0 = max(int(lo[0]), 0), max(int(lo[1]), 0)
    x1, y1 = min(int(hi[0]), w), min(int(hi[1]), h)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    return x0, y0, x1, y1


def signature(image: np.ndarray, box: Box) -> np.ndarray:
    """SIGNATURE_PX x SIGNATURE_PX float32 grey of `box` (x0, y0, x1, y1) of an RGB uint8 image."""
    x0, y0, x1, y1 = box
    grey = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, (SIGNATURE_PX, SIGNATURE_PX), interpolation=cv2.INTER_AREA).astype(np.float32)


def change(a: np.ndarray, b: np.ndarray) -> float:
    """The largest block mean of |a - b| over a GRID x GRID grid, grey levels."""
    step = SIGNATURE_PX // GRID
    d = np.abs(a - b).reshape(GRID, step, GRID, step)
    return float(d.mean(axis=(1, 3)).max())


def settled(rect: RotatedRect, next_rect: RotatedRect) -> bool:
    """Whether landmarks computed in the crop region `rect` are settled: the region they give for the next
    frame, `next_rect`, is nearly the same one."""
    w = max(rect.width, 1e-6)
    return (abs(next_rect.cx - rect.cx) <= SETTLED_MOVE * w and abs(next_rect.cy - rect.cy) <= SETTLED_MOVE * w
            and abs(next_rect.width - rect.width) <= SETTLED_SCALE * w)
