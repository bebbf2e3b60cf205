"""Hands in front of a face: MediaPipe's palm detector and 21-point hand landmark network, and the soft
mask of each hand's pixels that fusion and edits leave alone.

The networks (palm_detection_full 192 x 192, hand_landmark_full 224 x 224; Apache-2.0, unpacked from the
mediapipe 0.10.21 wheel, engines.cards) run in LiteRT's interpreter as the face networks do. Palm boxes
decode against MediaPipe's SSD anchors for that model (strides 8, 16, 16, 16, two anchors a cell: 2016),
box plus 7 keypoints in input pixels, weighted NMS; the hand ROI is the palm box rotated so the wrist ->
middle-finger-base axis points up, squared, scaled 2.6 and shifted half a side towards the fingers
(MediaPipe's palm_detection_detection_to_roi); a hand's own landmarks give the next ROI (its
hand_landmark_landmarks_to_roi: scale 2.0, shift 0.1).

A stream does not run them on every frame (`HandGuard`): at the check interval, or at once when a face's
own landmarks say something changed in front of it; between checks a found hand's 21 points follow by
sparse optical flow on a small grey crop, which costs a fraction of a millisecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import cv2
import numpy as np

from engines.faces import Face, MaskPatch
from engines.landmarks.networks import RotatedRect, crop, decode_ssd, normalize_radians, sigmoid, ssd_anchors
from kernels.numpy.masks import limb_mask

PALM_SIZE = 192
HAND_SIZE = 224
WRIST, MIDDLE_MCP = 0, 2            # palm keypoints that set the hand's rotation (MediaPipe's indices)
# the 21 hand landmarks: bones as (from, to) pairs, and the palm's outline
HAND_BONES = ((0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8), (9, 10), (10, 11), (11, 12),
              (13, 14), (14, 15), (15, 16), (17, 18), (18, 19), (19, 20), (0, 5), (5, 9), (9, 13), (13, 17), (0, 17))
PALM_OUTLINE = (0, 1, 2, 5, 9, 13, 17)
_ROI_POINTS = (0, 1, 2, 3, 5, 6, 9, 10, 13, 14, 17, 18)   # the landmarks MediaPipe's tracking ROI reads
# face landmarks whose colour is probed for the skin-consistency trigger: forehead, cheeks, nose, chin
SKIN_PROBES = (10, 151, 9, 50, 280, 101, 330, 4, 195, 152, 199, 206, 426, 36, 266, 117, 346, 205, 425, 32, 262, 175)


@dataclass(frozen=True, slots=True)
class HandConfig:
    """When and how the hand check runs in a stream, and how wide each hand's kept region is."""

    enabled: bool = True
    # a full check (palm detector + landmarks) this far apart (stream ms); None: the face stage's search
    # interval (250 ms) ...
    check_interval_ms: float | None = None
    # ... or this far apart while the last check found no hand (the triggers below guard the gap: a hand
    # raised in front of a face changes its skin probes or moves its landmarks)
    idle_interval_ms: float = 1000.0
    min_palm_score: float = 0.5
    min_presence: float = 0.5          # hand landmark network's hand-presence score
    max_hands: int = 4
    region_scale: float = 4.0          # palms are searched in a square this many face sizes wide around each face
    margin: float = 0.15               # the mask grows by this fraction of the hand's palm width
    finger_width: float = 0.9          # finger strokes this fraction of the spacing of the knuckles (MCPs)
    feather: float = 0.05              # edge softness (Gaussian sigma), fraction of the palm width
    # ... and at once when a face's own landmarks say something changed in front of it:
    presence_drop: float = 0.12        # its presence score falls this much below its running level
    jump: float = 0.05                 # its landmarks' median move in one frame, in face widths
    skin_change: float = 18.0          # one of its skin probes changes colour this many levels (RGB, mean abs)
                                       # more than the probes' median change (light changes move them all)
    track: bool = True                 # between checks, follow found hands by optical flow


