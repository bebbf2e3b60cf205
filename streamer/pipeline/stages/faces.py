"""The face stage: finds, tracks and steadies the faces of one stream and puts them on `state.faces`.

One FaceStage per session (the landmarker runs in VIDEO mode, which follows one stream). Later stages
read `state.faces`; each face carries a stable `track_id`, smoothed landmarks (pixels) and the bbox of
the smoothed landmarks; the raw landmarks stay in `state.raw_landmarks[track_id]`. A hand in front of a
face puts its soft mask on that face's `keep` (engines.landmarks.hands.HandGuard: a check at the search
interval or when the face's landmarks change oddly, optical flow between checks); fusion and edits leave
those pixels alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import logging

import numpy as np

from engines.backends import BackendSettings, Detector, select_backend
from engines.cards import ModelError
from engines.faces import Face, LandmarkerConfig, SearchConfig
from engines.landmarks.hands import Fill, HandConfig, HandGuard, open_hand_finder
from engines.smoothing import OneEuroLandmarks, SmoothingConfig
from engines.tracking import FaceTracker, TrackerConfig
from streamer.pipeline.pipeline import FrameState

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class FaceStageConfig:
    # no stream stage reads blendshapes, so the stream skips their network (about 1 ms per face per frame);
    # a face whose box keeps still keeps its landmarks for up to 3 frames (engines.landmarks.still; the
    # threshold, 1.5 grey levels, from docs/faces.md "A still face keeps its landmarks"); while a face is
    # followed, the search for newcomers runs beside the frames (SearchConfig.background: this stage hands
    # the landmarker a fresh whole-frame RGB on the frames a search pass starts, and never changes it)
    landmarker: LandmarkerConfig = field(default_factory=lambda: LandmarkerConfig(
        blendshapes=False, still_change=1.5, search=SearchConfig(background=True)))
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)
    backend: BackendSettings = field(default_factory=BackendSettings)
    # hands in front of a face; its check interval (unless set) is the landmarker's search interval
    hands: HandConfig = field(default_factory=HandConfig)


class FaceStage:
    """Landmarker + tracker + smoothing. Handles no face (empty list) and many (up to max_faces)."""

    name = "faces"

    def __init__(self, config: FaceStageConfig = FaceStageConfig(),
                 detector: Detector | Callable[[LandmarkerConfig], Detector] | None = None,
                 hands: HandGuard | None = None) -> None:
        """`hands` replaces the hand check (one per stream) built from `config.hands`."""
        self.config = config
        if detector is None:  # the first backend in the preference list that runs here
            detector = select_backend(config.backend).landmarker(config.landmarker)
        elif not hasattr(detector, "detect"):
            detector = detector(config.landmarker)
        self.detector: Detector = detector
        self.tracker = FaceTracker(config.tracker)
        self._smoothers: dict[int, OneEuroLandmarks] = {}
        self._rgb: np.ndarray | None = None      # planes: the frame-sized RGB the landmarker reads, filled per ROI
        self.hands: HandGuard | None = hands
        if hands is None and config.hands.enabled:
            cfg = config.hands
            if cfg.check_interval_ms is None:
                cfg = replace(cfg, check_interval_ms=config.landmarker.search_interval_ms)
            self.hands = HandGuard(lambda: open_hand_finder(cfg), cfg)   # the networks load on the first face
        self.hands_error: str | None = None

    def _landmarker_input(self, planes: Any, timestamp_ms: int) -> np.ndarray:
        """The RGB the landmarker gets for a frame that travels as planes: while it follows its faces
        (no search due) only the boxes it reads are converted, into a frame-sized buffer this stage keeps
        (the rest of it is never read), so this costs what the faces' crops cost, not the frame's area.
        Planes on a torch device convert there and only those boxes come back to host memory."""
        reads = getattr(self.detector, "reads", None)
        boxes = reads(timestamp_ms) if reads is not None else None
        if boxes is None:
            return _as_numpy_rgb(planes.rgb())
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
        if self.hands is not None and out:
            # the hand check reads around the faces too: on planes, what it reads is converted as it asks
            fill = self._filler(state.planes) if state.planes is not None and image is self._rgb else None
            out = self._keep_hands(image, out, raw, t * 1000.0, fill)
        state.faces = out
        state.raw_landmarks = raw
        return state

    def _filler(self, planes: Any) -> Fill:
        """Converts a box of the planes frame into the RGB buffer `_landmarker_input` filled (the landmark
        crops), for the hand check's reads beyond them."""
        def fill(b: tuple[float, float, float, float]) -> None:
            box = planes.snap(*b)
            if box is not None:
                planes.rgb_into(self._rgb, box)

        return fill

    def _keep_hands(self, image: np.ndarray, faces: list[Face], raw: dict[int, np.ndarray], t_ms: float,
                    fill: Fill | None = None) -> list[Face]:
        """Each face with a hand in front of it gets the hand's mask as `keep`. Hand models that are not
        unpacked turn the check off for this stream, said once in the log (the faces go on unchanged)."""
        try:
            patches = self.hands(image, faces, raw, t_ms, fill)
        except ModelError as exc:
            self.hands_error = str(exc)
            log.warning("hand check off for this stream: %s", exc)
            self.hands = None
            return faces
        except Exception as exc:   # the faces go on without hand masks this frame; the log says why, once
            if self.hands_error is None:
                log.warning("hand check failed, faces go on without hand masks: %s", exc, exc_info=True)
            self.hands_error = str(exc)
            return faces
        return [replace(f, keep=patches[f.track_id]) if f.track_id in patches else f for f in faces]

    def close(self) -> None:
        self.detector.close()
        if self.hands is not None:
            self.hands.close()


def _as_numpy_rgb(image: Any) -> np.ndarray:
    if isinstance(image, np.ndarray):
        arr = image
    else:  # a torch tensor on the GPU path: the landmarker runs on the CPU copy
        arr = image.detach().to("cpu").numpy()
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"face stage expects H x W x 3 uint8 RGB, got {arr.dtype} {arr.shape}")
    return np.ascontiguousarray(arr)
