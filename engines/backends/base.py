"""The one small class every runtime implements, and the settings that choose between them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from engines.faces import Face, LandmarkerConfig


class BackendUnavailable(RuntimeError):
    """No backend in the preference list can run here; the message lists each one's reason."""


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """preference: tried in order; the first that can run here wins, and each skip is logged with why.
    device: for torch / tensorrt: "auto" (CUDA when present), "cpu", "cuda", "cuda:N".
    precision: fp16 halves the GPU cost; the CPU always runs fp32.
    engine_cache: folder for built TensorRT engines ("" = ~/.cache/livefuse/tensorrt).
    share_across_streams: torch: one landmark network for every stream in the process, calls that arrive
    together run as one batch of up to max_batch crops (engines/batching.py); for a GPU serving many streams."""

    preference: tuple[str, ...] = ("interpreter", "litert", "torch")
    device: str = "auto"
    precision: Literal["fp32", "fp16"] = "fp32"
    engine_cache: str = ""
    max_batch: int = 16
    share_across_streams: bool = False


class Detector(Protocol):
    """A stream's landmarker. One may also offer `reads(timestamp_ms) -> list[box] | None`: the frame
    boxes its next `detect` reads (None: the whole frame), so a caller converts only those to RGB."""

    def detect(self, image: "np.ndarray", timestamp_ms: int) -> list["Face"]: ...
    def close(self) -> None: ...


Network = Callable[[Any], list[Any]]   # NHWC float tensor batch -> outputs in the .tflite file's order


class Backend(ABC):
    """A runtime for the face models. Stages never know which one runs them: they get a landmarker
    (`detect(image, timestamp_ms) -> list[Face]`) and, for tensor runtimes, the bare networks."""

    name: ClassVar[str]

    def __init__(self, settings: BackendSettings) -> None:
        reason = self.unavailable_reason(settings)
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        self.settings = settings

    @classmethod
    @abstractmethod
    def unavailable_reason(cls, settings: BackendSettings) -> str | None:
        """None when this backend can run here with these settings, else why not (cheap; imports lazily)."""

    @abstractmethod
    def landmarker(self, config: "LandmarkerConfig") -> Detector:
        """A landmarker for one stream."""

    def network(self, member: str) -> Network:
        """The bare network `member` of the face_landmarker bundle, for tensor runtimes."""
        raise NotImplementedError(f"the {self.name} backend runs whole graphs only, not bare networks")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}
