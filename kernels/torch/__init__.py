"""torch twins of the pixel kernels: same names and results as kernels.numpy, on any device.
`kernels.twins.twin_for` hands this package out for torch tensors."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from kernels.torch import background, blend, color, edits, warp, watermark  # noqa: F401  (the twin's modules)

ON_HOST = False
uint8 = torch.uint8


def put(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """NumPy `a` as a tensor on `like`'s device."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


def host(a: torch.Tensor) -> np.ndarray:
    return a.detach().cpu().numpy()


def copy(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


def asarray(a: Any, like: torch.Tensor) -> torch.Tensor:
    """`a` (a NumPy array or a tensor anywhere) as a tensor on `like`'s device."""
    t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
    return t.to(like.device)


def any_of(masks: Sequence[torch.Tensor]) -> bool:
    """Twin of kernels.numpy.any_of: one device -> host sync for all of them."""
    return bool(torch.stack([m.any() for m in masks]).any())
