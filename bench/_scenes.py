"""Frames of real faces at known places and sizes, for the face benchmarks and tests: a square cut around
a portrait's face pasted into a plain frame, with the affine that put it there (so every landmark's true
place is known)."""

from __future__ import annotations

import cv2
import numpy as np

# where the face lies in each fixture photo (x0, y0, x1, y1): skimage's astronaut, matplotlib's Grace
# Hopper; measured once
ASTRONAUT_FACE = (181.0, 72.0, 270.0, 177.0)
GRACE_HOPPER_FACE = (170.0, 132.0, 355.0, 335.0)
def paste_face(frame: np.ndarray, photo: np.ndarray, face_box, width: float, centre, margin: float = 1.8,
               mirror: bool = False) -> np.ndarray:
    """Pastes a square cut of `photo` around its face into `frame` (in place) so the face is about `width`
    px wide with its centre at `centre`; returns the 2x3 affine photo -> frame (for true landmark places)."""
    x0, y0, x1, y1 = face_box
    k = width / (x1 - x0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    m = np.array([[k, 0, centre[0] - cx * k], [0, k, centre[1] - cy * k]])
    if mirror:
        m = np.array([[-k, 0, centre[0] + cx * k], [0, k, centre[1] - cy * k]])
    h, w = frame.shape[:2]
    flags = cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR
    warped = cv2.warpAffine(photo, m, (w, h), flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
    half = (x1 - x0) * k * margin / 2
    mask = np.zeros((h, w), bool)
    ys, xs = int(max(0, centre[1] - half)), int(max(0, centre[0] - half))
    mask[ys:int(min(h, centre[1] + half)), xs:int(min(w, centre[0] + half))] = True
    frame[mask] = warped[mask]
    return m


def group_frame(faces, size=(1280, 720), background=(118, 118, 118)):
    """A frame with several real faces pasted in: `faces` is a list of (photo, face_box, width, centre);
    returns the frame and each face's photo -> frame affine, in order."""
    w, h = size
    frame = np.empty((h, w, 3), np.uint8)
    frame[:] = background
    return frame, [paste_face(frame, photo, box, width, centre) for photo, box, width, centre in faces]
