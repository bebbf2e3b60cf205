"""A still face reuses what a stage made of it on the previous frame (the idea of StreamDiffusion's
similarity filter, per face).

Why: a person sitting still in front of a webcam gives nearly the same landmarks frame after frame, and
fusion and edits then redo the same work for a result the viewer cannot tell apart. Per track, a stage
keeps its last result as an additive delta over the face's box (int16: what it added to the live pixels),
the smoothed landmarks it was made from and a key of everything that steers it. The next frame's face
reuses the delta (its box's RGB becomes clip(live + delta)) when

- its landmarks moved less than `max_move` of the face width from the ones the delta was made from
  (measured from the made frame, not the last one, so slow drift adds up and forces a fresh result),
- the key is identical (the stage names what goes in it: source, weight, shape, mode, kept parts; the edits),
- it carries no hand `keep` mask,
- the delta was made or reused on the frame just before (a face that was not worked on, or a gap in its
  track, starts fresh), and it has been reused fewer than `max_run` frames in a row (so colour smoothing
  and slow drift catch up).

Adding the delta to the live pixels keeps what the stage leaves live (kept mouth and eyes, the blend's
outer ramp) following the frame. Only the planes path reuses (whole-frame RGB, photos and the torch path
always run fresh), and the composition root gives clips stages without reuse. One `StillFaces` belongs
to one stage of one session's pipeline; it forgets everything when the frame's session id differs from
the last one's, so a result never crosses sessions, and entries are per track id, so never crosses
tracks. The defaults come from `livefuse bench pipeline --still` (docs/fusion.md, Still faces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable

import numpy as np

from streamer.media.planes import Box, Planes

if TYPE_CHECKING:  # pragma: no cover
    from engines.faces import Face


@dataclass(frozen=True, slots=True)
class StillConfig:
    enabled: bool = True
    max_move: float = 0.003   # largest landmark displacement that still reuses, fraction of the face width
    max_run: int = 3          # reused frames in a row before a fresh result (1 fresh in max_run + 1 frames)

    def __post_init__(self) -> None:
        if not (self.max_move >= 0.0) or self.max_run < 0:
            raise ValueError(f"still faces need max_move >= 0 and max_run >= 0, got {self.max_move}, {self.max_run}")


@dataclass(slots=True)
class _Kept:
    key: Hashable
    landmarks: np.ndarray     # (478, 2) float32: what the delta was made from
    region: Box               # the region the stage opened (shared with the frame's other stages)
    box: Box                  # where the delta lies, frame pixels
    delta: np.ndarray         # int16, box-sized x 3
    frame: int                # the frame it was last made or reused on
    run: int = 0              # reused frames in a row


class StillFaces:
    """One stage's last result per track (see the module's docstring). Call `begin` once per frame before
    anything else, then per face `reuse` (True: done, the region holds the reused result) or, after fresh
    work, `remember`. `fresh` / `reused` count faces since the helper was made (for stats and benches)."""

    def __init__(self, config: StillConfig = StillConfig()) -> None:
        self.config = config
        self._kept: dict[int, _Kept] = {}
        self._frame = 0
        self._session: str | None = None
        self.fresh = 0
        self.reused = 0

    def begin(self, session_id: str) -> None:
        """A new frame: entries not touched on the last frame are dropped; a new session drops all."""
        self._frame += 1
        if session_id != self._session:
            self._kept.clear()
            self._session = session_id
        stale = [t for t, k in self._kept.items() if k.frame < self._frame - 1]
        for t in stale:
            del self._kept[t]

    def reuse(self, planes: Planes | None, face: Face, key: Hashable) -> bool:
        """Whether `face` reuses its track's last result; when it does, the result is in the planes' region."""
        kept = self._kept.get(face.track_id) if planes is not None else None
        if kept is None or not self.config.enabled or face.track_id < 0 or face.keep is not None:
            return False
        if kept.key != key or kept.frame != self._frame - 1 or kept.run >= self.config.max_run:
            return False
        lm = np.asarray(face.landmarks, np.float32)[:, :2]
        if lm.shape != kept.landmarks.shape or moved(lm, kept.landmarks) > self.config.max_move:
            return False
        arr, (ox, oy, _, _) = planes.region(kept.region)
        x0, y0, x1, y1 = kept.box
        sub = arr[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
        np.clip(sub + kept.delta, 0, 255, out=sub, casting="unsafe")
        kept.frame, kept.run = self._frame, kept.run + 1
        self.reused += 1
        return True

    def remember(self, face: Face, key: Hashable, region: Box, box: Box, before: np.ndarray, after: np.ndarray) -> None:
        """A fresh result for `face`: `before` / `after` are the box's RGB before and after the stage's work."""
        self.fresh += 1
        if not self.config.enabled or face.track_id < 0:
            return
        delta = after.astype(np.int16)
        delta -= before
        self._kept[face.track_id] = _Kept(key, np.array(np.asarray(face.landmarks)[:, :2], np.float32), region, box,
                                          delta, self._frame)

    def clear(self) -> None:
        self._kept.clear()


def moved(a: np.ndarray, b: np.ndarray) -> float:
    """The largest landmark displacement between two (N, 2) sets, as a fraction of `b`'s width."""
    width = max(float(np.ptp(b[:, 0])), 1.0)
    return float(np.sqrt(((a - b) ** 2).sum(axis=1)).max()) / width
