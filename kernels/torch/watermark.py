"""Torch twin of `kernels.numpy.watermark`: the same mark, embedded and read on any torch device.

The key, the tile layout and the channel code are shared with the NumPy path (they are built once per
payload, not per frame); the per-frame work (embedding, and the detector's luma, whitening, folding and
correlations) runs in torch. Embedding is bit-exact with the NumPy twin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from kernels.numpy import watermark as np_wm
from kernels.numpy.watermark import Detection, WatermarkConfig, WatermarkKey, make_key  # noqa: F401


@dataclass(frozen=True, slots=True)
class Pattern:
    delta: torch.Tensor   # (H, W, 1) int16 on the frame's device
    payload: int


def pattern_for(key: WatermarkKey, shape: tuple[int, int], payload: int, device: str | torch.device = "cpu") -> Pattern:
    p = np_wm.pattern_for(key, shape, payload)
    delta = p.pos[:, :, :1].astype(np.int16) - p.neg[:, :, :1].astype(np.int16)
    return Pattern(delta=torch.from_numpy(delta).to(device), payload=payload)


def luma_pattern_for(key: WatermarkKey, shape: tuple[int, int], payload: int, device: str | torch.device = "cpu") -> Pattern:
    """Twin of `kernels.numpy.watermark.luma_pattern_for`: the mark for a Y plane, delta (H, W) int16."""
    p = np_wm.luma_pattern_for(key, shape, payload)
    return Pattern(delta=torch.from_numpy(p.pos.astype(np.int16) - p.neg.astype(np.int16)).to(device), payload=payload)


def embed_luma(y: torch.Tensor, pattern: Pattern, out: torch.Tensor | None = None) -> torch.Tensor:
    """An H x W uint8 Y plane + a `luma_pattern_for` pattern, saturating at 0/255 (into `out` when given:
    `out=y` marks the plane in place, as the NumPy twin's `embed(y, pattern, out=y)`)."""
    if y.dtype != torch.uint8 or tuple(y.shape) != tuple(pattern.delta.shape):
        raise ValueError(f"pattern is for {tuple(pattern.delta.shape)} uint8, plane is {tuple(y.shape)} {y.dtype}")
    res = (y.to(torch.int16) + pattern.delta).clamp_(0, 255).to(torch.uint8)
    if out is not None:
        out.copy_(res)
        return out
    return res


def embed(image: torch.Tensor, pattern: Pattern, out: torch.Tensor | None = None) -> torch.Tensor:
    """H x W x 3 uint8 tensor + the pattern on every channel, saturating at 0/255."""
    if image.dtype != torch.uint8 or tuple(image.shape[:2]) != tuple(pattern.delta.shape[:2]) or image.shape[2] != 3:
        raise ValueError(f"pattern is for {tuple(pattern.delta.shape[:2])} x 3 uint8, image is {tuple(image.shape)} {image.dtype}")
    res = (image.to(torch.int16) + pattern.delta).clamp_(0, 255).to(torch.uint8)
    if out is not None:
        out.copy_(res)
        return out
    return res


def luma(image: torch.Tensor) -> torch.Tensor:
    if image.ndim == 2:
        return image.float()
    x = image[..., :3].float()
    return x[..., 0] * 0.299 + x[..., 1] * 0.587 + x[..., 2] * 0.114


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    r = int(math.ceil(sigma * 4))
    t = torch.arange(-r, r + 1, dtype=x.dtype, device=x.device)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    k = k / k.sum()
    y = x[None, None]
    y = F.conv2d(F.pad(y, (r, r, 0, 0), mode="reflect"), k.view(1, 1, 1, -1))
    y = F.conv2d(F.pad(y, (0, 0, r, r), mode="reflect"), k.view(1, 1, -1, 1))
    return y[0, 0]


def _median(x: torch.Tensor, k: int) -> torch.Tensor:
    r = k // 2
    q = torch.clamp(x, 0, 255).round()   # the NumPy twin takes the median of uint8 luma
    p = F.pad(q[None, None], (r, r, r, r), mode="replicate")
    return F.unfold(p, k).median(dim=1).values.reshape(x.shape)


def whiten(y: torch.Tensor, config: WatermarkConfig) -> torch.Tensor:
    hp = y - _median(y, config.median_size)
    hp = hp - _blur(hp, config.highpass_sigma)
    env = torch.sqrt(_blur(hp * hp, config.envelope_sigma)) + 1.0
    return hp / env


def _resize(x: torch.Tensor, size_hw: tuple[int, int]) -> torch.Tensor:
    if tuple(x.shape) == tuple(size_hw):
        return x
    down = size_hw[0] < x.shape[0]
    return F.interpolate(x[None, None], size=size_hw, mode="bilinear", align_corners=False, antialias=down)[0, 0]


def canonical(image: torch.Tensor, config: WatermarkConfig) -> torch.Tensor:
    y = luma(image)
    h, w = y.shape
    f = config.tile * config.tiles_per_short / min(h, w)
    return whiten(_resize(y, (max(1, round(h * f)), max(1, round(w * f)))), config)


def fold(r: torch.Tensor, n: int) -> torch.Tensor:
    h, w = r.shape
    ph, pw = -(-h // n) * n, -(-w // n) * n
    pad = F.pad(r, (0, pw - w, 0, ph - h))
    return pad.reshape(ph // n, n, pw // n, n).sum(dim=(0, 2))


def extract(image: torch.Tensor, key: WatermarkKey) -> Detection:
    """Detector front end in torch; the few-hundred-number decision is shared with the NumPy twin."""
    cfg = key.config
    c = canonical(image, cfg)
    h, w = c.shape
    folds = []
    for s in cfg.scales:
        r = c if s == 1.0 else F.interpolate(c[None, None], size=(max(1, round(h * s)), max(1, round(w * s))),
                                             mode="bilinear", align_corners=False)[0, 0]
        folds.append((float(s), fold(r, cfg.tile).double().cpu().numpy()))
    return np_wm.decide(folds, key)


psnr = np_wm.psnr
