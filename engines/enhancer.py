"""Face enhancers (GFPGAN, RestoreFormer++, CodeFormer, GPEN): the face aligned onto the family's
restoration template, restored by the network in one batch with every other session's faces, and pasted
back through the face mask (the live face oval from the landmarks, pulled in and feathered, as the
swapper's paste), blended by a strength in 0..1. Nothing outside the face oval changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engines.catalogue.families import FamilyRefused, image_from_network
from engines.face_nets import FaceNet, FaceNetConfig
from engines.paste import paste_crop
from engines.swappers.swapper import crop_landmarks, paste_mask


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
        returns the indices of the faces pasted. One network call for all of them."""
        if not landmarks or strength <= 0.0:
            return []
        pairs = [self.crop(image, lm) for lm in landmarks]
        restored = self.enhance(np.stack([c for c, _ in pairs]))
        done = []
        size = self.prep.size
        for i, (lm, (_, m)) in enumerate(zip(landmarks, pairs)):
            mask = paste_mask(crop_landmarks(lm, m), size, keep_mouth=False, keep_eyes=False,
                              erode=settings.erode, feather=settings.feather)
            if paste_crop(out, restored[i], mask * np.float32(min(strength, 1.0)), m):
                done.append(i)
        return done


def load_enhancer(config: FaceNetConfig, fidelity: float = 0.5) -> FaceEnhancer:
    return FaceEnhancer(config, fidelity)
