"""torch twin of kernels/numpy/edits.py: the same ops, same order and constants, on any device.

The plan (kernels/face_plan.py: region of interest, masks, backward map) is small NumPy arrays, drawn
once for both twins and uploaded here; the pixel work runs in torch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from kernels.face_plan import FacePlan, Masked
from kernels.numpy.edits import (LID_INK_GAP, LIDS_LUMA, LUMA, NUDE_LIFT, PAINT_LUMA, SHINE_FLOOR, TAN_ABSORB,
                                 TONE_EVEN, TONE_KEEP, TONE_NEAR, WARMTH_RGB, ink_darkens, toward_rgb)
from kernels.numpy.flow import WARP_SUBPIXEL

__all__ = ["apply_plan", "apply_appearance", "apply_colour", "guided_coefficients", "guided_smooth"]


def _t(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=torch.float32)


def _box(a: torch.Tensor, r: int) -> torch.Tensor:
    """Mean over a (2r+1)^2 window with reflect-101 borders, like cv2.boxFilter. a: (h, w, c)."""
    x = a.permute(2, 0, 1).unsqueeze(0)
    x = F.pad(x, (r, r, r, r), mode="reflect")
    return F.avg_pool2d(x, 2 * r + 1, stride=1).squeeze(0).permute(1, 2, 0)


def _resize(a: torch.Tensor, h: int, w: int, mode: str) -> torch.Tensor:
    x = a.permute(2, 0, 1).unsqueeze(0)
    if mode == "area":
        x = F.avg_pool2d(x, x.shape[-2] // h)  # exact integer reduction, what cv2 INTER_AREA does at 1/2, 1/4
    else:
        x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False)
    return x.squeeze(0).permute(1, 2, 0)


def guided_coefficients(small: torch.Tensor, radius: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    luma = _t(LUMA, small)
    h, w = small.shape[:2]
    half = _resize(small, h // 2, w // 2, "area")
    g = (half @ luma).unsqueeze(-1)
    r = max(1, radius)
    mean_i = _box(g, r)
    var_i = _box(g * g, r) - mean_i * mean_i
    mean_p = _box(half, r)
    cov = _box(half * g, r) - mean_i * mean_p
    a = cov / (var_i + eps)
    b = mean_p - a * mean_i
    return _resize(_box(a, r), h, w, "bilinear"), _resize(_box(b, r), h, w, "bilinear")


def guided_smooth(x: torch.Tensor, radius: int, eps: float, factor: int = 4) -> torch.Tensor:
    h, w = x.shape[:2]
    small = _resize(x, h // (factor // 2), w // (factor // 2), "area")
    a, b = guided_coefficients(small, radius // factor, eps)
    guide = (x @ _t(LUMA, x)).unsqueeze(-1)
    return _resize(a, h, w, "bilinear") * guide + _resize(b, h, w, "bilinear")


def apply_appearance(x: torch.Tensor, plan: FacePlan) -> torch.Tensor:
    h, w = x.shape[:2]
    c = 2 * plan.level
    small = _resize(x, h // c, w // c, "area")
    change = None
    if plan.colour:
        change = apply_colour(small, plan) - small
    if plan.smooth is not None:
        km = plan.smooth.amount * _t(plan.smooth.mask, x).unsqueeze(-1)
        a, b = guided_coefficients(small, plan.smooth_radius // (2 * c), plan.smooth_eps)
        a, b = a * km, b * km
        if change is not None:
            b = b + change
        guide = (x @ _t(LUMA, x)).unsqueeze(-1)
        keep = _resize(1.0 - km, h, w, "bilinear")
        x = x * keep + _resize(a, h, w, "bilinear") * guide + _resize(b, h, w, "bilinear")
    elif change is not None:
        x = x + _resize(change, h, w, "bilinear")
    return x


def _toward(x: torch.Tensor, op: Masked, part: float, luma: torch.Tensor, darkens: bool | None = None) -> torch.Tensor:
    """Makeup's move at full amount, as the NumPy twin's _paint: to the op's colour in chroma, `part` of the
    way in lightness; `darkens` (a liner, a brow's fill): lightness all the way, only darker (True) or only
    lighter (False)."""
    t = _t(toward_rgb(op), x) - x
    if darkens is None:
        return t - (1.0 - part) * (t @ luma).unsqueeze(-1)
    lightness = t @ luma
    return t - (lightness.clamp(min=0.0) if darkens else lightness.clamp(max=0.0)).unsqueeze(-1)


def apply_colour(x: torch.Tensor, plan: FacePlan) -> torch.Tensor:
    luma = _t(LUMA, x)
    uploaded: dict[int, torch.Tensor] = {}   # ops share masks (brightness and saturation: the face)

    def m(op: Masked) -> torch.Tensor:
        if id(op.mask) not in uploaded:
            uploaded[id(op.mask)] = _t(op.mask, x).unsqueeze(-1)
        return uploaded[id(op.mask)]

    def paint(op: Masked, part: float = PAINT_LUMA, darkens: bool | None = None) -> torch.Tensor:
        return _toward(x, op, part, luma, darkens)

    if (op := plan.tone) is not None:
        x = x + op.amount * m(op) * _even_tone(x, plan.tone_radius, m(op), luma)
    if (op := plan.warmth) is not None:
        x = x + (op.amount * m(op)) * _t(WARMTH_RGB, x)
    if (op := plan.brightness) is not None:
        b = op.amount * m(op)
        x = x + b * (255.0 - x) if op.amount > 0 else x * (1.0 + b)
    if (op := plan.tan) is not None:
        x = x * (1.0 - op.amount * m(op) * _t(TAN_ABSORB, x))
    if (op := plan.lips) is not None:
        if op.amount > 0:
            x = x + op.amount * m(op) * paint(op)
        else:
            grey = (x @ luma).unsqueeze(-1) + NUDE_LIFT
            x = x + (-op.amount) * m(op) * (grey - x)
    if (op := plan.blush) is not None:
        if op.amount > 0:
            x = x + op.amount * m(op) * paint(op)
        else:
            x = x + op.amount * m(op) * _t(np.array([1.0, 0.0, 0.0], np.float32), x)
    if (op := plan.contour) is not None:
        x = x * (1.0 - op.amount * m(op))
    for op in (plan.lids, plan.brows):    # eyeshadow and brow colour: as the NumPy twin
        if op is not None:
            a = op.amount
            if op is plan.lids and a > 0 and plan.lid_grey > 0:   # as the NumPy twin's lid_scale
                ink = float(np.dot(LUMA, toward_rgb(op)))
                w = m(op).sum()
                if float(w) > 1e-6:
                    g = float(((x @ luma).unsqueeze(-1) * m(op)).sum() / w)
                    if min(g, plan.lid_grey) - ink >= LID_INK_GAP:
                        a = a * min(2.0, max(0.5, (plan.lid_grey - ink) / (g - ink)))
            darkens = None if op is plan.lids else ink_darkens(op)   # a brow's fill: one way, as a liner
            x = x + a * m(op) * paint(op, LIDS_LUMA, darkens) if a > 0 else x + (-a) * m(op) * (255.0 - x)
    if (op := plan.saturation) is not None:
        grey = (x @ luma).unsqueeze(-1)
        x = grey + (x - grey) * (1.0 + op.amount * m(op))
    for op in (plan.gloss, plan.glow):    # as the NumPy twin: a highlight, or matte
        if op is not None:
            if op.amount > 0:
                x = x + op.amount * m(op) * (255.0 - x)
            else:
                x = x + op.amount * m(op) * _shine(x, plan.shine_radius, m(op), luma)
    return x


def _local_mean(x: torch.Tensor, radius: int, weight: torch.Tensor) -> torch.Tensor:
    """The NumPy twin's `local_mean`: x's mean over the region `weight` (h, w, 1) covers, in a box of `radius`."""
    r = max(1, radius)
    return _box(x * weight, r) / _box(weight, r).clamp(min=1e-3)


def _even_tone(x: torch.Tensor, radius: int, weight: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    """The NumPy twin's `even_tone`: the move to x's own grey in the skin's colour around it (read twice,
    the second time from the pixels near the first), none for a colour far from it."""
    g = (x @ luma).unsqueeze(-1)

    def to_skin(skin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        move = skin * (g / (skin @ luma).unsqueeze(-1).clamp(min=1.0)) - x
        return move, move.abs().amax(-1, keepdim=True) / g.clamp(min=8.0)

    move, far = to_skin(_local_mean(x, radius, weight))
    near = weight * torch.exp(-(far / TONE_NEAR) ** 2).clamp(min=0.02)
    move, far = to_skin(_local_mean(x, radius, near))
    t = ((far - TONE_EVEN) / (TONE_KEEP - TONE_EVEN)).clamp(0.0, 1.0)
    return move * (1.0 - t * t * (3.0 - 2.0 * t))


def _shine(x: torch.Tensor, radius: int, weight: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    """The NumPy twin's `shine`: the white on top of the region's colour around, where it is brighter too;
    `weight` (h, w, 1); returns (h, w, 1)."""
    base = _local_mean(x, radius, weight)
    bb = (base * base).sum(-1)
    b1 = base.sum(-1)
    bx = (base * x).sum(-1)
    x1 = x.sum(-1)
    det = 3.0 * bb - b1 * b1
    white = (bb * x1 - b1 * bx) / torch.maximum(det, 1e-3 * bb + 1.0)
    white = torch.minimum(white, (x - base) @ luma)
    return (white - SHINE_FLOOR).clamp(min=0.0).unsqueeze(-1)


def _remap(roi: torch.Tensor, map_xy: np.ndarray) -> torch.Tensor:
    """Bilinear backward sampling with replicated borders at positions rounded to 1/WARP_SUBPIXEL of a pixel,
    like cv2.remap(..., BORDER_REPLICATE) over cv2.convertMaps' fixed-point maps."""
    h, w = roi.shape[:2]
    grid = torch.round(_t(map_xy, roi) * WARP_SUBPIXEL) * (1.0 / WARP_SUBPIXEL)
    gx = grid[..., 0] * (2.0 / max(w - 1, 1)) - 1.0
    gy = grid[..., 1] * (2.0 / max(h - 1, 1)) - 1.0
    src = roi.permute(2, 0, 1).unsqueeze(0).float()
    out = F.grid_sample(src, torch.stack([gx, gy], -1).unsqueeze(0), mode="bilinear", padding_mode="border", align_corners=True)
    return out.squeeze(0).permute(1, 2, 0)


