"""torch twins of the pixel kernels: same names and results as kernels.numpy, on any device.
`kernels.twins.twin_for` hands this package out for torch tensors."""

from __future__ import annotations

import numpy as np
import torch

from kernels.torch import background, blend, color, edits, warp, watermark  # noqa: F401  (the twin's modules)

ON_HOST = False


def put(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """NumPy `a` as a tensor on `like`'s device."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


def host(a: torch.Tensor) -> np.ndarray:
    return a.detach().cpu().numpy()


def copy(a: torch.Tensor) -> torch.Tensor:
    return a.clone()
