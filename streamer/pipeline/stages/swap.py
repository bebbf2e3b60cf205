"""Swap stage: the neural fusion backend. Each tracked face is re-rendered by the user's swap model with
its source's identity, then pasted back into the frame.

Per frame: every face with a source is aligned onto the model's template (5 points from its 478
landmarks), all of them go to the shared `NeuralSwapper` in one call (which batches them with other
sessions' faces), and each result is colour matched to the live face (Lab statistics over the skin),
smoothed over time per track (an EMA on the swapped crop, in crop space, reset when the track or its
source changes), and pasted back through a mask drawn from the live landmarks: the face oval pulled in and
feathered, the live mouth opening and eyes kept, times the model's own mask where its family has one.
Every pixel outside a face's mask is bit-exact; strength 0 returns the frame untouched.

It runs when the frame's fusion mode (`Controls.fusion`, else the server's `--fusion`) is "neural" or
"both"; in "both" it runs after the geometric stage, on its output. A model that raises fails the stage:
the frame goes on as the earlier stages left it and the pipeline's error hook tells the client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import cv2
import numpy as np
from cachetools import FIFOCache

from engines.align import invert
from engines.sources import SourceFace
from engines.swappers.swapper import NeuralSwapper, crop_landmarks, paste_mask
from kernels.numpy import blend as np_blend, color as np_color
from kernels.twins import twin_for
from streamer.session.face_map import FaceFollower
from streamer.pipeline.pipeline import FrameState
from streamer.session.session import FrameContext, fusion_mode
from streamer.pipeline.stages.fusion import chosen_source_id

if TYPE_CHECKING:  # pragma: no cover
    from engines.faces import Face
    from streamer.session.session import Controls


@dataclass(frozen=True, slots=True)
class SwapStageConfig:
    erode: float = 0.03          # paste mask pulled inside the face oval, fraction of face width
    feather: float = 0.04        # its edge softness (Gaussian sigma), fraction of face width
    colour_match: float = 1.0    # 0..1: how far the swapped skin moves to the live skin's Lab mean/std
    smoothing: float = 0.5       # EMA memory of the swapped crop per track (0 = none); reset on a new track
    max_tracks: int = 64         # smoothing memories kept

    def __post_init__(self) -> None:
        for name in ("colour_match", "smoothing"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0 or not math.isfinite(v):
                raise ValueError(f"{name} must be within 0..1, got {v}")
        if self.smoothing >= 1.0:
            raise ValueError("smoothing 1 would freeze the face; use under 1")


class SwapStage:
    """One per session (it keeps the per-track smoothing); the `NeuralSwapper` is shared by all."""

    name = "swap"

    def __init__(self, swapper: NeuralSwapper, config: SwapStageConfig = SwapStageConfig(),
                 default_mode: str = "neural", follower: FaceFollower | None = None) -> None:
        """`follower`: the session's `FaceFollower` (the one its fusion stage has), for per-face mappings."""
        self.swapper = swapper
        self.follower = follower
        self.config = config
        self.default_mode = default_mode
        self._memory: FIFOCache[int, tuple[str, np.ndarray]] = FIFOCache(maxsize=config.max_tracks)   # track id -> (source id, smoothed crop)

    def runs(self, controls: Controls) -> bool:
        return fusion_mode(controls, self.default_mode) in ("neural", "both")

    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        controls = context.controls
        strength = float(min(max(controls.strength, 0.0), 1.0))
        if not controls.enabled or strength <= 0.0 or not state.faces or not self.runs(controls):
            return state
        planes = state.planes
        image = planes.rgb() if planes is not None else state.image   # the swapper's crops need the whole frame
        image = twin_for(image).host(image)     # the swapper takes NumPy; a GPU frame comes down once
        mapped = self.follower.mapping(state.faces, controls.face_sources, image) if self.follower is not None else None
        todo = self._faces_with_sources(state.faces, controls, context.sources, mapped)
        if not todo:
            self._forget(set())
            return state
        crops, mats, vectors = [], [], []
        for face, _, src in todo:
            crop, m = self.swapper.crop(image, face.landmarks)
            crops.append(crop)
            mats.append(m)
            vectors.append(self.swapper.source_vector(src))
        swapped, model_masks = self.swapper.swap(np.stack(crops), np.stack(vectors))   # raises: frame passes through
        out = image.copy()
        seen, done = set(), []
        for i, (face, name, src) in enumerate(todo):
            key = face.track_id
            size = self.swapper.template.size
            lm_crop = crop_landmarks(face.landmarks, mats[i])
            mask = paste_mask(lm_crop, size, keep_mouth=controls.keep_mouth, keep_eyes=controls.keep_eyes,
                              erode=self.config.erode, feather=self.config.feather)
            if model_masks is not None:
                mask = mask * model_masks[i]
            result = self._colour_matched(swapped[i], crops[i], mask)
            if key >= 0:
                seen.add(key)
                result = self._smoothed(key, src.id, result)
            if self._paste(out, result, mask * np.float32(strength), mats[i]):
                done.append({"track_id": face.track_id, "source_id": src.id, "source": name,
                             "card": self.swapper.card.name})
        self._forget(seen)
        if done:
            twin_for(out).blend.keep_patches(out, image, (f.keep for f in state.faces))   # a hand in front keeps its pixels
        if done and planes is not None:
            planes.put_rgb(out)
        elif done:
            state.image = twin_for(state.image).put(out, state.image)
        state.swapped = done
        return state

    def _faces_with_sources(self, faces: list[Face], controls: Controls, sources: Mapping[str, SourceFace],
                            mapped: Mapping[int, str] | None = None) -> list[tuple[Any, str, SourceFace]]:
        out = []
        for face in faces:
            name = chosen_source_id(face, controls, mapped=mapped)
            src = sources.get(name) if name is not None else None
            if src is not None:
                out.append((face, name, src))
        return out

    def _colour_matched(self, swapped: np.ndarray, live: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The swapped crop (float32 RGB 0..255) moved toward the live crop's skin colour statistics."""
        amount = self.config.colour_match
        if amount <= 0.0:
            return swapped
        skin = (mask > 0.5).astype(np.float32)
        fg = np_color.rgb_to_lab(swapped * np.float32(1.0 / 255.0))
        try:
            fg_stats = np_color.lab_stats(fg, skin)
            live_stats = np_color.lab_stats(np_color.rgb_to_lab(live), skin)
        except ValueError:     # too little skin to measure (a tiny face): leave the model's colours
            return swapped
        return np_color.lab_to_rgb(np_color.transfer_stats(fg, fg_stats, live_stats, amount))

    def _smoothed(self, key: int, source_id: str, crop: np.ndarray) -> np.ndarray:
        memory = self.config.smoothing
        prev = self._memory.get(key)
        if memory > 0.0 and prev is not None and prev[0] == source_id and prev[1].shape == crop.shape:
            crop = prev[1] * np.float32(memory) + crop * np.float32(1.0 - memory)
        self._memory[key] = (source_id, crop)
        return crop

    def _forget(self, seen: set[int]) -> None:
        """Tracks not in this frame start afresh when they come back (a track id is never reused)."""
        for key in [k for k in self._memory if k not in seen]:
            del self._memory[key]

    @staticmethod
    def _paste(out: np.ndarray, crop: np.ndarray, mask: np.ndarray, m: np.ndarray) -> bool:
        """Blend `crop` (float32 RGB, crop space) into `out` where the warped `mask` is above 0; every other
        pixel of `out` is left as it was. False when the mask lands outside the frame."""
        ys, xs = np.nonzero(mask > 0)
        if len(xs) == 0:
            return False
        inv = invert(m)
        corners = np.array([[xs.min(), ys.min()], [xs.max() + 1, ys.min()], [xs.min(), ys.max() + 1],
                            [xs.max() + 1, ys.max() + 1]], np.float32)
        frame_pts = corners @ inv[:, :2].T + inv[:, 2]
        h, w = out.shape[:2]
        x0, y0 = (max(0, int(math.floor(v)) - 1) for v in frame_pts.min(axis=0))
        x1, y1 = (int(math.ceil(v)) + 2 for v in frame_pts.max(axis=0))
        x1, y1 = min(w, x1), min(h, y1)
        if x1 <= x0 or y1 <= y0:
            return False
        shifted = inv.copy()
        shifted[:, 2] -= (x0, y0)
        size = (x1 - x0, y1 - y0)
        fg = cv2.warpAffine(crop, shifted, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        alpha = cv2.warpAffine(mask, shifted, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                               borderValue=0.0)
        region = out[y0:y1, x0:x1]
        blended = np.clip(np_blend.alpha_blend(fg, region, alpha) + 0.5, 0, 255).astype(np.uint8)
        out[y0:y1, x0:x1] = np.where((alpha > 0)[..., None], blended, region)
        return True

    def close(self) -> None:
        self._memory.clear()