def apply_plan(image: torch.Tensor, plan: FacePlan) -> torch.Tensor:
    """Edits one face in place on `image` (H x W x 3 uint8 tensor) and returns it."""
    y0, y1, x0, x1 = plan.roi
    roi = image[y0:y1, x0:x1]
    if plan.appearance:                # the part of the ROI the masks cover, as the NumPy twin
        a0, a1, b0, b1 = plan.appearance_box or (0, y1 - y0, 0, x1 - x0)
        roi = roi.clone()
        roi[a0:a1, b0:b1] = apply_appearance(roi[a0:a1, b0:b1].float(), plan).round().clamp(0, 255).to(torch.uint8)
    if plan.liners and not plan.appearance:
        roi = roi.clone()
    for drawn in plan.liners:          # as the NumPy twin: over the colour work, under the warp
        a0, a1, b0, b1 = drawn.box
        part = roi[a0:a1, b0:b1].float()
        t = _toward(part, drawn.op, LIDS_LUMA, _t(LUMA, part), darkens=ink_darkens(drawn.op))
        roi[a0:a1, b0:b1] = (part + drawn.op.amount * _t(drawn.op.mask, part).unsqueeze(-1) * t).round().clamp(0, 255).to(torch.uint8)
    if plan.map_xy is not None:        # only where the map moves pixels, as the NumPy twin
        a0, a1, b0, b1 = plan.map_box or (0, y1 - y0, 0, x1 - x0)
        if a1 > a0 and b1 > b0:
            roi[a0:a1, b0:b1] = _remap(roi, plan.map_xy[a0:a1, b0:b1]).round().clamp(0, 255).to(torch.uint8)
    image[y0:y1, x0:x1] = roi
    return image
