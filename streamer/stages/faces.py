"""The face stage: finds, tracks and steadies the faces of one stream and puts them on `state.faces`.

One FaceStage per session (the landmarker runs in VIDEO mode, which follows one stream). Later stages
read `state.faces`; each face carries a stable `track_id`, smoothed landmarks (pixels) and the bbox of
the smoothed landmarks; the raw landmarks stay in `state.raw_landmarks[track_id]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from engines.backends import BackendSettings, Detector, select_backend
from engines.faces import Face, LandmarkerConfig
from engines.smoothing import OneEuroLandmarks, SmoothingConfig
from engines.tracking import FaceTracker, TrackerConfig
from streamer.pipeline import FrameState


@dataclass(frozen=True, slots=True)
class FaceStageConfig:
    # no stream stage reads blendshapes, so the stream skips their network (about 1 ms per face per frame)
    landmarker: LandmarkerConfig = field(default_factory=lambda: LandmarkerConfig(blendshapes=False))
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)
    backend: BackendSettings = field(default_factory=BackendSettings)


class FaceStage:
    """Landmarker + tracker + smoothing. Handles no face (empty list) and many (up to max_faces)."""

    name = "faces"

    def __init__(self, config: FaceStageConfig = FaceStageConfig(),
                 detector: Detector | Callable[[LandmarkerConfig], Detector] | None = None) -> None:
        self.config = config
        if detector is None:  # the first backend in the preference list that runs here
            detector = select_backend(config.backend).landmarker(config.landmarker)
        elif not hasattr(detector, "detect"):
            detector = detector(config.landmarker)
        self.detector: Detector = detector
        self.tracker = FaceTracker(config.tracker)
        self._smoothers: dict[int, OneEuroLandmarks] = {}
        self._rgb: np.ndarray | None = None      # planes: the frame-sized RGB the landmarker reads, filled per ROI

    def _landmarker_input(self, planes: Any, timestamp_ms: int) -> np.ndarray:
        """The RGB the landmarker gets for a frame that travels as planes: while it follows its faces
        (no search due) only the boxes it reads are converted, into a frame-sized buffer this stage keeps
        (the rest of it is never read), so this costs what the faces' crops cost, not the frame's area."""
        reads = getattr(self.detector, "reads", None)
        boxes = reads(timestamp_ms) if reads is not None else None
        if boxes is None:
            return planes.rgb()
        if self._rgb is None or self._rgb.shape[:2] != planes.shape:
            self._rgb = np.empty((*planes.shape, 3), np.uint8)
        for b in boxes:
            box = planes.snap(*b)
            if box is not None:
                planes.rgb_into(self._rgb, box)
        return self._rgb

    def __call__(self, state: FrameState, context: Any = None) -> FrameState:
        t = state.seconds
        ts = int(round(t * 1000.0))
        image = self._landmarker_input(state.planes, ts) if state.planes is not None else _as_numpy_rgb(state.image)
        faces = self.tracker.update(self.detector.detect(image, ts))
        for tid in self.tracker.dropped:
            self._smoothers.pop(tid, None)
        raw: dict[int, np.ndarray] = {}
        out: list[Face] = []
        for face in faces:
            smoother = self._smoothers.get(face.track_id)
            if smoother is None:
                smoother = self._smoothers[face.track_id] = OneEuroLandmarks(self.config.smoothing)
            raw[face.track_id] = face.landmarks
            pts = smoother(face.landmarks, t)
            lo, hi = pts[:, :2].min(axis=0), pts[:, :2].max(axis=0)
            out.append(replace(face, landmarks=pts, bbox=(float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))))
        state.faces = out
        state.raw_landmarks = raw
        return state

    def close(self) -> None:
        self.detector.close()


def _as_numpy_rgb(image: Any) -> np.ndarray:
    if isinstance(image, np.ndarray):
        arr = image
    else:  # a torch tensor on the GPU path: the landmarker runs on the CPU copy
        arr = image.detach().to("cpu").numpy()
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"face stage expects H x W x 3 uint8 RGB, got {arr.dtype} {arr.shape}")
    return np.ascontiguousarray(arr)
