"""The face detector and landmark networks in torch, with MediaPipe's pre- and post-processing.

Crops follow MediaPipe's CPU image-to-tensor step exactly: the rotated rectangle's corners map onto the
tensor's corners (0 and size in OpenCV pixel coordinates), bilinear, edges replicated for landmarks and
zero for the detector's letterbox; landmark ROIs are the landmarks' box scaled 1.5, squared on the long
side, rotated so the eye corners (33, 263) lie level. Same inputs therefore give LiteRT's outputs up to
float rounding, and any device or batch size works.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import cv2
import numpy as np
import torch

from engines.cards import MEMBER_CARDS, ModelError
from engines.landmarks.tflite_graph import TFLiteGraph, load_graph

DETECTOR_MEMBER = "face_detector.tflite"
LANDMARKS_MEMBER = "face_landmarks_detector.tflite"
BLENDSHAPES_MEMBER = "face_blendshapes.tflite"
DETECTOR_SIZE = 128
FULL_RANGE_SIZE = 192
LANDMARKS_SIZE = 256
ROI_SCALE = 1.5


def read_task_member(member: str) -> bytes:
    """One .tflite file out of the verified .task bundle, checked against its own card's sha256."""
    if member not in MEMBER_CARDS:
        raise ModelError(f"no model card for {member!r}; known: {', '.join(MEMBER_CARDS)}")
    return MEMBER_CARDS[member].read()


@lru_cache(maxsize=4)
def graph_bytes(member: str) -> bytes:
    return read_task_member(member)


def load_network(member: str, device: str | torch.device = "cpu") -> TFLiteGraph:
    return load_graph(graph_bytes(member)).to(device)


@dataclass(frozen=True, slots=True)
class RotatedRect:
    """A square-or-not crop region in frame pixels: centre, size and rotation (radians, clockwise on screen)."""

    cx: float
    cy: float
    width: float
    height: float
    rotation: float = 0.0

    def corners(self) -> np.ndarray:
        """(4, 2) float32 corners in frame pixels, in OpenCV's boxPoints order."""
        return cv2.boxPoints(((self.cx, self.cy), (self.width, self.height), math.degrees(self.rotation)))

    def matrix(self, out_w: int, out_h: int, corners: np.ndarray | None = None) -> np.ndarray:
        """2x3 affine taking frame pixels to tensor pixels (corners to corners, as MediaPipe does)."""
        box = self.corners() if corners is None else corners
        dst = np.array([[0, out_h], [0, 0], [out_w, 0]], np.float32)
        return cv2.getAffineTransform(box[:3].astype(np.float32), dst)


def normalize_radians(a: float) -> float:
    return a - 2 * math.pi * math.floor((a + math.pi) / (2 * math.pi))


def roi_from_landmarks(landmarks: np.ndarray) -> RotatedRect:
    """The next frame's landmark ROI from this frame's landmarks (MediaPipe's tracking rule)."""
    p = np.asarray(landmarks, np.float64)[:, :2]
    x0, y0 = p[33]
    x1, y1 = p[263]
    rotation = normalize_radians(-math.atan2(-(y1 - y0), x1 - x0))
    lo, hi = p.min(axis=0), p.max(axis=0)
    size = max(hi[0] - lo[0], hi[1] - lo[1]) * ROI_SCALE
    return RotatedRect(float((lo[0] + hi[0]) / 2), float((lo[1] + hi[1]) / 2), size, size, rotation)


def roi_from_detection(box: np.ndarray, keypoints: np.ndarray) -> RotatedRect:
    """Landmark ROI from a detector box (x0, y0, x1, y1) and its eye keypoints (MediaPipe's rule)."""
    (x0, y0), (x1, y1) = keypoints[0], keypoints[1]
    rotation = normalize_radians(-math.atan2(-(y1 - y0), x1 - x0))
    w, h = box[2] - box[0], box[3] - box[1]
    size = max(w, h) * ROI_SCALE
    return RotatedRect(float((box[0] + box[2]) / 2), float((box[1] + box[3]) / 2), float(size), float(size), rotation)


