"""torch twin of kernels/numpy/edits.py: the same edits, same order and constants, on any device.

The plan (region of interest, soft masks, backward map) is drawn by the shared NumPy code, exactly as the
masks are for every kernel; it is small and is uploaded. The pixel work runs in torch.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from kernels.numpy.edits import (APPEARANCE, BLUSH_RGB, LIP_RGB, LUMA, WARMTH_RGB, EditConfig, FacePlan,
                                 plan_face)

__all__ = ["render_edits", "apply_plan", "apply_appearance", "apply_colour", "guided_coefficients", "guided_smooth", "plan_face"]


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
    e = plan.edits
    h, w = x.shape[:2]
    c = 2 * plan.level
    small = _resize(x, h // c, w // c, "area")
    change = None
    if any(k in e for k in APPEARANCE if k != "skin_smooth"):
        change = apply_colour(small, plan) - small
    if "skin_smooth" in e:
        s = e["skin_smooth"]
        k = s if s > 0 else 1.5 * s
        km = k * _t(plan.masks["skin"], x).unsqueeze(-1)
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


def apply_colour(x: torch.Tensor, plan: FacePlan) -> torch.Tensor:
    e, cfg = plan.edits, plan.config
    m = {k: _t(v, x).unsqueeze(-1) for k, v in plan.masks.items()}
    luma = _t(LUMA, x)
    if "skin_warmth" in e:
        x = x + (e["skin_warmth"] * m["skin"]) * _t(WARMTH_RGB, x)
    if "brightness" in e:
        b = e["brightness"] * cfg.brightness * m["face"]
        x = x + b * (255.0 - x) if e["brightness"] > 0 else x * (1.0 + b)
    if "lip_tint" in e:
        t = e["lip_tint"]
        if t > 0:
            x = x + (t * cfg.lip) * m["lips"] * (_t(LIP_RGB, x) - x)
        else:
            grey = (x @ luma).unsqueeze(-1) + 12.0
            x = x + (-t * cfg.lip) * m["lips"] * (grey - x)
    if "blush" in e:
        t = e["blush"]
        if t > 0:
            x = x + (t * cfg.blush) * m["blush"] * (_t(BLUSH_RGB, x) - x)
        else:
            x = x + (t * 14.0) * m["blush"] * _t(np.array([1.0, 0.0, 0.0], np.float32), x)
    if "contour" in e:
        x = x * (1.0 - (e["contour"] * cfg.contour) * m["contour"])
    if "eye_makeup" in e:
        t = e["eye_makeup"]
        x = x * (1.0 - (t * cfg.eye_makeup) * m["eye_makeup"]) if t > 0 else x + (-t * 0.25) * m["eye_makeup"] * (255.0 - x)
    if "saturation" in e:
        grey = (x @ luma).unsqueeze(-1)
        x = grey + (x - grey) * (1.0 + (e["saturation"] * cfg.saturation) * m["face"])
    return x


def _remap(roi: torch.Tensor, map_xy: np.ndarray) -> torch.Tensor:
    """Bilinear backward sampling with replicated borders, like cv2.remap(..., BORDER_REPLICATE)."""
    h, w = roi.shape[:2]
    grid = _t(map_xy, roi)
    gx = grid[..., 0] * (2.0 / max(w - 1, 1)) - 1.0
    gy = grid[..., 1] * (2.0 / max(h - 1, 1)) - 1.0
    src = roi.permute(2, 0, 1).unsqueeze(0).float()
    out = F.grid_sample(src, torch.stack([gx, gy], -1).unsqueeze(0), mode="bilinear", padding_mode="border", align_corners=True)
    return out.squeeze(0).permute(1, 2, 0)


def apply_plan(image: torch.Tensor, plan: FacePlan) -> torch.Tensor:
    """Edits one face in place on `image` (H x W x 3 uint8 tensor) and returns it."""
    y0, y1, x0, x1 = plan.roi
    roi = image[y0:y1, x0:x1]
    if any(k in plan.edits for k in APPEARANCE):
        roi = apply_appearance(roi.float(), plan).round().clamp(0, 255).to(torch.uint8)
    if plan.map_xy is not None:
        roi = _remap(roi, plan.map_xy).round().clamp(0, 255).to(torch.uint8)
    image[y0:y1, x0:x1] = roi
    return image


def render_edits(image: torch.Tensor, faces: Sequence[np.ndarray], edits: Mapping[str, float], config: EditConfig = EditConfig()) -> torch.Tensor:
    """A new frame (H x W x 3 uint8 tensor, any device) with `edits` applied to every face."""
    if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected HxWx3 uint8 RGB tensor, got {image.dtype} {tuple(image.shape)}")
    out = image.clone()
    for lm in faces:
        plan = plan_face(tuple(image.shape[:2]), lm, edits, config)
        if plan is not None:
            apply_plan(out, plan)
    return out