@dataclass(slots=True)
class Palm:
    box: np.ndarray          # (4,) x0, y0, x1, y1 frame pixels
    keypoints: np.ndarray    # (7, 2) frame pixels: wrist, index MCP, middle MCP, ring MCP, pinky MCP, thumb CMC, thumb MCP
    score: float


@dataclass(slots=True)
class Hand:
    landmarks: np.ndarray    # (21, 3) frame pixels (z on the x scale)
    presence: float
    rect: RotatedRect        # the crop it was found in

    @property
    def palm_width(self) -> float:
        p = self.landmarks[:, :2]
        return float(max(np.linalg.norm(p[5] - p[17]), np.linalg.norm(p[0] - p[9]) * 0.5, 1.0))

    def box(self) -> tuple[float, float, float, float]:
        p = self.landmarks[:, :2]
        return float(p[:, 0].min()), float(p[:, 1].min()), float(p[:, 0].max()), float(p[:, 1].max())


def palm_anchors() -> np.ndarray:
    """(2016, 2) normalised anchor centres of palm_detection_full (fixed anchor size, so centres only)."""
    return ssd_anchors(PALM_SIZE, strides=(8, 16, 16, 16), per_cell=2)


class PalmDetector:
    """palm_detection_full on square regions of the frame (letterboxed, zero outside the frame)."""

    def __init__(self, runner: Callable, min_score: float = 0.5, nms_iou: float = 0.3) -> None:
        self.net = runner
        self.anchors = palm_anchors()
        self.min_score, self.nms_iou = min_score, nms_iou

    def detect_regions(self, image: np.ndarray, rects: Sequence[RotatedRect]) -> list[Palm]:
        out: list[Palm] = []
        for rect in rects:
            view, m = crop(image, rect, PALM_SIZE, border=cv2.BORDER_CONSTANT)
            reg, cls = self.net(np.multiply(view[None], np.float32(1.0 / 255.0), dtype=np.float32))
            out.extend(self.decode(reg[0], sigmoid(cls[0].reshape(-1)), cv2.invertAffineTransform(m)))
        return out

    def detect(self, image: np.ndarray) -> list[Palm]:
        h, w = image.shape[:2]
        side = float(max(h, w))
        return self.detect_regions(image, [RotatedRect(w / 2.0, h / 2.0, side, side)])

    def decode(self, reg: np.ndarray, scores: np.ndarray, to_frame: np.ndarray) -> list[Palm]:
        return [Palm(box, kp, s) for box, kp, s in
                decode_ssd(reg, scores, self.anchors, PALM_SIZE, 7, self.min_score, self.nms_iou, to_frame)]


def _transform(cx: float, cy: float, w: float, h: float, rotation: float, scale: float, shift_y: float) -> RotatedRect:
    """MediaPipe's RectTransformation (shift along the rotated y axis, square on the long side, scale)."""
    sx = -h * shift_y * math.sin(rotation)
    sy = h * shift_y * math.cos(rotation)
    side = max(w, h) * scale
    return RotatedRect(cx + sx, cy + sy, side, side, rotation)


def _up_rotation(start: np.ndarray, end: np.ndarray) -> float:
    """The rotation that turns the start -> end direction to point up on screen (MediaPipe's 90 degree target)."""
    return normalize_radians(math.pi / 2 - math.atan2(-(end[1] - start[1]), end[0] - start[0]))


