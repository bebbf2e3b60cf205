"""Enhance stage: a face-restoration network (GFPGAN, RestoreFormer++, CodeFormer, GPEN:
engines/enhancer.py) over every face after fusion and the swap, pasted back through the face oval by the
frame's enhance strength. Nothing outside the oval changes; what a face keeps (a hand in front of it,
the parser's occluders and mouth interior: `Face.keep`) stays as the earlier stages left it.

The strength is `Controls.enhance` (0..1), or, unset, the stage's default: 0 on a live stream whose
pixels are in host memory (the CPU stream: the network costs per face), 1 on a stream on CUDA, in clips
(`livefuse process`, clip jobs) and in photos (`POST /v1/fuse`).

Only the faces' part of the frame is converted: on the stream path a region of the planes covering every
face's restoration crop (shared with the other stages' regions, written back once); on the RGB path the
frame itself. One network call per frame for all its faces, batched with other sessions' faces. A model
that raises fails the stage: the frame goes on as fusion left it and the error reaches the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.align import align_matrix, invert
from engines.enhancer import EnhanceSettings, FaceEnhancer
from kernels.twins import twin_for
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import FrameContext

if TYPE_CHECKING:  # pragma: no cover
    from streamer.session.session import Controls


@dataclass(frozen=True, slots=True)
class EnhanceStageConfig:
    erode: float = 0.02            # paste mask pulled inside the face oval, fraction of the face width
    feather: float = 0.05          # its softness, fraction of the face width
    live_cpu_strength: float = 0.0  # default strength on a live stream in host memory
    strength: float = 1.0          # default strength everywhere else (device streams, clips, photos)

    def __post_init__(self) -> None:
        for name in ("live_cpu_strength", "strength"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be within 0..1, got {v}")
        EnhanceSettings(self.erode, self.feather)


def enhance_strength(controls: Controls, default: float) -> float:
    value = getattr(controls, "enhance", None)
    return float(min(max(default if value is None else value, 0.0), 1.0))


def crop_footprint(landmarks: np.ndarray, template: Any) -> tuple[float, float, float, float]:
    """The frame box an aligned crop of `template` covers: (x0, y0, x1, y1)."""
    inv = invert(align_matrix(landmarks, template))
    s = float(template.size)
    corners = np.array([[0, 0], [s, 0], [0, s], [s, s]], np.float32) @ inv[:, :2].T + inv[:, 2]
    return (float(corners[:, 0].min()), float(corners[:, 1].min()), float(corners[:, 0].max()),
            float(corners[:, 1].max()))


class FaceRegion:
    """The RGB pixels around a frame's faces as one host array, and where they go back: a planes region
    (the stream path; shared with the other stages' regions) or the state's image (photos, clips)."""

    def __init__(self, state: FrameState, boxes: list[tuple[float, float, float, float]]) -> None:
        self.state = state
        planes = state.planes
        x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
        x1, y1 = max(b[2] for b in boxes), max(b[3] for b in boxes)
        self._tensor = None
        if planes is not None:
            box = planes.snap(x0, y0, x1, y1)
            if box is None:
                self.array = None
                return
            work, box = planes.region(box)
            self.origin = (box[0], box[1])
            self._twin = twin_for(work)
            if self._twin.ON_HOST:
                self.array = work
            else:                                  # a region on a torch device: worked on in host memory
                self._tensor = work
                self.array = self._twin.host(work)
        else:
            image = state.image
            self._twin = twin_for(image)
            if not self._twin.ON_HOST:
                self._tensor = image
                image = self._twin.host(image)
            self.origin = (0, 0)
            self.array = image

    def shifted(self, landmarks: np.ndarray) -> np.ndarray:
        lm = np.array(landmarks, np.float32, copy=True)
        lm[:, 0] -= self.origin[0]
        lm[:, 1] -= self.origin[1]
        return lm

    def put(self, out: np.ndarray) -> None:
        """Hand the changed pixels back."""
        state = self.state
        if state.planes is not None:
            if self._tensor is not None:
                self._tensor.copy_(self._twin.put(out, self._tensor))
            else:
                self.array[...] = out
        elif self._tensor is not None:
            state.image = self._twin.put(out, self._tensor)
        else:
            state.image = out


class EnhanceStage:
    """One per session; the `FaceEnhancer` is shared by all. `live`: a stream's pipeline, where the
    enhancer is off by default while the frame's pixels are in host memory (the session may turn it on)."""

    name = "enhance"

    def __init__(self, enhancer: FaceEnhancer, config: EnhanceStageConfig = EnhanceStageConfig(), *,
                 live: bool = False) -> None:
        self.enhancer = enhancer
        self.config = config
        self.live = live
        self.settings = EnhanceSettings(config.erode, config.feather)

    def default(self, state: FrameState) -> float:
        """The strength a session that set none gets: off on a live frame in host memory."""
        on_device = state.planes is not None and state.planes.device is not None
        return self.config.live_cpu_strength if self.live and not on_device else self.config.strength

    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        controls = context.controls
        strength = enhance_strength(controls, self.default(state))
        if not controls.enabled or strength <= 0.0 or not state.faces:
            return state
        faces = list(state.faces)
        region = FaceRegion(state, [crop_footprint(f.landmarks, self.enhancer.template) for f in faces])
        if region.array is None:
            return state
        image = region.array
        out = image.copy()
        done = self.enhancer.enhance_faces(out, image, [region.shifted(f.landmarks) for f in faces], strength,
                                           self.settings)            # raises: the frame passes through
        if not done:
            return state
        if state.planes is None:
            twin_for(out).blend.keep_patches(out, image, (f.keep for f in faces))   # a hand or an occluder keeps its pixels
            region.put(out)
        else:
            region.put(out)
            state.planes.keep([f.keep for f in faces if f.keep is not None])   # back to the region's start
        state.enhanced = [{"track_id": faces[i].track_id, "model": self.enhancer.entry.name,
                           "strength": round(strength, 3)} for i in done]
        return state

    def close(self) -> None:
        pass
