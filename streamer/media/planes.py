"""A decoded frame's pixels as the CPU stream path keeps them: yuv420p planes, end to end.

Why: only the faces need RGB and only the watermark needs the whole frame (its luma), so converting and
copying whole frames makes each frame cost follow its area. `Planes` holds the I420 buffer (Y, then U,
then V, one contiguous array the encoders' frame is made from) and hands out RGB of face regions on
demand (`region`): each region is converted once, shared by every stage of the frame that asks for a box
inside it, and written back (`flush`) only where its RGB changed: Y per changed pixel, U and V per 2x2
block whose chroma changed. Every other pixel keeps the decoded value exactly. The conversions are the
kernels' (`kernels.numpy.color.i420_to_rgb` / `rgb_to_i420`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.numpy.blend import keep_patch
from kernels.numpy.color import i420_to_rgb, rgb_to_i420

Box = tuple[int, int, int, int]   # x0, y0, x1, y1 in frame pixels, even, inside the frame


@dataclass(slots=True)
class _Region:
    box: Box
    rgb: np.ndarray       # the working copy the stages change
    before: np.ndarray    # what the planes held when it was converted


class Planes:
    """One even-sized yuv420p frame: `y` (H x W), `u`, `v` (H/2 x W/2) are views of `buffer`."""

    def __init__(self, buffer: np.ndarray, width: int, height: int) -> None:
        if width % 2 or height % 2 or buffer.shape != (height * 3 // 2, width) or buffer.dtype != np.uint8:
            raise ValueError(f"expected an even-sized I420 buffer for {width}x{height}, got {buffer.dtype} {buffer.shape}")
        self.buffer = buffer
        self.width, self.height = width, height
        self.y = buffer[:height]
        chroma = buffer[height:].reshape(2, height // 2, width // 2)
        self.u, self.v = chroma[0], chroma[1]
        self.changed = False              # any pixel written since decoding
        self._regions: list[_Region] = []

    @property
    def shape(self) -> tuple[int, int]:
        return self.height, self.width

    def snap(self, x0: float, y0: float, x1: float, y1: float) -> Box | None:
        """The even-aligned box inside the frame that covers [x0, x1) x [y0, y1); None when empty."""
        a = max(0, int(np.floor(x0)) & ~1)
        b = max(0, int(np.floor(y0)) & ~1)
        c = min(self.width, (int(np.ceil(x1)) + 1) & ~1)
        d = min(self.height, (int(np.ceil(y1)) + 1) & ~1)
        return (a, b, c, d) if c > a and d > b else None

    def region(self, box: Box) -> tuple[np.ndarray, Box]:
        """An RGB working array covering `box` (even-aligned, see `snap`) and the box it really covers
        (an open region that holds `box` is shared; overlapping ones are written back first). Changes to
        the array reach the planes at the next `flush`."""
        x0, y0, x1, y1 = box
        for r in self._regions:
            a, b, c, d = r.box
            if a <= x0 and b <= y0 and c >= x1 and d >= y1:
                return r.rgb, r.box
        overlapping = [r for r in self._regions if not (r.box[2] <= x0 or r.box[0] >= x1 or r.box[3] <= y0 or r.box[1] >= y1)]
        for r in overlapping:
            self._write(r)
            self._regions.remove(r)
        rgb = i420_to_rgb(self.y[y0:y1, x0:x1], self.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2], self.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2])
        reg = _Region(box, rgb, rgb.copy())
        self._regions.append(reg)
        return reg.rgb, reg.box

    def keep(self, patches: list) -> None:
        """Put back, in every open region, the pixels each patch (`engines.faces.MaskPatch`: x0, y0 and a soft
        mask in frame pixels: a hand in front of a face) covers, toward what the region held when it was
        opened, feathered by the mask."""
        for p in patches:
            for r in self._regions:
                keep_patch(r.rgb, r.before, p.x0 - r.box[0], p.y0 - r.box[1], p.mask)

    def rgb_into(self, out: np.ndarray, box: Box) -> None:
        """Convert `box` into the same place of `out` (an H x W x 3 array the caller keeps), read-only:
        no region is opened. Open regions are written back first."""
        self.flush()
        x0, y0, x1, y1 = box
        out[y0:y1, x0:x1] = i420_to_rgb(self.y[y0:y1, x0:x1], self.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2],
                                        self.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2])

    def rgb(self) -> np.ndarray:
        """The whole frame as H x W x 3 RGB (for a consumer that needs it all: the landmarker's search, a
        neural swapper); open regions are written back first."""
        self.flush()
        return i420_to_rgb(self.y, self.u, self.v)

    def put_rgb(self, rgb: np.ndarray) -> None:
        """Take a whole RGB frame back (what a whole-frame consumer made), changed pixels only."""
        self.flush()
        before = i420_to_rgb(self.y, self.u, self.v)
        self._write(_Region((0, 0, self.width, self.height), np.ascontiguousarray(rgb), before))

    def flush(self) -> None:
        """Write every open region's changes into the planes."""
        for r in self._regions:
            self._write(r)
        self._regions.clear()

    def _write(self, r: _Region) -> None:
        # A pixel counts as changed where its converted value differs from what its RGB before the
        # stages converts to: the same test as comparing RGB (an unchanged pixel converts the same), at
        # a tenth of the cost, and per plane, so chroma follows OpenCV's rule for its block.
        x0, y0, x1, y1 = r.box
        new, old = rgb_to_i420(r.rgb), rgb_to_i420(r.before)
        dst = (self.y[y0:y1, x0:x1], self.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2], self.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2])
        for plane, a, b in zip(dst, new, old):
            moved = a != b
            if moved.any():
                np.copyto(plane, a, where=moved)
                self.changed = True

    def luma(self) -> np.ndarray:
        """The Y plane to change in place (the watermark): open regions are written back first."""
        self.flush()
        self.changed = True
        return self.y

    def i420(self) -> np.ndarray:
        """The I420 buffer with every change written back."""
        self.flush()
        return self.buffer
