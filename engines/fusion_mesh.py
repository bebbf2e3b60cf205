"""The mesh fusion warps over: MediaPipe's tessellation plus fans that close the eye and mouth openings
(the tessellation leaves them as holes, but the source's eyes and lips must travel with the face), the
landmark groups that move rigidly, and the alignment maths between two 478-point faces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from engines import mesh

# Inner corners from which each opening is fanned (both openings are lens shaped, so a corner fan is valid).
_FAN_CORNERS = {"left_eye": 362, "right_eye": 133, "lips_inner": 78}
IRIS = np.arange(468, 478)


@dataclass(frozen=True, slots=True)
class FusionMesh:
    triangles: np.ndarray          # (T, 3) int32: tessellation, then hole fans
    n_tessellation: int            # triangles[:n] come from the tessellation
    oval: np.ndarray               # landmark ids on the face outline (they never move: the seam sits there)
    rigid_groups: tuple[np.ndarray, ...]  # eyes (with irises and lids) and mouth: moved as one piece each
    skin_exclude: tuple[str, ...] = ("left_eye", "right_eye", "left_brow", "right_brow", "lips_outer")


def _fan(loop: np.ndarray, corner: int) -> np.ndarray:
    loop = np.roll(loop, -int(np.nonzero(loop == corner)[0][0]))
    return np.array([(loop[0], loop[i], loop[i + 1]) for i in range(1, len(loop) - 1)], np.int32)


@cache
def fusion_mesh() -> FusionMesh:
    loops = mesh.loops()
    tess = mesh.triangles()
    fans = [_fan(loops[name], corner) for name, corner in _FAN_CORNERS.items()]
    tris = np.concatenate([tess] + fans).astype(np.int32)
    left = np.union1d(loops["left_eye"], IRIS[5:])   # 473..477 is the subject's left iris
    right = np.union1d(loops["right_eye"], IRIS[:5])
    mouth = np.union1d(loops["lips_outer"], loops["lips_inner"])
    return FusionMesh(triangles=tris, n_tessellation=len(tess), oval=loops["face_oval"].astype(np.int32),
                      rigid_groups=(left.astype(np.int32), right.astype(np.int32), mouth.astype(np.int32)))


def orient_triangles(tris: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """Reorder each triangle's vertices so its normal points out of the head (z grows away from the
    camera). Then a triangle faces the camera exactly when its 2D signed area is negative."""
    p = np.asarray(landmarks, np.float64)
    a, b, c = p[tris[:, 0]], p[tris[:, 1]], p[tris[:, 2]]
    n = np.cross(b - a, c - a)
    width = float(np.ptp(p[:, 0]))
    centre = p.mean(axis=0) + np.array([0.0, 0.0, 0.5 * width])
    outward = (a + b + c) / 3.0 - centre
    flip = (n * outward).sum(axis=1) < 0
    out = tris.copy()
    out[flip, 1], out[flip, 2] = tris[flip, 2], tris[flip, 1]
    return out


def signed_areas(tris: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Twice the 2D signed area of each triangle (negative = facing the camera for oriented triangles)."""
    p = np.asarray(pts, np.float32)
    a, b, c = p[tris[:, 0], :2], p[tris[:, 1], :2], p[tris[:, 2], :2]
    return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])


def similarity_3d(src: np.ndarray, dst: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Umeyama: scale s, rotation R (3x3) and translation t with dst ~ s R src + t (least squares)."""
    x = np.asarray(src, np.float64)
    y = np.asarray(dst, np.float64)
    mx, my = x.mean(axis=0), y.mean(axis=0)
    xc, yc = x - mx, y - my
    cov = yc.T @ xc / len(x)
    u, d, vt = np.linalg.svd(cov)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1.0
    r = u @ sign @ vt
    var = (xc ** 2).sum() / len(x)
    s = float(np.trace(np.diag(d) @ sign) / max(var, 1e-12))
    return s, r, my - s * r @ mx


def align(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """`src` landmarks moved by the similarity that best fits them onto `dst` (pose and size of dst,
    proportions of src)."""
    s, r, t = similarity_3d(src, dst)
    return (s * np.asarray(src, np.float64) @ r.T + t).astype(np.float32)
