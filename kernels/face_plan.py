"""One face's edit as the pixel kernels take it: a region of interest, masked colour amounts, the skin
filter's settings and a backward map, all plain NumPy arrays and numbers.

Both twins (kernels/numpy/edits.py, kernels/torch/edits.py) consume the same plan; the torch twin uploads
its small arrays. Whoever draws the plan decides where each op applies; the kernels only apply them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Masked:
    """A signed amount and the float32 (h, w) weights in [0, 1] it is applied with, at the colour level;
    for makeup, the sRGB colour it paints toward."""

    amount: float
    mask: np.ndarray
    rgb: tuple[float, float, float] | None = None


@dataclass(frozen=True, slots=True)
class Drawn:
    """Makeup drawn at full resolution on part of the ROI, where the colour level is too coarse for it (an
    eyeliner a few pixels wide): its (y0, y1, x0, x1) in ROI pixels and the op, whose mask covers that box."""

    box: tuple[int, int, int, int]
    op: Masked


@dataclass(frozen=True, slots=True)
class FacePlan:
    """The ops on one face, each None when off. Colour ops run in field order, at 1/(2 level) of the ROI;
    their amounts are at full strength (the mask scales them per pixel):

      tone        x += amount * (grey(x) in the colour of the skin around - x) (kernels.numpy.edits.even_tone)
      warmth      x += amount * WARMTH_RGB
      brightness  > 0: toward white by amount; < 0: x *= 1 + amount
      tan         x *= 1 - amount * TAN_ABSORB (per channel: blue most, so darker and golder; < 0: paler)
      lips        > 0: toward rgb by amount (chroma; lightness PAINT_LUMA of it); < 0: toward a nude grey + 12
      blush       > 0: toward rgb by amount (as lips); < 0: red channel += amount (8-bit levels)
      contour     x *= 1 - amount
      lids        > 0: toward rgb by amount (scaled by lid_grey, below), lightness too; < 0: toward white by -amount
      brows       as lids (not scaled), lightness one way only, as a liner's (below)
      saturation  chroma *= 1 + amount
      gloss       > 0: toward white by amount (a highlight); < 0: -amount of the shine taken off
                  (matte; kernels.numpy.edits.shine: the white on top of the region's own colour)
      glow        as gloss
      smooth      self-guided filter blended in by amount (< 0 pushes texture past the original)

    Then `liners`, each at full resolution on its box: toward rgb by amount, lightness one way only (a dark
    ink darkens and never lifts lashes darker than itself, a light one lightens: ink_darkens); then the warp.
    """

    roi: tuple[int, int, int, int]          # y0, y1, x0, x1 in the frame; sides multiples of 4 * level
    level: int = 1                          # q: colour at 1/(2q), filter coefficients at 1/(4q)
    tone: Masked | None = None
    warmth: Masked | None = None
    brightness: Masked | None = None
    tan: Masked | None = None
    lips: Masked | None = None
    blush: Masked | None = None
    contour: Masked | None = None
    lids: Masked | None = None
    brows: Masked | None = None
    saturation: Masked | None = None
    gloss: Masked | None = None
    glow: Masked | None = None
    smooth: Masked | None = None
    smooth_radius: int = 0                  # guided-filter window radius in ROI pixels
    smooth_eps: float = 0.0                 # guided-filter eps in 8-bit units squared
    shine_radius: int = 0                   # matte's base colour: box radius in colour-level cells
    tone_radius: int = 0                    # even tone's skin colour: box radius in colour-level cells
    lid_grey: float = 0.0                   # lids > 0: the amount scaled by (lid_grey - ink) / (the lids' own
                                            # mask-weighted grey - ink), ink the colour's grey, within [0.5, 2]:
                                            # a shadow darkens a light and a dark lid alike (0: as given)
    appearance_box: tuple[int, int, int, int] | None = None   # y0, y1, x0, x1 of the ROI the colour ops and the
                                            # smoothing work on (the masks cover it, at the colour level; sides
                                            # multiples of 4 * level); None: all of the ROI
    liners: tuple[Drawn, ...] = ()           # eyeliner (both eyes in one patch), drawn over the colour work
    map_xy: np.ndarray | None = None        # (h, w, 2) float32 sample positions in ROI pixels
    map_box: tuple[int, int, int, int] | None = None   # y0, y1, x0, x1 of the ROI where the map moves pixels
                                            # (kernels.numpy.flow.moving_map); elsewhere it is the identity
                                            # to a remap; None: all of the ROI

    @property
    def colour(self) -> bool:
        """Any colour op on."""
        return any(op is not None for op in (self.tone, self.warmth, self.brightness, self.tan, self.lips, self.blush,
                                             self.contour, self.lids, self.brows, self.saturation, self.gloss, self.glow))

    @property
    def appearance(self) -> bool:
        """Any work on the ROI's pixels before the warp."""
        return self.colour or self.smooth is not None
