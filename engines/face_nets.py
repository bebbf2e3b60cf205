"""One ONNX face network of a catalogue family (an enhancer or a parser), loaded once per process and shared
by every session: its file recognised against the catalogue's signatures, faces aligned onto the family's
template, and the crops of all sessions gathered into one batched call (`ArrayBatchRunner`, as the swapper
does); a file with a fixed batch of 1 runs the gathered rows one after another inside that call.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.align import align_crop
from engines.backends.onnxruntime import OrtModel, OrtSettings, OrtUnavailable
from engines.batching import ArrayBatchRunner
from engines.catalogue.entries import Entry
from engines.catalogue.families import FamilyRefused, Prep, prep, recognise, to_network
from engines.swappers.cards import Signature, check_file

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FaceNetConfig:
    """The file and how it runs. `name` forces a catalogue entry (the server passes the name the model was
    asked for by); `sha256` pins the file (a file with another hash is refused)."""

    path: str = ""
    name: str | None = None
    sha256: str = ""
    device: str = "auto"           # auto, cpu, cuda, cuda:N, tensorrt (engines/backends/onnxruntime.py)
    threads: int = 0
    trt_cache: str = ""
    max_batch: int = 16            # faces per model call, across sessions
    window_ms: float = 2.0
    warm_up: bool = True

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.window_ms < 0:
            raise ValueError("max_batch must be at least 1 and window_ms at least 0")

    @property
    def enabled(self) -> bool:
        return bool(self.path)


class FaceNet:
    """A loaded face network of `kind`; thread-safe; `close()` stops its batch worker."""

    kind = ""

    def __init__(self, config: FaceNetConfig) -> None:
        if not config.enabled:
            raise ValueError(f"no {self.kind} file given")
        self.config = config
        path = _checked(config.path, config.sha256)
        try:
            self.model = OrtModel(path, OrtSettings(device=config.device, threads=config.threads,
                                                    trt_cache=config.trt_cache))
        except OrtUnavailable as exc:
            raise FamilyRefused(str(exc)) from None
        self.entry: Entry = recognise(Signature(self.model.inputs, self.model.outputs), self.kind,
                                      file_name=path.name, name=config.name)
        self.prep: Prep = prep(self.entry)
        self.template = self.prep.crop
        self._input = self.model.inputs[0][0]
        self._extra = self._extra_feeds()
        self._runner = ArrayBatchRunner(self._forward, max_batch=config.max_batch, window_ms=config.window_ms)
        self._lock = threading.Lock()
        self.calls = 0
        self.warm_up_ms: float | None = None
        if config.warm_up:
            self.warm_up()
        log.info("%s %s (%s, licence %s) on %s", self.kind, path.name, self.entry.name, self.entry.licence.label,
                 ", ".join(self.model.providers))

    def _extra_feeds(self) -> dict[str, np.ndarray]:
        """Inputs beside the image (CodeFormer's fidelity weight); subclasses fill them."""
        return {}

    @property
    def stats(self):
        return self._runner.stats

    def crop(self, image: np.ndarray, landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The face aligned to the family's template: (S x S x 3 uint8, 2x3 frame -> crop)."""
        return align_crop(image, landmarks, self.template)

    def run(self, crops: np.ndarray) -> np.ndarray:
        """N aligned uint8 RGB crops -> the network's first output for each (batched with other callers)."""
        return self._runner(to_network(crops, self.prep))[0]

    def _forward(self, x: np.ndarray) -> list[np.ndarray]:
        with self._lock:
            self.calls += 1
        feeds = dict(self._extra)
        if self.model.dynamic_batch or len(x) == 1:
            return [self.model.run({self._input: x, **feeds})[0]]
        return [np.concatenate([self.model.run({self._input: x[i:i + 1], **feeds})[0] for i in range(len(x))])]

    def warm_up(self) -> float:
        t = time.perf_counter()
        s = self.prep.size
        self._forward(to_network(np.zeros((1, s, s, 3), np.uint8), self.prep))
        with self._lock:
            self.calls -= 1
        self.warm_up_ms = (time.perf_counter() - t) * 1000.0
        return self.warm_up_ms

    def describe(self) -> dict[str, Any]:
        return {"name": self.entry.name, "kind": self.kind, "family": self.entry.family, "size": self.prep.size,
                "template": self.prep.template, "providers": list(self.model.providers),
                "dynamic_batch": self.model.dynamic_batch, "licence": self.entry.licence.label,
                "commercial": self.entry.commercial}

    def close(self) -> None:
        self._runner.close()


def _checked(path: str, sha256: str) -> Path:
    try:
        return check_file(path, sha256 or None)
    except ValueError as exc:
        raise FamilyRefused(str(exc)) from None
