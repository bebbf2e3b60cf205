"""LiteRT through MediaPipe Tasks: the CPU default (XNNPACK), whole landmarker graph with blendshapes
and the face transform."""

from __future__ import annotations

import importlib.util

from engines.backends.base import Backend, BackendSettings, Detector
from engines.cards import FACE_LANDMARKER, ModelError


class LiteRTBackend(Backend):
    name = "litert"

    @classmethod
    def unavailable_reason(cls, settings: BackendSettings) -> str | None:
        if importlib.util.find_spec("mediapipe") is None:
            return "mediapipe is not installed (pip install mediapipe==1.2.2)"
        try:
            FACE_LANDMARKER.path()
        except ModelError as exc:
            return str(exc)
        return None

    def landmarker(self, config) -> Detector:
        from engines.faces import MediaPipeLandmarker

        return MediaPipeLandmarker(config)

    def describe(self) -> dict:
        return {"backend": self.name, "device": "cpu", "precision": "fp32"}
