"""torch twin of kernels.numpy.warp: the same maps and the same bilinear sampling, on any device.

The id map is integer raster work on a few hundred triangles; like the masks it is drawn on the CPU
(`rasterize_triangles` is the numpy one) and uploaded. The per-pixel maths and sampling run on the device.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from kernels.numpy.warp import affine_tables, rasterize_triangles  # noqa: F401  (same names on both paths)


def triangle_maps(ids: torch.Tensor, tables, origin: tuple[float, float] = (0.0, 0.0), identity=False,
                  step: float = 1.0):
    """See kernels.numpy.warp.triangle_maps; `ids` (H, W) integer and `tables` (T, 2, 3) float32 tensors
    (or a list of them)."""
    many = isinstance(tables, (list, tuple))
    tabs = list(tables) if many else [tables]
    idents = identity if isinstance(identity, (list, tuple)) else [identity] * len(tabs)
    h, w = ids.shape
    dev = ids.device
    ox, oy = origin
    px = (torch.arange(w, device=dev, dtype=torch.float32) * step + ox)[None, :].expand(h, w)
    py = (torch.arange(h, device=dev, dtype=torch.float32) * step + oy)[:, None].expand(h, w)
    covered = ids >= 0
    idx = ids.clamp(min=0).long()
    out = []
    for tab, ident in zip(tabs, idents):
        a = tab.reshape(-1, 6)[idx]                                # H,W,6
        mx = a[..., 0] * px + a[..., 1] * py + a[..., 2]
        my = a[..., 3] * px + a[..., 4] * py + a[..., 5]
        if ident:
            fx, fy = px, py
        else:
            fx = torch.full_like(mx, -1.0)
            fy = torch.full_like(my, -1.0)
        out.append((torch.where(covered, mx, fx), torch.where(covered, my, fy)))
    return out if many else out[0]


def remap(image: torch.Tensor, map_x: torch.Tensor, map_y: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of an H x W x C (uint8 or float) tensor; edge pixels repeat outside.
    uint8 in gives uint8 out (rounded), like cv2.remap."""
    h, w = image.shape[:2]
    src = image.permute(2, 0, 1)[None].float()
    gx = map_x * (2.0 / max(w - 1, 1)) - 1.0
    gy = map_y * (2.0 / max(h - 1, 1)) - 1.0
    grid = torch.stack([gx, gy], dim=-1)[None]
    out = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=True)[0].permute(1, 2, 0)
    if image.dtype == torch.uint8:
        return out.round().clamp(0, 255).to(torch.uint8)
    return out.to(image.dtype)


def piecewise_affine(image: torch.Tensor, src_pts: np.ndarray, dst_pts: np.ndarray, tris: np.ndarray,
                     out_shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(rasterize_triangles(out_shape, dst_pts, tris)).to(image.device)
    tables = torch.from_numpy(affine_tables(src_pts, dst_pts, tris)).to(image.device)
    mx, my = triangle_maps(ids, tables)
    return remap(image, mx, my), ids >= 0


def resize_to(x: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.warp.resize_to (same pixel-centre alignment as cv2.INTER_LINEAR)."""
    if x.ndim == 2:
        return F.interpolate(x[None, None].float(), size=tuple(shape), mode="bilinear", align_corners=False)[0, 0]
    return F.interpolate(x.permute(2, 0, 1)[None].float(), size=tuple(shape), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) rows of overlap weights: output i averages input [i * n_in / n_out, (i + 1) * n_in / n_out),
    a footprint clipped at the last input pixel (OpenCV's INTER_AREA table)."""
    scale = n_in / n_out
    start = np.arange(n_out, dtype=np.float64)[:, None] * scale
    end = np.minimum(start + scale, n_in)
    j = np.arange(n_in, dtype=np.float64)[None, :]
    w = np.clip(np.minimum(end, j + 1) - np.maximum(start, j), 0.0, None)
    return (w / (end - start)).astype(np.float32)


def area_resize(x: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.warp.area_resize: the same footprint weights, as two small matrix products."""
    h, w = x.shape[:2]
    wy = torch.from_numpy(_area_weights(h, int(shape[0]))).to(x.device)
    wx = torch.from_numpy(_area_weights(w, int(shape[1]))).to(x.device)
    xf = x.float()
    if xf.ndim == 2:
        return wy @ xf @ wx.T
    return torch.einsum("oh,hwc,pw->opc", wy, xf, wx)
