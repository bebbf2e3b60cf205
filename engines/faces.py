"""Faces in a frame: the Face record every stage reads, and the landmarker that makes them.

Landmarks are in pixels of the frame they were found in (x, y), with z on the same scale (MediaPipe's
relative depth times the frame width), so geometric code needs no image size alongside.
"""

from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

import numpy as np

from engines.cards import FACE_LANDMARKER, ModelCard


@dataclass(slots=True)
class Face:
    landmarks: np.ndarray                    # (478, 3) float32, pixels
    bbox: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels
    blendshapes: Mapping[str, float] = field(default_factory=dict)
    pose: tuple[float, float, float] = (0.0, 0.0, 0.0)  # yaw, pitch, roll in degrees
    transform: np.ndarray | None = None      # 4x4 face transform (canonical face -> camera), if known
    track_id: int = -1
    score: float = 1.0
    # pixels in front of this face that its stages leave alone (a hand), or None: the face stage's hand check
    keep: "MaskPatch | None" = None
    # the face's parsed regions in frame pixels ("lips", "skin"), or None: a face parser's (the parse stage),
    # which the edits use in place of the landmark polygons
    regions: "Mapping[str, MaskPatch] | None" = None

    @property
    def yaw(self) -> float:
        return self.pose[0]


@dataclass(frozen=True, slots=True)
class MaskPatch:
    """A soft mask over part of the frame: `mask` (h x w float32 in [0, 1]) covers the frame's pixels
    [y0:y0+h, x0:x0+w]. Frame coordinates, so it holds for any plane of the frame at full resolution."""

    x0: int
    y0: int
    mask: np.ndarray


def pose_from_transform(m: np.ndarray) -> tuple[float, float, float]:
    """Yaw, pitch, roll in degrees from a 4x4 face transform (rotation R = Rz(roll) Ry(yaw) Rx(pitch))."""
    r = np.asarray(m, dtype=np.float64)[:3, :3]
    yaw = math.degrees(math.asin(max(-1.0, min(1.0, -r[2, 0]))))
    pitch = math.degrees(math.atan2(r[2, 1], r[2, 2]))
    roll = math.degrees(math.atan2(r[1, 0], r[0, 0]))
    return yaw, pitch, roll


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """How far the face search looks (engines.landmarks.search). The short-range detector sees faces that
    fill a good part of the frame; `wide` adds MediaPipe's full-range detector on the whole frame and on a
    pyramid of square tiles, so faces down to `tile_min_face_px` wide are found in frames and photos of
    any size. In VIDEO mode the wide part runs only when a search is due (`search_interval_ms`), a few
    tiles each time; IMAGE mode runs all of it."""

    wide: bool = True
    min_face_px: float = 32.0       # narrower detections are dropped: too few pixels for usable landmarks
    tile_min_face_px: float = 40.0  # the finest tiles are sized so a face this wide is found in them
    tile_ratio: float = 12.0        # tile side = this x tile_min_face_px (1/16 of the view finds most, 1/12 all)
    tile_overlap: float = 0.34      # of a tile's side: a face up to this size lies whole in some tile
    level_step: float = 2.5         # each coarser pyramid level's tiles are this much larger
    max_tiles: int = 48             # all levels together; the finest levels go first beyond it
    tiles_per_search: int = 1       # VIDEO mode: tiles run per search, round robin over the pyramid
    # VIDEO mode while a face is followed: a search's passes (short range, full range, tiles) run one per
    # frame, so no single frame carries the whole search; False: all of them on the frame it is due
    spread: bool = True
    # ... and each pass runs on a thread of its own, its detections joining on the first frame after it
    # ends: looking for newcomers stays off the followed faces' frame time. The caller must not change a
    # frame it handed over afterwards (the stream's face stage hands over a fresh whole-frame RGB on the
    # frames a pass starts); off by default for that reason, on in the stream's face stage
    background: bool = False


@dataclass(frozen=True, slots=True)
class LandmarkerConfig:
    max_faces: int = 4
    min_detection_confidence: float = 0.5
    min_presence_confidence: float = 0.5
    min_tracking_confidence: float = 0.5
    # "video": follow faces from frame to frame (a stream); "image": detect afresh in each call
    # (unrelated photos: source uploads, `livefuse inspect IMAGE`)
    mode: Literal["video", "image"] = "video"
    # video mode, while some face is followed but fewer than max_faces: look for new faces at most this
    # often (stream milliseconds), not on every frame. 0 = every frame, which MediaPipe's own graph (the
    # `litert` backend) always does; the tracking graph of the other backends honours it.
    search_interval_ms: float = 250.0
    # the 52 blendshape scores (a second network, about 1 ms per face per frame on one core): on for
    # `inspect`, source registration and the evals; off in the stream's face stage, whose later stages
    # read none (MediaPipe's own `output_face_blendshapes` is off by default too)
    blendshapes: bool = True
    # where the detector looks (the tracking graph's backends; MediaPipe's own graph has the short range only)
    search: SearchConfig = field(default_factory=SearchConfig)
    # video mode, the tracking graph: a followed face whose box changed less than this (grey levels,
    # engines.landmarks.still.change) since the frame its landmarks were computed on keeps them, at most
    # `still_max_run` frames in a row. 0 = off: the network runs on every frame (MediaPipe's rule); the
    # stream's face stage turns it on (streamer.pipeline.stages.faces)
    still_change: float = 0.0
    still_max_run: int = 3

    def __post_init__(self) -> None:
        if not (self.still_change >= 0.0) or self.still_max_run < 0:
            raise ValueError(f"still_change and still_max_run must be >= 0, got {self.still_change}, {self.still_max_run}")


