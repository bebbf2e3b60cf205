"""The ordered stages a frame travels through, and the rule that a failing stage never freezes a stream."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np
from aiortc.mediastreams import VIDEO_TIME_BASE   # 1/90000 s: RTP video's pts tick, the default when a frame names none

if TYPE_CHECKING:  # pragma: no cover
    from engines.faces import Face
    from streamer.media.planes import Planes
    from streamer.session.session import FrameContext


log = logging.getLogger(__name__)


@dataclass(slots=True)
class FrameState:
    """What travels through the stages: the pixels, either `planes` (the decoded yuv420p planes, the
    stream path, in host memory or on a torch device; `image` is None then) or `image` (H x W x 3 uint8
    RGB, or a torch tensor; photos, clips, odd sizes), the frame's timestamp (`pts` ticks of `time_base` seconds), what each stage found or did, and
    per-stage timings in milliseconds. Each field has one writer, named beside it."""

    image: Any
    pts: int = 0
    time_base: Fraction = VIDEO_TIME_BASE
    faces: list["Face"] = field(default_factory=list)                 # faces: tracked, smoothed
    raw_landmarks: dict[int, np.ndarray] = field(default_factory=dict)  # faces: track id -> unsmoothed
    fused: list[dict[str, Any]] = field(default_factory=list)        # fusion: track, source, weight per face
    swapped: list[dict[str, Any]] = field(default_factory=list)      # swap: track, source, card per face
    enhanced: list[dict[str, Any]] = field(default_factory=list)     # enhance: track, model, strength per face
    parsed: list[dict[str, Any]] = field(default_factory=list)       # parse: track, model, kept pixels per face
    edits: dict[str, float] = field(default_factory=dict)            # edits: the edits applied, by name
    watermark: str | None = None                                     # watermark: the payload, hex
    timings: dict[str, float] = field(default_factory=dict)
    cpu_ms: float = 0.0                                              # the worker: thread CPU time of the stages
    errors: dict[str, str] = field(default_factory=dict)
    planes: "Planes | None" = None                                   # the worker's edge: yuv420p pixels

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W) of the frame, whichever form its pixels are in."""
        if self.planes is not None:
            return self.planes.shape
        return int(self.image.shape[0]), int(self.image.shape[1])

    @property
    def seconds(self) -> float:
        """pts x time base in seconds. An int pts over a Fraction's numerator and denominator is one integer
        division, rounded once as float(Fraction) rounds it, without the Fraction arithmetic (the stages ask
        every frame)."""
        pts, base = self.pts, self.time_base
        if type(pts) is int and type(base) is Fraction:
            return pts * base.numerator / base.denominator
        return float(pts * base)


def _image_view() -> property:
    """`FrameState.image` over the dataclass's own slot: a state that travels as planes materialises its
    whole-frame RGB here on demand (each read converts; a consumer that needs the whole frame pays for
    it, the stages that work on regions never do). Assigning a whole frame makes the state an RGB one
    for the rest of its way (its planes are let go), as if it had never had planes."""
    slot = FrameState.__dict__["image"]
    planes_slot = FrameState.__dict__["planes"]

    def get(self: "FrameState") -> Any:
        img = slot.__get__(self)
        if img is None and self.planes is not None:
            return self.planes.rgb()
        return img

    def put(self: "FrameState", value: Any) -> None:
        if value is not None:
            try:
                planes_slot.__set__(self, None)
            except AttributeError:  # pragma: no cover - slots always accept a set
                pass
        slot.__set__(self, value)

    return property(get, put, doc="H x W x 3 uint8 RGB (or a torch tensor); see `planes`")


FrameState.image = _image_view()


class Stage(Protocol):
    """One step of the pipeline. A stage instance belongs to one session's pipeline, so it may keep that
    stream's state (trackers, smoothing, colour statistics); models shared between sessions are passed
    into its constructor. `context` is the frame's read-only view of its session (controls, sources,
    the client's event hook), the same for every stage of one frame."""

    name: str

    def __call__(self, state: FrameState, context: "FrameContext") -> FrameState: ...


class Pipeline:
    """Runs stages in order. A stage that raises is skipped for that frame: the frame goes on with what
    the earlier stages made, and the error is recorded on the state's `errors`, which is where whoever
    runs the pipeline (the frame worker) finds it to report. A worker may run the stages in parts (the
    overlapped worker runs the first in one thread and the rest in another), so whatever has to see
    every frame is a stage, not an override of `__call__`."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = list(stages)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def __call__(self, state: FrameState, context: "FrameContext") -> FrameState:
        for stage in self.stages:
            t0 = time.perf_counter()
            try:
                out = stage(state, context)
            except Exception as exc:  # a stage failure must not freeze the stream
                state.errors[stage.name] = f"{type(exc).__name__}: {exc}"
                log.warning("stage %s failed: %s", stage.name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            else:
                state = out
            state.timings[stage.name] = (time.perf_counter() - t0) * 1000.0
        return state

    def close(self) -> None:
        for stage in self.stages:
            close = getattr(stage, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # closing is best effort
                    log.exception("closing stage %s", stage.name)


def as_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """The pipeline's pixel contract: contiguous H x W x 3 uint8."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected HxWx3 uint8 RGB, got {image.dtype} {image.shape}")
    return np.ascontiguousarray(image)
