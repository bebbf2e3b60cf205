"""Head pose from landmarks alone, for paths without MediaPipe's geometry pipeline (the torch port).

A weighted rigid Procrustes fit of MediaPipe's own canonical face (read from the .task bundle) onto the
landmarks, treated orthographically (x right, y up, z towards the camera, all in pixels). MediaPipe fits
through a perspective camera model instead, so the two agree closely on roll and yaw and differ by a few
degrees of pitch when the face sits far from the image centre (tests state the tolerance).
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
    """3x3 rotation taking the canonical face to the face in `landmarks` (478 or 468, x, y, z pixels)."""
    canon = canonical_face()
    pts = np.asarray(landmarks, np.float64)[:468]
    dst = np.stack([pts[:, 0], -pts[:, 1], -pts[:, 2]], axis=1)[canon.basis]
    src = canon.vertices[canon.basis]
    w = canon.weights / canon.weights.sum()
    ms, md = (src * w[:, None]).sum(0), (dst * w[:, None]).sum(0)
    u, _, vt = np.linalg.svd(((dst - md) * w[:, None]).T @ (src - ms))
    d = np.eye(3)
    d[2, 2] = np.sign(np.linalg.det(u @ vt))
    return u @ d @ vt


def pose_from_landmarks(landmarks: np.ndarray) -> tuple[float, float, float]:
    """Yaw, pitch, roll in degrees, on the same convention as engines.faces.pose_from_transform."""
    from engines.faces import pose_from_transform

    m = np.eye(4)
    m[:3, :3] = rotation_from_landmarks(landmarks)
    return pose_from_transform(m)
