"""A second read of where the person is, from a different network: MediaPipe's BlazePose (Apache-2.0, the
same mediapipe 0.10.21 wheel as the selfie networks, engines.cards), whose landmark network also answers a
person segmentation inside the body's own region.

The selfie networks read the frame, or a box around the head, as pixels alone, and in a busy room their
mistakes follow the zoom: read at the head's scale, a red motorcycle tank beside a shoulder is taken for the
body. BlazePose first finds the body (the detector's mid-hip keypoint and the circle around the whole
person, even where the hips lie below the frame), then reads a square region aligned with that body, so its
mistakes are other ones. The background stage counts its read as a third vote beside the selfie network's
two looks on photos and clips (engines/background.py: MatteConfig.pose_look; docs/background.md has what the
vote changes and what it costs).

The detector (224 x 224, SSD anchors at strides 8, 16, 32, 32, 32, two a cell: 2254) decodes like the face
and palm detectors: box and 4 keypoints in input pixels, weighted NMS. The region follows MediaPipe's
pose_detection_to_roi: centred on the mid-hip keypoint, rotated so the mid-hip -> body-circle axis points up,
a square twice that distance wide, scaled 1.25. The landmark network (pose_landmark_full, 256 x 256) reads
that square; its segmentation output is logits over the square, which go back to the frame here.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import cv2
import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from engines.landmarks.networks import RotatedRect

DETECTOR_SIZE = 224
LANDMARK_SIZE = 256
MID_HIP, BODY_CIRCLE = 0, 1          # the detector's keypoints that place and size the full-body region
ROI_SCALE = 1.25


@dataclass(frozen=True, slots=True)
class PoseConfig:
    """min_score: the detector's score (after its sigmoid) a body needs; min_presence: the landmark network's
    own "a body is here" score; max_people: bodies read per frame (each read costs the landmark network,
    about 14 ms on one core)."""

    min_score: float = 0.5
    nms_iou: float = 0.3
    min_presence: float = 0.5
    max_people: int = 2


@dataclass(frozen=True, slots=True)
class Body:
    """A body the detector found: the landmark network's region (frame pixels) and the detector's score."""

    rect: RotatedRect
    score: float


Runner = Callable[[np.ndarray], list[np.ndarray]]


def body_region(mid_hip: np.ndarray, circle: np.ndarray) -> RotatedRect:
    """The landmark network's square for a detection's mid-hip and body-circle keypoints (frame pixels)."""
    from engines.landmarks.networks import RotatedRect, normalize_radians   # lazy: that module loads torch
    (x0, y0), (x1, y1) = (float(v) for v in mid_hip[:2]), (float(v) for v in circle[:2])
    rotation = normalize_radians(math.pi / 2 - math.atan2(-(y1 - y0), x1 - x0))
    side = 2.0 * math.hypot(x1 - x0, y1 - y0) * ROI_SCALE
    return RotatedRect(x0, y0, side, side, rotation)


class PoseSegmenter:
    """The person probability of an RGB image from BlazePose: `bodies(image)` finds them, `__call__` gives
    the probability over the whole image at any size (the most of each body's read), or None where no body
    is found. Networks are made on first use (about 60 ms) and kept, so one instance can serve many mattes
    (the photo API's requests share one); reads take turns on its lock, as LiteRT's interpreters are not
    safe across threads. `close` gives the networks back."""

    def __init__(self, config: PoseConfig = PoseConfig(),
                 runner_factory: Callable[[bytes], Runner] | None = None) -> None:
        self.config = config
        self._factory = runner_factory
        self._detector: Runner | None = None
        self._landmarks: Runner | None = None
        self._anchors: np.ndarray | None = None   # normalised centres (engines.landmarks.networks.ssd_anchors)
        self._lock = threading.Lock()
        self.error: str | None = None   # why the networks could not be made; set once, never retried

    def _runner(self, card) -> Runner:
        data = card.read()                       # verified against the card's sha256
        if self._factory is not None:
            return self._factory(data)
        from engines.backends.interpreter import InterpreterRunner

        return InterpreterRunner(data)

    def _nets(self) -> tuple[Runner, Runner]:
        if self.error is not None:
            raise RuntimeError(self.error)
        if self._detector is None or self._landmarks is None:
            from engines.cards import POSE_DETECTION, POSE_LANDMARKS
            from engines.landmarks.networks import ssd_anchors

            try:
                self._anchors = ssd_anchors(DETECTOR_SIZE, strides=(8, 16, 32, 32, 32), per_cell=2)
                self._detector, self._landmarks = self._runner(POSE_DETECTION), self._runner(POSE_LANDMARKS)
            except Exception as exc:   # a missing or altered file (ModelError), a runtime that cannot load it
                self.error = f"{type(exc).__name__}: {exc}"
                raise
        return self._detector, self._landmarks

    def bodies(self, image: np.ndarray) -> list[Body]:
        """The bodies in a uint8 RGB image, best first, at most `max_people`."""
        with self._lock:
            return self._bodies(image)

    def _bodies(self, image: np.ndarray) -> list[Body]:
        from engines.landmarks.networks import RotatedRect, crop, decode_ssd, sigmoid

        detector, _ = self._nets()
        h, w = image.shape[:2]
        side = float(max(h, w))
        view, m = crop(image, RotatedRect(w / 2.0, h / 2.0, side, side), DETECTOR_SIZE, border=cv2.BORDER_CONSTANT)
        x = np.multiply(view[None], np.float32(1.0 / 127.5), dtype=np.float32)
        reg, cls = _by_width(detector(np.subtract(x, np.float32(1.0), out=x)), 12, 1)
        found = decode_ssd(reg[0], sigmoid(cls[0].reshape(-1)), self._anchors, DETECTOR_SIZE, 4,
                           self.config.min_score, self.config.nms_iou, cv2.invertAffineTransform(m))
        return [Body(body_region(kp[MID_HIP], kp[BODY_CIRCLE]), s) for _box, kp, s in found[:self.config.max_people]]

    def __call__(self, image: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray | None:
        """float32 (h, w) person probability over the whole uint8 RGB `image` at `size` (width, height; default
        the image's own), the most of each body's read; None when no body is found or read as present."""
        with self._lock:
            return self._read(image, size)

    def _read(self, image: np.ndarray, size: tuple[int, int] | None) -> np.ndarray | None:
        from engines.landmarks.networks import crop, sigmoid

        _, landmarks = self._nets()
        ih, iw = image.shape[:2]
        w, h = size if size is not None else (iw, ih)
        scale = np.array([[w / iw, 0.0], [0.0, h / ih]])
        out = None
        for body in self._bodies(image):
            view, m = crop(image, body.rect, LANDMARK_SIZE, border=cv2.BORDER_CONSTANT)
            outputs = landmarks(np.multiply(view[None], np.float32(1.0 / 255.0), dtype=np.float32))
            (presence,) = (o for o in outputs if o.size == 1)
            if float(sigmoid(np.asarray(presence).reshape(-1))[0]) < self.config.min_presence:
                continue
            (seg,) = (o for o in outputs if o.shape[1:3] == (LANDMARK_SIZE, LANDMARK_SIZE))
            prob = sigmoid(np.asarray(seg, np.float32).reshape(LANDMARK_SIZE, LANDMARK_SIZE))
            back = cv2.invertAffineTransform(m)                    # the square's pixels -> the image's
            to_out = np.hstack([scale @ back[:, :2], scale @ back[:, 2:]])
            read = cv2.warpAffine(prob, to_out, (w, h), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)
            out = read if out is None else np.maximum(out, read, out=out)
        return out

    def close(self) -> None:
        with self._lock:
            runners, self._detector, self._landmarks = (self._detector, self._landmarks), None, None
        for runner in runners:
            close = getattr(runner, "close", None)
            if close is not None:
                close()


def _by_width(outputs: list[np.ndarray], *widths: int) -> list[np.ndarray]:
    """The outputs whose last axis has each of `widths`, in that order (a runner need not keep the file's order)."""
    return [next(o for o in outputs if o.shape[-1] == wd) for wd in widths]
