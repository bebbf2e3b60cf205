"""torch twin of kernels.numpy.background: the same guided upsampling, steadying, blur and compositing on
any device (reflect-101 borders, bilinear with half-pixel centres, area means), for planes that live there."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.numpy.background import ROOM_SLACK, ROOM_TRUST, Upsampled, blur_sigma, halvings  # noqa: F401  (the same rules)
from kernels.numpy.color import gaussian_kernel
from kernels.torch.color import i420_to_rgb


def _area_weights(n_in: int, n_out: int, device: torch.device) -> torch.Tensor:
    """(n_out, n_in) weights of OpenCV's INTER_AREA shrink along one axis: output pixel i averages the input
    over [i s, (i + 1) s), s = n_in / n_out, each input pixel weighted by how much of it lies inside."""
    s = n_in / n_out
    lo = torch.arange(n_out, dtype=torch.float64) * s
    hi = lo + s
    j = torch.arange(n_in, dtype=torch.float64)
    cover = (torch.minimum(hi[:, None], j[None, :] + 1) - torch.maximum(lo[:, None], j[None, :])).clamp(min=0)
    return (cover / s).to(device=device, dtype=torch.float32)


def _area(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Area mean of a 2-D or H x W x C tensor down to size = (w, h), float32: OpenCV's INTER_AREA (whole
    factors by pooling, others by the coverage weights of each axis)."""
    w, h = size
    t = x.float()
    chw = t[None] if t.ndim == 2 else t.permute(2, 0, 1)
    in_h, in_w = chw.shape[1:]
    if in_h % h == 0 and in_w % w == 0:
        out = F.avg_pool2d(chw[None], (in_h // h, in_w // w))[0]
    else:
        out = _area_weights(in_h, h, t.device) @ chw @ _area_weights(in_w, w, t.device).T
    return out[0] if t.ndim == 2 else out.permute(1, 2, 0)


def _linear(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    w, h = size
    if x.ndim == 2:
        return F.interpolate(x[None, None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
    return F.interpolate(x.permute(2, 0, 1)[None], size=(h, w), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)


def _u8(x: torch.Tensor) -> torch.Tensor:
    return (x + 0.5).clamp_(0, 255).to(torch.uint8)


def i420_thumbnail(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.background.i420_thumbnail."""
    w, h = size
    return i420_to_rgb(_u8(_area(y, (w, h))), _u8(_area(u, (w // 2, h // 2))), _u8(_area(v, (w // 2, h // 2))))


def rgb_thumbnail(rgb: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return _u8(_area(rgb, size))


def thumbnail_guide(thumbnail: torch.Tensor) -> torch.Tensor:
    t = thumbnail.float()
    return (t[..., 0] * 0.299 + t[..., 1] * 0.587 + t[..., 2] * 0.114) * (1.0 / 255.0)


def _box(x: torch.Tensor, radius: int) -> torch.Tensor:
    k = 2 * radius + 1
    y = F.pad(x[None, None], (radius, radius, radius, radius), mode="reflect")
    return F.avg_pool2d(y, k, stride=1)[0, 0]


def steady(prev_mask: torch.Tensor | None, mask: torch.Tensor, prev_guide: torch.Tensor | None, guide: torch.Tensor,
           still_weight: float = 0.25, motion_level: float = 0.05, noise: float = 0.01, radius: int = 2) -> torch.Tensor:
    """See kernels.numpy.background.steady."""
    if prev_mask is None or prev_guide is None or prev_mask.shape != mask.shape or prev_guide.shape != guide.shape:
        return mask.float().clone()
    motion = _box((guide - prev_guide).abs(), radius)
    w = ((motion - noise) * (1.0 / motion_level)).clamp(0.0, 1.0) * (1.0 - still_weight) + still_weight
    return prev_mask + w * (mask - prev_mask)


def guided_coefficients(mask: torch.Tensor, guide: torch.Tensor, radius: int = 3, eps: float = 1e-3,
                        low: float = 0.25, high: float = 0.75) -> tuple[torch.Tensor, torch.Tensor]:
    """See kernels.numpy.background.guided_coefficients."""
    p, i = mask.float(), guide.float()
    mean_i, mean_p = _box(i, radius), _box(p, radius)
    var_i = _box(i * i, radius) - mean_i * mean_i
    cov = _box(i * p, radius) - mean_i * mean_p
    a = cov / (var_i + eps)
    b = mean_p - a * mean_i
    gain = 1.0 / (high - low)
    return _box(a, radius) * (gain / 255.0), (_box(b, radius) - low) * gain


def guided_alpha(coef: tuple[torch.Tensor, torch.Tensor], luma: torch.Tensor, out=None) -> torch.Tensor:
    """See kernels.numpy.background.guided_alpha."""
    return apply_coefficients(upsample_coefficients(coef, tuple(luma.shape)), luma)


def upsample_coefficients(coef: tuple[torch.Tensor, torch.Tensor], size: tuple[int, int]) -> Upsampled:
    """See kernels.numpy.background.upsample_coefficients: whole planes on the device (no blocks: a GPU
    gains nothing by skipping them)."""
    h, w = size
    return Upsampled(size, _linear(coef[0], (w, h)), _linear(coef[1], (w, h)))


def apply_coefficients(up: Upsampled, luma: torch.Tensor, out=None, shift: tuple[int, int] = (0, 0),
                       work: dict | None = None) -> torch.Tensor:
    """See kernels.numpy.background.apply_coefficients: the moved coefficients read by clamped indices."""
    a, b = up.a, up.b
    h, w = luma.shape
    dx, dy = (max(-w + 1, min(w - 1, int(shift[0]))), max(-h + 1, min(h - 1, int(shift[1]))))
    if dx or dy:
        rows = (torch.arange(h, device=a.device) - dy).clamp_(0, h - 1)
        cols = (torch.arange(w, device=a.device) - dx).clamp_(0, w - 1)
        a, b = a[rows][:, cols], b[rows][:, cols]
    return (a * luma.float() + b).clamp_(0.0, 1.0)


def keep_polygons(alpha: torch.Tensor, polygons) -> torch.Tensor:
    """See kernels.numpy.background.keep_polygons: each polygon rasterised on the host over its box, the box
    raised to 1 inside it on the device."""
    import cv2
    import numpy as np

    h, w = alpha.shape
    for poly in polygons:
        p = np.round(np.asarray(poly, np.float64)).astype(np.int32)
        x0, y0 = max(0, int(p[:, 0].min())), max(0, int(p[:, 1].min()))
        x1, y1 = min(w, int(p[:, 0].max()) + 1), min(h, int(p[:, 1].max()) + 1)
        if x1 <= x0 or y1 <= y0:
            continue
        m = np.zeros((y1 - y0, x1 - x0), np.float32)
        cv2.fillPoly(m, [p - np.array([x0, y0], np.int32)], 1.0)
        box = alpha[y0:y1, x0:x1]
        alpha[y0:y1, x0:x1] = torch.maximum(box, torch.from_numpy(m).to(alpha.device))
    return alpha


def half_plane(plane: torch.Tensor, out=None) -> torch.Tensor:
    """See kernels.numpy.background.half_plane (rounded to whole levels, as float32)."""
    return torch.floor(F.avg_pool2d(plane.float()[None, None], 2)[0, 0] + 0.5)


def upsample_alpha(alpha: torch.Tensor, size: tuple[int, int], out=None) -> torch.Tensor:
    return _linear(alpha, size)


def half_alpha(alpha: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(alpha[None, None], 2)[0, 0]


def composite(fg: torch.Tensor, bg, alpha: torch.Tensor, out: torch.Tensor | None = None, work=None) -> torch.Tensor:
    """See kernels.numpy.background.composite; `bg` a tensor like fg or one value per channel (`work` is
    the NumPy twin's buffer: torch's caching allocator keeps its own)."""
    f = fg.float()
    b = bg.float() if isinstance(bg, torch.Tensor) else torch.tensor(bg, dtype=torch.float32, device=fg.device)
    a = alpha[..., None] if fg.ndim == 3 else alpha
    res = _u8(b + (f - b) * a)
    if out is None:
        return res
    out.copy_(res)
    return out


def room_fill(bg, shape: tuple[int, int]) -> torch.Tensor | None:
    """See kernels.numpy.background.room_fill (a value stays a value here: composite_i420 takes it)."""
    if isinstance(bg, torch.Tensor):
        return bg if bg.dtype == torch.uint8 else _u8(bg)
    return None


def composite_i420(planes, bgs, alpha: torch.Tensor, keep=(), out=None, fills=None, work=None) -> tuple:
    """See kernels.numpy.background.composite_i420: the same pixels, composed whole on the device (Y's
    alpha brought up, `keep` raised to 1, each plane composited), where skipping tiles gains nothing."""
    y = planes[0]
    h, w = y.shape
    full = keep_polygons(upsample_alpha(alpha, (w, h)), keep)
    return tuple(composite(p, b, a, out=o) for p, b, a, o in zip(planes, bgs, (full, alpha, alpha), out or (None,) * 3))


def _sep(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """2-D (H x W) or C x H x W, separable filter with reflect-101 borders."""
    t = x[None, None] if x.ndim == 2 else x[:, None]
    r = k.numel() // 2
    t = F.pad(t, (r, r, r, r), mode="reflect")
    t = F.conv2d(t, k.view(1, 1, 1, -1))
    t = F.conv2d(t, k.view(1, 1, -1, 1))
    return t[0, 0] if x.ndim == 2 else t[:, 0]


def shrink(plane: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.background.shrink."""
    h, w = plane.shape[:2]
    steps = halvings((w, h), size) if plane.dtype == torch.uint8 else 0
    if not steps:
        return _area(plane, size)          # exact (a float plane's halvings are too, up to float rounding)
    t = plane.float()
    chw = t[None] if t.ndim == 2 else t.permute(2, 0, 1)
    chw = torch.floor(F.avg_pool2d(chw[None], 2)[0] + 0.5)       # a uint8 plane's first halving rounded
    for _ in range(steps - 1):
        chw = F.avg_pool2d(chw[None], 2)[0]
    return chw[0] if t.ndim == 2 else chw.permute(1, 2, 0)


def room_weight(alpha: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.background.room_weight."""
    return 1.0 - _area(alpha, size)


def trusted_room(weight: torch.Tensor, sigma: float) -> torch.Tensor:
    """See kernels.numpy.background.trusted_room."""
    k = torch.from_numpy(gaussian_kernel(sigma)).to(weight.device)
    return (_sep(weight, k) * (1.0 / ROOM_TRUST)).clamp(0.0, 1.0)


def room_within(weight: torch.Tensor, trust: torch.Tensor, sigma: float, slack: float = ROOM_SLACK) -> bool:
    """See kernels.numpy.background.room_within."""
    return float((weight * (trusted_room(weight, sigma) - trust)).max()) <= slack


def background_blur(plane: torch.Tensor, alpha: torch.Tensor, sigma: float, factor: int = 4,
                    weight: torch.Tensor | None = None, out=None) -> torch.Tensor:
    """See kernels.numpy.background.background_blur."""
    h, w = plane.shape[:2]
    sw, sh = max(1, w // factor), max(1, h // factor)
    small = shrink(plane, (sw, sh))
    if weight is None or tuple(weight.shape) != (sh, sw):
        weight = 1.0 - _area(alpha, (sw, sh))
    k = torch.from_numpy(gaussian_kernel(sigma)).to(plane.device)
    chw = small.permute(2, 0, 1) if small.ndim == 3 else small
    num = _sep(chw * weight, k)
    den = _sep(weight, k)
    plain = _sep(chw, k)
    t = (den * (1.0 / ROOM_TRUST)).clamp(0.0, 1.0)
    blurred = num * (t / den.clamp(min=1e-4)) + plain * (1.0 - t)
    if small.ndim == 3:
        blurred = blurred.permute(1, 2, 0)
    return _linear(blurred.contiguous(), (w, h))


def background_blur_i420(planes, weight: torch.Tensor, sigma: float, factor: int = 8, out=None, y_half=None) -> tuple:
    """See kernels.numpy.background.background_blur_i420 (the planes one by one, rounded at full size; Y
    shrunk from its own plane, `y_half` being the host's shortcut)."""
    half = max(1, factor // 2)
    return tuple(_u8(background_blur(p, None, sigma, f, weight)) for p, f in zip(planes, (factor, half, half)))


def cover(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """See kernels.numpy.background.cover."""
    h, w = image.shape[:2]
    tw, th = size
    s = max(tw / w, th / h)
    nw, nh = max(tw, int(round(w * s))), max(th, int(round(h * s)))
    scaled = _area(image, (nw, nh)) if s < 1 else _linear(image.float(), (nw, nh))
    x0, y0 = (nw - tw) // 2, (nh - th) // 2
    return _u8(scaled[y0:y0 + th, x0:x0 + tw]).contiguous()
