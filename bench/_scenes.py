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
ASTRONAUT_SKIN = (190, 120, 250, 150)     # her forehead and cheeks: real skin for `skin_hand`


def add_noise(frame: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Sensor-like noise: Gaussian per pixel and channel, in 8-bit levels."""
    return np.clip(frame.astype(np.float32) + rng.normal(0.0, sigma, frame.shape), 0, 255).astype(np.uint8)


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



def skin_hand(photo: np.ndarray, skin_box, size=(640, 480), centre=(320, 300), scale: float = 1.0,
              frame: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An open hand (palm, four fingers, thumb) drawn as a silhouette and textured with real skin pixels
    cut from `photo` at `skin_box` (x0, y0, x1, y1), shaded darker towards its edge, over `frame` (or a grey
    canvas). No photo of a real hand ships in any package found here; MediaPipe's palm detector and hand
    landmark network both take this shape for a hand (scores above 0.95 at scale 1). Returns the frame and
    the hand's exact coverage (float32 H x W in [0, 1])."""
    w, h = size
    img = np.full((h, w, 3), 118, np.uint8) if frame is None else frame.copy()
    h, w = img.shape[:2]
    cx, cy, s = centre[0], centre[1], scale
    mask = np.zeros((h, w), np.uint8)
    cv2.ellipse(mask, (int(cx), int(cy)), (int(55 * s), int(65 * s)), 0, 0, 360, 255, -1)
    for ang, length, width, bx in ((-12, 110, 22, -38), (-4, 125, 24, -13), (4, 120, 24, 12), (12, 100, 22, 36)):
        a = np.radians(ang)
        x0, y0 = cx + bx * s, cy - 50 * s
        x1, y1 = x0 + np.sin(a) * length * s, y0 - np.cos(a) * length * s
        cv2.line(mask, (int(x0), int(y0)), (int(x1), int(y1)), 255, max(1, int(width * s)))
        cv2.circle(mask, (int(x1), int(y1)), max(1, int(width * s / 2)), 255, -1)
    cv2.line(mask, (int(cx - 45 * s), int(cy + 10 * s)), (int(cx - 110 * s), int(cy - 50 * s)), 255, max(1, int(28 * s)))
    cv2.circle(mask, (int(cx - 110 * s), int(cy - 50 * s)), max(1, int(14 * s)), 255, -1)
    x0, y0, x1, y1 = skin_box
    tex = cv2.resize(np.ascontiguousarray(photo[y0:y1, x0:x1]), (w, h))
    d = cv2.distanceTransform(mask, cv2.DIST_L2, 3)
    hand = np.clip(tex * np.clip(0.7 + d / 40.0, 0.7, 1.05)[..., None], 0, 255)
    m = cv2.GaussianBlur(mask, (3, 3), 0).astype(np.float32)[..., None] / 255.0
    return (img * (1 - m) + hand * m).astype(np.uint8), m[..., 0]
