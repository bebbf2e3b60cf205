"""Stable track ids for faces across frames.

MediaPipe's VIDEO mode follows faces between frames and re-runs its detector when it loses one, but it
gives no identity: the order of faces in its output may change. The tracker matches each frame's faces to
the live tracks by box overlap (falling back to centre distance in face sizes for fast motion), keeps a
lost track alive for a short while so a face that blinks out of detection comes back with its id, and
hands out new ids, never reused, to new faces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from engines.faces import Face


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    min_iou: float = 0.2            # overlap that counts as the same face
    max_center_shift: float = 0.6   # or: centre moved less than this many face sizes
    max_missed_frames: int = 15     # a track unseen this many frames in a row is dropped (0.5 s at 30 fps)


@dataclass(slots=True)
class Track:
    track_id: int
    bbox: tuple[float, float, float, float]
    missed: int = 0
    age: int = 1


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def overlap_of_smaller(a: Sequence[float], b: Sequence[float]) -> float:
    """The share of the smaller box's area that lies inside the other: 1 for a box nested in another, however
    small, where IoU would be small (a face part found on its own inside a close face's box)."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    small = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return float(ix * iy / small) if small > 0 else 0.0


def _center_shift(a: Sequence[float], b: Sequence[float]) -> float:
    """Distance between box centres in units of the larger box's diagonal."""
    ca = np.array([(a[0] + a[2]) / 2, (a[1] + a[3]) / 2])
    cb = np.array([(b[0] + b[2]) / 2, (b[1] + b[3]) / 2])
    size = max(np.hypot(a[2] - a[0], a[3] - a[1]), np.hypot(b[2] - b[0], b[3] - b[1]), 1e-6)
    return float(np.linalg.norm(ca - cb) / size)


class FaceTracker:
    """Assigns `track_id` to each face, frame after frame. One instance per stream."""

    def __init__(self, config: TrackerConfig = TrackerConfig()) -> None:
        self.config = config
        self.tracks: list[Track] = []
        self.dropped: list[int] = []   # ids dropped by the last update (their per-face state can go)
        self._next_id = 1

    def reset(self) -> None:
        self.tracks.clear()

    def update(self, faces: Sequence[Face]) -> list[Face]:
        """The same faces, in the same order, with `track_id` set."""
        cfg = self.config
        pairs = []
        for ti, track in enumerate(self.tracks):
            for fi, face in enumerate(faces):
                overlap = iou(track.bbox, face.bbox)
                shift = _center_shift(track.bbox, face.bbox)
                if overlap >= cfg.min_iou or shift <= cfg.max_center_shift:
                    pairs.append((overlap - shift, ti, fi))
        pairs.sort(reverse=True)
        used_t: set[int] = set()
        assigned: dict[int, int] = {}
        for _, ti, fi in pairs:  # greedy best-first; a handful of faces makes this exact enough
            if ti in used_t or fi in assigned:
                continue
            used_t.add(ti)
            assigned[fi] = ti
        out: list[Face] = []
        for fi, face in enumerate(faces):
            if fi in assigned:
                track = self.tracks[assigned[fi]]
                track.bbox, track.missed, track.age = face.bbox, 0, track.age + 1
            else:
                track = Track(self._next_id, face.bbox)
                self._next_id += 1
                self.tracks.append(track)
                used_t.add(len(self.tracks) - 1)
            out.append(replace(face, track_id=track.track_id))
        self.dropped: list[int] = []
        keep = []
        for ti, track in enumerate(self.tracks):
            if ti not in used_t:
                track.missed += 1
            if track.missed > cfg.max_missed_frames:
                self.dropped.append(track.track_id)
            else:
                keep.append(track)
        self.tracks = keep
        return out
