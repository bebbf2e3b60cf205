"""Identity embeddings: dlib's ResNet (128-d, Euclidean distance; same person below about 0.6).

About 70 ms a face on CPU, so it runs on key frames (source registration, filters, quality metrics),
never on every frame.
"""

from __future__ import annotations

import threading

import numpy as np

from engines.cards import DLIB_FACE_RECOGNITION, DLIB_SHAPE_5
from engines.faces import Face

SAME_PERSON_DISTANCE = 0.6


class IdentityEmbedder:
    def __init__(self) -> None:
        import dlib

        self._dlib = dlib
        self._shape = dlib.shape_predictor(str(DLIB_SHAPE_5.path()))
        self._net = dlib.face_recognition_model_v1(str(DLIB_FACE_RECOGNITION.path()))
        self._lock = threading.Lock()

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        """128-d embedding of `face` in the RGB uint8 `image`."""
        dlib = self._dlib
        x0, y0, x1, y1 = face.bbox
        rect = dlib.rectangle(int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1)))
        img = np.ascontiguousarray(image)
        with self._lock:
            shape = self._shape(img, rect)
            vec = self._net.compute_face_descriptor(img, shape)
        return np.asarray(vec, dtype=np.float32)


def distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))
