"""Face alignment: the 5 standard points taken from the 478 landmarks, and similarity transforms that
map a face onto standard crops (the ArcFace 112 template, and larger crops for plug-in models).

Points are ordered as the ArcFace template is: the eye on the image's left in a frontal view (the
subject's right), the other eye, the nose tip, then the mouth corners in the same order. They are taken
by landmark index, not by image position, so a rolled or mirrored face keeps its order.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

# MediaPipe indices: iris centres (468 = subject's right), nose tip, mouth corners (61 = subject's right)
FIVE_POINT_INDICES = (468, 473, 1, 61, 291)

_ARCFACE_112 = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)  # the template InsightFace's ArcFace models are trained on (112 x 112)


@dataclass(frozen=True, slots=True)
class CropTemplate:
    name: str
    size: int
    points: np.ndarray   # (5, 2) where the five points land in the crop

    @staticmethod
    def scaled(name: str, size: int, zoom_out: float = 1.0) -> "CropTemplate":
        """The ArcFace layout at `size` px; zoom_out > 1 shows more around the face (forehead, chin, hair)."""
        centre = np.array([56.0, 56.0], np.float32)
        pts = (centre + (_ARCFACE_112 - centre) / zoom_out) * (size / 112.0)
        return CropTemplate(name, size, pts.astype(np.float32))


ARCFACE_112 = CropTemplate("arcface_112", 112, _ARCFACE_112)
FACE_256 = CropTemplate.scaled("face_256", 256, zoom_out=1.6)   # whole head with some margin
FACE_512 = CropTemplate.scaled("face_512", 512, zoom_out=1.6)
TEMPLATES = {t.name: t for t in (ARCFACE_112, FACE_256, FACE_512)}


def five_points(landmarks: np.ndarray) -> np.ndarray:
    """(5, 2) float32: eye centres, nose tip, mouth corners, in ArcFace order."""
    lm = np.asarray(landmarks)
    if lm.ndim != 2 or lm.shape[0] < 478:
        raise ValueError(f"expected (478, 2|3) landmarks, got {lm.shape}")
    return lm[list(FIVE_POINT_INDICES), :2].astype(np.float32)


def similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """2x3 least-squares similarity (rotation, uniform scale, shift) taking src points onto dst (Umeyama)."""
    src = np.asarray(src, np.float64)
    dst = np.asarray(dst, np.float64)
    mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
    s, d = src - mu_s, dst - mu_d
    var = (s ** 2).sum() / len(src)
    if var <= 1e-12:
        raise ValueError("points are degenerate (all in one place)")
    u, sig, vt = np.linalg.svd(d.T @ s / len(src))
    e = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        e[1, 1] = -1.0
    r = u @ e @ vt
    scale = (sig * np.diag(e)).sum() / var
    t = mu_d - scale * r @ mu_s
    return np.hstack([scale * r, t[:, None]]).astype(np.float32)


def invert(m: np.ndarray) -> np.ndarray:
    """Inverse of a 2x3 affine (crop -> frame for pasting back)."""
    return cv2.invertAffineTransform(np.asarray(m, np.float32))


def align_matrix(landmarks: np.ndarray, template: CropTemplate = ARCFACE_112) -> np.ndarray:
    """2x3 transform from frame pixels to the template crop."""
    return similarity(five_points(landmarks), template.points)


def align_crop(image: np.ndarray, landmarks: np.ndarray, template: CropTemplate = ARCFACE_112,
               border: int = cv2.BORDER_REPLICATE) -> tuple[np.ndarray, np.ndarray]:
    """The face warped onto `template`: (crop size x size x C, the 2x3 frame -> crop matrix)."""
    m = align_matrix(landmarks, template)
    crop = cv2.warpAffine(image, m, (template.size, template.size), flags=cv2.INTER_LINEAR, borderMode=border)
    return crop, m
