"""The face edits' pixel work on the CPU: colour and skin smoothing inside a face's region of interest,
then the warp, as a FacePlan (kernels/face_plan.py) says. The torch twin is kernels/torch/edits.py.

All pixel work happens inside the ROI, so cost follows the face size, not the frame size; everything
smooth runs at the plan's coarse level and is interpolated back.
"""

from __future__ import annotations

import cv2
import numpy as np

from kernels.face_plan import FacePlan, Masked
from kernels.numpy.flow import warp
from kernels.numpy.masks import in_channels, ramp

WARMTH_RGB = np.array([12.0, 4.0, -14.0], np.float32)
# tanned skin holds more melanin, which absorbs blue most and red least: per-channel transmission, so skin
# gets darker and golder together on any skin tone (a fixed target colour would lighten dark skin)
TAN_ABSORB = np.array([0.15, 0.24, 0.42], np.float32)
PAINT_LUMA = 0.3  # how far lipstick and blush pull lightness toward their colour (chroma goes all the way)
LIDS_LUMA = 1.0   # eyeshadow and liner are worn to darken the lids: lightness goes all the way too
NUDE_LIFT = 12.0   # pale lips go toward the grey of the lips plus this
SHINE_FLOOR = 2.0  # matte takes off the shine past this many levels (kernels' `shine`)
# even tone evens a colour this far from the skin's around it (its largest channel's difference over its grey)
# and leaves one past TONE_KEEP alone: redness and blotches are a few hundredths to a few tenths off, a brow
# hair, a beard, a frame or a mole much further
TONE_EVEN, TONE_KEEP = 0.15, 0.3
TONE_NEAR = 0.06   # the skin's colour is read again from the pixels about this near the first reading
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def _grey(x: np.ndarray) -> np.ndarray:
    """Rec. 601 luma (the LUMA weights), via OpenCV's SIMD path."""
    return cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)


def _times(m: np.ndarray, rgb: np.ndarray) -> np.ndarray:
    """(h, w) x (3,) -> (h, w, 3): m's value times each channel's factor (OpenCV's per-channel scalars)."""
    return cv2.multiply(in_channels(m), (float(rgb[0]), float(rgb[1]), float(rgb[2]), 0.0))


_ONES = np.ones((1, 3), np.float32)


def _channel_sum(x: np.ndarray) -> np.ndarray:
    """(h, w, 3) float32 -> (h, w): the sum of the channels in one OpenCV pass. NumPy's sum over the last
    axis of a small image costs 20 times as much (100 us against 5 at 80 x 84)."""
    return cv2.transform(x, _ONES)


def _channel_absmax(x: np.ndarray) -> np.ndarray:
    """(h, w, 3) -> (h, w): the largest |channel|, as element-wise maxima (NumPy's max over the last axis:
    250 us against 8 at 80 x 84)."""
    a = np.abs(x)
    return np.maximum(np.maximum(a[..., 0], a[..., 1]), a[..., 2])


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
    mean_i3 = in_channels(mean_i)
    cov = box(half * in_channels(g)) - mean_i3 * mean_p
    a = cov / in_channels(var_i + eps)
    b = mean_p - a * mean_i3
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
    out *= in_channels(_grey(x))
    out += cv2.resize(b, (w, h), interpolation=cv2.INTER_LINEAR)
    return out


def apply_appearance(x: np.ndarray, plan: FacePlan) -> np.ndarray:
    """The plan's colour ops and skin smoothing on a float32 (h, w, 3) ROI in 0..255 (in place). Everything
    smooth is found at the masks' resolution (1/(2q)): the colour ops' change, and the smoothing's
    coefficients with its mask folded in, so the full-resolution work is one blend
        x' = x (1 - k m) + up(k m a) grey(x) + up(k m b + colour change)
    whatever the number of ops. The colour change is taken on the unsmoothed image (at 1/(2q) the
    smoothing has nothing left to remove)."""
    _appearance(x, plan)
    return x


