"""Expressions and head turns made from one real photo, for the face rig and the avatar outputs: the
product's own smile edit, eyelids drawn shut over the eyes (a blink, or one eye: a wink), and the face
turned on its own mesh depth (a piecewise-affine warp of the photo over the landmark mesh)."""

from __future__ import annotations

import numpy as np

# upper and lower lid points of each eye, paired along the lid (the person's right eye, then left)
RIGHT_LIDS = ([246, 161, 160, 159, 158, 157, 173], [7, 163, 144, 145, 153, 154, 155])
LEFT_LIDS = ([466, 388, 387, 386, 385, 384, 398], [249, 390, 373, 374, 380, 381, 382])


def _warp(image: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    from engines.mesh import triangles
    from kernels.numpy.warp import piecewise_affine

    tris = triangles()
    tris = tris[(tris < 468).all(axis=1)]
    warped, covered = piecewise_affine(image, src[:468, :2].astype(np.float32), dst[:468, :2].astype(np.float32),
                                       tris, image.shape[:2])
    out = image.copy()
    out[covered] = warped[covered]
    return out


def shut_eyes(image: np.ndarray, landmarks: np.ndarray, lids=(RIGHT_LIDS, LEFT_LIDS)) -> np.ndarray:
    """The photo with the upper lids of `lids` drawn down onto the lower ones (the lid skin stretched over
    the eye, as in a blink)."""
    dst = landmarks.copy()
    for upper, lower in lids:
        for u, lo in zip(upper, lower):
            dst[u, :2] = landmarks[lo, :2] - 0.05 * (landmarks[lo, :2] - landmarks[u, :2])
    return _warp(image, landmarks, dst)


def turn_head(image: np.ndarray, landmarks: np.ndarray, degrees: float) -> np.ndarray:
    """The face turned by `degrees` about a vertical axis on its own mesh depth (> 0: toward the person's
    left, the nose toward the image's right), seen orthographically."""
    p = landmarks[:468].astype(np.float64)
    a = np.radians(degrees)
    cx, zc = p[:, 0].mean(), p[:, 2].mean()
    dst = p.copy()
    dst[:, 0] = cx + (p[:, 0] - cx) * np.cos(a) - (p[:, 2] - zc) * np.sin(a)   # z: MediaPipe's, negative toward the camera
    return _warp(image, p, dst)


def scenes(photo: np.ndarray, landmarks: np.ndarray) -> dict[str, np.ndarray]:
    """Named frames of one person: neutral, smiling, eyes shut, left eye shut, head turned each way."""
    from engines.edit_render import render_edits

    return {"neutral": photo, "smile": render_edits(photo, [landmarks], {"smile": 1.0}),
            "blink": shut_eyes(photo, landmarks), "wink_left": shut_eyes(photo, landmarks, (LEFT_LIDS,)),
            "turn_left": turn_head(photo, landmarks, 20.0), "turn_right": turn_head(photo, landmarks, -20.0)}
