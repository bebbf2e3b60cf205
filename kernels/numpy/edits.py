"""The face edits' pixel work on the CPU: colour and skin smoothing inside a face's region of interest,
then the warp, as a FacePlan (kernels/face_plan.py) says. The torch twin is kernels/torch/edits.py.

All pixel work happens inside the ROI, so cost follows the face size, not the frame size; everything
smooth runs at the plan's coarse level and is interpolated back.
"""

from __future__ import annotations

import cv2
import numpy as np

from kernels.face_plan import FacePlan

WARMTH_RGB = np.array([12.0, 4.0, -14.0], np.float32)
LIP_RGB = np.array([185.0, 45.0, 75.0], np.float32)
BLUSH_RGB = np.array([235.0, 120.0, 130.0], np.float32)
NUDE_LIFT = 12.0   # pale lips go toward the grey of the lips plus this
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def _grey(x: np.ndarray) -> np.ndarray:
    """Rec. 601 luma (the LUMA weights), via OpenCV's SIMD path."""
    return cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)


def guided_coefficients(small: np.ndarray, radius: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The box-averaged coefficients (a, b) of a self-guided filter (He et al.) with the grey image as
    guide, at half the resolution of `small` and interpolated back to it: the filtered image is
    a * grey + b. Needs even height and width."""
    h, w = small.shape[:2]
    half = cv2.resize(small, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
    g = _grey(half)
    r = max(1, radius)
    k = (2 * r + 1, 2 * r + 1)
    box = lambda a: cv2.boxFilter(a, -1, k, borderType=cv2.BORDER_REFLECT_101)  # noqa: E731
    mean_i = box(g)
    var_i = box(g * g) - mean_i * mean_i
    mean_p = box(half)
    cov = box(half * g[..., None]) - mean_i[..., None] * mean_p
    a = cov / (var_i[..., None] + eps)
    b = mean_p - a * mean_i[..., None]
    return (cv2.resize(box(a), (w, h), interpolation=cv2.INTER_LINEAR),
            cv2.resize(box(b), (w, h), interpolation=cv2.INTER_LINEAR))


def guided_smooth(x: np.ndarray, radius: int, eps: float, factor: int = 4) -> np.ndarray:
    """Self-guided filter: flattens texture, keeps edges. The coefficients are found at 1/factor
    resolution and interpolated back (the 'fast guided filter'), which is indistinguishable on skin and
    far cheaper. Needs height and width divisible by factor (factor even)."""
    h, w = x.shape[:2]
    small = cv2.resize(x, (w // (factor // 2), h // (factor // 2)), interpolation=cv2.INTER_AREA)
    a, b = guided_coefficients(small, radius // factor, eps)
    out = cv2.resize(a, (w, h), interpolation=cv2.INTER_LINEAR)
    out *= _grey(x)[..., None]
    out += cv2.resize(b, (w, h), interpolation=cv2.INTER_LINEAR)
    return out


def apply_appearance(x: np.ndarray, plan: FacePlan) -> np.ndarray:
    """The plan's colour ops and skin smoothing on a float32 (h, w, 3) ROI in 0..255 (in place). Everything
    smooth is found at the masks' resolution (1/(2q)): the colour ops' change, and the smoothing's
    coefficients with its mask folded in, so the full-resolution work is one blend
        x' = x (1 - k m) + up(k m a) grey(x) + up(k m b + colour change)
    whatever the number of ops. The colour change is taken on the unsmoothed image (at 1/(2q) the
    smoothing has nothing left to remove)."""
    h, w = x.shape[:2]
    c = 2 * plan.level
    small = cv2.resize(x, (w // c, h // c), interpolation=cv2.INTER_AREA)
    change = None
    if plan.colour:
        change = apply_colour(small.copy(), plan)
        change -= small
    if plan.smooth is not None:
        km = (plan.smooth.amount * plan.smooth.mask)[..., None]
        a, b = guided_coefficients(small, plan.smooth_radius // (2 * c), plan.smooth_eps)
        a *= km
        b *= km
        if change is not None:
            b += change
        # full resolution in OpenCV's SIMD passes on same-shaped arrays (numpy's (h, w, 1) broadcasting is
        # several times slower); resizing 1 - k m is the same as 1 - k resize(m), bilinear being affine
        guide = cv2.cvtColor(_grey(x), cv2.COLOR_GRAY2RGB)
        keep = 1.0 - km
        cv2.multiply(x, cv2.resize(np.repeat(keep, 3, axis=2), (w, h), interpolation=cv2.INTER_LINEAR), dst=x)
        cv2.accumulateProduct(cv2.resize(a, (w, h), interpolation=cv2.INTER_LINEAR), guide, x)   # x += a * guide, one pass
        cv2.add(x, cv2.resize(b, (w, h), interpolation=cv2.INTER_LINEAR), dst=x)
    elif change is not None:
        cv2.add(x, cv2.resize(change, (w, h), interpolation=cv2.INTER_LINEAR), dst=x)
    return x


def apply_colour(x: np.ndarray, plan: FacePlan) -> np.ndarray:
    """The plan's colour ops on a float32 (h, w, 3) image in 0..255 at the masks' resolution, in place, in
    the plan's field order (the torch twin repeats it)."""
    if (op := plan.warmth) is not None:
        x += (op.amount * op.mask)[..., None] * WARMTH_RGB
    if (op := plan.brightness) is not None:
        b = (op.amount * op.mask)[..., None]
        if op.amount > 0:
            t = 255.0 - x
            t *= b
            x += t
        else:
            x *= 1.0 + b
    if (op := plan.lips) is not None:
        ml = (abs(op.amount) * op.mask)[..., None]
        target = LIP_RGB - x if op.amount > 0 else _grey(x)[..., None] + NUDE_LIFT - x
        target *= ml
        x += target
    if (op := plan.blush) is not None:
        if op.amount > 0:
            t = BLUSH_RGB - x
            t *= (op.amount * op.mask)[..., None]
            x += t
        else:
            x[..., 0] += op.amount * op.mask
    if (op := plan.contour) is not None:
        x *= 1.0 - (op.amount * op.mask)[..., None]
    if (op := plan.lids) is not None:
        if op.amount > 0:
            x *= 1.0 - (op.amount * op.mask)[..., None]
        else:
            t = 255.0 - x
            t *= ((-op.amount) * op.mask)[..., None]
            x += t
    if (op := plan.saturation) is not None:
        grey = _grey(x)[..., None]
        x -= grey
        x *= 1.0 + (op.amount * op.mask)[..., None]
        x += grey
    return x


def apply_plan(image: np.ndarray, plan: FacePlan) -> np.ndarray:
    """Edits one face in place on `image` (H x W x 3 uint8) and returns it."""
    y0, y1, x0, x1 = plan.roi
    roi = image[y0:y1, x0:x1]
    if plan.appearance:
        x = apply_appearance(roi.astype(np.float32), plan)
        roi_u8 = cv2.add(x, np.zeros_like(x), dtype=cv2.CV_8U)  # saturating, round-half-even: np.rint + clip in one pass
    else:
        roi_u8 = roi
    if plan.map_xy is not None:
        roi_u8 = cv2.remap(roi_u8, plan.map_xy, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    image[y0:y1, x0:x1] = roi_u8
    return image