def roi_from_palm(palm: Palm) -> RotatedRect:
    """The hand landmark network's crop for a palm detection."""
    rot = _up_rotation(palm.keypoints[WRIST], palm.keypoints[MIDDLE_MCP])
    x0, y0, x1, y1 = (float(v) for v in palm.box)
    return _transform((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, rot, 2.6, -0.5)


def roi_from_hand(landmarks: np.ndarray) -> RotatedRect:
    """The next crop from a hand's 21 landmarks: axis box in the hand's own rotated frame, scale 2, shift 0.1."""
    p = np.asarray(landmarks, np.float64)[:, :2]
    fingers = (((p[6] + p[14]) / 2) + p[10]) / 2
    rot = _up_rotation(p[0], fingers)
    sub = p[list(_ROI_POINTS)]
    c, s = math.cos(rot), math.sin(rot)
    centre = (sub.min(axis=0) + sub.max(axis=0)) / 2
    d = sub - centre
    local = np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c], axis=1)   # into the hand's frame
    lo, hi = local.min(axis=0), local.max(axis=0)
    mid = (lo + hi) / 2
    cx = centre[0] + mid[0] * c - mid[1] * s
    cy = centre[1] + mid[0] * s + mid[1] * c
    return _transform(float(cx), float(cy), float(hi[0] - lo[0]), float(hi[1] - lo[1]), rot, 2.0, -0.1)


class HandLandmarker:
    """hand_landmark_full on a rotated crop: 21 points in frame pixels and the hand-presence score."""

    def __init__(self, runner: Callable) -> None:
        self.net = runner

    def landmarks(self, image: np.ndarray, rect: RotatedRect) -> Hand:
        view, m = crop(image, rect, HAND_SIZE, border=cv2.BORDER_CONSTANT)
        pts, presence, _handedness, _world = self.net(np.multiply(view[None], np.float32(1.0 / 255.0), dtype=np.float32))
        pts = pts.reshape(21, 3)
        inv = cv2.invertAffineTransform(m)
        xy = pts[:, :2] @ inv[:, :2].T + inv[:, 2]
        z = pts[:, 2:3] * (rect.width / HAND_SIZE)
        return Hand(np.hstack([xy, z]).astype(np.float32), float(np.asarray(presence).reshape(-1)[0]), rect)


class HandFinder:
    """Palms in the given regions, then each palm's landmarks; hands below `min_presence` are dropped, and
    a hand found twice (two overlapping regions) is kept once."""

    def __init__(self, palms: PalmDetector, landmarker: HandLandmarker, config: HandConfig = HandConfig()) -> None:
        self.palms, self.landmarker, self.config = palms, landmarker, config

    def find(self, image: np.ndarray, regions: Sequence[RotatedRect] | None = None) -> list[Hand]:
        found = self.palms.detect(image) if regions is None else self.palms.detect_regions(image, regions)
        found.sort(key=lambda p: -p.score)
        hands: list[Hand] = []
        for palm in found:
            if len(hands) >= self.config.max_hands:
                break
            if any(_inside(palm.keypoints[WRIST], h) and _inside(palm.keypoints[MIDDLE_MCP], h) for h in hands):
                continue
            hand = self.landmarker.landmarks(image, roi_from_palm(palm))
            if hand.presence >= self.config.min_presence:
                hands.append(hand)
        return hands

    def follow(self, image: np.ndarray, hand: Hand) -> Hand | None:
        """The same hand in a new frame by the landmark network on the crop its landmarks give (MediaPipe's
        tracking); None when the network no longer sees a hand there."""
        nxt = self.landmarker.landmarks(image, roi_from_hand(hand.landmarks))
        return nxt if nxt.presence >= self.config.min_presence else None


def _inside(point: np.ndarray, hand: Hand) -> bool:
    x0, y0, x1, y1 = hand.box()
    return x0 <= point[0] <= x1 and y0 <= point[1] <= y1


def open_hand_finder(config: HandConfig = HandConfig()) -> HandFinder:
    """Both networks in LiteRT's interpreter (one thread each), from their verified unpacked files."""
    from engines.backends.interpreter import InterpreterRunner
    from engines.cards import HAND_LANDMARKS, PALM_DETECTOR

    return HandFinder(PalmDetector(InterpreterRunner(PALM_DETECTOR.read()), min_score=config.min_palm_score),
                      HandLandmarker(InterpreterRunner(HAND_LANDMARKS.read())), config)


