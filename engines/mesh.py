"""Face-mesh topology of the 478-point landmarker: named regions as ordered polygon loops, and the mesh's
triangles. Built once from MediaPipe's own connection lists, so the indices cannot drift from the model."""

from __future__ import annotations

import collections
from functools import cache

import numpy as np

# MediaPipe's attribute name for each region we draw as a closed polygon.
_LOOP_SOURCES = {
    "face_oval": "FACE_LANDMARKS_FACE_OVAL",
    "left_eye": "FACE_LANDMARKS_LEFT_EYE",
    "right_eye": "FACE_LANDMARKS_RIGHT_EYE",
    "left_iris": "FACE_LANDMARKS_LEFT_IRIS",
    "right_iris": "FACE_LANDMARKS_RIGHT_IRIS",
}


def _connections(attr: str) -> list[tuple[int, int]]:
    from mediapipe.tasks.python.vision import FaceLandmarksConnections

    return [(c.start, c.end) for c in getattr(FaceLandmarksConnections, attr)]


def _closed_loops(edges: list[tuple[int, int]]) -> list[list[int]]:
    """Split an edge list whose vertices all have degree 2 into ordered closed loops."""
    adj: dict[int, list[int]] = collections.defaultdict(list)
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    seen: set[int] = set()
    loops = []
    for start in sorted(adj):
        if start in seen:
            continue
        loop, prev, cur = [start], None, start
        seen.add(start)
        while True:
            nxt = next((n for n in adj[cur] if n != prev and n not in seen), None)
            if nxt is None:
                break
            loop.append(nxt)
            seen.add(nxt)
            prev, cur = cur, nxt
        loops.append(loop)
    return loops


@cache
def loops() -> dict[str, np.ndarray]:
    """Region name -> ordered landmark indices of its outline. Lips come as `lips_outer` and `lips_inner`
    (the inner loop is the mouth opening)."""
    out = {name: np.array(_closed_loops(_connections(attr))[0]) for name, attr in _LOOP_SOURCES.items()}
    lips = sorted(_closed_loops(_connections("FACE_LANDMARKS_LIPS")), key=len)
    # both lip loops have 20 points; the outer one encloses the larger area in any frontal layout,
    # decided by index membership: 61 and 291 are the outer mouth corners.
    outer = next(l for l in lips if 61 in l)
    inner = next(l for l in lips if l is not outer)
    out["lips_outer"], out["lips_inner"] = np.array(outer), np.array(inner)
    for side in ("left", "right"):
        brow = _connections(f"FACE_LANDMARKS_{side.upper()}_EYEBROW")
        out[f"{side}_brow"] = np.array(sorted({i for e in brow for i in e}))
    return out


@cache
def triangles() -> np.ndarray:
    """(N, 3) landmark indices of the mesh triangles: the 3-cliques of the tessellation graph."""
    edges = {tuple(sorted(e)) for e in _connections("FACE_LANDMARKS_TESSELATION")}
    adj: dict[int, set[int]] = collections.defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    tris = {tuple(sorted((a, b, c))) for a, b in edges for c in adj[a] & adj[b]}
    return np.array(sorted(tris), dtype=np.int32)