def _appearance(x: np.ndarray, plan: FacePlan,
                eight_bit: bool = False) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    """`apply_appearance`'s work, done only inside the part of the ROI its fields reach (the masks are
    the face's, the ROI is wider for the warp): the (y0, y1, x0, x1) of `x` it changed and that part's new
    pixels (in `x`; with `eight_bit`, a new uint8 array instead, rounded half to even and saturated by the
    blend's last pass), None for nothing. Outside that box every field is zero and x' = x, so leaving it
    alone changes no value."""
    h, w = x.shape[:2]
    c = 2 * plan.level
    small = cv2.resize(x, (w // c, h // c), interpolation=cv2.INTER_AREA)
    change = None
    if plan.colour:
        change = apply_colour(small.copy(), plan)
        change -= small
    km = a = b = None
    if plan.smooth is not None:
        km = plan.smooth.amount * plan.smooth.mask
        km3 = in_channels(km)
        a, b = guided_coefficients(small, plan.smooth_radius // (2 * c), plan.smooth_eps)
        a *= km3
        b *= km3
        if change is not None:
            b += change
    elif change is None:
        return None
    cells = reach(km, change)
    if cells is None:
        return None
    i0, i1, j0, j1 = cells
    r0, r1, c0, c1 = i0 * c, i1 * c, j0 * c, j1 * c
    part = x[r0:r1, c0:c1]
    up = lambda f: _upsampled_part(f, cells, c)  # noqa: E731
    if km is not None:
        # full resolution in OpenCV's SIMD passes on same-shaped arrays (numpy's (h, w, 1) broadcasting is
        # several times slower); resizing 1 - k m is the same as 1 - k resize(m), bilinear being affine
        guide = in_channels(_grey(part))
        cv2.multiply(part, up(1.0 - km3), dst=part)
        cv2.accumulateProduct(up(a), guide, part)   # part += a * guide, one pass
        last = up(b)
    else:
        last = up(change)
    if eight_bit:
        return (r0, r1, c0, c1), cv2.add(part, last, dtype=cv2.CV_8U)
    cv2.add(part, last, dst=part)
    return (r0, r1, c0, c1), part


def reach(*fields: np.ndarray | None, grow: int = 1) -> tuple[int, int, int, int] | None:
    """The cells (i0, i1, j0, j1) where any field ((h, w) or (h, w, C)) is non-zero, grown by `grow` cells
    (by default the one a bilinear upsample reaches past them) and kept inside; None where all are zero."""
    hit = None
    for f in fields:
        if f is None:
            continue
        if f.ndim == 3:
            f = _channel_absmax(f) if f.shape[2] == 3 else f[..., 0]
        nz = f != 0
        hit = nz if hit is None else hit | nz
    if hit is None:
        return None
    rows, cols = np.flatnonzero(hit.any(axis=1)), np.flatnonzero(hit.any(axis=0))
    if not len(rows):
        return None
    h, w = hit.shape
    return (max(0, int(rows[0]) - grow), min(h, int(rows[-1]) + 1 + grow),
            max(0, int(cols[0]) - grow), min(w, int(cols[-1]) + 1 + grow))


def _upsampled_part(field: np.ndarray, cells: tuple[int, int, int, int], c: int) -> np.ndarray:
    """The bilinear, pixel-centre aligned upsample by `c` of `field` (h, w, C), over the cells given only:
    the same values as upsampling all of it and cutting the part out. Bilinear reads one cell past each
    side, so one more cell is taken where there is one and its pixels are cut off again."""
    i0, i1, j0, j1 = cells
    h, w = field.shape[:2]
    a0, a1, b0, b1 = max(0, i0 - 1), min(h, i1 + 1), max(0, j0 - 1), min(w, j1 + 1)
    grown = cv2.resize(np.ascontiguousarray(field[a0:a1, b0:b1]), ((b1 - b0) * c, (a1 - a0) * c),
                       interpolation=cv2.INTER_LINEAR)
    y, x = (i0 - a0) * c, (j0 - b0) * c
    return grown[y:y + (i1 - i0) * c, x:x + (j1 - j0) * c]


def toward_rgb(op: Masked) -> np.ndarray:
    """The colour a makeup op paints toward (the plan always names one for lips, blush, lids and brows)."""
    if op.rgb is None:
        raise ValueError("a makeup op needs its colour (Masked.rgb)")
    return np.asarray(op.rgb, np.float32)


def _paint(x: np.ndarray, op: Masked, luma: float = PAINT_LUMA, darkens: bool | None = None) -> None:
    """Makeup: x moves toward the op's colour by amount * mask, all the way in chroma and `luma` of the
    way in lightness, so the named shade lands while the region keeps some of its own light. `darkens`
    (a liner): lightness all the way, but only darker (True) or only lighter (False)."""
    r, g, b = toward_rgb(op).tolist()
    t = cv2.subtract((r, g, b, 0.0), x)
    lightness = _grey(t)
    if darkens is None:
        t -= in_channels((1.0 - luma) * lightness)
    else:
        t -= in_channels(np.maximum(lightness, 0.0) if darkens else np.minimum(lightness, 0.0))
    t *= in_channels(op.amount * op.mask)
    x += t


def _where(op: Masked) -> tuple[slice, slice] | None:
    """The rows and columns where the op's mask is non-zero, None where it is nowhere: lipstick, the lids'
    and brows' colour, blush, contour and a highlight cover a small part of the face, and outside their
    masks they add nothing (x + 0 * t is x), so they run on that part only."""
    cells = reach(op.mask, grow=0)
    return None if cells is None else (slice(cells[0], cells[1]), slice(cells[2], cells[3]))


def _part(x: np.ndarray, op: Masked, where: tuple[slice, slice]) -> tuple[np.ndarray, Masked]:
    """x and the op cut to `where` (x's part is a view: work on it lands in x)."""
    return x[where], Masked(op.amount, op.mask[where], op.rgb)


def apply_colour(x: np.ndarray, plan: FacePlan) -> np.ndarray:
    """The plan's colour ops on a float32 (h, w, 3) image in 0..255 at the masks' resolution, in place, in
    the plan's field order (the torch twin repeats it)."""
    if (op := plan.tone) is not None:
        x += in_channels(op.amount * op.mask) * even_tone(x, plan.tone_radius, op.mask)
    if (op := plan.warmth) is not None:
        x += _times(op.amount * op.mask, WARMTH_RGB)
    if (op := plan.brightness) is not None:
        b = in_channels(op.amount * op.mask)
        if op.amount > 0:
            t = 255.0 - x
            t *= b
            x += t
        else:
            x *= 1.0 + b
    if (op := plan.tan) is not None:
        x *= 1.0 - _times(op.amount * op.mask, TAN_ABSORB)
    if (op := plan.lips) is not None and (where := _where(op)):
        part, op = _part(x, op, where)
        if op.amount > 0:
            _paint(part, op)
        else:
            target = in_channels(_grey(part) + NUDE_LIFT) - part
            target *= in_channels(-op.amount * op.mask)
            part += target
    if (op := plan.blush) is not None and (where := _where(op)):
        part, op = _part(x, op, where)
        if op.amount > 0:
            _paint(part, op)
        else:
            part[..., 0] += op.amount * op.mask
    if (op := plan.contour) is not None and (where := _where(op)):
        part, op = _part(x, op, where)
        part *= in_channels(1.0 - op.amount * op.mask)
    for op in (plan.lids, plan.brows):    # eyeshadow and brow colour: worn to darken, lightness and all
        if op is None or not (where := _where(op)):
            continue
        lids = op is plan.lids
        part, op = _part(x, op, where)
        if op.amount > 0:
            if lids and plan.lid_grey > 0:
                op = Masked(op.amount * lid_scale(part, op, plan.lid_grey), op.mask, op.rgb)
            _paint(part, op, LIDS_LUMA, darkens=None if lids else ink_darkens(op))   # a brow's fill: one way, as a liner
        else:
            t = 255.0 - part
            t *= in_channels((-op.amount) * op.mask)
            part += t
    if (op := plan.saturation) is not None:
        grey = in_channels(_grey(x))
        x -= grey
        x *= in_channels(1.0 + op.amount * op.mask)
        x += grey
    for op in (plan.gloss, plan.glow):    # lip gloss and the skin's glow: a highlight, or matte
        if op is None:
            continue
        if op.amount > 0:
            if where := _where(op):
                part, op = _part(x, op, where)
                t = 255.0 - part
                t *= in_channels(op.amount * op.mask)
                part += t
        else:
            x -= in_channels(-op.amount * op.mask * shine(x, plan.shine_radius, op.mask))
    return x


LID_INK_GAP = 10.0   # a shadow whose grey is within this of the lids' (or above it) is a colour, not a darkening


def lid_scale(x: np.ndarray, op: Masked, grey: float) -> float:
    """How much the lids' shadow is scaled so that it darkens these lids' grey as it darkens a lid of `grey`:
    toward a colour of grey `ink` by a, a grey g moves by a (g - ink), so a (grey - ink) / (g - ink), g the
    lids' mask-weighted grey; within [0.5, 2]. A shade as light as the lids (gold, a pastel) is left as given."""
    ink = float(np.dot(LUMA, toward_rgb(op)))
    w = float(op.mask.sum())
    if w <= 1e-6:
        return 1.0
    g = float((_grey(np.ascontiguousarray(x)) * op.mask).sum()) / w
    if min(g, grey) - ink < LID_INK_GAP:
        return 1.0
    return float(np.clip((grey - ink) / (g - ink), 0.5, 2.0))


def local_mean(x: np.ndarray, radius: int, weight: np.ndarray) -> np.ndarray:
    """The `weight`-weighted mean of x (h, w, C) over a box of `radius` about each pixel (reflect-101
    borders): the colour of the region `weight` covers around it, not of what lies beside the region."""
    r = max(1, radius)
    k = (2 * r + 1, 2 * r + 1)
    w = np.ascontiguousarray(weight, np.float32)
    mean = cv2.boxFilter(x * in_channels(w), -1, k, borderType=cv2.BORDER_REFLECT_101)
    mean /= in_channels(np.maximum(cv2.boxFilter(w, -1, k, borderType=cv2.BORDER_REFLECT_101), 1e-3))
    return mean


def even_tone(x: np.ndarray, radius: int, weight: np.ndarray) -> np.ndarray:
    """What evens the skin's tone, per pixel (h, w, 3): the move from x to its own grey in the colour of the
    skin around it, x' = grey(x) * skin / grey(skin). Only the hue and the saturation move, toward the skin's:
    redness, a sallow or blotchy patch; the grey, and with it the shading, the pores and the lines, stays.
    The skin's colour is the `weight`-weighted mean within `radius`, taken twice: the second time from the
    pixels near the first (TONE_NEAR), so a blotch does not colour its own target. A colour far from the
    skin's (TONE_EVEN .. TONE_KEEP of its grey away: a brow hair, a beard, a frame) is left as it is."""
    g = _grey(x)
    move, far = _to_skin(x, g, local_mean(x, radius, weight))
    near = weight * np.maximum(np.exp(-np.square(far * (1.0 / TONE_NEAR))), 0.02)
    move, far = _to_skin(x, g, local_mean(x, radius, near))
    move *= in_channels(1.0 - ramp((far - TONE_EVEN) * (1.0 / (TONE_KEEP - TONE_EVEN))))
    return move


def _to_skin(x: np.ndarray, g: np.ndarray, skin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The move from x to its grey `g` in the colour `skin`, and how far that is (its largest channel over g)."""
    move = skin * in_channels(g / np.maximum(_grey(skin), 1.0))
    move -= x
    return move, _channel_absmax(move) / np.maximum(g, 8.0)


def shine(x: np.ndarray, radius: int, weight: np.ndarray) -> np.ndarray:
    """The shine a matte finish takes off: per pixel, the white it carries on top of the colour around it,
    where it is also brighter than its surroundings. Read by the dichromatic reflection model, a gloss
    reflects the light's white and the skin or lip below reflects its own colour: x = k * base + s * (1, 1, 1),
    base the mean colour within `radius` of the region `weight` covers (a box, reflect-101 borders: hair,
    brows and lips around the skin do not colour it), k the shading and s the white, solved per pixel by
    least squares. A wrinkle's ridge or a cheekbone's light is brighter but no whiter (k changes, not s), a
    freckle is darker: both stay. s is capped by how far the grey stands above the base's, less
    SHINE_FLOOR, and is 0 under it."""
    base = local_mean(x, radius, weight)
    bb = _channel_sum(base * base)
    b1 = _channel_sum(base)
    bx = _channel_sum(base * x)
    x1 = _channel_sum(x)
    det = 3.0 * bb - b1 * b1      # [[bb, b1], [b1, 3]] [k, s] = [bx, x1]; small only where base is grey
    white = (bb * x1 - b1 * bx) / np.maximum(det, 1e-3 * bb + 1.0)
    g = _grey(x)
    g -= _grey(base)
    np.minimum(white, g, out=white)
    white -= SHINE_FLOOR
    return np.maximum(white, 0.0)


INK_LIGHT = 128.0   # an ink at or above this grey is a light one (white, gold, blonde): it lightens, and a darker one darkens


def ink_darkens(op: Masked) -> bool:
    """Whether a liner or a brow colour darkens what it covers (a dark ink: black, brown, plum) or lightens
    it (gold, white, blonde). Each moves lightness that way only: under a liner lie lashes and lid shadow
    darker than a black ink, and in a dark brow hairs darker than a brown one, and moving them toward the
    ink's own grey would lighten them: a liner lost on a dark lash line (Biden's reads L* 13-14, the black
    ink 14), a dark brow made paler by its fill. The ink decides, not the grey under it, which the hairs
    and the light of the room set."""
    return float(np.dot(LUMA, toward_rgb(op))) < INK_LIGHT


def draw_liners(roi: np.ndarray, plan: FacePlan) -> None:
    """The plan's full-resolution makeup (FacePlan.liners) painted on the uint8 ROI in place: toward the
    ink in colour, and in lightness only darker for a dark ink, only lighter for a light one (ink_darkens)."""
    for drawn in plan.liners:
        a0, a1, b0, b1 = drawn.box
        part = roi[a0:a1, b0:b1].astype(np.float32)
        _paint(part, drawn.op, darkens=ink_darkens(drawn.op))
        roi[a0:a1, b0:b1] = cv2.add(part, np.zeros_like(part), dtype=cv2.CV_8U)


def apply_plan(image: np.ndarray, plan: FacePlan) -> np.ndarray:
    """Edits one face in place on `image` (H x W x 3 uint8) and returns it."""
    y0, y1, x0, x1 = plan.roi
    roi = image[y0:y1, x0:x1]
    if plan.appearance:                # the part of the ROI the masks cover, and of it only where they reach
        a0, a1, b0, b1 = plan.appearance_box or (0, y1 - y0, 0, x1 - x0)
        x = roi[a0:a1, b0:b1].astype(np.float32)
        done = _appearance(x, plan, eight_bit=True)
        if done is not None:           # the rest of the ROI is left as it is
            (r0, r1, c0, c1), pixels = done
            roi[a0 + r0:a0 + r1, b0 + c0:b0 + c1] = pixels
    draw_liners(roi, plan)             # over the colour work, under the warp (the eyes move with the liner on)
    if plan.map_xy is not None:        # only where the map moves pixels: elsewhere the remap gives them back
        a0, a1, b0, b1 = plan.map_box or (0, y1 - y0, 0, x1 - x0)
        if a1 > a0 and b1 > b0:
            image[y0 + a0:y0 + a1, x0 + b0:x0 + b1] = warp(roi, plan.map_xy[a0:a1, b0:b1])
    return image