def crop(image: np.ndarray, rect: RotatedRect, size: int, border: int = cv2.BORDER_REPLICATE) -> tuple[np.ndarray, np.ndarray]:
    """(size x size x 3 uint8 crop, the 2x3 frame -> crop matrix).

    A rotated crop reads the frame along slanted rows, which defeats the cache's prefetch. So the
    rectangle's bounding region (plus the bilinear taps' margin) is first copied out in order, and the warp
    reads that copy. The region is clipped to
    the frame, so replicated edges stay the frame's own; the only change is the shifted matrix's
    fixed-point rounding (a few pixels one level apart)."""
    corners = rect.corners()
    m = rect.matrix(size, size, corners)
    src, x0, y0 = _region(image, corners)
    shifted = m.copy()
    shifted[:, 2] += m[:, 0] * x0 + m[:, 1] * y0      # frame pixels -> the region's pixels -> the crop
    out = cv2.warpAffine(src, shifted, (size, size), flags=cv2.INTER_LINEAR, borderMode=border, borderValue=0)
    return out, m


def _region(image: np.ndarray, box: np.ndarray, margin: int = 2) -> tuple[np.ndarray, int, int]:
    """(pixels, x0, y0): the part of the frame a crop with these corners reads, copied, and its top-left
    corner; the frame itself at (0, 0) when the rectangle lies off it (edges then replicate from the whole
    frame) or covers most of it."""
    h, w = image.shape[:2]
    x0 = max(int(math.floor(float(box[:, 0].min()))) - margin, 0)
    y0 = max(int(math.floor(float(box[:, 1].min()))) - margin, 0)
    x1 = min(int(math.ceil(float(box[:, 0].max()))) + margin + 1, w)
    y1 = min(int(math.ceil(float(box[:, 1].max()))) + margin + 1, h)
    if x1 - x0 <= margin or y1 - y0 <= margin or (x1 - x0) * (y1 - y0) >= w * h // 2:
        return image, 0, 0
    return np.ascontiguousarray(image[y0:y1, x0:x1]), x0, y0


def _takes_numpy(net: Callable) -> bool:
    """Runners outside torch (LiteRT's interpreter) take and give NumPy arrays."""
    return bool(getattr(net, "takes_numpy", False))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(x, -80.0, 80.0).astype(np.float32)))).astype(np.float32)


@dataclass(slots=True)
class LandmarkResult:
    landmarks: np.ndarray   # (478, 3) frame pixels (z on the x scale)
    presence: float
    rect: RotatedRect


