"""The edit renderer the stages call: plan each face (engines/edit_plan.py), then apply the plans with the
pixel twin for the frame's device (NumPy for arrays, torch for tensors on any device)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from engines.colours import RGB
from engines.edit_plan import EditConfig, plan_face
from kernels.twins import twin_for

if TYPE_CHECKING:  # pragma: no cover
    import torch


def render_edits(image: "np.ndarray | torch.Tensor", faces: Sequence[np.ndarray], edits: Mapping[str, float],
                 config: EditConfig = EditConfig(), regions: Sequence[Any] | None = None,
                 colours: Mapping[str, RGB] | None = None) -> "np.ndarray | torch.Tensor":
    """A new H x W x 3 uint8 RGB frame (a NumPy array, or a torch tensor on the input's device) with `edits`
    applied to every face, each given by its (478, 2|3) pixel landmarks. The input is not modified.
    `regions`: per face, a face parser's regions (`engines.faces.Face.regions`) or None. `colours`: the
    makeup's sRGB per coloured edit (`engines.edit_plan.colours_for`); the vocabulary's by default."""
    if not isinstance(image, np.ndarray) and type(image).__module__ != "torch":
        raise TypeError(f"expected a NumPy array or a torch tensor, got {type(image).__name__}")
    twin = twin_for(image)
    if str(image.dtype).rpartition(".")[2] != "uint8" or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected HxWx3 uint8 RGB, got {image.dtype} {tuple(image.shape)}")
    out = twin.copy(image)
    apply = twin.edits.apply_plan
    shape = (int(image.shape[0]), int(image.shape[1]))
    for i, lm in enumerate(faces):
        plan = plan_face(shape, lm, edits, config, regions[i] if regions else None, colours)
        if plan is not None:
            apply(out, plan)
    return out


Region = Callable[[tuple[int, int, int, int]], "tuple[np.ndarray | torch.Tensor, tuple[int, int]]"]
"""(x0, y0, x1, y1) in the frame -> a writable H x W x 3 uint8 RGB array (NumPy, or a torch tensor on
any device) covering at least that box, and the frame position of its top-left corner (how the yuv420p
path hands out face regions)."""


def render_edits_in_regions(shape: tuple[int, int], faces: Sequence[np.ndarray], edits: Mapping[str, float],
                            region: Region, config: EditConfig = EditConfig(), regions: Sequence[Any] | None = None,
                            colours: Mapping[str, RGB] | None = None) -> int:
    """`edits` applied in place to the RGB regions `region` hands out, one per face's ROI (the same plans
    and kernels as `render_edits`, the torch twin for a tensor region, so a frame that is not whole RGB
    gets the same pixels); the number of faces edited."""
    done = 0
    for i, lm in enumerate(faces):
        plan = plan_face(shape, lm, edits, config, regions[i] if regions else None, colours)
        if plan is None:
            continue
        y0, y1, x0, x1 = plan.roi
        arr, (ox, oy) = region((x0, y0, x1, y1))
        twin_for(arr).edits.apply_plan(arr, replace(plan, roi=(y0 - oy, y1 - oy, x0 - ox, x1 - ox)))
        done += 1
    return done
