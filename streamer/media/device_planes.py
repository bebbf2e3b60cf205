"""The frame's planes on a torch device: the stream path's `Planes` with tensors for arrays.

Why: on a GPU the stages' torch twins work on device tensors, so the decoded I420 buffer goes up once per
frame (one host -> device copy; on CUDA out of a page-locked host buffer this uploader reuses, with a
non-blocking copy), face regions are converted there (`kernels.torch.color.i420_to_rgb` / `rgb_to_i420`,
written back per changed pixel as on the host), the watermark adds to the Y plane there, and the buffer
comes down once, at the encoders' edge (`Planes.i420`). Torch's CPU device runs the same code (tests,
CPU-only machines). torch is imported only when planes on a device are asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from av import VideoFrame

from streamer.media.planes import Planes


def check_device(name: str) -> str | None:
    """Why planes cannot live on torch device `name` here (None: they can): the error a server gives at
    start-up rather than at its first frame."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        return f"pixels: {name!r} is not a torch device ({exc})"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return f"pixels: {name!r} asks for CUDA, but torch {torch.__version__} finds no CUDA device here"
        if device.index is not None and device.index >= torch.cuda.device_count():
            return f"pixels: {name!r} asks for CUDA device {device.index}, but only {torch.cuda.device_count()} exist"
    return None


def fill_i420(dst: np.ndarray, frame: VideoFrame) -> None:
    """Write an even-sized yuv420p frame's planes into `dst` ((H * 3/2) x W uint8: Y, then U, then V),
    skipping the decoder's row padding: the same bytes as `frame.to_ndarray()`, without its array."""
    w, h = frame.width, frame.height
    y, u, v = (np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in frame.planes)
    dst[:h] = y
    n = (h // 2) * (w // 2)
    flat = dst[h:].reshape(-1)
    flat[:n].reshape(h // 2, w // 2)[:] = u
    flat[n:].reshape(h // 2, w // 2)[:] = v


class DeviceUpload:
    """Decoded frames onto one torch device as `Planes`, one stream's frames after another (a frame
    worker holds one). On CUDA the page-locked host buffer is made at the first frame (and again when
    the frame size changes) and reused; a new frame waits for the previous copy out of it to finish."""

    def __init__(self, device: str) -> None:
        import torch

        problem = check_device(device)
        if problem is not None:
            raise RuntimeError(problem)
        self.device = torch.device(device)
        self._pinned: torch.Tensor | None = None
        self._copied: Any = None          # CUDA event recorded after the last copy out of `_pinned`

    def planes(self, frame: VideoFrame) -> Planes:
        """The planes of an even-sized yuv420p frame on this device (the decoder's frame is left as it is)."""
        import torch

        w, h = frame.width, frame.height
        if self.device.type != "cuda":
            host = np.empty((h * 3 // 2, w), np.uint8)
            fill_i420(host, frame)
            return Planes(torch.from_numpy(host).to(self.device), w, h)
        if self._copied is not None:
            self._copied.synchronize()     # the last frame's copy has left the buffer
        if self._pinned is None or tuple(self._pinned.shape) != (h * 3 // 2, w):
            self._pinned = torch.empty((h * 3 // 2, w), dtype=torch.uint8, pin_memory=True)
        fill_i420(self._pinned.numpy(), frame)
        buf = self._pinned.to(self.device, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()
        return Planes(buf, w, h)
