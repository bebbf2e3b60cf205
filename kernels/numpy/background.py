"""Background pixel maths: the person mask from the network's size to the frame's (fast guided filter with
the frame as guide, so the mask's edge follows hair and shoulders instead of the network's 5x coarser
grid), steadied over time, and the frame composed over a blurred, coloured or pictured background.

Planes are 2-D (one I420 plane, or a grey image) or H x W x C; masks are float32 in [0, 1]. Everything
that runs per frame touches the full-resolution frame a few times only: the filter's coefficients live
at the mask's size and are upsampled once, the blur runs at 1/`factor` of the frame.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import cv2
import numpy as np

from kernels.numpy.color import gaussian_kernel, i420_to_rgb

_BORDER = cv2.BORDER_REFLECT_101


def area_down(plane: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """cv2.resize(plane, size, INTER_AREA), the same pixels, faster for a uint8 plane shrunk by a whole
    factor of 3 to 16 (720p to the network's 256 x 144 by 5: OpenCV takes its per-pixel path there): the
    factor's rows summed, then its columns (a box sum read at every factor-th column), scaled and
    rounded as OpenCV rounds."""
    h, w = plane.shape[:2]
    f = w // size[0] if size[0] else 0
    if plane.ndim != 2 or plane.dtype != np.uint8 or not 3 <= f <= 16 or (w, h) != (size[0] * f, size[1] * f):
        return cv2.resize(plane, size, interpolation=cv2.INTER_AREA)
    rows = plane.reshape(size[1], f, w).sum(axis=1, dtype=np.uint16)
    sums = cv2.boxFilter(rows, -1, (f, 1), anchor=(0, 0), normalize=False, borderType=cv2.BORDER_CONSTANT)[:, ::f]
    return cv2.convertScaleAbs(sums, alpha=1.0 / (f * f))


def i420_thumbnail(y: np.ndarray, u: np.ndarray, v: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 RGB (h, w, 3) thumbnail of an I420 frame at `size` = (w, h), both even: each plane averaged
    down (area), then converted; the frame itself is never converted whole."""
    w, h = size
    return i420_to_rgb(area_down(y, (w, h)), area_down(u, (w // 2, h // 2)), area_down(v, (w // 2, h // 2)))


def rgb_thumbnail(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 RGB thumbnail at `size` = (w, h), averaged down (area)."""
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)


def thumbnail_guide(thumbnail: np.ndarray) -> np.ndarray:
    """float32 grey in [0, 1] of an RGB thumbnail (BT.601 weights): the guided filter's and the motion
    test's view of the frame at the mask's size."""
    t = thumbnail.astype(np.float32)
    return (t[..., 0] * 0.299 + t[..., 1] * 0.587 + t[..., 2] * 0.114) * np.float32(1.0 / 255.0)


def _box(x: np.ndarray, radius: int) -> np.ndarray:
    return cv2.boxFilter(x, -1, (2 * radius + 1, 2 * radius + 1), borderType=_BORDER)


def steady(prev_mask: np.ndarray | None, mask: np.ndarray, prev_guide: np.ndarray | None, guide: np.ndarray,
           still_weight: float = 0.25, motion_level: float = 0.05, noise: float = 0.01, radius: int = 2) -> np.ndarray:
    """The mask over time, at the mask's size: where the picture stands still (grey change, averaged over
    a (2 radius + 1)^2 window, under `noise`: a camera's sensor noise) the new mask is only `still_weight`
    of the result, so the network's flicker on a still person fades; where the picture moved (by
    `noise` + `motion_level` or more) it is taken whole, so a moving person leaves no trail; between, in
    proportion. No history (or a new size): the new mask."""
    if prev_mask is None or prev_guide is None or prev_mask.shape != mask.shape or prev_guide.shape != guide.shape:
        return mask.astype(np.float32, copy=True)
    w = moved(prev_guide, guide, motion_level, noise, radius)
    w = w * np.float32(1.0 - still_weight) + np.float32(still_weight)
    return prev_mask + w * (mask - prev_mask)


def moved(then: np.ndarray, now: np.ndarray, motion_level: float = 0.05, noise: float = 0.01,
          radius: int = 2) -> np.ndarray:
    """How far each pixel of the grey `now` moved from `then` (same shape, [0, 1]): 0 where the change,
    averaged over a (2 radius + 1)^2 window, is under `noise` (a camera's sensor noise), 1 from `noise` +
    `motion_level` up, in proportion between. One minus it is what an earlier read of the picture is still
    worth there (a stream's held second look, engines/background.py)."""
    d = cv2.absdiff(np.ascontiguousarray(now, np.float32), np.ascontiguousarray(then, np.float32))
    cv2.boxFilter(d, -1, (2 * radius + 1, 2 * radius + 1), dst=d, borderType=_BORDER)
    d -= np.float32(noise)
    d *= np.float32(1.0 / motion_level)
    return np.clip(d, 0.0, 1.0, out=d)


def fit_holds(fit: tuple[np.ndarray, np.ndarray], mask: np.ndarray, guide: np.ndarray, level: float,
              noise: float = 0.01, radius: int = 2) -> bool:
    """Whether guided coefficients fitted to `fit` = (mask, guide) still fit a stream's new steadied `mask`
    and `guide` (the thumbnail's grey): no mask value moved by more than `level`, and the grey nowhere
    `moved` past a camera's `noise` (the steadying's own test). A still picture's new read then changes
    nothing the fit would see."""
    then_mask, then_guide = fit
    if then_mask.shape != mask.shape or then_guide.shape != guide.shape:
        return False
    if float(cv2.norm(mask, then_mask, cv2.NORM_INF)) > level:
        return False
    return float(moved(then_guide, guide, noise=noise, radius=radius).max()) == 0.0


def mask_parts(mask: np.ndarray, level: float = 0.5) -> tuple[int, np.ndarray]:
    """(how many labels, the room's 0 among them; the labels) of the 8-connected parts of `mask` > `level`."""
    person = (mask > level).astype(np.uint8)
    return cv2.connectedComponents(person, connectivity=8, ltype=cv2.CV_32S)


def drop_islands(mask: np.ndarray, parts: tuple[int, np.ndarray], seeds: np.ndarray, reach: float,
                 max_area: float = float("inf"), grow: int = 2) -> tuple[np.ndarray, int]:
    """(`mask` without its far islands, how many were dropped): the `parts` of `mask` (mask_parts) that
    hold no `seeds` pixel (the places known to be the person, uint8 or bool, the mask's shape), cover at
    most `max_area` mask pixels and lie more than `reach` mask pixels from every part that does, set to 0
    together with their fringe (`grow` pixels around them, but not within `reach` / 2 of the seeded
    parts). `mask` itself when nothing is dropped, else a new array. No seeded part (nobody known to be
    there): nothing is dropped."""
    n, labels = parts
    if n <= 2:
        return mask, 0
    known = seeds > 0
    seeded = np.bincount(labels[known], minlength=n) > 0
    seeded[0] = False
    if not seeded.any():
        return mask, 0
    anchor = (seeded[labels] | known).astype(np.uint8)
    dist = cv2.distanceTransform(1 - anchor, cv2.DIST_L2, cv2.DIST_MASK_5)
    near = np.bincount(labels[dist <= reach], minlength=n) > 0       # a part with a pixel within reach
    far = ~(near | seeded | (np.bincount(labels.ravel(), minlength=n) > max_area))
    far[0] = False
    if not far.any():
        return mask, 0
    gone = cv2.dilate(far[labels].astype(np.uint8), np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)) > 0
    out = mask.copy()
    out[gone & (dist > 0.5 * reach)] = 0.0
    return out, int(far.sum())


def person_moved_share(prev_luma: np.ndarray, prev_mask: np.ndarray, luma: np.ndarray, shift: tuple[float, float],
                       step: int = 8, level: int = 16) -> float:
    """The share of a sparse grid of `luma` (every `step`-th row and column, uint8 grey) that differs by more
    than `level` from the previous frame as it would look had the person (`prev_mask` > 0.5, at any size)
    moved by `shift` = (dx, dy) luma pixels and the room stood still: how badly "the same person, moved"
    explains the new frame. Grid points the person has just uncovered are not counted (what was behind
    them is not in the previous frame)."""
    h, w = luma.shape
    gy, gx = np.mgrid[step // 2:h:step, step // 2:w:step].astype(np.float32)
    sx, sy = gx - np.float32(shift[0]), gy - np.float32(shift[1])
    mh, mw = prev_mask.shape

    def person_at(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """prev_mask > 0.5 at luma pixels (x, y), read bilinearly at the mask's own size."""
        return cv2.remap(prev_mask, (x + 0.5) * np.float32(mw / w) - 0.5, (y + 0.5) * np.float32(mh / h) - 0.5,
                         cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE) > 0.5

    arrived = person_at(sx, sy)                                 # the moved person covers this point now
    known = arrived | ~person_at(gx, gy)
    carried = cv2.remap(prev_luma, sx, sy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    iy, ix = gy.astype(np.intp), gx.astype(np.intp)
    predicted = np.where(arrived, carried, prev_luma[iy, ix]).astype(np.int16)
    off = np.abs(luma[iy, ix].astype(np.int16) - predicted) > level
    return float(np.count_nonzero(off & known)) / max(1, int(np.count_nonzero(known)))


def guided_coefficients(mask: np.ndarray, guide: np.ndarray, radius: int = 3, eps: float = 1e-3,
                        low: float = 0.25, high: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """The guided filter's per-pixel linear model alpha = A * grey + B at the mask's size (He and Sun's
    fast guided filter), with the contrast curve (low -> 0, high -> 1) folded in, so that inside the
    person alpha is exactly 1 and far from it exactly 0. `guide` is grey in [0, 1] at the mask's size; A is
    returned per grey level 0..255 (to multiply the frame's uint8 luma directly)."""
    p = mask.astype(np.float32, copy=False)
    i = guide.astype(np.float32, copy=False)
    mean_i, mean_p = _box(i, radius), _box(p, radius)    # one box per mean: merging them into channels and
    var_i = cv2.subtract(_box(cv2.multiply(i, i), radius), cv2.multiply(mean_i, mean_i))   # splitting cost more
    cov = cv2.subtract(_box(cv2.multiply(i, p), radius), cv2.multiply(mean_i, mean_p))
    a = cv2.divide(cov, cv2.add(var_i, float(np.float32(eps))))
    b = cv2.subtract(mean_p, cv2.multiply(a, mean_i))
    gain = np.float32(1.0 / (high - low))
    return (cv2.multiply(_box(a, radius), float(gain / np.float32(255.0))),
            cv2.multiply(cv2.subtract(_box(b, radius), float(np.float32(low))), float(gain)))


def _fits(buf: np.ndarray | None, shape: tuple, dtype) -> np.ndarray | None:
    """`buf` when it can take a result of this shape and type (a caller's reused workspace), else None."""
    return buf if buf is not None and buf.shape == shape and buf.dtype == dtype else None


class Upsampled(NamedTuple):
    """guided_coefficients brought up to an alpha's `size` = (h, w), to apply to a frame's grey
    (apply_coefficients). By blocks (alpha_blocks): `person` marks the blocks that are wholly 1, `bi`,
    `bj` the blocks along the person's edge, whose coefficients `a` and `b` hold (k x block); whole: `a`
    and `b` are planes and `person` is None. A stream keeps one while its coefficients stay (the frames
    the network rests on), and each frame costs a multiply and an add on the edge's blocks."""

    size: tuple[int, int]
    a: np.ndarray
    b: np.ndarray
    person: np.ndarray | None = None
    bi: np.ndarray | None = None
    bj: np.ndarray | None = None


def guided_alpha(coef: tuple[np.ndarray, np.ndarray], luma: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 alpha at `luma`'s size (uint8 H x W, the frame's grey or Y plane): the coefficients
    upsampled (bilinear, half-pixel centres) and applied to every pixel, clipped to [0, 1]. `out` (float32
    of luma's shape): a buffer a stream reuses from frame to frame (a fresh 4 MB array each frame costs its
    page faults, on a busy machine more than the arithmetic)."""
    return apply_coefficients(upsample_coefficients(coef, luma.shape), luma, out)


def upsample_coefficients(coef: tuple[np.ndarray, np.ndarray], size: tuple[int, int]) -> Upsampled:
    """The coefficients brought up to `size` = (h, w) (bilinear, half-pixel centres). Where the sides allow
    (alpha_blocks), only the blocks along the person's edge: a block is 0 when every coefficient it reads
    gives at most 0 for any grey level (alpha = A * grey + B, grey 0..255), 1 when every one gives at
    least 1; the others (about a quarter of a 720p stream's with one person) are brought up by two
    products with each block's window of coefficients, the same values as OpenCV's resize to float
    rounding. The products go block by block (a stack of small ones, each far under the size at which
    BLAS wakes its threads: one product over all the blocks does, and they spin on the stream's other
    core, doubling the server's CPU a frame)."""
    grid = alpha_blocks(size, coef[0].shape)
    a, b = coef
    if grid is None:
        h, w = size
        return Upsampled(size, cv2.resize(a, (w, h), interpolation=cv2.INTER_LINEAR),
                         cv2.resize(b, (w, h), interpolation=cv2.INTER_LINEAR))
    (bh, ch, wy), (bw, cw, wx) = grid
    top = cv2.add(b, a * np.float32(255.0))
    lo = _block_reduce(_block_reduce(np.minimum(b, top), ch, np.minimum).T, cw, np.minimum).T
    hi = _block_reduce(_block_reduce(np.maximum(b, top), ch, np.maximum).T, cw, np.maximum).T
    person = lo >= 1.0
    bi, bj = np.nonzero(~person & (hi > 0.0))
    k = len(bi)
    if not k:
        empty = np.empty((0, bh, bw), np.float32)
        return Upsampled(size, empty, empty, person, bi, bj)
    ih, iw = a.shape
    rows = np.clip(bi[:, None] * ch - 1 + np.arange(ch + 2), 0, ih - 1)        # each block's window of cells
    cols = np.clip(bj[:, None] * cw - 1 + np.arange(cw + 2), 0, iw - 1)
    at = (rows[:, :, None], cols[:, None, :])
    windows = np.concatenate((a[at], b[at]))                                    # (2k, ch + 2, cw + 2)
    up = np.matmul(wy, np.matmul(windows, wx.T))                                # (2k, bh, bw)
    return Upsampled(size, up[:k], up[k:], person, bi, bj)


def apply_coefficients(up: Upsampled, luma: np.ndarray, out: np.ndarray | None = None,
                       shift: tuple[int, int] = (0, 0), work: dict | None = None) -> np.ndarray:
    """float32 alpha = A * grey + B clipped to [0, 1] at `luma`'s size (its `up`), into `out` when it fits.
    `shift` = (dx, dy) whole pixels: the coefficients moved by it first, their edges repeated, alpha(x) =
    A(x - shift) grey(x) + B(x - shift) (a person's matte carried along as they moved, fitted to the new
    frame's grey): the grey moved back, the coefficients applied where they were brought up, the result
    moved on, and the strip the coefficients left at the frame's edge computed from their edge line.
    `work`: a dict the caller keeps, where the moved grey and alpha live from frame to frame."""
    h, w = luma.shape
    out = _fits(out, (h, w), np.float32)
    dx, dy = (max(-w + 1, min(w - 1, int(shift[0]))), max(-h + 1, min(h - 1, int(shift[1]))))
    if not dx and not dy:
        return _apply(up, luma, out)
    moved = _moved(luma, -dx, -dy, scratch(work, "moved_grey", (h, w), np.uint8) if work is not None
                   else np.empty_like(luma))
    placed = _apply(up, moved, scratch(work, "moved_alpha", (h, w)))
    out = _moved(placed, dx, dy, out if out is not None else np.empty((h, w), np.float32))
    if dx:                                               # columns whose coefficients came from the edge column
        xs = np.s_[:dx] if dx > 0 else np.s_[w + dx:]
        a, b = (_moved(c[:, None], 0, dy, np.empty_like(c[:, None])) for c in _edge_line(up, 1, 0 if dx > 0 else w - 1))
        _line_alpha(a, b, luma[:, xs], out[:, xs])
    if dy:                                               # rows whose coefficients came from the edge row
        ys = np.s_[:dy] if dy > 0 else np.s_[h + dy:]
        a, b = (_moved(c[None], dx, 0, np.empty_like(c[None])) for c in _edge_line(up, 0, 0 if dy > 0 else h - 1))
        _line_alpha(a, b, luma[ys], out[ys])
    return out


def _line_alpha(a: np.ndarray, b: np.ndarray, grey: np.ndarray, out: np.ndarray) -> None:
    v = a * grey
    v += b
    np.maximum(v, 0.0, out=v)
    np.minimum(v, 1.0, out=out)


def _apply(up: Upsampled, luma: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    h, w = luma.shape
    if up.person is None:
        out = cv2.multiply(up.a, luma, dst=out, dtype=cv2.CV_32F)
        cv2.add(out, up.b, dst=out)
        cv2.threshold(out, 1.0, 1.0, cv2.THRESH_TRUNC, dst=out)
        cv2.threshold(out, 0.0, 0.0, cv2.THRESH_TOZERO, dst=out)
        return out
    if out is None:
        out = np.empty((h, w), np.float32)
    nr, nc = up.person.shape
    blocks = out.reshape(nr, h // nr, nc, w // nc)
    blocks[...] = up.person.astype(np.float32)[:, None, :, None]
    if len(up.bi):
        alpha = up.a * luma.reshape(blocks.shape)[up.bi, :, up.bj, :]
        alpha += up.b
        np.clip(alpha, 0.0, 1.0, out=alpha)
        blocks[up.bi, :, up.bj, :] = alpha
    return out


def _moved(src: np.ndarray, dx: int, dy: int, out: np.ndarray) -> np.ndarray:
    """out[y, x] = src[y - dy, x - dx], the index clamped to the plane: `src` moved by (dx, dy) whole
    pixels (|dx| < width, |dy| < height), its edges repeated into what it uncovers."""
    h, w = src.shape
    out[max(0, dy):h + min(0, dy), max(0, dx):w + min(0, dx)] = src[max(0, -dy):h - max(0, dy),
                                                                  max(0, -dx):w - max(0, dx)]
    if dx > 0:
        out[:, :dx] = out[:, dx:dx + 1]
    elif dx < 0:
        out[:, w + dx:] = out[:, w + dx - 1:w + dx]
    if dy > 0:
        out[:dy] = out[dy:dy + 1]
    elif dy < 0:
        out[h + dy:] = out[h + dy - 1:h + dy]
    return out


def _edge_line(up: Upsampled, axis: int, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of `up` along one line: row `index` (axis 0, a value per column) or column `index` (axis 1,
    a value per row)."""
    h, w = up.size
    if up.person is None:
        return (up.a[index], up.b[index]) if axis == 0 else (up.a[:, index], up.b[:, index])
    nr, nc = up.person.shape
    bh, bw = h // nr, w // nc
    if axis == 0:
        i, r = divmod(index, bh)
        a, b = np.zeros(w, np.float32), np.repeat(up.person[i].astype(np.float32), bw)
        for k in np.flatnonzero(up.bi == i):
            j = up.bj[k]
            a[j * bw:(j + 1) * bw], b[j * bw:(j + 1) * bw] = up.a[k, r], up.b[k, r]
        return a, b
    j, c = divmod(index, bw)
    a, b = np.zeros(h, np.float32), np.repeat(up.person[:, j].astype(np.float32), bh)
    for k in np.flatnonzero(up.bj == j):
        i = up.bi[k]
        a[i * bh:(i + 1) * bh], b[i * bh:(i + 1) * bh] = up.a[k, :, c], up.b[k, :, c]
    return a, b


def _axis_blocks(n_out: int, n_in: int) -> tuple[int, int, np.ndarray] | None:
    """(block, cells, weights) for one axis of a bilinear upsample from n_in to n_out: blocks of `block`
    output pixels that each start where the sampling grid repeats, so that every block's pixels are
    `weights` (block x cells + 2) times its window of input cells (its own `cells`, one before and one
    after, the map's edge repeated), as from the whole map (OpenCV's half-pixel centres and clamped edges).
    Blocks are 32 to 128 pixels and cut n_out into at least two; None where no such block exists."""
    g = math.gcd(n_out, n_in)
    p_out, p_in = n_out // g, n_in // g
    if p_out < p_in or p_out > 128:                   # a downsample, or a period too long to cut into blocks
        return None
    for k in range(1, 128 // p_out + 1):
        block, cells = p_out * k, p_in * k
        if block >= 32 and n_out % block == 0 and n_out // block >= 2:
            f = (np.arange(block) + 0.5) * (n_in / n_out) + 0.5          # in window cells (the window starts a cell early)
            first = np.floor(f).astype(np.intp)
            weights = np.zeros((block, cells + 2), np.float32)
            weights[np.arange(block), first] = 1.0 - (f - first)
            weights[np.arange(block), first + 1] = f - first
            return block, cells, weights
    return None


def alpha_blocks(size: tuple[int, int], coef_shape: tuple[int, int]) -> tuple | None:
    """(rows, cols): _axis_blocks of both axes of an alpha of `size` = (h, w) upsampled from coefficients of
    `coef_shape`, or None (upsample_coefficients then brings up the whole planes)."""
    rows, cols = _axis_blocks(size[0], coef_shape[0]), _axis_blocks(size[1], coef_shape[1])
    return None if rows is None or cols is None else (rows, cols)


def _block_reduce(x: np.ndarray, cells: int, reduce) -> np.ndarray:
    """`reduce` (np.minimum or np.maximum) of a cell map over each block's cells along axis 0, with the
    cell before and after it (the bilinear taps of its edge pixels; the map's edges repeated)."""
    n = x.shape[0] // cells
    p = np.concatenate([x[:1], x, x[-1:]])
    core = reduce.reduce(p[1:-1].reshape(n, cells, *x.shape[1:]), axis=1)
    return reduce(core, reduce(p[0:n * cells:cells], p[cells + 1::cells][:n]))


def keep_polygons(alpha: np.ndarray, polygons) -> np.ndarray:
    """alpha set to 1 inside each polygon ((N, 2) pixel x, y), in place: regions known to be the person
    (the faces the face stage follows) whatever the network thought."""
    for poly in polygons:
        cv2.fillPoly(alpha, [np.round(np.asarray(poly, np.float64)).astype(np.int32)], 1.0)
    return alpha


def half_plane(plane: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """An even-sized plane's 2 x 2 block means (uint8 stays uint8, rounded): the luma the stream's alpha is
    fitted to (the chroma planes' size)."""
    h, w = plane.shape
    return cv2.resize(plane, (w // 2, h // 2), dst=_fits(out, (h // 2, w // 2), plane.dtype),
                      interpolation=cv2.INTER_AREA)


def upsample_alpha(alpha: np.ndarray, size: tuple[int, int], out: np.ndarray | None = None) -> np.ndarray:
    """alpha brought up to `size` = (w, h), bilinear with half-pixel centres (into `out` when it fits)."""
    return cv2.resize(alpha, size, dst=_fits(out, (size[1], size[0]), np.float32), interpolation=cv2.INTER_LINEAR)


def half_alpha(alpha: np.ndarray) -> np.ndarray:
    """alpha for the chroma planes: the 2 x 2 block means of an even-sized alpha."""
    h, w = alpha.shape
    return cv2.resize(alpha, (w // 2, h // 2), interpolation=cv2.INTER_AREA)


def composite(fg: np.ndarray, bg: np.ndarray | float | tuple, alpha: np.ndarray,
              out: np.ndarray | None = None, work: np.ndarray | None = None) -> np.ndarray:
    """uint8 fg over bg by alpha, rounded: bg + alpha (fg - bg). `bg` is a plane like fg (uint8 or float),
    or one value per channel (a colour). Where alpha is 1 the result is fg exactly, where 0 it is bg.
    `out` (a plane of fg's shape, fg itself allowed): written there instead of a new array; `work` (float32
    of a plane's shape): the arithmetic's buffer, reused by a stream."""
    if fg.ndim == 2:                                     # a plane: OpenCV's passes (the stream's path)
        b2 = bg.astype(np.float32, copy=False) if isinstance(bg, np.ndarray) else float(np.asarray(bg).reshape(-1)[0])
        d = _fits(work, fg.shape, np.float32)
        if d is None:
            d = np.empty(fg.shape, np.float32)
        cv2.subtract(fg, b2 if isinstance(b2, np.ndarray) else float(np.float32(b2)), dst=d, dtype=cv2.CV_32F)
        cv2.multiply(d, alpha, dst=d)
        if isinstance(b2, np.ndarray):
            cv2.add(d, b2, dst=d)
            res = cv2.convertScaleAbs(d, dst=out)          # rounded to nearest, saturated
        else:
            res = cv2.convertScaleAbs(d, dst=out, alpha=1.0, beta=b2)
        return res if out is None else out
    b = np.asarray(bg, np.float32)
    a = alpha[..., None] if fg.ndim == 3 else alpha
    res = fg.astype(np.float32)
    res -= b
    res *= a
    res += b
    res += np.float32(0.5)
    np.clip(res, 0.0, 255.0, out=res)
    if out is None:
        return res.astype(np.uint8)
    out[...] = res
    return out


def blur_sigma(strength: float, height: int, factor: int) -> float:
    """The Gaussian's sigma at 1/`factor` size for a blur `strength` in [0, 1]: up to 4 % of the frame's
    height (29 px on a 720p frame), a soft lens blur."""
    return max(0.5, float(strength) * 0.04 * height / factor)


def halvings(size: tuple[int, int], small: tuple[int, int]) -> int:
    """How many times (w, h) = `size` halves exactly to `small` (0: it does not)."""
    (w, h), (sw, sh), n = size, small, 0
    while (w, h) != (sw, sh):
        if w % 2 or h % 2 or w < 2 * sw:
            return 0
        w, h, n = w // 2, h // 2, n + 1
    return n


def shrink(plane: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """float32 area means of a uint8 or float32 plane down to `size` = (w, h). By a power of two in 2 x 2
    steps (OpenCV's fast path: 1/8 of 720p in a third of one 8 x 8 pass's time), a uint8 plane's first
    step rounded to whole levels, the others exact; else in one pass (a uint8 plane's rounded)."""
    h, w = plane.shape[:2]
    steps = halvings((w, h), size) if plane.dtype in (np.uint8, np.float32) else 0
    if not steps:
        return cv2.resize(plane, size, interpolation=cv2.INTER_AREA).astype(np.float32, copy=False)
    for _ in range(steps):
        h, w = h // 2, w // 2
        plane = cv2.resize(plane, (w, h), interpolation=cv2.INTER_AREA).astype(np.float32, copy=False)
    return plane


def room_weight(alpha: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """1 - alpha, area-averaged down to `size` = (w, h): how much room each small pixel shows."""
    return 1.0 - shrink(alpha, size)


ROOM_TRUST = 0.05   # the blurred room's weight from which background_blur shows the room alone (below: the frame's blur mixes in)


def _blur_weights(weight: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(c1, c0) of the normalised convolution at the small size, shared by the planes of one frame: the
    blurred room is c1 * blur(plane * weight) + c0 * blur(plane), c1 = t / blur(weight) and c0 = 1 - t,
    t trusting the weighted mean where some background is seen nearby (ROOM_TRUST)."""
    den = cv2.sepFilter2D(weight, -1, k, k, borderType=_BORDER)
    t = _trust(den)
    return t / np.maximum(den, np.float32(1e-4)), np.float32(1.0) - t


def _trust(den: np.ndarray) -> np.ndarray:
    return np.clip(den * np.float32(1.0 / ROOM_TRUST), 0.0, 1.0)


def trusted_room(weight: np.ndarray, sigma: float) -> np.ndarray:
    """float32 at the blur's small size: how much a blur made with the room's `weight` shows the room
    alone there (1 where the room's blurred weight reaches ROOM_TRUST; below it the frame's own blur, the
    person's colours, makes up the rest), the t of _blur_weights."""
    k = gaussian_kernel(sigma)
    return _trust(cv2.sepFilter2D(weight, -1, k, k, borderType=_BORDER))


ROOM_SLACK = 0.03   # how much more of a pixel a reused blurred room may show of the person than a new one (room_within)


def room_within(weight: np.ndarray, trust: np.ndarray, sigma: float, slack: float = ROOM_SLACK) -> bool:
    """Whether an earlier frame's blurred room (`trust`: its trusted_room) serves a frame whose room's
    weight is `weight`, wherever the person has moved since: no pixel of the frame would show more than
    `slack` more of its value from the person's colours than a blur made for it would (the room's share
    there times the share the earlier blur did not fill from room alone, less this frame's)."""
    return float(np.max(weight * (trusted_room(weight, sigma) - trust))) <= slack


def _blur_small(small: np.ndarray, weight: np.ndarray, k: np.ndarray, c: tuple | None = None) -> np.ndarray:
    """The normalised convolution of background_blur at the small size (H x W or H x W x C); `c`: the
    frame's _blur_weights, when the caller has them."""
    c1, c0 = c if c is not None else _blur_weights(weight, k)
    wk = weight
    if small.ndim == 3:
        c1, c0, wk = c1[..., None], c0[..., None], weight[..., None]
    num = cv2.sepFilter2D(small * wk, -1, k, k, borderType=_BORDER)
    plain = cv2.sepFilter2D(small, -1, k, k, borderType=_BORDER)
    return num * c1 + plain * c0


def background_blur(plane: np.ndarray, alpha: np.ndarray, sigma: float, factor: int = 4,
                    weight: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """float32 plane (H x W, or H x W x C) of the background blurred with the person left out: normalised
    convolution at 1/`factor` size (the plane shrunk by `shrink`), weighted by 1 - alpha, so the person's
    colours do not bleed into the blurred room around them; upsampled back (bilinear). Under the person,
    where no background is seen nearby, the frame's own blur fills in (it is covered by the person
    there). `weight`: the room's weight (1 - alpha) already at the small size, shared by the planes of
    one frame."""
    h, w = plane.shape[:2]
    sw, sh = max(1, w // factor), max(1, h // factor)
    small = shrink(plane, (sw, sh))
    if weight is None or weight.shape != (sh, sw):
        weight = room_weight(alpha, (sw, sh))
    blurred = _blur_small(small, weight, gaussian_kernel(sigma))
    return cv2.resize(blurred, (w, h), dst=_fits(out, blurred.shape[:0] + (h, w) + blurred.shape[2:], np.float32),
                      interpolation=cv2.INTER_LINEAR)


def background_blur_i420(planes: tuple[np.ndarray, np.ndarray, np.ndarray], weight: np.ndarray, sigma: float,
                         factor: int = 8, out: tuple | None = None,
                         y_half: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """background_blur of an I420 frame's three planes (Y by `factor`, U and V by half of it) with the
    room's `weight` at the small size they share (blurred once for the three), as uint8 planes: rounded at
    the small size and brought up in OpenCV's 8-bit bilinear path (within 1.5 grey levels of the float
    planes, a quarter of their bytes; composite_i420 copies them into the room's tiles as they are).
    Planes whose small sizes differ (an odd factor) are blurred one by one. `out`: the last frame's
    results, written over where they fit. `y_half`: Y's 2 x 2 means (half_plane), when the caller has
    them: Y is shrunk from there as U and V are from their planes (its next halving rounded too, within
    half a grey level at the small size: a sixth of Y's shrink)."""
    out = out or (None, None, None)
    factors = (factor, max(1, factor // 2), max(1, factor // 2))
    smalls = [(max(1, p.shape[1] // f), max(1, p.shape[0] // f)) for p, f in zip(planes, factors)]
    if len(set(smalls)) != 1 or weight.shape != smalls[0][::-1]:
        return tuple(cv2.convertScaleAbs(background_blur(p, None, sigma, f, weight), dst=_fits(o, p.shape, np.uint8))
                     for p, f, o in zip(planes, factors, out))
    y, u, v = planes
    if y_half is not None and y_half.shape == (y.shape[0] // 2, y.shape[1] // 2) and y_half.dtype == np.uint8:
        y = y_half
    k = gaussian_kernel(sigma)
    c = _blur_weights(weight, k)
    return tuple(cv2.resize(cv2.convertScaleAbs(_blur_small(shrink(src, smalls[0]), weight, k, c)), (p.shape[1], p.shape[0]),
                            dst=_fits(o, p.shape, np.uint8), interpolation=cv2.INTER_LINEAR)
                 for src, p, o in zip((y, u, v), planes, out))


def cover(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 image scaled to cover `size` = (w, h) (aspect kept, area-averaged when shrinking, bilinear
    when growing), then cropped to it around the centre."""
    h, w = image.shape[:2]
    tw, th = size
    s = max(tw / w, th / h)
    nw, nh = max(tw, int(round(w * s))), max(th, int(round(h * s)))
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
    scaled = cv2.resize(image, (nw, nh), interpolation=interp)
    x0, y0 = (nw - tw) // 2, (nh - th) // 2
    return np.ascontiguousarray(scaled[y0:y0 + th, x0:x0 + tw])


def _tile_side(h: int, w: int) -> int:
    """The tile side (in half-size pixels) composite_i420 works in: the largest of 8..4 that divides both
    of the half-size alpha's sides (0: none does; the planes are then composed whole)."""
    for t in (8, 6, 5, 4):
        if h % t == 0 and w % t == 0:
            return t
    return 0


def _tiles(plane: np.ndarray, side: int) -> np.ndarray:
    """A (rows, side, cols, side) view of a 2-D plane cut into side x side tiles (no copy: writes land)."""
    h, w = plane.shape
    if plane.flags.c_contiguous:
        return plane.reshape(h // side, side, w // side, side)       # a view (and much cheaper to make)
    s0, s1 = plane.strides
    return np.lib.stride_tricks.as_strided(plane, (h // side, side, w // side, side), (s0 * side, s0, s1 * side, s1))


def _all_over_tiles(flag: np.ndarray, side: int) -> np.ndarray:
    """bool per side x side tile of a uint8 0/255 map: set over the tile and the pixel around it."""
    h, w = flag.shape
    s = flag.reshape(h // side, side, w).min(axis=1)              # each tile row's strip ...
    np.minimum(s[1:], flag[side - 1:h - 1:side], out=s[1:])      # ... with the row above it
    np.minimum(s[:-1], flag[side::side], out=s[:-1])             # ... and below it
    k = cv2.getStructuringElement(cv2.MORPH_RECT, (side + 2, 1))
    return cv2.erode(s, k, anchor=(1, 0))[:, ::side] > 0         # then along the strip, a column either side


def tile_classes(alpha: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """(room, person): bool per side x side tile of a half-size alpha, True where the alpha is exactly 0
    (room) or exactly 1 (person) over the tile and one pixel around it, so that Y's alpha, brought up
    bilinearly from it, is exactly 0 or 1 over the tile's full-size pixels too."""
    return (_all_over_tiles(cv2.compare(alpha, 0.0, cv2.CMP_LE), side),
            _all_over_tiles(cv2.compare(alpha, 1.0, cv2.CMP_GE), side))


def room_fill(bg, shape: tuple[int, int]) -> np.ndarray:
    """uint8 plane of `shape`: the background as `composite` writes it where alpha is 0 (a value, a uint8
    plane or a float plane, rounded to nearest): what composite_i420 copies into the room's tiles. A
    caller keeps it while the background stays (a colour, a still blurred room)."""
    if isinstance(bg, np.ndarray):
        return bg if bg.dtype == np.uint8 else cv2.convertScaleAbs(bg.astype(np.float32, copy=False))
    return np.full(shape, cv2.convertScaleAbs(np.zeros((1, 1), np.float32), alpha=1.0, beta=float(bg))[0, 0], np.uint8)


def _blend(fg: np.ndarray, bg, alpha: np.ndarray) -> np.ndarray:
    """`composite`'s plane arithmetic on (K, n, n) stacks of tiles (one 2-D pass per step)."""
    k, n, m = fg.shape
    b2 = bg.reshape(k * n, m) if isinstance(bg, np.ndarray) else bg
    return composite(fg.reshape(k * n, m), b2, alpha.reshape(k * n, m)).reshape(k, n, m)


def scratch(work: dict | None, key: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray | None:
    """A buffer of `shape` (float32 unless told) kept in the caller's `work` dict under `key`, made once
    (None without a dict): the arithmetic of composing a frame reuses it frame after frame."""
    if work is None:
        return None
    b = work.get(key)
    if b is None or b.shape != shape or b.dtype != dtype:
        b = work[key] = np.empty(shape, dtype)
    return b


def _tile_box(polygon: np.ndarray, big: int) -> tuple[int, int, int, int]:
    """(i0, i1, j0, j1): the rows and columns of big x big tiles a full-size polygon's box touches."""
    return (max(0, int(polygon[:, 1].min()) // big), max(0, int(polygon[:, 1].max()) // big + 1),
            max(0, int(polygon[:, 0].min()) // big), max(0, int(polygon[:, 0].max()) // big + 1))


# above this share of edge tiles composite_i420 composes the planes whole: about as fast there (2026-12-07, the
# shared 2-core VM: a 720p close-up's 9 % of edge tiles composed in 0.91 ms by tiles, 1.47 ms whole; tiles
# scattered at random over it cross over at 11-14 %)
EDGE_SHARE = 0.12


def composite_i420(planes: tuple[np.ndarray, np.ndarray, np.ndarray], bgs, alpha: np.ndarray, keep=(),
                   out: tuple | None = None, fills: tuple | None = None,
                   work: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An I420 frame over its background by the half-size alpha (the chroma planes'): U and V by `alpha`,
    Y by `alpha` brought up bilinearly (upsample_alpha) and raised to 1 inside `keep`'s polygons
    (keep_polygons): the same pixels as `composite` of each plane with those alphas, but the arithmetic
    runs only on the tiles along the person's edge. The frame is cut into tiles (8 x 8 at half size where
    the sides allow): a tile wholly room (alpha 0 over it and one pixel around) takes the background (plain
    copies around the box of the other tiles, one masked copy inside it), a tile wholly person keeps the
    frame's pixels, and only the others (4 % of a 720p frame with one person) are blended, gathered into
    one stack per plane; where more than EDGE_SHARE of the tiles are edge (a ragged matte), or no tile
    size divides the sides, the planes are composed whole. `bgs`: per plane a
    value (a colour), a uint8 plane (a picture) or a float32 plane (a blurred room); `fills`: their
    room_fill planes, when the caller keeps them. `out`: the planes written (the frame's own allowed);
    default new planes. `work`: a dict the caller keeps, where composing whole keeps its float buffers."""
    y, u, v = planes
    h2, w2 = alpha.shape
    side = _tile_side(h2, w2)
    if out is None:
        out = tuple(np.empty_like(p) for p in planes)
    bi = None
    if side and y.shape == (2 * h2, 2 * w2) and u.shape == alpha.shape and v.shape == alpha.shape:
        room, person = tile_classes(alpha, side)
        big = 2 * side
        hulls = [np.round(np.asarray(p, np.float64)).astype(np.int32) for p in keep]
        for p in hulls:                  # the faces' polygons are the person: any tile they touch is worked on
            i0, i1, j0, j1 = _tile_box(p, big)
            room[i0:i1, j0:j1] = False
        bi, bj = np.nonzero(~(room | person))
    if bi is None or len(bi) > EDGE_SHARE * room.size:   # no tiles, or edge nearly everywhere: whole planes
        full = keep_polygons(upsample_alpha(alpha, (y.shape[1], y.shape[0]), out=scratch(work, ("alpha", y.shape), y.shape)), keep)
        return tuple(composite(p, b, a, out=o, work=scratch(work, ("work", p.shape), p.shape))
                     for p, b, a, o in zip(planes, bgs, (full, alpha, alpha), out))
    rows, cols = np.flatnonzero(~room.all(axis=1)), np.flatnonzero(~room.all(axis=0))
    i0, i1, j0, j1 = (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) if len(rows) else (0, 0, 0, 0)
    room8 = room[i0:i1, j0:j1].view(np.uint8)           # inside the box of the tiles not wholly room
    masks, alphas = {}, {}                               # U and V share theirs
    for p, b, o, n, f in zip(planes, bgs, out, (big, side, side), fills or (None,) * 3):
        edge = _tiles(p, n)[bi, :, bj, :] if len(bi) else None   # gathered before `out` (maybe `p`) is written
        if o is not p:
            np.copyto(o, p)
        f = room_fill(b, p.shape) if f is None else f
        box = np.s_[i0 * n:i1 * n, j0 * n:j1 * n]
        for slab in (np.s_[:i0 * n], np.s_[i1 * n:], np.s_[i0 * n:i1 * n, :j0 * n], np.s_[i0 * n:i1 * n, j1 * n:]):
            if isinstance(b, np.ndarray):               # the room around the box: plain copies
                np.copyto(o[slab], f[slab])
            else:
                o[slab] = f[0, 0]
        if i1 > i0:
            if n not in masks:
                masks[n] = np.repeat(np.repeat(room8, n, axis=1), n, axis=0)
            done = cv2.copyTo(f[box], masks[n], o[box])
            if not np.shares_memory(done, o):           # OpenCV wrote a copy (a plane it cannot write into)
                o[box] = done
        if edge is not None:
            if n not in alphas:
                alphas[n] = _y_alpha(alpha, bi, bj, side, hulls) if n == big else _tiles(alpha, n)[bi, :, bj, :]
            a = alphas[n]
            bt = _tiles(b, n)[bi, :, bj, :] if isinstance(b, np.ndarray) else b
            _tiles(o, n)[bi, :, bj, :] = _blend(edge, bt, a)
    return out


def _y_alpha(alpha: np.ndarray, bi: np.ndarray, bj: np.ndarray, side: int, hulls) -> np.ndarray:
    """(K, 2 side, 2 side) Y alpha of the tiles (bi, bj): each tile's half-size alpha with a pixel around it
    (the edge's pixels repeated, as OpenCV's resize reads past the edge), brought up bilinearly as one
    row of tiles side by side (inside its margin every tile has the whole plane's upsample_alpha), then
    raised to 1 inside the polygons."""
    h, w = alpha.shape
    n, k, big = side + 2, len(bi), 2 * side
    steps = np.arange(-1, side + 1)
    rows = np.minimum(np.maximum(bi * side + steps[:, None], 0), h - 1)   # (n, k): the edge's pixels repeated past it
    cols = np.minimum(np.maximum(bj[:, None] * side + steps, 0), w - 1)   # (k, n)
    windows = alpha.ravel().take(rows[:, :, None] * w + cols)             # (n, k, n): the tiles side by side
    up = cv2.resize(windows.reshape(n, k * n), (2 * k * n, 2 * n), interpolation=cv2.INTER_LINEAR)
    a = np.ascontiguousarray(up.reshape(2 * n, k, 2 * n)[2:2 * n - 2, :, 2:2 * n - 2].transpose(1, 0, 2))
    for p in hulls:                      # keep_polygons on the tiles the polygon's box touches
        i0, i1, j0, j1 = _tile_box(p, big)
        grid = np.zeros((h // side, w // side), bool)
        grid[i0:i1, j0:j1] = True
        sel = np.flatnonzero(grid[bi, bj])
        if not len(sel):
            continue
        canvas = np.zeros(((i1 - i0) * big, (j1 - j0) * big), np.uint8)
        cv2.fillPoly(canvas, [p - np.array([j0 * big, i0 * big], np.int32)], 1)
        tiles = a[sel]
        np.putmask(tiles, _tiles(canvas, big)[bi[sel] - i0, :, bj[sel] - j0, :], 1.0)
        a[sel] = tiles
    return a