def hand_patch(hand: Hand, box: tuple[int, int, int, int], config: HandConfig = HandConfig()) -> MaskPatch | None:
    """The hand's soft mask over the frame region `box` (x0, y0, x1, y1): the palm's outline filled and each
    bone stroked as wide as a finger, grown by a margin and feathered; None when the hand misses the box."""
    x0, y0, x1, y1 = box
    if x1 <= x0 or y1 <= y0:
        return None
    pw = hand.palm_width
    grow = config.margin * pw
    hx0, hy0, hx1, hy1 = hand.box()
    reach = grow + 3 * config.feather * pw
    if hx1 + reach < x0 or hx0 - reach > x1 or hy1 + reach < y0 or hy0 - reach > y1:
        return None
    p = hand.landmarks[:, :2]
    knuckles = float(np.mean([np.linalg.norm(p[a] - p[b]) for a, b in ((5, 9), (9, 13), (13, 17))]))
    width = max(2.0, config.finger_width * knuckles)
    mask = limb_mask((y1 - y0, x1 - x0), p - np.array([x0, y0], np.float32), [list(PALM_OUTLINE)], HAND_BONES,
                     width=width, grow=grow, soft=config.feather * pw)
    if not mask.any():
        return None
    return MaskPatch(x0, y0, mask)


def palm_regions(faces: Sequence[Face], scale: float, frame_shape: tuple[int, int]) -> list[RotatedRect]:
    """Where palms in front of these faces are searched for: a square `scale` face sizes wide around each
    face, centred half a face below it (a raised hand comes from below; the palm detector misses a hand
    whose wrist a region cuts off), or the whole frame, once, when any such square would take most of it."""
    h, w = frame_shape
    long_side = float(max(h, w))
    whole = RotatedRect(w / 2.0, h / 2.0, long_side, long_side)
    out = []
    for f in faces:
        x0, y0, x1, y1 = f.bbox
        side = max(x1 - x0, y1 - y0) * scale
        if side >= 0.75 * long_side:
            return [whole]
        out.append(RotatedRect((x0 + x1) / 2, (y0 + y1) / 2 + 0.5 * (y1 - y0), side, side))
    return out


def face_box(face: Face, frame_shape: tuple[int, int], grow: float = 0.25) -> tuple[int, int, int, int]:
    """The face's bbox grown by `grow` of its size each way, clipped to the frame, in integers: the region a
    face's stages may change (fusion's crop and the edits stay inside it)."""
    h, w = frame_shape
    x0, y0, x1, y1 = face.bbox
    gx, gy = (x1 - x0) * grow, (y1 - y0) * grow
    return (max(0, int(math.floor(x0 - gx))), max(0, int(math.floor(y0 - gy))),
            min(w, int(math.ceil(x1 + gx))), min(h, int(math.ceil(y1 + gy))))


@dataclass(slots=True)
class _FaceSignal:
    presence: float
    raw: np.ndarray
    skin: np.ndarray
    frames: int = 1


@dataclass(slots=True)
class GuardReport:
    """What the last frame's hand check did (read by the bench and tests)."""

    checked: bool = False
    reason: str = ""          # "interval", "presence", "jump", "skin" or "" (no full check)
    tracked: int = 0          # hands followed by optical flow
    hands: int = 0


Fill = Callable[[tuple[float, float, float, float]], None]
"""Makes an image's pixels in (x0, y0, x1, y1) valid before they are read (see `HandGuard.__call__`)."""


def _nothing(_box: tuple[float, float, float, float]) -> None:
    return None


