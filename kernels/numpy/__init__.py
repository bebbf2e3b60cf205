"""CPU twins of the pixel kernels (NumPy/OpenCV): the default path. `kernels.twins.twin_for` hands this
package out for NumPy pixels; `kernels.torch` has the same module names and helpers."""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.numpy import background, blend, color, edits, warp, watermark  # noqa: F401  (the twin's modules)

ON_HOST = True


def put(a: np.ndarray, like: Any = None) -> np.ndarray:
    """`a` where `like` lives: host memory already."""
    return a


def host(a: Any) -> np.ndarray:
    return np.asarray(a)


def copy(a: np.ndarray) -> np.ndarray:
    return a.copy()
