"""torch twin of kernels.numpy.blend: the same 5-tap pyramid with reflect-101 borders, on any device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.numpy.blend import pyramid_levels

_K = torch.tensor([1, 4, 6, 4, 1], dtype=torch.float32) / 16.0


def alpha_blend(fg: torch.Tensor, bg: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    a = alpha[..., None] if fg.ndim == 3 else alpha
    bgf = bg.float()
    return bgf + (fg.float() - bgf) * a


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
    c = x.shape[0]
    up = torch.zeros((c,) + tuple(shape), dtype=torch.float32, device=x.device)
    up[:, ::2, ::2] = x
    return _sep(up, _K * 2.0)


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


def multiband_blend(fg: torch.Tensor, bg: torch.Tensor, alpha: torch.Tensor, levels: int = 4) -> torch.Tensor:
    return bg.float() + multiband_delta(fg, bg, alpha, levels)
