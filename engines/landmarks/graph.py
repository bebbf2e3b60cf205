"""The face tracking graph: detector -> ROI -> landmark network -> next ROI, behind the same
`detect(image, timestamp_ms) -> list[Face]` seam as MediaPipeLandmarker. It is runtime-agnostic: the
networks run in torch (CPU or CUDA) by default, and LiteRT's interpreter or TensorRT engines plug in as
runners of the same networks (`network_factory`).

VIDEO mode follows MediaPipe's rule: each face's next ROI comes from its landmarks, and the detector
runs only while fewer than `max_faces` faces are followed (then at most every `search_interval_ms` once
one face is followed, its passes spread over frames: engines.landmarks.search). With `still_change` on,
a followed face whose box still looks as it did keeps its last landmarks instead of running the network
(engines.landmarks.still). Blendshapes come from the blendshapes network; `transform` and `pose` from
MediaPipe's perspective geometry pipeline, reproduced in engines.landmarks.geometry.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from engines.faces import Face, LandmarkerConfig
from engines.landmarks.geometry import face_transform, pose_of
from engines.landmarks.search import FaceSearch
from engines.landmarks.still import Box, change, face_box, settled, signature
from engines.tracking import overlap_of_smaller
from engines.landmarks.networks import (DETECTOR_MEMBER, LANDMARKS_MEMBER, ROI_SCALE, RotatedRect, BlendshapeNet,
                                         FaceDetectorNet, LandmarkNet, roi_from_detection, roi_from_landmarks)


REFINE_BELOW_PX = 72.0    # IMAGE mode: faces narrower than this get a second landmark pass (not the
                          # fixtures at full size: MediaPipe's IMAGE mode, the reference, runs one pass)
NESTED = 0.5              # a box with this share of its area inside another face's box is that face

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    """A followed face's last computed landmarks (as the Face they made) and its box's signature then."""

    face: Face
    box: Box
    signature: np.ndarray
    run: int = 0     # frames in a row it has been kept since


class LandmarkGraph:
    def __init__(self, config: LandmarkerConfig = LandmarkerConfig(), device: str | torch.device = "cpu",
                 network_factory: Callable[[str], Callable] | None = None,
                 blendshapes_graph: Callable | None = None,
                 full_range_runner: Callable[[bytes], Callable] | None = None) -> None:
        """network_factory(member) -> runner: how the detector and landmark networks run (default: the torch
        modules); blendshapes_graph: how the blendshapes network runs (default: its exact torch port), used
        while `config.blendshapes` is on."""
        self.config = config
        self._full_runner = full_range_runner   # how the full-range detector runs (LiteRT's interpreter); None: no wide search
        self.device = torch.device(device)
        make = network_factory or (lambda member: None)
        self.detector = FaceDetectorNet(self.device, min_score=config.min_detection_confidence,
                                          graph=make(DETECTOR_MEMBER))
        self.search = FaceSearch(self.detector, self._full_range if full_range_runner else None, config.search)
        self.net = LandmarkNet(self.device, graph=make(LANDMARKS_MEMBER))
        self.blendshapes = BlendshapeNet(self.device, graph=blendshapes_graph) if config.blendshapes else None
        self._rois: list[RotatedRect] = []
        self._held: list[_Held | None] = []      # beside _rois: what each followed face may keep
        self.landmark_runs = {"fresh": 0, "kept": 0}   # faces the network ran on, faces that kept theirs
        self._searched_ms: float | None = None   # stream time of the last detector run
        self._wide_ms: float | None = None       # ... and of the last wide one
        self._passes: list[str] = []             # a search spread over frames: its passes still to run
        self._pending: Future | None = None      # a pass running on the search thread (config.search.background)
        self._read: tuple[int, bool] | None = None   # what `reads` promised for a frame: (its time, the whole frame)
        self._searcher: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def detect(self, image: np.ndarray, timestamp_ms: int = 0) -> list[Face]:
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"landmarker expects H x W x 3 uint8 RGB, got {getattr(image, 'dtype', type(image))} "
                             f"{getattr(image, 'shape', '')}")
        cfg = self.config
        with self._lock:
            rois = list(self._rois) if cfg.mode == "video" else []
            min_conf = cfg.min_tracking_confidence
            found = self._finished_pass()           # a background pass that ended since the last frame
            read, self._read = self._read, None
            crops_only = read is not None and read[0] == timestamp_ms and not read[1]   # `reads` gave crops only
            if len(rois) < cfg.max_faces and rois and cfg.mode == "video" and cfg.search.spread:
                if self._pending is None and not crops_only:   # following: a pass a frame
                    if not self._passes and self._search_due(rois, timestamp_ms):
                        self._passes = self.search.passes(image, self._start_search(timestamp_ms))
                    if self._passes:
                        name = self._passes.pop(0)
                        if cfg.search.background:
                            self._pending = self._search_thread().submit(self.search.find_pass, image, name)
                        else:
                            found = self.search.find_pass(image, name)
            elif len(rois) < cfg.max_faces and self._search_due(rois, timestamp_ms):
                self._passes = []
                found = (found or []) + (self._finished_pass(wait=True) or [])   # the search is not shared between threads
                found += self.search.find(image, wide=self._start_search(timestamp_ms), all_tiles=cfg.mode != "video")
            if found:
                boxes = [_rect_box(r) for r in rois]
                for d in found:
                    if len(rois) >= cfg.max_faces:
                        break
                    # a newcomer lies mostly outside every face already held: a tile's view of part of a
                    # close face (an eye and brow, say) is found as a face of its own inside it
                    if all(overlap_of_smaller(d.box, b) < NESTED for b in boxes):
                        rois.append(roi_from_detection(d.box, d.keypoints))
                        boxes.append(d.box)
            held = list(self._held) if cfg.mode == "video" else []
            held += [None] * (len(rois) - len(held))
            kept = [h if h is not None and self._still(image, h) else None for h in held]
            fresh = self.net.landmarks(image, [r for r, k in zip(rois, kept) if k is None])
            if cfg.mode != "video":
                fresh = self._refine_small(image, fresh)
            fresh_iter = iter(fresh)
            faces, keep, next_held = [], [], []
            for k in kept:
                if k is not None:       # the box still looks the same: the same face, one frame on
                    k.run += 1
                    face, res = k.face, None
                else:
                    res = next(fresh_iter)
                    if res.presence < (min_conf if cfg.mode == "video" else cfg.min_presence_confidence):
                        continue
                    face = self._face(image, res)
                if any(overlap_of_smaller(face.bbox, f.bbox) >= NESTED for f in faces):   # two crops on one face
                    continue
                roi = roi_from_landmarks(face.landmarks)
                faces.append(face)
                keep.append(roi)
                next_held.append(k if res is None else self._hold(image, face, res.rect, roi))
            self.landmark_runs["fresh"] += len(fresh)
            self.landmark_runs["kept"] += sum(k is not None for k in kept)
            self._rois = keep if cfg.mode == "video" else []
            self._held = next_held if cfg.mode == "video" else []
        return faces

    def _search_thread(self) -> ThreadPoolExecutor:
        if self._searcher is None:
            self._searcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="face-search")
        return self._searcher

    def _finished_pass(self, wait: bool = False) -> list | None:
        """The detections of the background pass, once it has ended (`wait`: waiting for it); None while it
        runs or when none was started. A pass that failed finds nothing, said in the log."""
        pending = self._pending
        if pending is None or not (wait or pending.done()):
            return None
        self._pending = None
        try:
            return pending.result()
        except Exception as exc:   # the faces already followed go on; the next search looks again
            log.warning("face search pass failed: %s", exc, exc_info=True)
            return None

    def _face(self, image: np.ndarray, res) -> Face:
        pts = res.landmarks
        lo, hi = pts[:, :2].min(axis=0), pts[:, :2].max(axis=0)
        box = (float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1]))
        shapes = self.blendshapes(pts) if self.blendshapes is not None else {}
        transform = face_transform(pts, (image.shape[1], image.shape[0])).astype(np.float32)
        return Face(landmarks=pts, bbox=box, blendshapes=shapes, pose=pose_of(transform), transform=transform,
                    score=res.presence)

    def _hold(self, image: np.ndarray, face: Face, rect: RotatedRect, next_rect: RotatedRect) -> _Held | None:
        """What a freshly computed face may keep on later frames: None when reuse is off, the box is too
        small, or the landmarks have not settled (`rect`, the region they came from, against `next_rect`,
        the one they give)."""
        if self.config.still_change <= 0 or self.config.mode != "video":
            return None
        if not settled(rect, next_rect):
            return None
        box = face_box(face.landmarks, image.shape)
        return _Held(face, box, signature(image, box)) if box is not None else None

    def _still(self, image: np.ndarray, held: _Held) -> bool:
        cfg = self.config
        if held.run >= cfg.still_max_run:
            return False
        return change(signature(image, held.box), held.signature) < cfg.still_change

    def reads(self, timestamp_ms: int) -> list[tuple[float, float, float, float]] | None:
        """The frame boxes (x0, y0, x1, y1) the next `detect` at `timestamp_ms` reads, or None when it
        reads the whole frame (a detector search is due, or IMAGE mode). A caller that holds its frame in
        another form converts only these to RGB; the landmark crops read each ROI's bounding box plus
        two pixels for the bilinear taps (networks.crop), given here with four."""
        with self._lock:
            rois = list(self._rois)
            cfg = self.config   # a search due, or a spread search's next pass: the whole frame
            # a background pass still running starts no other: this frame's crops are all it reads
            starts = not rois or not cfg.search.spread or self._pending is None or self._pending.done()
            whole = cfg.mode != "video" or (len(rois) < cfg.max_faces and starts
                                            and (bool(self._passes) or self._search_due(rois, timestamp_ms)))
            self._read = (timestamp_ms, whole)
            if whole:
                return None
        out = []
        for r in rois:
            c = r.corners()
            out.append((float(c[:, 0].min()) - 4, float(c[:, 1].min()) - 4, float(c[:, 0].max()) + 5, float(c[:, 1].max()) + 5))
        return out

    def _start_search(self, timestamp_ms: int) -> bool:
        """Notes a search starting now; whether its wide passes are due too."""
        self._searched_ms = float(timestamp_ms)
        wide = self._wide_due(timestamp_ms)
        if wide:
            self._wide_ms = float(timestamp_ms)
        return wide

    def _search_due(self, rois: list[RotatedRect], timestamp_ms: int) -> bool:
        """The detector runs on every frame while no face is followed; with one followed, at most every
        `search_interval_ms`, so new faces still appear within that time while a single face costs no
        detector run on most frames. A clock that runs backwards (a new stream) searches at once."""
        if not rois or self.config.mode != "video" or self._searched_ms is None:
            return True
        since = float(timestamp_ms) - self._searched_ms
        return since >= self.config.search_interval_ms or since < 0

    def _refine_small(self, image: np.ndarray, results: list) -> list:
        """IMAGE mode: a face narrower than REFINE_BELOW_PX is cropped again from its own landmarks and
        run once more. A detector box seeds the crop less well the fewer pixels it had (a 40 px face landed
        3.9 % of its width off, mean, from one pass); a stream gets the same second look on its next frame."""
        small = [i for i, r in enumerate(results)
                 if np.ptp(r.landmarks[:, 0]) < REFINE_BELOW_PX and r.presence >= self.config.min_presence_confidence]
        if not small:
            return results
        again = self.net.landmarks(image, [roi_from_landmarks(results[i].landmarks) for i in small])
        out = list(results)
        for i, r in zip(small, again):
            out[i] = r
        return out

    def _wide_due(self, timestamp_ms: int) -> bool:
        """The full-range passes run at most every `search_interval_ms` (every call in IMAGE mode), even
        while no face is followed and the short-range detector runs on every frame."""
        if self.config.mode != "video" or self._wide_ms is None:
            return True
        since = float(timestamp_ms) - self._wide_ms
        return since >= self.config.search_interval_ms or since < 0

    def _full_range(self) -> FaceDetectorNet:
        """The full-range detector, made on the first wide search. It runs in LiteRT's interpreter on every
        backend (its sparse weights and ops are outside the torch port); it runs rarely, on the CPU."""
        from engines.cards import FACE_DETECTOR_FULL_RANGE

        return FaceDetectorNet.full_range(self._full_runner(FACE_DETECTOR_FULL_RANGE.read()),
                                          min_score=self.config.min_detection_confidence)

    def close(self) -> None:
        with self._lock:
            self._finished_pass(wait=True)
            if self._searcher is not None:
                self._searcher.shutdown(wait=True)
                self._searcher = None
            self._rois = []
            self._held = []
            self._passes = []
            self._searched_ms = None
            self._wide_ms = None
            full = self.search._full if isinstance(self.search._full, FaceDetectorNet) else None
            for runner in (self.detector.net, self.net.net, getattr(self.blendshapes, "net", None),
                           getattr(full, "net", None)):
                if hasattr(runner, "close"):   # runners that hold threads (LiteRT's, spread over cores)
                    runner.close()


def _rect_box(r: RotatedRect) -> np.ndarray:
    """The face box inside a landmark ROI (the ROI is the face scaled by ROI_SCALE)."""
    half = r.width / ROI_SCALE / 2.0
    return np.array([r.cx - half, r.cy - half, r.cx + half, r.cy + half], np.float32)
