"""Identity embeddings: dlib's ResNet (128-d, Euclidean distance; same person below about 0.6).

Tens of ms a face on the CPU (docs/faces.md), so it runs on key frames (source registration, filters, quality metrics),
never on every frame. dlib's own 5-point predictor places the 150 x 150 chip inside the face box the
landmarker gave, so the embedder sees the chips it was trained on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engines.cards import DLIB_FACE_RECOGNITION, DLIB_SHAPE_5
from engines.faces import Face

SAME_PERSON_DISTANCE = 0.6
EMBEDDING_DIM = 128


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    num_jitters: int = 1        # >1 averages over jittered chips: steadier, that many times slower
    chip_padding: float = 0.25  # dlib's default context around the aligned face
    min_face_px: int = 20       # smaller faces give meaningless embeddings and are refused


class IdentityError(ValueError):
    """The face cannot be embedded (too small, outside the image)."""


class IdentityEmbedder:
    """Thread-safe; one instance may be shared by all sessions."""

    def __init__(self, config: IdentityConfig = IdentityConfig()) -> None:
        import dlib

        self.config = config
        self._dlib = dlib
        self._shape = dlib.shape_predictor(str(DLIB_SHAPE_5.path()))
        self._net = dlib.face_recognition_model_v1(str(DLIB_FACE_RECOGNITION.path()))
        self._lock = threading.Lock()

    def _rect(self, image: np.ndarray, face: Face):
        h, w = image.shape[:2]
        x0, y0, x1, y1 = face.bbox
        if x1 - x0 < self.config.min_face_px or y1 - y0 < self.config.min_face_px:
            raise IdentityError(f"face {x1 - x0:.0f}x{y1 - y0:.0f} px is below {self.config.min_face_px} px")
        if x1 <= 0 or y1 <= 0 or x0 >= w or y0 >= h:
            raise IdentityError("face box lies outside the image")
        return self._dlib.rectangle(int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1)))

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        """128-d float32 embedding of `face` in the RGB uint8 `image`."""
        img = _rgb(image)
        rect = self._rect(img, face)
        with self._lock:
            shape = self._shape(img, rect)
            vec = self._net.compute_face_descriptor(img, shape, self.config.num_jitters, self.config.chip_padding)
        return np.asarray(vec, dtype=np.float32)

    def embed_many(self, items: Sequence[tuple[np.ndarray, Face]]) -> list[np.ndarray | IdentityError]:
        """Embeddings of many (image, face) pairs in one batched network call (dlib's batch descriptor:
        cheaper per face where dlib runs on a GPU; on the CPU about the same as one call each). A face
        that cannot be embedded gets its IdentityError in its place; the others are still embedded."""
        out: list[np.ndarray | IdentityError | None] = [None] * len(items)
        imgs, shapes, where = [], [], []
        with self._lock:
            for i, (image, face) in enumerate(items):
                img = _rgb(image)
                try:
                    rect = self._rect(img, face)
                except IdentityError as exc:
                    out[i] = exc
                    continue
                dets = self._dlib.full_object_detections()
                dets.append(self._shape(img, rect))
                imgs.append(img)
                shapes.append(dets)
                where.append(i)
            if imgs:
                vecs = self._net.compute_face_descriptor(imgs, shapes, self.config.num_jitters, self.config.chip_padding)
                for i, per_image in zip(where, vecs):
                    out[i] = np.asarray(per_image[0], dtype=np.float32)
        return out  # type: ignore[return-value]

    def chip(self, image: np.ndarray, face: Face, size: int = 150) -> np.ndarray:
        """The aligned chip the network sees (for drawing and debugging)."""
        img = _rgb(image)
        rect = self._rect(img, face)
        with self._lock:
            shape = self._shape(img, rect)
        return np.asarray(self._dlib.get_face_chip(img, shape, size=size, padding=self.config.chip_padding))


def _rgb(image: np.ndarray) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise IdentityError(f"expected H x W x 3 uint8 RGB, got {getattr(image, 'dtype', type(image))} {getattr(image, 'shape', '')}")
    return np.ascontiguousarray(image)


def distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))


def same_person(a: np.ndarray, b: np.ndarray, threshold: float = SAME_PERSON_DISTANCE) -> bool:
    return distance(a, b) < threshold


def nearest(query: np.ndarray, gallery: dict[str, np.ndarray]) -> tuple[str | None, float]:
    """The gallery key closest to `query` and its distance (None, inf for an empty gallery)."""
    best, best_d = None, float("inf")
    for key, vec in gallery.items():
        d = distance(query, vec)
        if d < best_d:
            best, best_d = key, d
    return best, best_d
