"""torch twin of kernels.numpy.color: the same Lab maths (sRGB gamma, D65) on any device."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from kernels.numpy.color import RATIO_LIMITS, delta_e, gaussian_kernel  # noqa: F401

_M = torch.tensor([[0.412453, 0.357580, 0.180423],
                   [0.212671, 0.715160, 0.072169],
                   [0.019334, 0.119193, 0.950227]], dtype=torch.float32)
_WHITE = torch.tensor([0.950456, 1.0, 1.088754], dtype=torch.float32)
_EPS = 0.008856
_KAPPA = 903.3


def rgb_to_lab(rgb: torch.Tensor) -> torch.Tensor:
    x = rgb.float() / 255.0 if rgb.dtype == torch.uint8 else rgb.float()
    lin = torch.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    xyz = lin @ _M.to(x.device).T / _WHITE.to(x.device)
    f = torch.where(xyz > _EPS, xyz.clamp(min=1e-12) ** (1.0 / 3.0), (_KAPPA * xyz + 16.0) / 116.0)
    y = xyz[..., 1]
    L = torch.where(y > _EPS, 116.0 * f[..., 1] - 16.0, _KAPPA * y)
    a = 500.0 * (f[..., 0] - f[..., 1])
    b = 200.0 * (f[..., 1] - f[..., 2])
    return torch.stack([L, a, b], dim=-1)


def lab_to_rgb(lab: torch.Tensor) -> torch.Tensor:
    L, a, b = lab[..., 0], lab[..., 1], lab[..., 2]
    fy = (L + 16.0) / 116.0
    fx = fy + a / 500.0
    fz = fy - b / 200.0
    f = torch.stack([fx, fy, fz], dim=-1)
    xyz = torch.where(f ** 3 > _EPS, f ** 3, (116.0 * f - 16.0) / _KAPPA)
    y = torch.where(L > _KAPPA * _EPS, ((L + 16.0) / 116.0) ** 3, L / _KAPPA)
    xyz = torch.stack([xyz[..., 0], y, xyz[..., 2]], dim=-1) * _WHITE.to(lab.device)
    lin = xyz @ torch.linalg.inv(_M).to(lab.device).T
    lin = lin.clamp(0.0, 1.0)
    srgb = torch.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin.clamp(min=1e-12) ** (1.0 / 2.4) - 0.055)
    return (srgb * 255.0).clamp(0.0, 255.0)


def lab_stats(lab: torch.Tensor, mask: torch.Tensor, step: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    sel = mask[::step, ::step] > 0.5
    px = lab[::step, ::step][sel]
    if px.shape[0] < 16:
        raise ValueError(f"too few skin pixels for colour statistics ({px.shape[0]})")
    return px.mean(dim=0), px.std(dim=0, unbiased=False) + 1e-3


def transfer_stats(lab: torch.Tensor, src, dst, amount: float = 1.0) -> torch.Tensor:
    src = [torch.as_tensor(v, dtype=torch.float32, device=lab.device) for v in src]
    dst = [torch.as_tensor(v, dtype=torch.float32, device=lab.device) for v in dst]
    ratio = (dst[1] / src[1]).clamp(*RATIO_LIMITS)
    scale = 1.0 + amount * (ratio - 1.0)
    shift = amount * dst[0] - src[0] * scale + (1.0 - amount) * src[0]
    return lab * scale + shift


def _box_down(x: torch.Tensor, factor: int) -> torch.Tensor:
    if factor == 1:
        return x
    h, w = x.shape
    ph, pw = (-h) % factor, (-w) % factor
    x = F.pad(x[None, None], (0, pw, 0, ph), mode="replicate") if (ph or pw) else x[None, None]
    return F.avg_pool2d(x, factor)[0, 0]


def _sep_blur(x: torch.Tensor, k: np.ndarray) -> torch.Tensor:
    kt = torch.from_numpy(k).to(x.device)
    r = len(k) // 2
    y = F.pad(x[None, None], (r, r, r, r), mode="replicate")
    y = F.conv2d(y, kt.view(1, 1, 1, -1))
    y = F.conv2d(y, kt.view(1, 1, -1, 1))
    return y[0, 0]


def masked_lowpass(channel: torch.Tensor, mask: torch.Tensor, sigma: float, factor: int = 4) -> torch.Tensor:
    h, w = channel.shape
    k = gaussian_kernel(max(sigma / factor, 0.5))
    num = _sep_blur(_box_down(channel * mask, factor), k)
    den = _sep_blur(_box_down(mask, factor), k)
    low = num / den.clamp(min=1e-3)
    return F.interpolate(low[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]


def relight(fg_lab: torch.Tensor, bg_lab: torch.Tensor, mask: torch.Tensor, sigma: float, amount: float = 1.0,
            factor: int = 4, colour: float = 0.0) -> torch.Tensor:
    """See kernels.numpy.color.relight."""
    h, w = fg_lab.shape[:2]
    k = h // mask.shape[0]
    g = gaussian_kernel(max(sigma / factor, 0.5))
    low_mask = _sep_blur(_box_down(mask, factor // k), g).clamp(min=1e-3)
    out = fg_lab.clone()
    for c, a in enumerate((amount, colour, colour)[:3 if colour else 1]):
        fg_c = fg_lab[..., c] if k == 1 else _box_down(fg_lab[..., c], k)
        diff = (_sep_blur(_box_down(bg_lab[..., c] * mask, factor // k), g)
                - _sep_blur(_box_down(fg_c * mask, factor // k), g)) / low_mask
        out[..., c] += a * F.interpolate(diff[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
    return out


def half_size(rgb: torch.Tensor) -> torch.Tensor:
    """2x2 block mean of uint8 RGB as float32 in [0, 1] (see the numpy twin)."""
    return F.avg_pool2d(rgb.float().permute(2, 0, 1)[None] / 255.0, 2)[0].permute(1, 2, 0)


# -- yuv420p (I420) <-> RGB, BT.601 limited range: twins of kernels.numpy.color.i420_to_rgb / rgb_to_i420.
# OpenCV's fixed-point arithmetic (coefficients scaled by 2^20, round half up, the same integer steps as
# its cvtColor), so the twins give the NumPy path's bytes exactly on every device. int32 holds every
# intermediate: at most 255 * 2^20 * 1.6 < 2^31.

_SHIFT = 20
_HALF = 1 << (_SHIFT - 1)
_CY, _CUB, _CUG, _CVG, _CVR = 1220542, 2116026, -409993, -852492, 1673527           # YUV -> RGB
_CRY, _CGY, _CBY, _CRU, _CGU, _CBU, _CGV, _CBV = 269484, 528482, 102760, -155188, -305135, 460324, -385875, -74448


def i420_to_rgb(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """H x W x 3 uint8 RGB of uint8 planes Y (H x W), U and V (H/2 x W/2); each chroma sample covers its 2x2 block."""
    yy = (y.to(torch.int32) - 16).clamp_(min=0) * _CY + _HALF
    up = lambda c: (c.to(torch.int32) - 128).repeat_interleave(2, 0).repeat_interleave(2, 1)  # noqa: E731
    cb, cr = up(u), up(v)
    r = yy + _CVR * cr
    g = yy + _CVG * cr + _CUG * cb
    b = yy + _CUB * cb
    return (torch.stack([r, g, b], dim=-1) >> _SHIFT).clamp_(0, 255).to(torch.uint8)


def rgb_to_i420(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uint8 planes Y (H x W), U, V (H/2 x W/2) of H x W x 3 uint8 RGB; each 2x2 block's chroma is its
    top-left pixel's (as OpenCV's conversion takes it)."""
    x = rgb.to(torch.int32)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = _CRY * r + _CGY * g + _CBY * b + ((16 << _SHIFT) + _HALF)
    s = x[::2, ::2]
    r, g, b = s[..., 0], s[..., 1], s[..., 2]
    cb = _CRU * r + _CGU * g + _CBU * b + ((128 << _SHIFT) + _HALF)
    cr = _CBU * r + _CGV * g + _CBV * b + ((128 << _SHIFT) + _HALF)
    q = lambda c: (c >> _SHIFT).clamp_(0, 255).to(torch.uint8)  # noqa: E731
    return q(y), q(cb), q(cr)
