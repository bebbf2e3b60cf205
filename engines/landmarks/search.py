"""The face search: where the detectors look in a frame, and how their findings merge.

The bundle's short-range detector looks at the whole frame squeezed into 128 x 128: a face narrower than
about a tenth of the frame's long side is lost (no face at all in a 1280 px group photo of 120 px faces).
The wide search adds MediaPipe's full-range detector (192 x 192) on the whole frame, which finds faces
down to about 1/16 of the long side (40-50 px in 640 x 480, 50-60 px in 1280 x 720), and on a pyramid of
overlapping square tiles whose finest level is sized so a face `tile_min_face_px` wide is found in them.
A stream runs the wide part only when a search is due, `tiles_per_search` tiles at a time (a far face in
a 1280 x 720 stream appears within one pass over the tiles), so a frame that only follows a face pays
nothing for it. While it follows a face, a stream spreads each search over frames, one pass a frame
(`SearchConfig.spread`, `find_pass`): short range, full range, tiles. The search's work is the same; the
frame that carried all of it was among the stream's slowest (docs/faces.md, "Faces at every distance").
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from engines.faces import SearchConfig
from engines.landmarks.networks import Detection, FaceDetectorNet, RotatedRect
from engines.tracking import overlap_of_smaller


# a short-range detection this sure goes ahead of the full-range ones (MediaPipe's own seed for a close
# face); a less sure one competes on score (a 0.64 short-range box of a 130 px face, 30 px off centre, once
# hid the full-range pass's 0.96 box and the face was lost)
SURE_SHORT_RANGE = 0.8


def tile_levels(width: int, height: int, config: SearchConfig) -> list[list[RotatedRect]]:
    """Square tiles, finest level first, each level covering the frame with `tile_overlap`; no level
    whose tiles would cover the whole frame (the whole-frame pass does that). Bounded by `max_tiles`:
    beyond it the finest levels are left out (the smallest face found is then larger)."""
    levels: list[list[RotatedRect]] = []
    side = config.tile_min_face_px * config.tile_ratio
    long_side = max(width, height)
    while side * 1.25 < long_side:
        step = side * (1.0 - config.tile_overlap)
        levels.append([RotatedRect(x + side / 2, y + side / 2, side, side)
                       for y in _starts(height, side, step) for x in _starts(width, side, step)])
        side *= config.level_step
    while levels and sum(len(level) for level in levels) > config.max_tiles:
        levels.pop(0)
    return levels


def _starts(extent: int, side: float, step: float) -> list[float]:
    if extent <= side:
        return [(extent - side) / 2.0]
    n = int(math.ceil((extent - side) / step)) + 1
    return [float(v) for v in np.linspace(0.0, extent - side, n)]


class FaceSearch:
    """Short range on the whole frame, plus (config.wide) full range on the whole frame and on tiles.
    `full_range` is the full-range detector, or a callable that makes it on first need."""

    def __init__(self, short: FaceDetectorNet, full_range: FaceDetectorNet | Callable[[], FaceDetectorNet] | None,
                 config: SearchConfig = SearchConfig()) -> None:
        self.short = short
        self._full = full_range
        self.config = config
        self._cursor = 0                      # round robin over the tiles (VIDEO mode)
        self._plan_key: tuple[int, int] | None = None
        self._tiles: list[RotatedRect] = []
        self.last_cost: dict[str, int] = {}   # detector runs by the last call (for the bench and tests)
        self.runs = {"short": 0, "full": 0, "tiles": 0}   # ... and by all calls

    @property
    def full(self) -> FaceDetectorNet | None:
        if self._full is not None and not isinstance(self._full, FaceDetectorNet):
            self._full = self._full()
        return self._full

    def tiles(self, width: int, height: int) -> list[RotatedRect]:
        if self._plan_key != (width, height):
            self._plan_key = (width, height)
            self._tiles = [r for level in tile_levels(width, height, self.config) for r in level]
            self._cursor = 0
        return self._tiles

    def passes(self, image: np.ndarray, wide: bool) -> list[str]:
        """The passes a search of this frame's size makes, for `find_pass` one at a time."""
        if not (wide and self.config.wide and self._full is not None):
            return ["short"]
        return ["short", "full"] + (["tiles"] if self.tiles(image.shape[1], image.shape[0]) else [])

    def find_pass(self, image: np.ndarray, name: str) -> list[Detection]:
        """One pass of a search ("short", "full" or "tiles": the next `tiles_per_search` tiles), its
        detections merged, best first."""
        cost = {"short": 0, "full": 0, "tiles": 0}
        if name == "short":
            found = list(self.short.detect(image))
            cost["short"] = 1
        elif name == "full":
            found = list(self.full.detect(image))
            cost["full"] = 1
        elif name == "tiles":
            chosen = self._next_tiles(image)
            found = list(self.full.detect_regions(image, chosen))
            cost["tiles"] = len(chosen)
        else:
            raise ValueError(f"unknown search pass {name!r}")
        self._count(cost)
        return merge(sorted(found, key=lambda d: -d.score), self.config.min_face_px)

    def _next_tiles(self, image: np.ndarray) -> list[RotatedRect]:
        """The next `tiles_per_search` tiles, round robin (VIDEO mode)."""
        tiles = self.tiles(image.shape[1], image.shape[0])
        if not tiles:
            return []
        k = min(max(1, self.config.tiles_per_search), len(tiles))
        chosen = [tiles[(self._cursor + i) % len(tiles)] for i in range(k)]
        self._cursor = (self._cursor + k) % len(tiles)
        return chosen

    def _count(self, cost: dict[str, int]) -> None:
        self.last_cost = cost
        for k, v in cost.items():
            self.runs[k] += v

    def find(self, image: np.ndarray, wide: bool, all_tiles: bool = False) -> list[Detection]:
        """Detections, best first, merged across passes; faces narrower than `min_face_px` left out.
        wide: run the full-range passes; all_tiles: every tile (a photo) rather than the next few."""
        short = sorted(self.short.detect(image), key=lambda d: -d.score)
        found = [d for d in short if d.score >= SURE_SHORT_RANGE]
        cost = {"short": 1, "full": 0, "tiles": 0}
        full = self.full if wide and self.config.wide else None
        if full is not None:
            wider = list(full.detect(image))
            cost["full"] = 1
            chosen = self.tiles(image.shape[1], image.shape[0]) if all_tiles else self._next_tiles(image)
            if chosen:
                wider.extend(full.detect_regions(image, chosen))
                cost["tiles"] = len(chosen)
            # a tile sees a small face larger than the whole-frame pass does: the better score wins
            found.extend(sorted(wider + [d for d in short if d.score < SURE_SHORT_RANGE], key=lambda d: -d.score))
        else:
            found = short
        self._count(cost)
        return merge(found, self.config.min_face_px)


def merge(found: list[Detection], min_face_px: float = 0.0, overlap: float = 0.5) -> list[Detection]:
    """One detection per face, in the order given (each pass best score first): a detection is dropped
    when most of it (`overlap` of the smaller box) lies inside an earlier one, which also removes the part
    of a face a tile cut off. `FaceSearch.find` puts the short-range pass's sure detections first: there
    its box seeds the landmarks exactly as MediaPipe's own graph does; the rest follow, best score first."""
    kept: list[Detection] = []
    for d in found:
        w = float(d.box[2] - d.box[0])
        if w < min_face_px:
            continue
        if all(overlap_of_smaller(d.box, k.box) < overlap for k in kept):
            kept.append(d)
    return kept
