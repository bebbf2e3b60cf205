"""Parse stage: a face parser (BiSeNet's 19 classes, or XSeg's face / not-face: engines/face_parser.py) over
every face, right after the faces stage and before anything changes the face. What it finds over the face
that is not face (hair, glasses, a hand, a microphone, a hat) and, while the session keeps its mouth
(`Controls.keep_mouth`), the mouth interior, joins the face's keep mask (`Face.keep`, a soft mask in frame
pixels, where the faces stage puts a hand in front of the face): fusion, the swapper, the enhancer and the
edits leave those pixels live. The mask is cut to the face oval (grown a little), where the stages change
pixels, so a face with nothing in front of it and its mouth closed gets no keep mask at all. A parser that
names classes (BiSeNet) also gives each face its lips and skin (`Face.regions`, in frame pixels), which the
edits use in place of the landmark polygons: lip tint follows the real lip line, skin edits leave out
what covers the skin.

One network call per frame for all its faces, batched with other sessions' faces; only the faces' crop
footprint is converted. A model that raises fails the stage: the frame goes on with no parsed masks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import cv2
import numpy as np

from engines.face_masks import region_mask
from engines.face_parser import FaceParser
from engines.faces import MaskPatch
from engines.paste import paste_box, warp_to_frame
from streamer.pipeline.pipeline import FrameState
from streamer.pipeline.stages.enhance import FaceRegion, crop_footprint
from streamer.session.session import FrameContext


@dataclass(frozen=True, slots=True)
class ParseStageConfig:
    grow: float = 0.06         # the face oval grown by this (fraction of the face width) to bound the keep mask
    min_keep: float = 0.02     # mask values under this count as nothing kept
    soften: float = 1.5        # Gaussian softening of the parse's edges, px at 512

    def __post_init__(self) -> None:
        if not (0.0 <= self.grow < 0.5 and 0.0 <= self.min_keep < 1.0 and self.soften >= 0.0):
            raise ValueError("grow in [0, 0.5), min_keep in [0, 1), soften at least 0")


def merge_keep(a: MaskPatch | None, b: MaskPatch) -> MaskPatch:
    """The union (per-pixel max) of two keep patches over the box holding both."""
    if a is None:
        return b
    x0, y0 = min(a.x0, b.x0), min(a.y0, b.y0)
    x1 = max(a.x0 + a.mask.shape[1], b.x0 + b.mask.shape[1])
    y1 = max(a.y0 + a.mask.shape[0], b.y0 + b.mask.shape[0])
    out = np.zeros((y1 - y0, x1 - x0), np.float32)
    for p in (a, b):
        h, w = p.mask.shape
        view = out[p.y0 - y0:p.y0 - y0 + h, p.x0 - x0:p.x0 - x0 + w]
        np.maximum(view, p.mask, out=view)
    return MaskPatch(x0, y0, out)


class ParseStage:
    """One per session; the `FaceParser` is shared by all."""

    name = "parse"

    def __init__(self, parser: FaceParser, config: ParseStageConfig = ParseStageConfig()) -> None:
        self.parser = parser
        self.config = config

    def __call__(self, state: FrameState, context: FrameContext) -> FrameState:
        controls = context.controls
        if not controls.enabled or not state.faces:
            return state
        faces = list(state.faces)
        region = FaceRegion(state, [crop_footprint(f.landmarks, self.parser.template) for f in faces])
        if region.array is None:
            return state
        image = region.array
        ox, oy = region.origin
        crops, mats = [], []
        for f in faces:
            crop, m = self.parser.crop(image, region.shifted(f.landmarks))
            crops.append(crop)
            mats.append(m)
        parses = self.parser.parse(np.stack(crops))      # raises: the frame passes through
        h, w = state.shape
        done, widened = [], []
        for i, (face, parse) in enumerate(zip(faces, parses)):
            keep = self.parser.keep_mask(parse, keep_mouth=controls.keep_mouth, soften=self.config.soften)
            lm = region.shifted(face.landmarks)
            patch = self._frame_patch(keep, mats[i], lm, (ox, oy), (h, w))
            kept = 0 if patch is None else int((patch.mask > 0.5).sum())
            regions = self._regions(parse, mats[i], lm, (ox, oy), (h, w))
            # a new Face (as the faces stage makes one for a hand): a face object may outlive this frame
            changes = {"keep": merge_keep(face.keep, patch)} if patch is not None else {}
            if regions:
                changes["regions"] = regions
            widened.append(replace(face, **changes) if changes else face)
            done.append({"track_id": face.track_id, "model": self.parser.entry.name, "kept_px": kept})
        state.faces = widened
        state.parsed = done
        return state

    def _regions(self, parse, m: np.ndarray, lm: np.ndarray, origin: tuple[int, int],
                 shape: tuple[int, int]) -> dict[str, MaskPatch]:
        """The lips and the skin (skin and nose: what skin edits treat) as frame-pixel patches over the grown
        face box; empty for a parser without classes."""
        if parse.classes is None:
            return {}
        out = {}
        for name, classes in (("lips", (12, 13)), ("skin", (1, 10))):
            crop_mask = np.isin(parse.classes, classes).astype(np.float32)
            patch = self._frame_patch(crop_mask, m, lm, origin, shape, cut_to_oval=False)
            if patch is not None:
                out[name] = patch
        return out

    def _frame_patch(self, keep: np.ndarray, m: np.ndarray, lm: np.ndarray, origin: tuple[int, int],
                     shape: tuple[int, int], cut_to_oval: bool = True) -> MaskPatch | None:
        """A crop-space mask in frame pixels over the grown face box (cut to the grown face oval where asked);
        None when it holds nothing."""
        cfg = self.config
        lm2 = lm[:, :2]
        fw = float(np.ptp(lm2[:, 0]))
        x0 = int(max(0.0, lm2[:, 0].min() - 2 * cfg.grow * fw - 2))
        y0 = int(max(0.0, lm2[:, 1].min() - 2 * cfg.grow * fw - 2))
        x1 = int(lm2[:, 0].max() + 2 * cfg.grow * fw + 3)
        y1 = int(lm2[:, 1].max() + 2 * cfg.grow * fw + 3)
        box = paste_box((y1, x1), keep, m)
        if box is None:
            return None
        bx0, by0, bx1, by1 = max(box[0], x0), max(box[1], y0), box[2], box[3]
        if bx1 <= bx0 or by1 <= by0:
            return None
        mask = warp_to_frame(keep, m, (bx0, by0, bx1, by1))
        if cut_to_oval:
            oval = region_mask((by1 - by0, bx1 - bx0), lm2 - np.float32([bx0, by0]), ["face_oval"]) > 0.5
            r = max(1, int(round(cfg.grow * fw)))
            oval = cv2.dilate(oval.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
            mask = np.where(oval > 0, mask, 0.0).astype(np.float32)
        if mask.max(initial=0.0) < cfg.min_keep:
            return None
        ox, oy = origin
        fx0, fy0 = bx0 + ox, by0 + oy
        hh, ww = shape
        mask = mask[:max(0, hh - fy0), :max(0, ww - fx0)]
        return MaskPatch(fx0, fy0, np.ascontiguousarray(mask)) if mask.size else None

    def close(self) -> None:
        pass

