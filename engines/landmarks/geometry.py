"""Head pose from landmarks alone, for paths without MediaPipe's graph (the tracking graph of the
`interpreter`, `torch` and `tensorrt` backends).

`face_transform` follows MediaPipe's geometry pipeline (face_geometry/libs/geometry_pipeline.cc): the
landmarks are placed in a perspective camera's frustum (vertical field of view 63 degrees, near plane 1, as
the face landmarker sets it), un-projected to metric space with a scale found in two passes, and MediaPipe's
own canonical face (read from the .task bundle) is fitted to them by weighted Procrustes with its own
landmark weights. The result is the 4x4 face transform MediaPipe reports. With no frame size the fit is
orthographic (`rotation_from_landmarks`), a few degrees of pitch away when the face is off-centre.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engines.cards import FACE_GEOMETRY


def _varint(b: bytes, i: int) -> tuple[int, int]:
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b: bytes) -> list[tuple[int, bytes | int]]:
    """Protobuf wire format, one level: (field number, value). Enough for this one fixed message."""
    i, out = 0, []
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((num, v))
    return out


@dataclass(frozen=True)
class CanonicalFace:
    vertices: np.ndarray   # (468, 3) cm, y up, z towards the viewer
    basis: np.ndarray      # landmark indices used for the fit
    weights: np.ndarray


@lru_cache(maxsize=1)
def canonical_face() -> CanonicalFace:
    """GeometryPipelineMetadata: 1 = canonical_mesh (Mesh3d: 3 = vertex_buffer x,y,z,u,v),
    2 = procrustes_landmark_basis (1 = landmark_id, 2 = weight)."""
    msg = _fields(FACE_GEOMETRY.read())
    mesh = next(v for n, v in msg if n == 1)
    floats = b"".join(v for n, v in _fields(mesh) if n == 3)
    verts = np.frombuffer(floats, np.float32).reshape(-1, 5)[:, :3].astype(np.float64)
    ids, wts = [], []
    for n, v in msg:
        if n == 2:
            d = dict(_fields(v))
            ids.append(int(d.get(1, 0)))
            wts.append(float(np.frombuffer(d[2], np.float32)[0]) if 2 in d else 0.0)
    return CanonicalFace(verts, np.array(ids), np.array(wts))


def rotation_from_landmarks(landmarks: np.ndarray) -> np.ndarray:
    """3x3 rotation taking the canonical face to the face in `landmarks` (478 or 468, x, y, z pixels),
    fitted orthographically (no camera model)."""
    canon = canonical_face()
    pts = np.asarray(landmarks, np.float64)[:468]
    dst = np.stack([pts[:, 0], -pts[:, 1], -pts[:, 2]])[:, canon.basis]
    return canonical_fit()(dst)[1]


FOV_Y_DEGREES = 63.0   # the face landmarker's perspective camera
NEAR = 1.0


@dataclass(frozen=True)
class Procrustes:
    """MediaPipe's SolveWeightedOrthogonalProblem (optimal rotation by SVD, then the optimal scale, then
    the translation) against one fixed source point set. The source is always the canonical face, so
    everything that depends on it alone is computed once: a fit is then one 3x3 SVD and a few products,
    which matters three times per face per frame."""

    weights: np.ndarray   # (N,) weights over their sum
    centre: np.ndarray    # (3,) the source's weighted centre
    cross: np.ndarray     # (N, 3): dst @ cross is the weighted cross-covariance of dst and the centred source
    norm: float           # the centred source's weighted squared norm

    @classmethod
    def of(cls, src: np.ndarray, w: np.ndarray) -> "Procrustes":
        """src: 3 x N points, w: N weights."""
        total = float(w.sum())
        centre = (src * w).sum(axis=1) / total
        centred = src - centre[:, None]
        return cls(w / total, centre, (centred * w).T.copy(), float((centred * centred * w).sum()))

    def __call__(self, dst: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(scale, R, t) with dst ~ scale R src + t, for dst 3 x N."""
        m = dst @ self.cross
        u, _, vt = np.linalg.svd(m)
        if np.linalg.det(u) * np.linalg.det(vt) < 0:
            u[:, 2] *= -1
        r = u @ vt
        scale = float((r * m).sum() / self.norm)
        return scale, r, dst @ self.weights - scale * (r @ self.centre)


@lru_cache(maxsize=1)
def canonical_fit() -> Procrustes:
    canon = canonical_face()
    return Procrustes.of(canon.vertices.T[:, canon.basis], canon.weights)


def face_transform(landmarks: np.ndarray, frame_size: tuple[int, int]) -> np.ndarray:
    """4x4 transform taking the canonical face (cm) to the face in `landmarks` (frame pixels, z on the
    x scale) seen by MediaPipe's perspective camera, as its geometry pipeline computes it."""
    canon, fit = canonical_face(), canonical_fit()
    w, h = frame_size
    pts = np.asarray(landmarks, np.float64)[:468]
    height = 2.0 * NEAR * np.tan(0.5 * np.radians(FOV_Y_DEGREES))
    width = w * height / h
    depth_offset = float(pts[:, 2].mean()) / w * width      # over all 468 points, as MediaPipe takes it
    b = pts[canon.basis]                                    # only the basis enters the fit
    screen = np.stack([b[:, 0] / w * width - width / 2, (1.0 - b[:, 1] / h) * height - height / 2,
                       b[:, 2] / w * width])

    def unproject(scale: float) -> np.ndarray:
        m = screen.copy()
        m[2] = (m[2] - depth_offset + NEAR) / scale
        m[:2] *= m[2] / NEAR
        m[2] *= -1.0                       # to the canonical face's handedness
        return m

    first = screen * np.array([[1.0], [1.0], [-1.0]])
    s1 = fit(first)[0]                     # pass 1 on the projected points: z is only relative yet
    s2 = fit(unproject(s1))[0]             # pass 2 on points un-projected with that scale
    scale, r, t = fit(unproject(s1 * s2))
    m = np.eye(4)
    m[:3, :3] = scale * r
    m[:3, 3] = t
    return m


def pose_of(transform: np.ndarray) -> tuple[float, float, float]:
    """Yaw, pitch, roll in degrees of a face transform that may carry a scale (the fit's own)."""
    from engines.faces import pose_from_transform

    m = np.array(transform, np.float64)
    m[:3, :3] /= np.linalg.norm(m[:3, 0])
    return pose_from_transform(m)


def pose_from_landmarks(landmarks: np.ndarray, frame_size: tuple[int, int] | None = None) -> tuple[float, float, float]:
    """Yaw, pitch, roll in degrees, on the same convention as engines.faces.pose_from_transform: through
    MediaPipe's perspective pipeline when the frame size (width, height) is known, else orthographic."""
    if frame_size is not None:
        return pose_of(face_transform(landmarks, frame_size))
    m = np.eye(4)
    m[:3, :3] = rotation_from_landmarks(landmarks)
    return pose_of(m)