class LandmarkNet:
    """The 478-point landmark network. `run` takes a batch of crops; `landmarks` does crop -> frame.
    `graph` replaces the torch module with another runner of the same network (a TensorRT engine)."""

    def __init__(self, device: str | torch.device = "cpu", graph: Callable | None = None) -> None:
        self.device = torch.device(device)
        self.net = graph if graph is not None else load_network(LANDMARKS_MEMBER, self.device)

    @torch.inference_mode()
    def run(self, crops: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """crops (N, 256, 256, 3) uint8 RGB -> (N, 478, 3) crop-pixel landmarks, (N,) presence in [0, 1]."""
        if _takes_numpy(self.net) and isinstance(crops, np.ndarray):
            lms, presence_logit, _ = self.net(np.multiply(crops, np.float32(1.0 / 255.0), dtype=np.float32))
            return lms.reshape(-1, 478, 3), sigmoid(presence_logit.reshape(-1))
        x = torch.as_tensor(crops, device=self.device).float().div_(255.0)
        lms, presence_logit, _ = self.net(x)  # the third output is not the presence (it is ~1 on non-faces)
        presence = torch.sigmoid(presence_logit.reshape(-1))
        return lms.reshape(-1, 478, 3).cpu().numpy(), presence.cpu().numpy()

    def landmarks(self, image: np.ndarray, rects: list[RotatedRect]) -> list[LandmarkResult]:
        if not rects:
            return []
        crops, mats = zip(*(crop(image, r, LANDMARKS_SIZE) for r in rects))
        raw, presence = self.run(np.stack(crops))
        out = []
        for pts, p, m, r in zip(raw, presence, mats, rects):
            inv = cv2.invertAffineTransform(m)
            xy = pts[:, :2] @ inv[:, :2].T + inv[:, 2]
            z = pts[:, 2:3] * (r.width / LANDMARKS_SIZE)
            out.append(LandmarkResult(np.hstack([xy, z]).astype(np.float32), float(p), r))
        return out


# The blendshapes network reads these 146 of the 478 landmarks, x and y in frame pixels, in this order
# (the model's input contract, as MediaPipe's face_blendshapes_graph.cc feeds it).
BLENDSHAPE_LANDMARKS = (
    0, 1, 4, 5, 6, 7, 8, 10, 13, 14, 17, 21, 33, 37, 39, 40, 46, 52, 53, 54, 55, 58, 61, 63, 65, 66, 67, 70,
    78, 80, 81, 82, 84, 87, 88, 91, 93, 95, 103, 105, 107, 109, 127, 132, 133, 136, 144, 145, 146, 148, 149,
    150, 152, 153, 154, 155, 157, 158, 159, 160, 161, 162, 163, 168, 172, 173, 176, 178, 181, 185, 191, 195,
    197, 234, 246, 249, 251, 263, 267, 269, 270, 276, 282, 283, 284, 285, 288, 291, 293, 295, 296, 297, 300,
    308, 310, 311, 312, 314, 317, 318, 321, 323, 324, 332, 334, 336, 338, 356, 361, 362, 365, 373, 374, 375,
    377, 378, 379, 380, 381, 382, 384, 385, 386, 387, 388, 389, 390, 397, 398, 400, 402, 405, 409, 415, 454,
    466, 468, 469, 470, 471, 472, 473, 474, 475, 476, 477,
)
# its 52 outputs, in order (ARKit names, as MediaPipe reports them)
BLENDSHAPE_NAMES = (
    "_neutral", "browDownLeft", "browDownRight", "browInnerUp", "browOuterUpLeft", "browOuterUpRight",
    "cheekPuff", "cheekSquintLeft", "cheekSquintRight", "eyeBlinkLeft", "eyeBlinkRight", "eyeLookDownLeft",
    "eyeLookDownRight", "eyeLookInLeft", "eyeLookInRight", "eyeLookOutLeft", "eyeLookOutRight", "eyeLookUpLeft",
    "eyeLookUpRight", "eyeSquintLeft", "eyeSquintRight", "eyeWideLeft", "eyeWideRight", "jawForward", "jawLeft",
    "jawOpen", "jawRight", "mouthClose", "mouthDimpleLeft", "mouthDimpleRight", "mouthFrownLeft",
    "mouthFrownRight", "mouthFunnel", "mouthLeft", "mouthLowerDownLeft", "mouthLowerDownRight", "mouthPressLeft",
    "mouthPressRight", "mouthPucker", "mouthRight", "mouthRollLower", "mouthRollUpper", "mouthShrugLower",
    "mouthShrugUpper", "mouthSmileLeft", "mouthSmileRight", "mouthStretchLeft", "mouthStretchRight",
    "mouthUpperUpLeft", "mouthUpperUpRight", "noseSneerLeft", "noseSneerRight",
)


class BlendshapeNet:
    """The 52-blendshape network (an MLP-Mixer over 146 landmarks), run in TFLite's own layout."""

    def __init__(self, device: str | torch.device = "cpu", graph: Callable | None = None) -> None:
        """`graph` replaces the torch module with another runner of the same network (LiteRT's interpreter)."""
        self.device = torch.device(device)
        if graph is None:
            from engines.landmarks.tflite_exact import load_exact_graph

            graph = load_exact_graph(read_task_member(BLENDSHAPES_MEMBER)).to(self.device)
        self.net = graph
        self._subset = list(BLENDSHAPE_LANDMARKS)

    @torch.inference_mode()
    def __call__(self, landmarks: np.ndarray) -> dict[str, float]:
        """(478, 2|3) frame-pixel landmarks -> name -> score in [0, 1]."""
        x = np.ascontiguousarray(landmarks[self._subset, :2], np.float32)
        if _takes_numpy(self.net):
            scores = np.asarray(self.net(x[None])[0], np.float32).reshape(-1)
        else:
            scores = self.net(torch.as_tensor(x, device=self.device)[None])[0].float().cpu().numpy()
        return {name: float(v) for name, v in zip(BLENDSHAPE_NAMES, scores)}


def ssd_anchors(size: int = DETECTOR_SIZE, strides=(8, 16, 16, 16), per_cell: int = 2) -> np.ndarray:
    """(A, 2) anchor centres, normalised: `per_cell` anchors per cell per layer (896 for BlazeFace short
    range; 2304 for full range: stride 4, one per cell)."""
    centres = []
    i = 0
    while i < len(strides):
        j, count = i, 0
        while j < len(strides) and strides[j] == strides[i]:  # layers sharing a stride share a grid
            count += per_cell
            j += 1
        n = int(math.ceil(size / strides[i]))
        for y in range(n):
            for x in range(n):
                centres.extend([((x + 0.5) / n, (y + 0.5) / n)] * count)
        i = j
    return np.array(centres, np.float32)


@dataclass(slots=True)
class Detection:
    box: np.ndarray        # (4,) x0, y0, x1, y1 frame pixels
    keypoints: np.ndarray  # (6, 2) right eye, left eye, nose tip, mouth, right ear, left ear (frame pixels)
    score: float


class FaceDetectorNet:
    """BlazeFace on a letterboxed square view of the frame (the whole frame, or a tile of it).

    The short-range model (128 x 128, the bundle's) sees faces that fill a good part of its view; the
    full-range one (192 x 192, `full_range()`) sees faces down to about a twentieth of it. Both decode
    alike: box and 6 keypoints relative to SSD anchors, in input pixels."""

    def __init__(self, device: str | torch.device = "cpu", min_score: float = 0.5, nms_iou: float = 0.3,
                 graph: Callable | None = None, size: int = DETECTOR_SIZE, anchors: np.ndarray | None = None) -> None:
        self.device = torch.device(device)
        self.net = graph if graph is not None else load_network(DETECTOR_MEMBER, self.device)
        self.size = int(size)
        self.anchors = ssd_anchors(self.size) if anchors is None else anchors
        self.min_score = min_score
        self.nms_iou = nms_iou

    @classmethod
    def full_range(cls, graph: Callable, min_score: float = 0.5, nms_iou: float = 0.3) -> "FaceDetectorNet":
        """The full-range detector (MediaPipe's face_detection_full_range: 192 x 192, one anchor per cell
        of a 48 x 48 grid); `graph` runs it (LiteRT's interpreter: the torch port lacks its sparse weights)."""
        return cls("cpu", min_score=min_score, nms_iou=nms_iou, graph=graph, size=FULL_RANGE_SIZE,
                   anchors=ssd_anchors(FULL_RANGE_SIZE, strides=(4,), per_cell=1))

    def letterbox(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = image.shape[:2]
        side = float(max(h, w))
        return self.view(image, RotatedRect(w / 2.0, h / 2.0, side, side, 0.0))

    def view(self, image: np.ndarray, rect: RotatedRect) -> tuple[np.ndarray, np.ndarray]:
        """The network's input for one square region of the frame (zero outside the frame), and its matrix."""
        return crop(image, rect, self.size, border=cv2.BORDER_CONSTANT)

    @torch.inference_mode()
    def raw(self, tensors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, S, S, 3) uint8 -> regressors (N, A, 16), scores (N, A) after the sigmoid."""
        if _takes_numpy(self.net):
            x = np.multiply(tensors, np.float32(1.0 / 127.5), dtype=np.float32)
            reg, cls = self.net(np.subtract(x, np.float32(1.0), out=x))
            return reg, sigmoid(cls).reshape(cls.shape[0], -1)
        x = torch.as_tensor(tensors, device=self.device).float().div_(127.5).sub_(1.0)
        reg, cls = self.net(x)
        return reg.cpu().numpy(), torch.sigmoid(cls.clamp(-100, 100)).reshape(cls.shape[0], -1).cpu().numpy()

    def detect(self, image: np.ndarray) -> list[Detection]:
        tensor, m = self.letterbox(image)
        reg, scores = self.raw(tensor[None])
        return self.decode(reg[0], scores[0], cv2.invertAffineTransform(m))

    def detect_regions(self, image: np.ndarray, rects: list[RotatedRect]) -> list[Detection]:
        """Detections from each region, in frame pixels (not merged across regions)."""
        if not rects:
            return []
        views, mats = zip(*(self.view(image, r) for r in rects))
        reg, scores = self.raw(np.stack(views))
        out: list[Detection] = []
        for i, m in enumerate(mats):
            out.extend(self.decode(reg[i], scores[i], cv2.invertAffineTransform(m)))
        return out

    def decode(self, reg: np.ndarray, scores: np.ndarray, to_frame: np.ndarray) -> list[Detection]:
        return [Detection(box, kp, s) for box, kp, s in
                decode_ssd(reg, scores, self.anchors, self.size, 6, self.min_score, self.nms_iou, to_frame)]


def decode_ssd(reg: np.ndarray, scores: np.ndarray, anchors: np.ndarray, size: int, keypoints: int,
               min_score: float, nms_iou: float, to_frame: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """MediaPipe's SSD detectors (faces, palms, bodies) decoded alike: for each anchor (normalised centres,
    `anchors`) scoring `min_score` or more, a box (centre offset, width, height) and `keypoints` points
    in input pixels of a `size`-px square, merged by weighted NMS, then taken to the frame by `to_frame`
    (2 x 3): [(box x0, y0, x1, y1 float32, (K, 2) float32 keypoints, score)], best first."""
    keep = np.nonzero(scores >= min_score)[0]
    if keep.size == 0:
        return []
    a = anchors[keep] * size
    r = reg[keep]
    cx, cy = r[:, 0] + a[:, 0], r[:, 1] + a[:, 1]
    w, h = r[:, 2], r[:, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    kps = r[:, 4:4 + 2 * keypoints].reshape(-1, keypoints, 2) + a[:, None, :]
    out = []
    for box, kp, s in weighted_nms(boxes, kps, scores[keep], nms_iou):
        corners = np.array([[box[0], box[1]], [box[2], box[3]]]) @ to_frame[:, :2].T + to_frame[:, 2]
        kp_f = kp @ to_frame[:, :2].T + to_frame[:, 2]
        out.append((corners.reshape(-1).astype(np.float32), kp_f.astype(np.float32), float(s)))
    return out


def _iou_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    ix = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = ix * iy
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    return inter / np.maximum(area(box) + area(boxes) - inter, 1e-9)


def weighted_nms(boxes, kps, scores, iou_threshold):
    """MediaPipe's WEIGHTED non-max suppression: overlapping candidates are averaged by score."""
    order = np.argsort(-scores)
    boxes, kps, scores = boxes[order], kps[order], scores[order]
    remaining = np.arange(len(scores))
    out = []
    while remaining.size:
        ious = _iou_many(boxes[remaining[0]], boxes[remaining])
        group = remaining[ious > iou_threshold]
        if group.size == 0:
            group = remaining[:1]
        wts = scores[group][:, None]
        box = (boxes[group] * wts).sum(0) / wts.sum()
        kp = (kps[group] * wts[:, :, None]).sum(0) / wts.sum()
        out.append((box, kp, float(scores[remaining[0]])))
        remaining = remaining[ious <= iou_threshold]
    return out
