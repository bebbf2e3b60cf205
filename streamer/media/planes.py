"""A decoded frame's pixels as the stream path keeps them: yuv420p planes, end to end.

Why: only the faces need RGB and only the watermark needs the whole frame (its luma), so converting and
copying whole frames makes each frame cost follow its area. `Planes` holds the I420 buffer (Y, then U,
then V, one contiguous array the encoders' frame is made from) and hands out RGB of face regions on
demand (`region`): each region is converted once, shared by every stage of the frame that asks for a box
inside it (or grown to the union with a box that overlaps it), and written back (`flush`) only where its
RGB changed: Y per changed pixel, U and V per 2x2 block whose chroma changed. Every other pixel keeps the decoded value exactly.

The same design runs on NumPy arrays in host memory (the CPU default: the conversions are
`kernels.numpy.color`'s) and on torch tensors on any device (`streamer.media.device_planes`: the buffer
uploaded once, regions converted by `kernels.torch.color`'s twins, the buffer downloaded once at the
edge). The few array operations that differ come from the kernels' twin for the buffer
(`kernels.twins.twin_for`); everything else is this one class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.twins import twin_for

Box = tuple[int, int, int, int]   # x0, y0, x1, y1 in frame pixels, even, inside the frame


@dataclass(slots=True)
class _Region:
    box: Box
    rgb: Any              # the working copy the stages change
    before: Any           # what the planes held when it was converted


class Planes:
    """One even-sized yuv420p frame: `y` (H x W), `u`, `v` (H/2 x W/2) are views of `buffer`, a NumPy
    array or a torch tensor on any device (`streamer.media.device_planes` puts a decoded frame there).
    Regions and luma are arrays of the same kind, worked on with the kernels' twin for it
    (`kernels.twins.twin_for`, chosen once here); `rgb_into` and `i420` give host memory."""

    def __init__(self, buffer: Any, width: int, height: int) -> None:
        self.ops = twin_for(buffer)
        if width % 2 or height % 2 or tuple(buffer.shape) != (height * 3 // 2, width) or buffer.dtype != self.ops.uint8:
            raise ValueError(f"expected an even-sized I420 buffer for {width}x{height}, got {buffer.dtype} {tuple(buffer.shape)}")
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

    @property
    def device(self) -> str | None:
        """The torch device the planes live on; None for NumPy in host memory."""
        return None if self.ops.ON_HOST else str(self.buffer.device)

    def snap(self, x0: float, y0: float, x1: float, y1: float) -> Box | None:
        """The even-aligned box inside the frame that covers [x0, x1) x [y0, y1); None when empty."""
        a = max(0, int(np.floor(x0)) & ~1)
        b = max(0, int(np.floor(y0)) & ~1)
        c = min(self.width, (int(np.ceil(x1)) + 1) & ~1)
        d = min(self.height, (int(np.ceil(y1)) + 1) & ~1)
        return (a, b, c, d) if c > a and d > b else None

    def _convert(self, box: Box) -> Any:
        x0, y0, x1, y1 = box
        return self.ops.color.i420_to_rgb(self.y[y0:y1, x0:x1], self.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2],
                               self.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2])

    def region(self, box: Box) -> tuple[Any, Box]:
        """An RGB working array covering `box` (even-aligned, see `snap`) and the box it really covers:
        an open region that holds `box` is shared; open regions that overlap it become one region over
        the boxes' union, their pixels (changed or not) carried into it, so a stage asking for a little
        more than an earlier one opened (the edits' margin around a close face) converts the frame once
        and writes it back once. Changes to the array reach the planes at the next `flush`; an array
        handed out before a merge is no longer the region's."""
        x0, y0, x1, y1 = box
        for r in self._regions:
            a, b, c, d = r.box
            if a <= x0 and b <= y0 and c >= x1 and d >= y1:
                return r.rgb, r.box
        overlapping = [r for r in self._regions if not (r.box[2] <= x0 or r.box[0] >= x1 or r.box[3] <= y0 or r.box[1] >= y1)]
        for r in overlapping:
            x0, y0 = min(x0, r.box[0]), min(y0, r.box[1])
            x1, y1 = max(x1, r.box[2]), max(y1, r.box[3])
        union = (x0, y0, x1, y1)
        rgb = self._convert(union)
        before = self.ops.copy(rgb)
        for r in overlapping:      # what the earlier regions hold and held, in place of the fresh conversion
            a, b, c, d = r.box
            rgb[b - y0:d - y0, a - x0:c - x0] = r.rgb
            before[b - y0:d - y0, a - x0:c - x0] = r.before
            self._regions.remove(r)
        reg = _Region(union, rgb, before)
        self._regions.append(reg)
        return reg.rgb, reg.box

    def keep(self, patches: list) -> None:
        """Put back, in every open region, the pixels each patch (`engines.faces.MaskPatch`: x0, y0 and a soft
        mask in frame pixels: a hand in front of a face) covers, toward what the region held when it was
        opened, feathered by the mask."""
        for p in patches:
            for r in self._regions:
                self.ops.blend.keep_patch(r.rgb, r.before, p.x0 - r.box[0], p.y0 - r.box[1], p.mask)

    def rgb_into(self, out: np.ndarray, box: Box) -> None:
        """Convert `box` into the same place of `out` (an H x W x 3 host array the caller keeps), read-only:
        no region is opened. Open regions are written back first."""
        self.flush()
        x0, y0, x1, y1 = box
        out[y0:y1, x0:x1] = self.ops.host(self._convert(box))

    def rgb(self) -> Any:
        """The whole frame as H x W x 3 RGB of the planes' kind (for a consumer that needs it all: the
        landmarker's search, a neural swapper); open regions are written back first."""
        self.flush()
        return self.ops.color.i420_to_rgb(self.y, self.u, self.v)

    def put_rgb(self, rgb: Any) -> None:
        """Take a whole RGB frame back (what a whole-frame consumer made, NumPy or torch), changed pixels only."""
        self.flush()
        before = self.ops.color.i420_to_rgb(self.y, self.u, self.v)
        self._write(_Region((0, 0, self.width, self.height), self.ops.asarray(rgb, self.buffer), before))

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
        ops = self.ops
        new, old = ops.color.rgb_to_i420(r.rgb), ops.color.rgb_to_i420(r.before)
        dst = (self.y[y0:y1, x0:x1], self.u[y0 // 2:y1 // 2, x0 // 2:x1 // 2], self.v[y0 // 2:y1 // 2, x0 // 2:x1 // 2])
        moved = [a != b for a, b in zip(new, old)]
        if ops.any_of(moved):
            for plane, a, m in zip(dst, new, moved):
                ops.blend.copy_where(plane, a, m)
            self.changed = True

    def luma(self) -> Any:
        """The Y plane to change in place (the watermark): open regions are written back first."""
        self.flush()
        self.changed = True
        return self.y

    def i420(self) -> np.ndarray:
        """The I420 buffer in host memory with every change written back (a device's buffer comes down
        here, once)."""
        self.flush()
        return self.ops.host(self.buffer)
