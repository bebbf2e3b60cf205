"""CPU twins of the pixel kernels (NumPy/OpenCV): the default path. `kernels.twins.twin_for` hands this
package out for NumPy pixels; `kernels.torch` has the same module names and helpers."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kernels.numpy import background, blend, color, edits, warp, watermark  # noqa: F401  (the twin's modules)

ON_HOST = True
uint8 = np.uint8


def put(a: np.ndarray, like: Any = None) -> np.ndarray:
    """`a` where `like` lives: host memory already."""
    return a


def host(a: Any) -> np.ndarray:
    return np.asarray(a)


def copy(a: np.ndarray) -> np.ndarray:
    return a.copy()


def asarray(a: Any, like: Any = None) -> np.ndarray:
    """`a` (a NumPy array or a torch tensor) as a contiguous NumPy array in host memory."""
    return np.ascontiguousarray(a if isinstance(a, np.ndarray) else a.detach().cpu().numpy())


def any_of(masks: Sequence[np.ndarray]) -> bool:
    """Whether any of these boolean arrays holds a True."""
    return any(bool(m.any()) for m in masks)