class HandGuard:
    """A stream's hands in front of its faces. `__call__` gives each face (by track id) the mask of the hand
    pixels over it, or nothing. A full check (palm detector in a square around each face, then landmarks)
    runs at `check_interval_ms` while a hand is in view (`idle_interval_ms` while none is), or at once when some face's presence score drops, its landmarks jump, or
    its skin probes change colour; between checks the found hands follow by optical flow."""

    def __init__(self, finder: HandFinder | Callable[[], HandFinder], config: HandConfig = HandConfig()) -> None:
        self._finder = finder
        self.config = config
        self.hands: list[Hand] = []
        self._last_check: float | None = None
        self._signals: dict[int, _FaceSignal] = {}
        self._grey: np.ndarray | None = None
        self._grey_box: tuple[int, int, int, int] | None = None
        self.report = GuardReport()
        self.checks = 0

    @property
    def finder(self) -> HandFinder:
        if not isinstance(self._finder, HandFinder):
            self._finder = self._finder()
        return self._finder

    def close(self) -> None:
        """Gives back the networks' interpreters, if they were made."""
        if isinstance(self._finder, HandFinder):
            for net in (self._finder.palms.net, self._finder.landmarker.net):
                if hasattr(net, "close"):
                    net.close()
        self.hands = []

    def __call__(self, image: np.ndarray, faces: Sequence[Face], raw: dict[int, np.ndarray], t_ms: float,
                 fill: Fill | None = None) -> dict[int, MaskPatch]:
        """`fill`, for an `image` whose pixels are made on demand (the planes path converts only what is
        read): called with each box (x0, y0, x1, y1, frame pixels) beyond the faces before it is read, so
        a frame costs the palm squares only when a check runs and the hands' box while one is followed."""
        cfg = self.config
        fill = fill or _nothing
        self.report = GuardReport()
        if not faces:
            self.hands, self._grey, self._signals = [], None, {}
            return {}
        reason = self._trigger(image, faces, raw)
        interval = 250.0 if cfg.check_interval_ms is None else cfg.check_interval_ms
        if not self.hands:
            interval = max(interval, cfg.idle_interval_ms)
        if reason is None and (self._last_check is None or t_ms - self._last_check >= interval
                               or t_ms < self._last_check):
            reason = "interval"
        shape = image.shape[:2]
        if reason is not None:
            regions = palm_regions(faces, cfg.region_scale, shape)
            for r in regions:
                xy = r.corners()
                fill((float(xy[:, 0].min()), float(xy[:, 1].min()), float(xy[:, 0].max()), float(xy[:, 1].max())))
            found = self.finder.find(image, regions)
            boxes = [face_box(f, shape) for f in faces]
            self.hands = [h for h in found if any(hand_patch(h, b, cfg) is not None for b in boxes)]
            self._last_check = t_ms
            self.checks += 1
            self.report.checked, self.report.reason = True, reason
            self._grey = None
        elif self.hands and cfg.track:
            if self._grey_box is not None:
                fill(self._grey_box)
            self.hands = self._flow(image)
            self.report.tracked = len(self.hands)
        if cfg.track and self.hands:
            self._keep_grey(image, fill)
        else:
            self._grey = None
        self.report.hands = len(self.hands)
        out: dict[int, MaskPatch] = {}
        for face in faces:
            box = face_box(face, shape)
            patches = [p for p in (hand_patch(h, box, cfg) for h in self.hands) if p is not None]
            if patches:
                mask = patches[0].mask
                for p in patches[1:]:
                    mask = np.maximum(mask, p.mask)
                out[face.track_id] = MaskPatch(box[0], box[1], mask)
        return out

    # -- triggers: the face's own landmarks say something is in front of it -------------------------
    def _trigger(self, image: np.ndarray, faces: Sequence[Face], raw: dict[int, np.ndarray]) -> str | None:
        cfg = self.config
        reason = None
        seen = set()
        for face in faces:
            pts = raw.get(face.track_id, face.landmarks)
            skin = _probe(image, pts)
            seen.add(face.track_id)
            prev = self._signals.get(face.track_id)
            # a track's first landmarks come from the detector's box, its second from its own: that step
            # moves the points a little (and a probe on an edge changes colour); signals count from the third
            if prev is not None and prev.frames >= 2 and reason is None:
                width = max(float(np.ptp(pts[:, 0])), 1.0)
                if face.score < prev.presence - cfg.presence_drop:
                    reason = "presence"
                elif float(np.median(np.linalg.norm(pts[:, :2] - prev.raw[:, :2], axis=1))) > cfg.jump * width:
                    reason = "jump"
                else:
                    change = np.abs(skin - prev.skin).mean(axis=1)
                    if float(change.max() - np.median(change)) > cfg.skin_change:
                        reason = "skin"
            level = face.score if prev is None else max(face.score, 0.8 * prev.presence + 0.2 * face.score)
            frames = 1 if prev is None else prev.frames + 1
            self._signals[face.track_id] = _FaceSignal(level, np.array(pts[:, :2], np.float32), skin, frames)
        for tid in [t for t in self._signals if t not in seen]:
            del self._signals[tid]
        return reason

    # -- following between checks -------------------------------------------------------------------
    def _hands_box(self, shape: tuple[int, int]) -> tuple[int, int, int, int]:
        h, w = shape
        boxes = np.array([hd.box() for hd in self.hands])
        pad = max(hd.palm_width for hd in self.hands)
        return (max(0, int(boxes[:, 0].min() - pad)), max(0, int(boxes[:, 1].min() - pad)),
                min(w, int(boxes[:, 2].max() + pad) + 1), min(h, int(boxes[:, 3].max() + pad) + 1))

    def _keep_grey(self, image: np.ndarray, fill: Fill) -> None:
        box = self._hands_box(image.shape[:2])
        fill(box)
        x0, y0, x1, y1 = box
        self._grey_box = box
        self._grey = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_RGB2GRAY)

    def _flow(self, image: np.ndarray) -> list[Hand]:
        """The hands' points moved by pyramidal Lucas-Kanade between the previous frame's grey crop and the
        same region of this frame; a hand that loses most of its points is dropped (the next check finds it)."""
        if self._grey is None or self._grey_box is None:
            return self.hands
        x0, y0, x1, y1 = self._grey_box
        cur = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_RGB2GRAY)
        if cur.shape != self._grey.shape or min(cur.shape) < 8:
            return self.hands
        origin = np.array([x0, y0], np.float32)
        pts = np.concatenate([hd.landmarks[:, :2] for hd in self.hands]) - origin
        nxt, status, _err = cv2.calcOpticalFlowPyrLK(self._grey, cur, pts.reshape(-1, 1, 2).astype(np.float32), None,
                                                     winSize=(15, 15), maxLevel=2)
        nxt, status = nxt.reshape(-1, 2) + origin, status.reshape(-1).astype(bool)
        kept = []
        for i, hd in enumerate(self.hands):
            ok = status[i * 21:(i + 1) * 21]
            if ok.sum() < 11:
                continue
            moved = hd.landmarks.copy()
            step = nxt[i * 21:(i + 1) * 21] - hd.landmarks[:, :2]
            # lost points move with the hand's median motion
            step[~ok] = np.median(step[ok], axis=0)
            moved[:, :2] += step
            kept.append(Hand(moved, hd.presence, hd.rect))
        return kept


def _probe(image: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """Mean RGB of a 5 x 5 patch at each skin probe landmark, (len(SKIN_PROBES), 3) float32."""
    h, w = image.shape[:2]
    out = np.empty((len(SKIN_PROBES), 3), np.float32)
    for k, i in enumerate(SKIN_PROBES):
        x = min(max(int(landmarks[i, 0]), 2), w - 3)
        y = min(max(int(landmarks[i, 1]), 2), h - 3)
        out[k] = image[y - 2:y + 3, x - 2:x + 3].reshape(-1, 3).mean(axis=0)
    return out
