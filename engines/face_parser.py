"""Face parsers: which pixels of a face are face. BiSeNet (CelebAMask-HQ's 19 classes) names skin, brows,
eyes, nose, lips and the mouth interior, and everything else over the face (hair, glasses, a hand or a
microphone, which it calls background, a hat, clothes); XSeg gives one face / not-face probability.

From a parse the stages take a keep mask: the pixels that stay live from the frame whatever fusion, the
swapper or the enhancer did, so an occluder stays in front of the face and the mouth interior (teeth,
tongue) stays the speaker's own ("mouth mask"); and region masks (lips, brows, skin) for the edits.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engines.face_nets import FaceNet

# CelebAMask-HQ / BiSeNet class ids (yakhyo/face-parsing, zllrunning/face-parsing.PyTorch)
CLASSES = ("background", "skin", "l_brow", "r_brow", "l_eye", "r_eye", "eye_g", "l_ear", "r_ear", "ear_r", "nose",
           "mouth", "u_lip", "l_lip", "neck", "neck_l", "cloth", "hair", "hat")
FACE = (1, 2, 3, 4, 5, 10, 12, 13)       # what a face change may repaint: skin, brows, eyes, nose, lips
MOUTH_INTERIOR = 11
REGIONS: dict[str, tuple[int, ...]] = {
    "skin": (1,), "brows": (2, 3), "eyes": (4, 5), "nose": (10,), "lips": (12, 13), "mouth": (11,),
    "glasses": (6,), "hair": (17,),
}


def class_map(logits: np.ndarray) -> np.ndarray:
    """C x H x W logits -> H x W uint8 class ids, the first of equal maxima as argmax gives: the maximum over
    contiguous planes, then each class marked where it reaches it, last to first (three times faster than
    argmax across the strided class axis)."""
    best = np.maximum.reduce(logits)
    ids = np.zeros(best.shape, np.uint8)
    for c in range(logits.shape[0] - 1, -1, -1):
        np.putmask(ids, logits[c] == best, c)
    return ids


@dataclass(frozen=True, slots=True)
class Parse:
    """One face's parse in crop space: class ids (BiSeNet) or None, and the face probability (both kinds)."""

    classes: np.ndarray | None     # S x S uint8
    face: np.ndarray               # S x S float32 in [0, 1]: 1 = face the stages may change


class FaceParser(FaceNet):
    kind = "parser"

    @property
    def has_classes(self) -> bool:
        return self.entry.card == "bisenet_19"

    def parse(self, crops: np.ndarray) -> list[Parse]:
        """N aligned uint8 RGB crops -> N parses (one batched call)."""
        y = self.run(np.asarray(crops))
        if self.has_classes:
            classes = [class_map(np.asarray(y[i], np.float32)) for i in range(len(y))]
            return [Parse(c, np.isin(c, FACE).astype(np.float32)) for c in classes]
        prob = np.clip(np.asarray(y, np.float32)[..., 0], 0.0, 1.0)    # NHWC, one channel
        return [Parse(None, p) for p in prob]

    def keep_mask(self, parse: Parse, *, keep_mouth: bool = True, soften: float = 1.5) -> np.ndarray:
        """Crop-space float32 in [0, 1]: 1 where the live frame's pixel is kept (an occluder; the mouth
        interior when `keep_mouth`), softened by a Gaussian of `soften` px at 512 (scaled to the crop)."""
        keep = 1.0 - parse.face
        if parse.classes is not None and not keep_mouth:
            keep = keep * (parse.classes != MOUTH_INTERIOR)
        keep = keep.astype(np.float32)
        sigma = soften * keep.shape[0] / 512.0
        if sigma > 0.3:
            keep = cv2.GaussianBlur(keep, (0, 0), sigma)
        return np.clip(keep, 0.0, 1.0)

    @staticmethod
    def region(parse: Parse, name: str) -> np.ndarray:
        """Crop-space float32 mask of a named region (REGIONS); needs a class-giving parser."""
        if parse.classes is None:
            raise ValueError("this parser gives no classes (XSeg): regions need a BiSeNet parser")
        return np.isin(parse.classes, REGIONS[name]).astype(np.float32)
