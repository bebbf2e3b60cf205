"""Named face edits, each a control in [-1, 1] where 0 = no change (the CPU path).

Geometry (a smooth landmark-anchored warp; the field is a sum of Gaussians, so it fades to nothing away
from the face):
  smile       mouth corners up and out (< 0: down, a sadder mouth)
  eye_size    local zoom centred on each eye (< 0: smaller eyes)
  face_slim   jaw line pulled toward the face's midline (< 0: fuller face)
  nose_width  nose wings pushed apart (> 0) or together (< 0)
  brow_raise  eyebrows lifted (< 0: lowered)
Appearance (restricted to regions built from the landmarks with kernels/numpy/masks.py):
  skin_smooth edge-preserving smoothing of the skin by a guided filter (< 0: sharpened texture)
  skin_warmth skin toward red/yellow (< 0: cooler, bluer)
  brightness  face lifted toward white (< 0: darker)
  lip_tint    lips toward rose red (< 0: paler, nude)
  blush       pink on the cheeks (< 0: less red)
  contour     shading under the cheekbones (< 0: lighter hollows)
  eye_makeup  darker lids and liner around the eyes (< 0: lighter)
  saturation  colour of the face (< 0: toward grey)

`plan_face` (shared by both pixel paths, like the masks) turns landmarks + edits into a region of interest,
the soft masks and a backward flow field; `apply_plan` is the pixel work and has a torch twin in
kernels/torch/edits.py. All pixel work happens inside the face's region of interest, so cost follows the
face size, not the frame size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import cv2
import numpy as np

from engines import mesh
from kernels.numpy.masks import polygon_mask

GEOMETRY = ("smile", "eye_size", "face_slim", "nose_width", "brow_raise")
APPEARANCE = ("skin_smooth", "skin_warmth", "brightness", "lip_tint", "blush", "contour", "eye_makeup", "saturation")
EDITS = GEOMETRY + APPEARANCE

# MediaPipe face-mesh landmarks the plan anchors to.
MOUTH_CORNERS = (61, 291)
FACE_SIDES = (234, 454)      # face width at the cheekbones
CHIN, FOREHEAD, NOSE_TIP = 152, 10, 4
NOSE_WINGS = (129, 358)
CHEEKS = (50, 280)
EYE_CORNERS = ((33, 133), (362, 263))

WARMTH_RGB = np.array([12.0, 4.0, -14.0], np.float32)
LIP_RGB = np.array([185.0, 45.0, 75.0], np.float32)
BLUSH_RGB = np.array([235.0, 120.0, 130.0], np.float32)
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


@dataclass(frozen=True, slots=True)
class EditConfig:
    """Strengths at control = 1, as fractions of the face width (geometry) or of the colour range."""

    smile_lift: float = 0.045
    smile_spread: float = 0.02
    eye_zoom: float = 0.28
    slim_shift: float = 0.05
    nose_zoom: float = 0.35
    brow_lift: float = 0.04
    brightness: float = 0.30
    saturation: float = 0.7
    lip: float = 0.55
    blush: float = 0.35
    contour: float = 0.22
    eye_makeup: float = 0.45
    smooth_radius: float = 0.025   # guided-filter radius, fraction of face width
    smooth_eps: float = 150.0      # guided-filter eps in 8-bit units squared: edges with more variance survive
    grid_step: int = 8             # flow field is evaluated every grid_step pixels, then interpolated
    margin: float = 0.25           # region of interest beyond the landmarks, fraction of face width
    detail_cap_px: float = 90.0    # level q = floor(face width / this): masks, colour and filter coefficients
                                   # at 1/(2q), 1/(4q), so the face there is 45-90 px wide at any size (0: off)


@dataclass(slots=True)
class FacePlan:
    roi: tuple[int, int, int, int]                 # y0, y1, x0, x1 in the frame
    edits: dict[str, float]
    masks: dict[str, np.ndarray] = field(default_factory=dict)   # name -> (h/2, w/2) float32 in [0, 1]
    map_xy: np.ndarray | None = None               # (h, w, 2) float32 sample positions in ROI pixels, or None
    smooth_radius: int = 0
    smooth_eps: float = 0.0
    config: EditConfig = EditConfig()
    level: int = 1                                 # q: colour at 1/(2q), filter coefficients at 1/(4q)


def detail_level(face_width: float, config: EditConfig = EditConfig()) -> int:
    """q = floor(face width / cap): at the masks' resolution (1/(2q)) the face is between cap/2 and cap
    pixels wide whatever its size, so that work stops growing, and never gets coarser than that (a
    112-px face at 1/2 is 56 px: the detail every size had before)."""
    if config.detail_cap_px <= 0:
        return 1
    return max(1, int(face_width // config.detail_cap_px))


def active(edits: Mapping[str, float], eps: float = 1e-3) -> dict[str, float]:
    """The known edits that do anything, clipped to [-1, 1]."""
    return {k: float(np.clip(v, -1.0, 1.0)) for k, v in edits.items() if k in EDITS and abs(float(v)) > eps}


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 1e-6 else v


def plan_face(shape: tuple[int, int], landmarks: np.ndarray, edits: Mapping[str, float], config: EditConfig = EditConfig()) -> FacePlan | None:
    """Everything but the pixel work for one face: ROI, masks, warp. None when nothing would change."""
    e = active(edits)
    if not e:
        return None
    h, w = shape
    lm = np.asarray(landmarks, np.float32)[:, :2]
    fw = float(np.linalg.norm(lm[FACE_SIDES[1]] - lm[FACE_SIDES[0]]))
    if not np.isfinite(lm).all() or fw < 8:
        return None  # too small or broken to edit meaningfully
    pad = config.margin * fw
    x0, y0 = np.floor(lm.min(0) - pad).astype(int)
    x1, y1 = np.ceil(lm.max(0) + pad).astype(int)
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
    q = detail_level(fw, config)
    x1 -= (x1 - x0) % (4 * q)   # multiples of 4q: colour at exactly 1/(2q), guided-filter coefficients at 1/(4q)
    y1 -= (y1 - y0) % (4 * q)
    if x1 - x0 < 8 * q or y1 - y0 < 8 * q:
        return None
    local = lm - np.array([x0, y0], np.float32)
    rh, rw = y1 - y0, x1 - x0
    plan = FacePlan(roi=(int(y0), int(y1), int(x0), int(x1)), edits=e, config=config, level=q)
    # Colour edits are smooth over the face, so their masks and their change are computed at 1/(2q)
    # resolution and the change is interpolated back; only the smoothing's final blend (which removes fine
    # texture) and the warp's sampling touch every pixel.
    c = 2 * q
    _plan_masks(plan, (rh // c, rw // c), local / c, fw / c, config)
    if "skin_smooth" in e:
        plan.smooth_radius = max(1, int(round(config.smooth_radius * fw)))
        plan.smooth_eps = config.smooth_eps
    if any(k in e for k in GEOMETRY):
        plan.map_xy = _flow(plan, (rh, rw), local, fw, config)
    return plan


def _loop(local: np.ndarray, name: str) -> np.ndarray:
    return local[mesh.loops()[name]]


def _hull(points: np.ndarray) -> np.ndarray:
    return cv2.convexHull(points.astype(np.float32)).reshape(-1, 2)


def _scaled(points: np.ndarray, sx: float, sy: float, dy: float = 0.0) -> np.ndarray:
    c = points.mean(0)
    return (points - c) * np.array([sx, sy], np.float32) + c + np.array([0.0, dy], np.float32)


def _blur(mask: np.ndarray, sigma: float) -> np.ndarray:
    k = int(sigma * 3) * 2 + 1
    return cv2.GaussianBlur(mask, (k, k), sigma) if sigma > 0.3 else mask


def _blobs(shape: tuple[int, int], centres: Sequence[np.ndarray], sigma: float, step: int) -> np.ndarray:
    """Sum of Gaussian blobs, evaluated on a coarse grid and interpolated (cheap and smooth)."""
    h, w = shape
    step = max(1, min(step, int(sigma)))   # a grid coarser than sigma would flatten the blob's peak
    gy, gx = np.mgrid[0:h + step:step, 0:w + step:step].astype(np.float32)
    out = np.zeros_like(gx)
    for c in centres:
        out += np.exp(-((gx - c[0]) ** 2 + (gy - c[1]) ** 2) / (2 * sigma * sigma))
    full = cv2.resize(out, (gx.shape[1] * step, gx.shape[0] * step), interpolation=cv2.INTER_LINEAR)
    off = step // 2  # resize treats grid values as pixel centres of step-wide cells
    return np.ascontiguousarray(np.clip(full[off:off + h, off:off + w], 0.0, 1.0))


def _plan_masks(plan: FacePlan, shape: tuple[int, int], local: np.ndarray, fw: float, cfg: EditConfig) -> None:
    e, masks = plan.edits, plan.masks
    feather = 0.03 * fw
    need_face = any(k in e for k in ("brightness", "saturation", "blush", "contour"))
    need_skin = any(k in e for k in ("skin_smooth", "skin_warmth"))
    face = polygon_mask(shape, [_loop(local, "face_oval")]) if (need_face or need_skin) else None
    if need_skin:
        holes = [_scaled(_loop(local, "left_eye"), 1.5, 2.2), _scaled(_loop(local, "right_eye"), 1.5, 2.2),
                 _hull(local[mesh.loops()["left_brow"]]), _hull(local[mesh.loops()["right_brow"]]),
                 _scaled(_loop(local, "lips_outer"), 1.12, 1.25)]
        masks["skin"] = _blur(face * (1.0 - polygon_mask(shape, holes)), feather)
    if need_face:
        masks["face"] = _blur(face, feather)
    if "lip_tint" in e:
        lips = polygon_mask(shape, [_loop(local, "lips_outer")]) * (1.0 - polygon_mask(shape, [_loop(local, "lips_inner")]))
        masks["lips"] = _blur(lips, 0.012 * fw)
    if "blush" in e:
        masks["blush"] = _blobs(shape, [local[i] for i in CHEEKS], 0.09 * fw, cfg.grid_step) * masks["face"]
    if "contour" in e:
        centres = [local[s] * 0.62 + local[m] * 0.38 + (local[CHIN] - local[NOSE_TIP]) * 0.12
                   for s, m in zip(FACE_SIDES, MOUTH_CORNERS)]
        masks["contour"] = _blobs(shape, centres, 0.075 * fw, cfg.grid_step) * masks["face"]
    if "eye_makeup" in e:
        rings = []
        for name in ("left_eye", "right_eye"):
            eye = _loop(local, name)
            height = float(np.ptp(eye[:, 1]))
            lid = polygon_mask(shape, [_scaled(eye, 1.25, 2.3, -0.45 * height)])
            rings.append(lid * (1.0 - polygon_mask(shape, [eye])))
        masks["eye_makeup"] = _blur(np.maximum(rings[0], rings[1]), 0.01 * fw)


def _flow(plan: FacePlan, shape: tuple[int, int], local: np.ndarray, fw: float, cfg: EditConfig) -> np.ndarray:
    """Backward map: output pixel p samples the input at p - d(p), d a sum of Gaussian-weighted moves
    (translations at anchors, zooms about centres), evaluated on a coarse grid and interpolated."""
    e = plan.edits
    up = _unit(local[FOREHEAD] - local[CHIN])
    right = _unit(local[FACE_SIDES[1]] - local[FACE_SIDES[0]])
    anchors, moves, sigmas = [], [], []
    zooms = []   # (centre, axis matrix 2x2, strength, sigma)
    if "smile" in e:
        s = e["smile"]
        for idx, side in zip(MOUTH_CORNERS, (-1.0, 1.0)):
            anchors.append(local[idx])
            moves.append(s * fw * (cfg.smile_lift * up + cfg.smile_spread * side * np.sign(np.dot(local[idx] - local[NOSE_TIP], right) or side) * right))
            sigmas.append(0.09 * fw)
    if "brow_raise" in e:
        for name in ("left_brow", "right_brow"):
            brow = local[mesh.loops()[name]]
            order = np.argsort(brow @ right)
            for p in brow[order][::3]:   # 4 of the 10 points along the brow: the Gaussians overlap anyway
                anchors.append(p)
                moves.append(e["brow_raise"] * cfg.brow_lift * fw * up / 2.0)
                sigmas.append(0.07 * fw)
    if "face_slim" in e:
        centre = local[NOSE_TIP]
        for p in _loop(local, "face_oval")[::2]:
            below = np.dot(p - centre, up) < 0.1 * fw
            side = float(np.dot(p - centre, right))
            if below and abs(side) > 0.08 * fw:
                anchors.append(p)
                moves.append(-e["face_slim"] * cfg.slim_shift * fw * np.sign(side) * min(1.0, abs(side) / (0.4 * fw)) * right / 1.2)
                sigmas.append(0.1 * fw)
    if "eye_size" in e:
        for a, b in EYE_CORNERS:
            eye_w = float(np.linalg.norm(local[a] - local[b]))
            zooms.append(((local[a] + local[b]) / 2, np.eye(2, dtype=np.float32), e["eye_size"] * cfg.eye_zoom, 0.75 * eye_w))
    if "nose_width" in e:
        nose_w = float(np.linalg.norm(local[NOSE_WINGS[0]] - local[NOSE_WINGS[1]]))
        centre = (local[NOSE_WINGS[0]] + local[NOSE_WINGS[1]]) / 2
        zooms.append((centre, np.outer(right, right).astype(np.float32), e["nose_width"] * cfg.nose_zoom, 0.6 * nose_w))
    h, w = shape
    step = cfg.grid_step   # not coarser with the level: a 16-px grid cost 18 % of the smile's lift on a 200-px face
    xs = np.arange(0, w + step, step, dtype=np.float32)
    ys = np.arange(0, h + step, step, dtype=np.float32)
    gy, gx = np.meshgrid(ys, xs, indexing="ij")
    d = np.zeros(gx.shape + (2,), np.float32)
    # A 2-D Gaussian on a grid is the outer product of two 1-D ones, so the sum over anchors is one small
    # matrix product (anchors x rows) @ (anchors x cols) per component instead of grid x anchors exponentials.
    if anchors:
        a = np.asarray(anchors, np.float32)
        v = np.asarray(moves, np.float32)
        inv = 1.0 / (2.0 * np.asarray(sigmas, np.float32) ** 2)
        ey = np.exp(-(ys[None] - a[:, 1:2]) ** 2 * inv[:, None])   # (K, rows)
        ex = np.exp(-(xs[None] - a[:, 0:1]) ** 2 * inv[:, None])   # (K, cols)
        for j in range(2):
            d[..., j] += (ey * v[:, j:j + 1]).T @ ex
    for c, axes, k, sigma in zooms:
        inv = 1.0 / (2.0 * sigma * sigma)
        g = np.exp(-(ys - c[1]) ** 2 * inv)[:, None] * np.exp(-(xs - c[0]) ** 2 * inv)[None, :]
        rx, ry = gx - c[0], gy - c[1]
        d[..., 0] += k * g * (axes[0, 0] * rx + axes[0, 1] * ry)
        d[..., 1] += k * g * (axes[1, 0] * rx + axes[1, 1] * ry)
    # Sample positions on the coarse grid, interpolated to every pixel. Positions are linear in p, so the
    # interpolation is exact for them; the -0.5 undoes the half-cell shift of resizing step-wide cells.
    coarse = np.stack([gx, gy], -1) - d - 0.5
    full = cv2.resize(coarse, (gx.shape[1] * step, gx.shape[0] * step), interpolation=cv2.INTER_LINEAR)
    off = step // 2
    return full[off:off + h, off:off + w]   # a view: cv2.remap reads strided rows, no copy needed


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
    """All appearance edits on a float32 (h, w, 3) ROI in 0..255 (in place). Everything smooth is found at
    the masks' resolution (1/(2q)): the colour edits' change, and the smoothing's coefficients with its
    mask folded in, so the full-resolution work is one blend
        x' = x (1 - k m) + up(k m a) grey(x) + up(k m b + colour change)
    whatever the number of edits. The colour change is taken on the unsmoothed image (at 1/(2q) the
    smoothing has nothing left to remove)."""
    e = plan.edits
    h, w = x.shape[:2]
    c = 2 * plan.level
    small = cv2.resize(x, (w // c, h // c), interpolation=cv2.INTER_AREA)
    change = None
    if any(k in e for k in APPEARANCE if k != "skin_smooth"):
        change = apply_colour(small.copy(), plan)
        change -= small
    if "skin_smooth" in e:
        s = e["skin_smooth"]
        k = s if s > 0 else 1.5 * s
        km = (k * plan.masks["skin"])[..., None]
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
    """The colour edits on a float32 (h, w, 3) image in 0..255 at the masks' resolution, in place, in a
    fixed order the torch twin repeats."""
    e, m, cfg = plan.edits, plan.masks, plan.config
    if "skin_warmth" in e:
        x += (e["skin_warmth"] * m["skin"])[..., None] * WARMTH_RGB
    if "brightness" in e:
        b = (e["brightness"] * cfg.brightness * m["face"])[..., None]
        if e["brightness"] > 0:
            t = 255.0 - x
            t *= b
            x += t
        else:
            x *= 1.0 + b
    if "lip_tint" in e:
        t_ = e["lip_tint"]
        ml = (abs(t_) * cfg.lip * m["lips"])[..., None]
        target = LIP_RGB - x if t_ > 0 else _grey(x)[..., None] + 12.0 - x
        target *= ml
        x += target
    if "blush" in e:
        t_ = e["blush"]
        if t_ > 0:
            t = BLUSH_RGB - x
            t *= (t_ * cfg.blush * m["blush"])[..., None]
            x += t
        else:
            x[..., 0] += (t_ * 14.0) * m["blush"]
    if "contour" in e:
        x *= 1.0 - ((e["contour"] * cfg.contour) * m["contour"])[..., None]
    if "eye_makeup" in e:
        t_ = e["eye_makeup"]
        if t_ > 0:
            x *= 1.0 - ((t_ * cfg.eye_makeup) * m["eye_makeup"])[..., None]
        else:
            t = 255.0 - x
            t *= ((-t_ * 0.25) * m["eye_makeup"])[..., None]
            x += t
    if "saturation" in e:
        grey = _grey(x)[..., None]
        x -= grey
        x *= 1.0 + ((e["saturation"] * cfg.saturation) * m["face"])[..., None]
        x += grey
    return x


def apply_plan(image: np.ndarray, plan: FacePlan) -> np.ndarray:
    """Edits one face in place on `image` (H x W x 3 uint8) and returns it."""
    y0, y1, x0, x1 = plan.roi
    roi = image[y0:y1, x0:x1]
    if any(k in plan.edits for k in APPEARANCE):
        x = apply_appearance(roi.astype(np.float32), plan)
        roi_u8 = cv2.add(x, np.zeros_like(x), dtype=cv2.CV_8U)  # saturating, round-half-even: np.rint + clip in one pass
    else:
        roi_u8 = roi
    if plan.map_xy is not None:
        roi_u8 = cv2.remap(roi_u8, plan.map_xy, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    image[y0:y1, x0:x1] = roi_u8
    return image


def render_edits(image: np.ndarray, faces: Sequence[np.ndarray], edits: Mapping[str, float], config: EditConfig = EditConfig()) -> np.ndarray:
    """A new frame with `edits` applied to every face (each given by its (478, 2|3) pixel landmarks)."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected HxWx3 uint8 RGB, got {image.dtype} {image.shape}")
    out = image.copy()
    for lm in faces:
        plan = plan_face(image.shape[:2], lm, edits, config)
        if plan is not None:
            apply_plan(out, plan)
    return out
