"""One choice of twin per frame: the kernels package that matches the frame's pixels.

`kernels.numpy` (NumPy/OpenCV, host memory) and `kernels.torch` (any torch device) hold modules of the same
names (`blend`, `color`, `warp`, `edits`, `watermark`, `background`) that give the same results, and the same
helpers: `ON_HOST`, `uint8`, `put(a, like)` (a NumPy array where `like` lives), `asarray(a, like)` (either
kind there), `host(a)` (back to NumPy), `copy(a)` and `any_of(masks)`.
A stage asks once per frame and calls through what it got; torch is imported only for tensors."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def twin_for(pixels: Any) -> ModuleType:
    """`kernels.numpy` for a NumPy array, `kernels.torch` for a torch tensor."""
    if isinstance(pixels, np.ndarray):
        from kernels import numpy as twin
    else:
        from kernels import torch as twin
    return twin
