"""Face enhancers (GFPGAN, RestoreFormer++, CodeFormer, GPEN): the face aligned onto the family's
restoration template, restored by the network in one batch with every other session's faces, and pasted
back through the face mask (the live face oval from the landmarks, pulled in and feathered, as the
swapper's paste), blended by a strength in 0..1. Nothing outside the face oval changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import cv2
import numpy as np

from engines.catalogue.families import FamilyRefused, image_from_network
from engines.face_masks import region_mask
from engines.face_nets import FaceNet, FaceNetConfig
from engines.paste import blend_box, warp_to_frame
from kernels.numpy.masks import inner_ramp


@dataclass(frozen=True, slots=True)
class EnhanceSettings:
    erode: float = 0.02       # paste mask pulled inside the face oval, fraction of the face width
    feather: float = 0.05     # its edge softness, fraction of the face width

    def __post_init__(self) -> None:
        if not (0.0 <= self.erode < 0.5 and 0.0 <= self.feather < 0.5):
            raise ValueError("erode and feather are fractions of the face width in [0, 0.5)")


class FaceEnhancer(FaceNet):
    """A restoration network; `fidelity` feeds CodeFormer's weight input (0 = most restoration, 1 = most
    like the input face), unused by the families without one."""

    kind = "enhancer"

    def __init__(self, config: FaceNetConfig, fidelity: float = 0.5) -> None:
        if not 0.0 <= fidelity <= 1.0:
            raise ValueError(f"fidelity must be within 0..1, got {fidelity}")
        self.fidelity = float(fidelity)
        super().__init__(config)

    def _extra_feeds(self) -> dict[str, np.ndarray]:
        extra = {}
        for name, _ in self.model.inputs[1:]:
            if name == "weight":
                extra[name] = np.array([self.fidelity], np.float64)
            else:
                raise FamilyRefused(f"{self.entry.name}: input {name!r} is not one LiveFuse knows how to feed")
        return extra

    def enhance(self, crops: np.ndarray) -> np.ndarray:
        """N aligned uint8 RGB crops -> N restored crops, float32 RGB 0..255."""
        return image_from_network(self.run(np.asarray(crops)), self.prep)

    def enhance_faces(self, out: np.ndarray, image: np.ndarray, landmarks: Sequence[np.ndarray], strength: float,
                      settings: EnhanceSettings = EnhanceSettings()) -> list[int]:
        """Restore each face of `image` (uint8 RGB) into `out` (a copy of it, changed in place) by `strength`;
        returns the indices of the faces pasted. One network call for all of them. The network's output is
        brought back per face only over the face's box in the frame (warped plane by plane, then scaled to
        0..255 there), and the paste mask is drawn there too: the work after the call scales with the face's
        size in the frame, not with the crop's."""
        if not landmarks or strength <= 0.0:
            return []
        pairs = [self.crop(image, lm) for lm in landmarks]
        raw = np.asarray(self.run(np.stack([c for c, _ in pairs])), np.float32)
        lo, hi = self.prep.output_range or (0.0, 1.0)
        done = []
        for i, (lm, (_, m)) in enumerate(zip(landmarks, pairs)):
            box, alpha = face_alpha(out.shape[:2], lm, settings)
            if box is None:
                continue
            planes = [raw[i, ..., c] if self.prep.nhwc else raw[i, c] for c in range(3)]
            if self.prep.bgr:
                planes = planes[::-1]
            fg = cv2.merge([warp_to_frame(pl, m, box, replicate=True) for pl in planes])
            np.clip(fg, lo, hi, out=fg)
            fg -= np.float32(lo)
            fg *= np.float32(255.0 / (hi - lo))
            blend_box(out, fg, alpha * np.float32(min(strength, 1.0)), box)
            done.append(i)
        return done


def face_alpha(shape: tuple[int, int], landmarks: np.ndarray, settings: EnhanceSettings
               ) -> tuple[tuple[int, int, int, int] | None, np.ndarray]:
    """The frame box around a face's oval and, over it, the paste mask: the oval pulled in by `erode` and
    feathered inside by `feather` (fractions of the face width), 0 outside the oval."""
    lm = np.asarray(landmarks, np.float32)[:, :2]
    fw = float(np.ptp(lm[:, 0]))
    h, w = shape
    x0, y0 = max(0, int(np.floor(lm[:, 0].min())) - 2), max(0, int(np.floor(lm[:, 1].min())) - 2)
    x1, y1 = min(w, int(np.ceil(lm[:, 0].max())) + 3), min(h, int(np.ceil(lm[:, 1].max())) + 3)
    if x1 <= x0 or y1 <= y0 or fw < 2.0:
        return None, np.zeros((0, 0), np.float32)
    oval = region_mask((y1 - y0, x1 - x0), lm - np.float32([x0, y0]), ["face_oval"]) > 0.5
    sig = max(0.5, settings.feather * fw)
    return (x0, y0, x1, y1), inner_ramp(oval, settings.erode * fw, 2.5 * sig).astype(np.float32)


def load_enhancer(config: FaceNetConfig, fidelity: float = 0.5) -> FaceEnhancer:
    return FaceEnhancer(config, fidelity)
