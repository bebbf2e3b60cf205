"""Puts the product together: the shared models, one pipeline per session, and the service hooks the
server and `livefuse process` call. The one place that knows which stage follows which.

Models that are expensive and thread-safe (source registry with its identity embedder) are built once
per process and shared; stages that keep per-stream state (the landmarker in video mode, the tracker, the
colour memory) are built per session.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from engines.sources import SourceConfig, SourceRefused, SourceRegistry
from streamer.pipeline import Pipeline
from streamer.services import Services, default_audit, default_authorize
from streamer.session import Session
from streamer.stages.faces import FaceStage, FaceStageConfig
from streamer.stages.fusion import FusionConfig, FusionStage

log = logging.getLogger(__name__)

STAGE_NAMES = ("faces", "fusion")


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """What runs on each frame. `stages` names a subset of STAGE_NAMES, in that order."""

    stages: tuple[str, ...] = STAGE_NAMES
    faces: FaceStageConfig = field(default_factory=FaceStageConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    sources: SourceConfig = field(default_factory=SourceConfig)

    def __post_init__(self) -> None:
        unknown = set(self.stages) - set(STAGE_NAMES)
        if unknown:
            raise ValueError(f"unknown stages {sorted(unknown)}; choose from {STAGE_NAMES}")


class Product:
    """The shared, process-wide parts, created lazily so a server starts fast and a test pays only for
    what it uses."""

    def __init__(self, config: PipelineConfig = PipelineConfig()) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._registry: SourceRegistry | None = None

    @property
    def registry(self) -> SourceRegistry:
        with self._lock:
            if self._registry is None:
                from engines.identity import IdentityEmbedder

                self._registry = SourceRegistry(self.config.sources, embedder=IdentityEmbedder())
            return self._registry

    # --- per session -------------------------------------------------------------------------------
    def make_pipeline(self, session: Session) -> Pipeline:
        stages: list[Any] = []
        for name in self.config.stages:
            if name == "faces":
                stages.append(FaceStage(self.config.faces))
            elif name == "fusion":
                stages.append(FusionStage(self.config.fusion))
        return Pipeline(stages)

    def register_source(self, session: Session, image_rgb: np.ndarray, form: Mapping[str, str]) -> dict[str, Any]:
        index = _parse_index(form.get("index"))
        source = self.registry.register(image_rgb, index=index)
        source_id = form.get("source_id") or source.id
        if len(source_id) > 64 or not source_id.replace("-", "").replace("_", "").isalnum():
            raise SourceRefused("bad_request", "source_id must be up to 64 letters, digits, '-' or '_'")
        session.sources[source_id] = source
        session.update(source_id=source_id)
        return {"source_id": source_id, **{k: v for k, v in source.summary().items() if k != "id"}}

    def set_prompt(self, session: Session, text: str) -> dict[str, Any]:
        session.update(prompt=text)
        return {"prompt": text}

    def services(self) -> Services:
        return Services(
            make_pipeline=self.make_pipeline,
            register_source=self.register_source,
            set_prompt=self.set_prompt,
            authorize=default_authorize,
            audit=default_audit,
        )


def _parse_index(raw: str | None) -> int | None:
    if raw in (None, ""):
        return None
    try:
        index = int(raw)
    except ValueError:
        raise SourceRefused("bad_index", f"face index must be a whole number, got {raw!r}") from None
    if index < 0:
        raise SourceRefused("bad_index", "face index must be 0 or more")
    return index
