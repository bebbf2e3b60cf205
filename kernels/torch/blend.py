"""torch twin of kernels.numpy.blend: the same 5-tap pyramid with reflect-101 borders, on any device."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch
import torch.nn.functional as F

from kernels.numpy.blend import pyramid_levels

_K = torch.tensor([1, 4, 6, 4, 1], dtype=torch.float32) / 16.0


def alpha_blend(fg: torch.Tensor, bg: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    a = alpha[..., None] if fg.ndim == 3 else alpha
    bgf = bg.float()
    return bgf + (fg.float() - bgf) * a


def keep_patch(out: torch.Tensor, original: torch.Tensor, x0: int, y0: int, mask: "torch.Tensor | np.ndarray") -> None:
    """Twin of kernels.numpy.blend.keep_patch (in place on a uint8 H x W x C tensor; mask h x w float32,
    a tensor or a NumPy array)."""
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(np.ascontiguousarray(mask, np.float32))
    h, w = out.shape[:2]
    mh, mw = mask.shape
    ya, xa, yb, xb = max(0, y0), max(0, x0), min(h, y0 + mh), min(w, x0 + mw)
    if yb <= ya or xb <= xa:
        return
    m = mask[ya - y0:yb - y0, xa - x0:xb - x0, None].to(device=out.device, dtype=torch.float32)
    o = out[ya:yb, xa:xb].float()
    res = o + (original[ya:yb, xa:xb].float() - o) * m
    out[ya:yb, xa:xb] = (res + 0.5).clamp(0, 255).to(torch.uint8)


def keep_patches(out: torch.Tensor, original: torch.Tensor, patches: Iterable[Any]) -> None:
    """Twin of kernels.numpy.blend.keep_patches."""
    for p in patches:
        if p is not None:
            keep_patch(out, original, p.x0, p.y0, p.mask)


def copy_where(dst: torch.Tensor, src: torch.Tensor, where: torch.Tensor) -> None:
    """Twin of kernels.numpy.blend.copy_where."""
    dst.copy_(torch.where(where, src, dst))


def write_where(dst: torch.Tensor, src: torch.Tensor, where: torch.Tensor) -> None:
    """Twin of kernels.numpy.blend.write_where."""
    if src.dtype != torch.uint8:
        src = (src + 0.5).clamp(0, 255).to(torch.uint8)
    dst.copy_(torch.where(where[..., None], src, dst))


def _sep(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """x: (C, H, W); separable 5-tap filter with reflect-101 borders (torch's 'reflect')."""
    c = x.shape[0]
    kk = k.to(x.device)
    y = F.pad(x[None], (2, 2, 2, 2), mode="reflect")
    y = F.conv2d(y, kk.view(1, 1, 1, 5).expand(c, 1, 1, 5), groups=c)
    y = F.conv2d(y, kk.view(1, 1, 5, 1).expand(c, 1, 5, 1), groups=c)
    return y[0]


def pyr_down(x: torch.Tensor) -> torch.Tensor:
    return _sep(x, _K)[:, ::2, ::2]


def pyr_up(x: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.blend.pyr_up: twice the size, filtered, cropped to `shape`."""
    c, h, w = x.shape
    up = torch.zeros((c, 2 * h, 2 * w), dtype=torch.float32, device=x.device)
    up[:, ::2, ::2] = x
    return _sep(up, _K * 2.0)[:, :shape[0], :shape[1]]


def multiband_delta(fg: torch.Tensor, bg: torch.Tensor, alpha: torch.Tensor, levels: int = 4) -> torch.Tensor:
    """See kernels.numpy.blend.multiband_delta; H x W x C tensors in, float32 H x W x C out."""
    diff = fg.float() - bg.float()
    n = pyramid_levels(tuple(alpha.shape), levels)
    if n == 0:
        return diff * alpha.float()[..., None]
    g = [diff.permute(2, 0, 1)]
    m = [alpha.float()[None]]
    for _ in range(n):
        g.append(pyr_down(g[-1]))
        m.append(pyr_down(m[-1]))
    out = g[n] * m[n]
    for i in range(n - 1, -1, -1):
        shape = tuple(g[i].shape[1:])
        lap = g[i] - pyr_up(g[i + 1], shape)
        out = pyr_up(out, shape) + lap * m[i]
    return out.permute(1, 2, 0)


def detail_blend(bg: torch.Tensor, bg_low: torch.Tensor, change: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """See kernels.numpy.blend.detail_blend (bilinear, pixel-centre aligned, as cv2.INTER_LINEAR)."""
    h, w = bg.shape[:2]
    up = lambda x: F.interpolate(x.float().permute(2, 0, 1)[None], size=(h, w), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)  # noqa: E731
    a = F.interpolate(alpha.float()[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0, ..., None]
    bgf = bg.float()
    return (bgf + up(change) - a * (bgf - up(bg_low)) + 0.5).clamp(0, 255).to(torch.uint8)


def multiband_blend(fg: torch.Tensor, bg: torch.Tensor, alpha: torch.Tensor, levels: int = 4) -> torch.Tensor:
    return bg.float() + multiband_delta(fg, bg, alpha, levels)