class MediaPipeLandmarker:
    """MediaPipe Tasks FaceLandmarker in VIDEO mode: detects, then tracks from frame to frame.

    One instance per stream: VIDEO mode needs strictly increasing timestamps from one source. With
    `config.mode == "image"` every call detects afresh and the timestamp is ignored.
    """

    def __init__(self, config: LandmarkerConfig = LandmarkerConfig(), card: ModelCard = FACE_LANDMARKER) -> None:
        from mediapipe.tasks.python import BaseOptions, vision  # heavy import, kept local

        if config.mode not in ("video", "image"):
            raise ValueError(f"landmarker mode must be 'video' or 'image', not {config.mode!r}")
        self.config = config
        options = vision.FaceLandmarkerOptions(
            base_options=BaseOptions(model_asset_path=str(card.path())),
            running_mode=vision.RunningMode.VIDEO if config.mode == "video" else vision.RunningMode.IMAGE,
            num_faces=config.max_faces,
            min_face_detection_confidence=config.min_detection_confidence,
            min_face_presence_confidence=config.min_presence_confidence,
            min_tracking_confidence=config.min_tracking_confidence,
            output_face_blendshapes=config.blendshapes,
            output_facial_transformation_matrixes=True,
        )
        self._landmarker = _defuse_del(vision.FaceLandmarker.create_from_options(options))
        self._last_ts = -1
        self._lock = threading.Lock()

    def detect(self, image: np.ndarray, timestamp_ms: int) -> list[Face]:
        import mediapipe as mp

        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"landmarker expects H x W x 3 uint8 RGB, got {getattr(image, 'dtype', type(image))} "
                             f"{getattr(image, 'shape', '')}; engines.images.load_image converts other input")
        h, w = image.shape[:2]
        frame = mp.Image(image_format=mp.ImageFormat.SRGB, data=np.ascontiguousarray(image))
        with self._lock:
            if self._landmarker is None:
                raise RuntimeError("landmarker is closed")
            if self.config.mode == "image":
                result = self._landmarker.detect(frame)
            else:
                ts = max(int(timestamp_ms), self._last_ts + 1)
                self._last_ts = ts
                result = self._landmarker.detect_for_video(frame, ts)
        faces: list[Face] = []
        for i, lms in enumerate(result.face_landmarks):
            pts = np.array([(p.x * w, p.y * h, p.z * w) for p in lms], dtype=np.float32)
            x0, y0 = pts[:, :2].min(axis=0)
            x1, y1 = pts[:, :2].max(axis=0)
            shapes = {c.category_name: float(c.score) for c in result.face_blendshapes[i]} if result.face_blendshapes else {}
            transform = np.array(result.facial_transformation_matrixes[i], dtype=np.float32) if result.facial_transformation_matrixes else None
            pose = pose_from_transform(transform) if transform is not None else (0.0, 0.0, 0.0)
            faces.append(Face(landmarks=pts, bbox=(float(x0), float(y0), float(x1), float(y1)),
                              blendshapes=shapes, pose=pose, transform=transform))
        return faces

    def close(self) -> None:
        with self._lock:
            if self._landmarker is not None:
                self._landmarker.close()
                self._landmarker = None


# MediaPipe's FaceLandmarker sends every C call, close included, to a worker thread of its own and waits for
# the answer. When a forgotten landmarker is freed by the cyclic garbage collector, that worker has already
# gone: the collector clears weak references (which stop the worker) before it runs __del__, so the stock
# close would wait forever on a thread that has already ended. A forgotten landmarker is therefore
# closed straight through the C library, on whatever thread frees it; an explicit close() goes the usual way.
def _defuse_del(landmarker: Any) -> Any:
    cls = type(landmarker)
    safe = _SAFE_CLASSES.get(cls)
    if safe is None:
        safe = type(f"Forgettable{cls.__name__}", (cls,), {"__del__": _close_forgotten})
        _SAFE_CLASSES[cls] = safe
    landmarker.__class__ = safe
    return landmarker


_SAFE_CLASSES: dict[type, type] = {}


def _close_forgotten(landmarker: Any) -> None:
    handle = getattr(landmarker, "_handle", None)
    if not handle:
        return
    landmarker._handle = None
    try:
        from mediapipe.tasks.python.core import mediapipe_c_bindings

        lib = mediapipe_c_bindings.load_raw_library()
        error = ctypes.c_char_p()
        lib.MpFaceLandmarkerClose(handle, ctypes.byref(error))
        if error.value is not None:
            lib.MpErrorFree(error)
    except Exception:  # at interpreter exit the modules may be gone; the process frees the graph anyway
        pass
