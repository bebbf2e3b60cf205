"""Face geometry for the edits: landmarks + named edits -> the FacePlan both pixel twins apply.

Geometry edits (engines/edit_vocabulary.py says which) become a smooth landmark-anchored warp: Gaussian
moves at the mouth corners and brows, zooms about the eyes and along the nose wings, a squeeze of the
lower face that ends a set distance outside the jaw line, so the map fades to nothing away from the face,
and each iris moved inside its eye's opening. Appearance edits become masked colour amounts over regions
built from the landmarks (face oval, skin without eyes, brows and lips, the lip ring, cheek blobs, contour
blobs, the lids, the brows), and the eyeliner a full-resolution patch along the upper lids. The region of
interest and the plan's detail level come from the face's size.
Drawing is done by the NumPy kernels (masks, blobs, backward map); nothing here touches the frame's pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import cv2
import numpy as np

from engines import mesh
from engines.colours import RGB, resolve
from engines.edit_vocabulary import COLOURED, GEOMETRY, SPECS_BY_NAME
from kernels.face_plan import Drawn, FacePlan, Masked
from kernels.numpy.edits import reach
from kernels.numpy.flow import moving_map
from kernels.numpy.masks import feather, gaussian_blobs, polygon_coverage, polygon_mask

# MediaPipe face-mesh landmarks the plan anchors to.
MOUTH_CORNERS = (61, 291)
# each lip's outer and inner edge, corner to corner (the mesh's lipsUpperOuter ... lipsLowerInner)
LIPS = ((61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291), (78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308)), \
       ((61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291), (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308))
FACE_SIDES = (234, 454)      # face width at the cheekbones
CHIN, FOREHEAD, NOSE_TIP = 152, 10, 4
NOSE_WINGS = (129, 358)
CHEEKS = (50, 280)
CHIN_FLANKS = ((176, 400), (149, 378))   # the face oval's points either side of the chin, nearest first
NOSE_BASE = (1, 2)                       # the nose's tip and the point under it, where the septum meets the lip
# the top of the mesh across the forehead, its middle and two points either side (the hairline sits above it)
FOREHEAD_TOP = (10, 109, 338, 67, 297)
# where a highlighter goes: the cheekbones, down the nose's bridge, the forehead's middle, the chin's ball
GLOW_POINTS = {"cheekbones": (117, 346), "bridge": (6, 197, 195, 5), "forehead": (151,), "chin": (199,)}
EYE_CORNERS = ((33, 133), (362, 263))
# each eye's upper lid along the lash line, inner corner to outer corner (the mesh's rightEyeUpper0, leftEyeUpper0)
UPPER_LIDS = ((133, 173, 157, 158, 159, 160, 161, 246, 33), (362, 398, 384, 385, 386, 387, 388, 466, 263))
LID_BROWS = ("right_brow", "left_brow")   # the brow above each of UPPER_LIDS
EYE_SPAN = 0.64   # the outer eye corners' span (33 to 263) in face widths: 0.61-0.67 on the four test portraits
# each eye: its outline's loop name, its corners and its iris ring's loop name (engines.mesh.loops)
EYES = (("right_eye", (33, 133), "right_iris"), ("left_eye", (362, 263), "left_iris"))


@dataclass(frozen=True, slots=True)
class EditConfig:
    """Strengths at control = 1 (and, where named, at -1), as fractions of the face width (geometry) or of
    the colour range."""

    smile_lift: float = 0.045
    smile_spread: float = 0.04     # each mouth corner outward: the mouth about 12 % wider at smile = 1
    smile_sigma: float = 0.11      # reach of the corners' moves: lips and cheeks follow them
    eye_zoom: float = 0.28
    slim_shift: float = 0.19       # the lower face squeezed toward its midline: 10-12 % off the jaw's width
    slim_core: float = 0.3         # the middle of the face (this fraction of the jaw's half-width) keeps its width
    slim_inset: float = 0.12       # the squeeze starts to ease off this far inside the jaw line...
    slim_reach: float = 0.13       # ...and ends this far outside it: the background beyond stays as it was
    slim_mouth_reach: float = 0.09 # beside the mouth the kept middle reaches its corners, fading out over this
                                   # height above and below it (Gaussian sigma): a slimmer face, the same smile
    nose_zoom: float = 0.35
    lip_grow: float = 0.4          # lip_fullness = 1: each lip's outer edge moved out by this share of its height
    lip_reach: float = 0.15        # the skin beyond a lip's edge takes up the move over this share of the mouth's width
    lip_corner: float = 0.2        # and the move eases to nothing at the corners over this share of it
    brow_lift: float = 0.04
    chin_drop: float = 0.07        # chin = 1: the chin's point this far down (lip to chin 13-20 % longer, dlib)
    chin_sigma: float = 0.13       # the reach of that move: shorter, and the neck below it is squeezed into a line
    chin_taper: float = 0.35       # and its flanks this share of it in toward the midline: to a point (V-line)
    nose_drop: float = 0.04        # nose_length = 1: the tip this far down the face (< 0: up, a shorter nose)
    nose_sigma: float = 0.08
    forehead_move: float = 0.08    # forehead = 1: the forehead's top this far up the face (< 0: down, shorter)...
    forehead_above: float = 0.12   # ...moved by Gaussians centred this far above the mesh's top (about the hairline)
    forehead_sigma: float = 0.12   # of this reach: the brows, 0.15-0.25 face widths under the mesh's top, move a tenth
    even_tone: float = 1.0         # even_tone = 1: this share of each skin pixel's way to the skin's colour around it
    tone_radius: float = 0.25      # that colour: the skin's mean within this radius (face widths)
    brightness: float = 0.30
    tan: float = 0.95              # tan = 1: kernels' TAN_ABSORB this far (Biden's lit skin: L* -6.7)
    tan_soft: float = 0.08         # the tan's edge: a Gaussian this many face widths wide
    saturation: float = 0.7
    lip: float = 1.0
    blush: float = 0.9
    blush_less: float = 14.0       # blush = -1: red levels taken off the cheeks
    contour: float = 0.22
    eye_makeup: float = 0.52
    eye_makeup_less: float = 0.25  # eye_makeup = -1: lids this far toward white
    lid_width: float = 1.25        # the shadow: the eye's outline scaled by these (across, up and down)...
    lid_height: float = 2.3
    lid_rise: float = 0.45         # ...and raised this many eye heights, less the eye itself
    lid_soft: float = 0.025        # the shadow's edges: a Gaussian this many face widths wide (sharper edges follow
                                   # the eye landmarks' jitter: 0.01 added 1.97 grey levels of flicker on a still face)
    lid_grey: float = 100.0        # the shadow darkens every lid as it darkens one of this grey (kernels' lid_scale;
                                   # 0: off): the astronaut's light lids (grey 155-160) less, Biden's shaded ones (80) more
    liner: float = 1.0             # eyeliner = 1: the liner this far toward the colour
    liner_width: float = 0.075     # the liner's width at the outer corner, in eye widths (a quarter of it at the inner)
    liner_wing: float = 0.28       # the wing's tip this far past the outer corner (eye widths)...
    liner_aim: float = 0.4         # ...its direction this share of the way from the eye's axis to the brow's tail
    liner_soft: float = 0.04       # the liner's edges: a Gaussian this many eye widths wide...
    liner_soft_px: float = 2.0     # ...and at least this many pixels (0.5 px edges follow the eye landmarks' jitter:
                                   # 2.4 grey levels of flicker on a still face)
    brow_tint: float = 0.26        # brow_tint = 1: the brows this far toward their shade (more moves dlib's identity past 0.2)
    brow_tint_less: float = 0.3    # brow_tint = -1: brows this far toward white
    brow_fill: float = 1.15        # the filled brow's height over the landmarks' (a fuller brow)
    gloss: float = 0.5             # lip_gloss = 1: the lips' highlight this far toward white
    glow: float = 0.26             # skin_glow = 1: the highlighter's spots this far toward white (more moves
                                   # dlib's identity past 0.2)
    matte: float = 0.37            # lip_gloss or skin_glow = -1: this share of the shine taken off (more and the
                                   # skin's own highlights, part of its shape, go: dlib's identity moves past 0.2)
    shine_radius: float = 0.1      # matte: the shine is the white on top of the region's mean colour within this
                                   # radius (face widths; kernels.numpy.edits.shine)
    sharpen: float = 1.5           # skin_smooth = -1: texture pushed this far past the original
    smooth_radius: float = 0.025   # guided-filter radius, fraction of face width
    smooth_eps: float = 150.0      # guided-filter eps in 8-bit units squared: edges with more variance survive
    grid_step: int = 8             # flow field is evaluated every grid_step pixels, then interpolated
    margin: float = 0.25           # region of interest beyond the landmarks, fraction of face width
    gaze_max: float = 0.25         # eye_contact moves an iris at most this fraction of its eye's width
    gaze_temporal: float = 0.035   # where an iris sits when its person looks into the lens: this far from the
    gaze_up: float = 0.045         # corners' midpoint away from the nose and up, in eye widths (the two
                                   # portraits in the tests, four eyes: 0.01-0.06 and 0.03-0.07)
    gaze_hold: float = 1.3         # the iris and this many of its radii around it move as one piece...
    gaze_ease: float = 1.2         # ...easing to still over this many more radii (and at the lids, always)
    gaze_lid: float = 0.04         # ...and at the lids' edge, over this fraction of its width
    gaze_corner: float = 0.3       # the move eases to nothing at the eye's corners over this fraction of its width
    detail_cap_px: float = 90.0    # level q = floor(face width / this): masks, colour and filter coefficients
                                   # at 1/(2q), 1/(4q), so the face there is 45-90 px wide at any size (0: off)


def detail_level(face_width: float, config: EditConfig = EditConfig()) -> int:
    """q = floor(face width / cap): at the masks' resolution (1/(2q)) the face is between cap/2 and cap
    pixels wide whatever its size, so that work stops growing, and never gets coarser than that (a
    112-px face at 1/2 is 56 px)."""
    if config.detail_cap_px <= 0:
        return 1
    return max(1, int(face_width // config.detail_cap_px))


def active(edits: Mapping[str, float], eps: float = 1e-3) -> dict[str, float]:
    """The known edits that do anything once clipped to their ranges (a one-sided edit below 0 does nothing)."""
    clipped = {k: SPECS_BY_NAME[k].clip(float(v)) for k, v in edits.items() if k in SPECS_BY_NAME}
    return {k: v for k, v in clipped.items() if abs(v) > eps}


def face_width(landmarks: np.ndarray) -> float:
    """Pixels between the cheekbones: the unit every strength and size here is a fraction of."""
    lm = np.asarray(landmarks, np.float32)[:, :2]
    return float(np.linalg.norm(lm[FACE_SIDES[1]] - lm[FACE_SIDES[0]]))


def colours_for(colours: Mapping[str, str] | None) -> dict[str, RGB]:
    """Each coloured edit's sRGB: `colours` (edit -> palette name or #rrggbb) over the vocabulary's
    defaults. A colour for an edit that takes none, or one that does not parse, raises ValueError."""
    out = {name: resolve(SPECS_BY_NAME[name].colour or "") for name in COLOURED}
    for name, value in (colours or {}).items():
        if name not in COLOURED:
            raise ValueError(f"{str(name)[:40]!r} takes no colour; these do: {', '.join(COLOURED)}")
        out[name] = resolve(value)
    return out


DEFAULT_PAINT: Mapping[str, RGB] = MappingProxyType(colours_for(None))


def plan_face(shape: tuple[int, int], landmarks: np.ndarray, edits: Mapping[str, float],
              config: EditConfig = EditConfig(), regions: Mapping[str, Any] | None = None,
              colours: Mapping[str, RGB] | None = None, whole_roi: bool = False) -> FacePlan | None:
    """Everything but the pixel work for one face in an (H, W) frame, from its (478, 2|3) pixel
    landmarks: ROI, masked colour ops, warp. None when nothing would change. `regions`: a face parser's
    "lips" and "skin" in frame pixels (`engines.faces.MaskPatch`), used in place of the landmark polygons.
    `colours`: the makeup's sRGB per coloured edit (`colours_for`); missing ones take the defaults.
    The colour ops' masks cover the plan's `appearance_box` (where they reach, and the filters' margin);
    `whole_roi` draws them over the whole ROI instead (the same pixels come out: tests compare the two)."""
    e = active(edits)
    if not e:
        return None
    h, w = shape
    lm = np.asarray(landmarks, np.float32)[:, :2]
    fw = face_width(lm)
    if not np.isfinite(lm).all() or fw < 8:
        return None  # too small or broken to edit meaningfully
    pad = config.margin * fw
    x0, y0 = np.floor(lm.min(0) - pad).astype(int)
    x1, y1 = np.ceil(lm.max(0) + pad).astype(int)
    if "forehead" in e:   # its Gaussians sit above the mesh: the ROI takes in their reach, or the move is cut off
        top, unit = _forehead_centres(lm, config)
        reach = 4.0 * config.forehead_sigma * unit   # where a move has fallen under 0.01 px
        x0, y0 = np.minimum([x0, y0], np.floor(top.min(0) - reach).astype(int))
        x1, y1 = np.maximum([x1, y1], np.ceil(top.max(0) + reach).astype(int))
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
    q = detail_level(fw, config)
    x1 -= (x1 - x0) % (4 * q)   # multiples of 4q: colour at exactly 1/(2q), guided-filter coefficients at 1/(4q)
    y1 -= (y1 - y0) % (4 * q)
    if x1 - x0 < 8 * q or y1 - y0 < 8 * q:
        return None
    local = lm - np.array([x0, y0], np.float32)
    rh, rw = y1 - y0, x1 - x0
    # Colour edits are smooth over the face, so their masks and their change are computed at 1/(2q)
    # resolution and the change is interpolated back; only the smoothing's final blend (which removes fine
    # texture) and the warp's sampling touch every pixel.
    c = 2 * q
    level = (rh // c, rw // c)
    parsed = {k: _sampled(p, (x0, y0), c, level) for k, p in (regions or {}).items() if p is not None}
    paint = DEFAULT_PAINT | dict(colours or {})
    ops = _colour_ops(e, _masks(e, level, local / c, fw / c, config, parsed), config, paint)
    smooth = "skin_smooth" in e
    smooth_radius = max(1, int(round(config.smooth_radius * fw))) if smooth else 0
    shine_radius = max(1, int(round(config.shine_radius * fw / c))) if ("lip_gloss" in e or "skin_glow" in e) else 0
    tone_radius = max(1, int(round(config.tone_radius * fw / c))) if "even_tone" in e else 0
    box = None
    if ops and not whole_roi:
        # the filters read this many cells around what they change: the guided filter two boxes at half the
        # colour level and a bilinear step, matte's and even tone's weighted means their radius
        margin = max(shine_radius, tone_radius, 4 * max(1, smooth_radius // (2 * c)) + 4 if smooth else 0) + 2
        ops, box = _cropped(ops, margin, c)
    map_xy, map_box = _warp(e, (rh, rw), local, fw, config) if any(k in e for k in GEOMETRY) else (None, None)
    liners = ()
    if e.get("eyeliner", 0.0) > 0 and config.liner > 0 and len(local) >= 468:   # no line has no opposite
        liners = _liners((rh, rw), local, min(1.0, e["eyeliner"] * config.liner), paint["eyeliner"], config)
    return FacePlan(
        roi=(int(y0), int(y1), int(x0), int(x1)), level=q, **ops, appearance_box=box,
        smooth_radius=smooth_radius, smooth_eps=config.smooth_eps if smooth else 0.0,
        shine_radius=shine_radius, tone_radius=tone_radius, lid_grey=config.lid_grey if "eye_makeup" in e else 0.0,
        liners=liners, map_xy=map_xy, map_box=map_box,
    )


def _liners(shape: tuple[int, int], local: np.ndarray, amount: float, rgb: RGB, cfg: EditConfig) -> tuple[Drawn, ...]:
    """The eyeliner at full resolution (a line a few pixels wide is under a cell of the colour level), both
    eyes in one patch: a band along each upper lash line, a quarter of liner_width at the inner corner growing
    to all of it at the outer, and a wing from the band's top near the outer corner to a tip liner_wing past
    the corner, aimed from the eye's axis toward the brow's tail (where a winged liner points). Drawn
    antialiased, its edges a Gaussian liner_soft eye widths wide (liner_soft_px at least)."""
    h, w = shape
    (fx, fy), (cx, cy) = local[FOREHEAD, :2].tolist(), local[CHIN, :2].tolist()
    ux, uy = _unit_xy(fx - cx, fy - cy)                              # up the face
    loops = mesh.loops()
    polys, widths = [], []
    for lid_idx, brow in zip(UPPER_LIDS, LID_BROWS):
        lid = local[list(lid_idx), :2].tolist()
        (ix, iy), (ox, oy) = lid[0], lid[-1]
        eye_w = math.hypot(ox - ix, oy - iy)
        if eye_w < 4.0:
            return ()
        ax, ay = (ox - ix) / eye_w, (oy - iy) / eye_w               # along the eye, inner to outer corner
        top = []
        for i, (px, py) in enumerate(lid):
            # the point's normal, away from the eye: the tangent (central differences) turned toward the face's top
            a, b = lid[max(i - 1, 0)], lid[min(i + 1, len(lid) - 1)]
            nx, ny = _unit_xy(b[1] - a[1], a[0] - b[0], 1e-6)
            if nx * ux + ny * uy < 0:
                nx, ny = -nx, -ny
            s = min(max(((px - ix) * ax + (py - iy) * ay) / eye_w, 0.0), 1.0)
            r = cfg.liner_width * eye_w * (0.25 + 0.75 * s)
            top.append((px + nx * r, py + ny * r))
        tails = local[loops[brow], :2]
        tx, ty = tails[int(np.argmax((tails[:, 0] - ix) * ax + (tails[:, 1] - iy) * ay))].tolist()
        tx, ty = _unit_xy(tx - ox, ty - oy, 1e-6)
        mx, my = _unit_xy((1.0 - cfg.liner_aim) * ax + cfg.liner_aim * tx, (1.0 - cfg.liner_aim) * ay + cfg.liner_aim * ty, 1e-6)
        wing = (ox + mx * cfg.liner_wing * eye_w, oy + my * cfg.liner_wing * eye_w)
        # the wing's upper edge leaves the band before its last two points, whose normals turn outward
        polys.append(lid + [wing] + top[-3::-1])
        widths.append(eye_w)
    soft = max(cfg.liner_soft_px, cfg.liner_soft * sum(widths) / len(widths))
    reach = 3.0 * soft + 2.0
    xs, ys = [p[0] for poly in polys for p in poly], [p[1] for poly in polys for p in poly]
    x0, y0 = max(0, math.floor(min(xs) - reach)), max(0, math.floor(min(ys) - reach))
    x1, y1 = min(w, math.ceil(max(xs) + reach + 1)), min(h, math.ceil(max(ys) + reach + 1))
    if x1 - x0 < 3 or y1 - y0 < 3:
        return ()
    at = np.array([x0, y0], np.float32)
    mask = polygon_mask((y1 - y0, x1 - x0), [np.array(p, np.float32) - at for p in polys], feather_px=soft)
    return (Drawn((y0, y1, x0, x1), Masked(amount, mask, rgb)),)


def _cropped(ops: Mapping[str, Masked], margin: int, c: int) -> tuple[dict[str, Masked], tuple[int, int, int, int]]:
    """The colour ops with their masks cut to where any of them is non-zero, grown by `margin` cells, on
    even cells (the guided filter halves the colour level), and that box in ROI pixels (cells of c)."""
    h, w = next(iter(ops.values())).mask.shape
    cells = reach(*(op.mask for op in ops.values()), grow=margin)
    if cells is None:
        return dict(ops), (0, h * c, 0, w * c)
    i0, i1, j0, j1 = cells
    i0, j0, i1, j1 = i0 & ~1, j0 & ~1, min(h, (i1 + 1) & ~1), min(w, (j1 + 1) & ~1)
    cut = {k: Masked(op.amount, op.mask[i0:i1, j0:j1], op.rgb) for k, op in ops.items()}   # views: the kernels copy what they need whole
    return cut, (i0 * c, i1 * c, j0 * c, j1 * c)


def _colour_ops(e: Mapping[str, float], masks: Mapping[str, np.ndarray], cfg: EditConfig,
                paint: Mapping[str, RGB]) -> dict[str, Masked]:
    """Each active appearance edit as the kernel op it drives (FacePlan's field name -> amount at full
    strength, its region and, for makeup, its colour)."""
    ops: dict[str, Masked] = {}
    if "even_tone" in e:
        ops["tone"] = Masked(e["even_tone"] * cfg.even_tone, masks["skin"])
    if "skin_warmth" in e:
        ops["warmth"] = Masked(e["skin_warmth"], masks["skin"])
    if "brightness" in e:
        ops["brightness"] = Masked(e["brightness"] * cfg.brightness, masks["face"])
    if "tan" in e:
        ops["tan"] = Masked(e["tan"] * cfg.tan, masks["tan"])
    if "lip_tint" in e:
        ops["lips"] = Masked(e["lip_tint"] * cfg.lip, masks["lips"], paint["lip_tint"])
    if "blush" in e:
        t = e["blush"]
        ops["blush"] = Masked(t * cfg.blush if t > 0 else t * cfg.blush_less, masks["blush"], paint["blush"])
    if "contour" in e:
        ops["contour"] = Masked(e["contour"] * cfg.contour, masks["contour"])
    if "eye_makeup" in e:
        t = e["eye_makeup"]
        ops["lids"] = Masked(t * cfg.eye_makeup if t > 0 else t * cfg.eye_makeup_less, masks["eye_makeup"],
                             paint["eye_makeup"])
    if "brow_tint" in e:
        t = e["brow_tint"]
        ops["brows"] = Masked(t * cfg.brow_tint if t > 0 else t * cfg.brow_tint_less, masks["brows"], paint["brow_tint"])
    if "saturation" in e:
        ops["saturation"] = Masked(e["saturation"] * cfg.saturation, masks["face"])
    if "lip_gloss" in e:   # > 0: the highlight's spots toward white; < 0: all of the lips made matte
        t = e["lip_gloss"]
        ops["gloss"] = Masked(t * cfg.gloss if t > 0 else t * cfg.matte, masks["gloss"])
    if "skin_glow" in e:
        t = e["skin_glow"]
        ops["glow"] = Masked(t * cfg.glow if t > 0 else t * cfg.matte, masks["glow"])
    if "skin_smooth" in e:
        s = e["skin_smooth"]
        ops["smooth"] = Masked(s if s > 0 else cfg.sharpen * s, masks["skin"])
    return ops


def _loop(local: np.ndarray, name: str) -> np.ndarray:
    return local[mesh.loops()[name]]


def _hull(points: np.ndarray) -> np.ndarray:
    return cv2.convexHull(points.astype(np.float32)).reshape(-1, 2)


def _scaled(points: np.ndarray, sx: float, sy: float, dy: float = 0.0) -> np.ndarray:
    c = points.mean(0)
    return (points - c) * np.array([sx, sy], np.float32) + c + np.array([0.0, dy], np.float32)


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 1e-6 else v


def _unit_xy(x: float, y: float, floor: float = 0.0) -> tuple[float, float]:
    """(x, y) over its length (a length under 1e-6 left as it is, or taken as `floor` when one is given): the
    plan's few-point geometry runs in plain floats, where each NumPy call on a 2-vector costs microseconds."""
    n = math.hypot(x, y)
    if floor > 0.0:
        n = max(n, floor)
    elif n <= 1e-6:
        return x, y
    return x / n, y / n


def _sampled(patch: Any, origin: tuple[int, int], c: int, shape: tuple[int, int]) -> np.ndarray:
    """A frame-pixel mask patch brought to the colour level of a ROI starting at `origin` (1/c scale)."""
    m = np.array([[1.0 / c, 0.0, (patch.x0 - origin[0]) / c], [0.0, 1.0 / c, (patch.y0 - origin[1]) / c]], np.float32)
    return cv2.warpAffine(np.asarray(patch.mask, np.float32), m, (shape[1], shape[0]), flags=cv2.INTER_AREA,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)


def _masks(e: Mapping[str, float], shape: tuple[int, int], local: np.ndarray, fw: float, cfg: EditConfig,
           parsed: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The regions the active edits need, as (h, w) float32 masks at the colour level; `local` and `fw`
    are in that level's pixels. `parsed` (a face parser's "lips" and "skin" at this level) replaces the
    landmark polygons for those regions: a parse follows the real lip line and leaves out what covers the skin."""
    parsed = parsed or {}
    masks: dict[str, np.ndarray] = {}
    soft = 0.03 * fw
    need_face = any(k in e for k in ("brightness", "saturation", "blush", "contour")) or e.get("skin_glow", 0.0) > 0
    need_skin = any(k in e for k in ("skin_smooth", "skin_warmth", "even_tone")) or e.get("skin_glow", 0.0) < 0
    face = polygon_mask(shape, [_loop(local, "face_oval")]) if (need_face or need_skin or "tan" in e) else None

    brow_hulls: list[np.ndarray] = []   # both brows' hulls, drawn once for the skin, the tan and the brows

    def brows_hull() -> list[np.ndarray]:
        if not brow_hulls:
            brow_hulls.extend(_hull(_loop(local, n)) for n in ("left_brow", "right_brow"))
        return brow_hulls

    def bare(eyes: tuple[float, float], lips: tuple[float, float]) -> np.ndarray:
        """1 on skin, 0 on the eyes (their outline scaled by `eyes`), the brows and the lips (`lips`)."""
        if "skin" in parsed:
            return parsed["skin"]
        holes = [_scaled(_loop(local, "left_eye"), *eyes), _scaled(_loop(local, "right_eye"), *eyes),
                 *brows_hull(), _scaled(_loop(local, "lips_outer"), *lips)]
        return 1.0 - polygon_mask(shape, holes)

    if need_skin:    # smoothing, warmth, even tone and matte keep clear of the lashes and the lip line
        masks["skin"] = feather(face * bare((1.5, 2.2), (1.12, 1.25)), soft)
    if "tan" in e:
        # the sun reaches the lids and the lip line (no pale rings), and a tan has no edge: a wide feather
        # (`tan_soft` face widths) carries it softly over the jaw and the hairline, past the landmarks' outline
        masks["tan"] = feather(face * bare((1.0, 1.0), (1.0, 1.0)), cfg.tan_soft * fw)
    if need_face:
        masks["face"] = feather(face, soft)
    if "lip_tint" in e or "lip_gloss" in e:
        if "lips" in parsed:
            lips = parsed["lips"]
        else:
            lips = polygon_mask(shape, [_loop(local, "lips_outer")]) * (1.0 - polygon_mask(shape, [_loop(local, "lips_inner")]))
        # a lip is two or three cells tall at the colour level, so the feather leaves none at full weight:
        # the gain brings the lips' middle to 1 (the named shade lands) and the feather's reach stays as it is
        masks["lips"] = np.minimum(1.0, 1.5 * feather(lips, 0.012 * fw))
    if "lip_gloss" in e:
        if e["lip_gloss"] > 0:
            # light catches a wet lip along the middle of each lip's curve, the lower lip's most: blobs
            # halfway between each lip's outer and inner edge, kept on the lips
            (up_out, up_in), (low_out, low_in) = LIPS
            lower = gaussian_blobs(shape, [(local[low_out[k]] + local[low_in[k]]) / 2 for k in (3, 5, 7)], 0.03 * fw)
            upper = gaussian_blobs(shape, [(local[up_out[k]] + local[up_in[k]]) / 2 for k in (3, 5, 7)], 0.025 * fw)
            # kept off the skin by the lips' region feathered wide: a highlight fades out, it has no lip line
            masks["gloss"] = np.maximum(lower, 0.6 * upper) * np.minimum(1.0, 2.0 * feather(masks["lips"], 0.02 * fw))
        else:
            masks["gloss"] = masks["lips"]
    if "skin_glow" in e:
        if e["skin_glow"] > 0:
            sizes = {"cheekbones": 0.075, "bridge": 0.03, "forehead": 0.08, "chin": 0.045}
            spots = [gaussian_blobs(shape, [local[i] for i in idx], sizes[k] * fw)
                     for k, idx in GLOW_POINTS.items()]
            glow = spots[0]
            for spot in spots[1:]:
                np.maximum(glow, spot, out=glow)   # in place: maximum.reduce stacks the four into one array first
            masks["glow"] = glow * masks["face"]
        else:
            masks["glow"] = masks["skin"]
    if "blush" in e:
        masks["blush"] = gaussian_blobs(shape, [local[i] for i in CHEEKS], 0.09 * fw) * masks["face"]
    if "contour" in e:
        centres = [local[s] * 0.62 + local[m] * 0.38 + (local[CHIN] - local[NOSE_TIP]) * 0.12
                   for s, m in zip(FACE_SIDES, MOUTH_CORNERS)]
        masks["contour"] = gaussian_blobs(shape, centres, 0.075 * fw) * masks["face"]
    if "eye_makeup" in e:
        # both lids in one fill and both eyes in another (the two lids lie an eye's width apart: no overlap)
        eyes = [_loop(local, name) for name in ("left_eye", "right_eye")]
        lids = polygon_mask(shape, [_scaled(eye, cfg.lid_width, cfg.lid_height, -cfg.lid_rise * float(np.ptp(eye[:, 1])))
                                    for eye in eyes])
        masks["eye_makeup"] = feather(lids * (1.0 - polygon_mask(shape, eyes)), cfg.lid_soft * fw)
    if "brow_tint" in e:
        # each brow's hull grown across (a fuller brow) and a little along; two or three cells tall at the
        # colour level, so, as for the lips, a gain brings its middle to full weight
        brows = [_scaled(hull, 1.06, cfg.brow_fill) for hull in brows_hull()]
        masks["brows"] = np.minimum(1.0, 1.4 * feather(polygon_mask(shape, brows), 0.012 * fw))
    return masks


def _warp(e: Mapping[str, float], shape: tuple[int, int], local: np.ndarray, fw: float,
          cfg: EditConfig) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The geometry edits' control points (translations at anchors, zooms about centres, each with its
    Gaussian's sigma) in ROI pixels, drawn as a backward map with face_slim's squeeze added on its grid, and
    the part of the ROI the map moves."""
    up = _unit(local[FOREHEAD] - local[CHIN])
    right = _unit(local[FACE_SIDES[1]] - local[FACE_SIDES[0]])
    anchors, moves, sigmas = [], [], []
    zooms = []   # (centre, axis matrix 2x2, strength, sigma)
    if "smile" in e:
        s = e["smile"]
        for idx, side in zip(MOUTH_CORNERS, (-1.0, 1.0)):
            anchors.append(local[idx])
            outward = float(np.sign(np.dot(local[idx] - local[NOSE_TIP], right))) or side
            moves.append(s * fw * (cfg.smile_lift * up + cfg.smile_spread * outward * right))
            sigmas.append(cfg.smile_sigma * fw)
    if "brow_raise" in e:
        for name in ("left_brow", "right_brow"):
            brow = local[mesh.loops()[name]]
            order = np.argsort(brow @ right)
            for p in brow[order][::3]:   # 4 of the 10 points along the brow: the Gaussians overlap anyway
                anchors.append(p)
                moves.append(e["brow_raise"] * cfg.brow_lift * fw * up / 2.0)
                sigmas.append(0.07 * fw)
    if "chin" in e:
        s = e["chin"] * cfg.chin_drop * fw
        anchors.append(local[CHIN])
        moves.append(-s * up)
        sigmas.append(cfg.chin_sigma * fw)
        # the flanks go with it, less, and in toward the chin's line when it grows (to a point, a V-line);
        # a shorter chin keeps its width (pushed out, the flanks would bulge the jaw line)
        for flank, share in zip(CHIN_FLANKS, (0.6, 0.3)):
            for i in flank:
                inward = float(np.sign(np.dot(local[CHIN] - local[i], right)))
                anchors.append(local[i])
                moves.append(share * (max(s, 0.0) * cfg.chin_taper * inward * right - s * up))
                sigmas.append(cfg.chin_sigma * fw)
    if "nose_length" in e:
        for i, share in zip(NOSE_BASE, (1.0, 0.7)):   # the tip most; under it less, so the lip takes up little
            anchors.append(local[i])
            moves.append(-e["nose_length"] * share * cfg.nose_drop * fw * up)
            sigmas.append(cfg.nose_sigma * fw)
    if "forehead" in e:
        # Gaussians about the hairline: the skin under them is pressed (or drawn) as the hairline moves, the hair
        # above takes the rest, and the brows are out of their reach
        centres, unit = _forehead_centres(local, cfg)
        sigma = cfg.forehead_sigma * unit
        # the Gaussians overlap: each moves its share, so that the middle of the forehead moves forehead_move
        share = 1.0 / float(np.exp(-((centres - centres[0]) ** 2).sum(1) / (2.0 * sigma * sigma)).sum())
        for centre in centres:
            anchors.append(centre)
            moves.append(e["forehead"] * share * cfg.forehead_move * unit * up)
            sigmas.append(sigma)
    if "eye_size" in e:
        for a, b in EYE_CORNERS:
            eye_w = float(np.linalg.norm(local[a] - local[b]))
            zooms.append(((local[a] + local[b]) / 2, np.eye(2, dtype=np.float32), e["eye_size"] * cfg.eye_zoom, 0.75 * eye_w))
    if "nose_width" in e:
        nose_w = float(np.linalg.norm(local[NOSE_WINGS[0]] - local[NOSE_WINGS[1]]))
        centre = (local[NOSE_WINGS[0]] + local[NOSE_WINGS[1]]) / 2
        zooms.append((centre, np.outer(right, right).astype(np.float32), e["nose_width"] * cfg.nose_zoom, 0.6 * nose_w))
    # face_slim's squeeze is drawn on moving_map's grid and added there: one interpolation to every pixel
    slim = _slim_field(shape, cfg.grid_step, local, fw, e["face_slim"], cfg) if "face_slim" in e else None
    # not coarser with the level: a 16-px grid cost 18 % of the smile's lift on a 200-px face
    map_xy, box = moving_map(
        shape, cfg.grid_step,
        anchors=np.asarray(anchors, np.float32).reshape(-1, 2), shifts=np.asarray(moves, np.float32).reshape(-1, 2),
        sigmas=np.asarray(sigmas, np.float32),
        zoom_centres=np.asarray([z[0] for z in zooms], np.float32).reshape(-1, 2),
        zoom_axes=np.asarray([z[1] for z in zooms], np.float32).reshape(-1, 2, 2),
        zoom_gains=np.asarray([z[2] for z in zooms], np.float64), zoom_sigmas=np.asarray([z[3] for z in zooms], np.float64),
        offsets=slim,
    )
    if "lip_fullness" in e and len(local) >= 468:
        for patch in _lip_moves(shape, local, e["lip_fullness"], cfg):
            map_xy, box = _moved(map_xy, box, *patch)
    if "eye_contact" in e and len(local) >= 478:
        for patch in _gaze_moves(shape, local, e["eye_contact"], cfg):
            map_xy, box = _moved(map_xy, box, *patch)
    return map_xy, box


def _forehead_centres(points: np.ndarray, cfg: EditConfig) -> tuple[np.ndarray, float]:
    """Where forehead's moves are centred (3, 2), and the face width they are sized by: forehead_above of it
    up the face from the middle of the mesh's top, and 0.14 of it either side. The move reaches the hair
    and whatever is worn above the forehead, where the least jitter of its size or place shows, so it is
    sized by the outer eye corners' span (EYE_SPAN face widths) and placed by the mean of five points: on a
    still portrait with sensor noise the cheekbones' width jitters 1.6 % frame to frame, the eyes' span
    0.4 %, and a point of the mesh's top 0.46 px."""
    (fx, fy), (cx, cy) = points[FOREHEAD, :2].tolist(), points[CHIN, :2].tolist()
    ux, uy = _unit_xy(fx - cx, fy - cy)
    (ax, ay), (bx, by) = points[EYE_CORNERS[0][0], :2].tolist(), points[EYE_CORNERS[1][1], :2].tolist()
    unit = math.hypot(bx - ax, by - ay) / EYE_SPAN
    top = points[list(FOREHEAD_TOP), :2].tolist()
    mx = sum(p[0] for p in top) / len(top) + cfg.forehead_above * unit * ux
    my = sum(p[1] for p in top) / len(top) + cfg.forehead_above * unit * uy
    # the middle, and 0.14 of the unit either side of it across the face (right = up turned a quarter)
    return np.array([[mx + k * unit * -uy, my + k * unit * ux] for k in (0.0, -0.14, 0.14)], np.float32), unit


# A move drawn on part of the ROI: its (y0, y1, x0, x1) in ROI pixels, the (h, w) float32 weights there and
# the (dx, dy) a weight of 1 moves (the backward map's offset is weight * (dx, dy))
Patch = tuple[tuple[int, int, int, int], np.ndarray, tuple[float, float]]


def _gaze_moves(shape: tuple[int, int], local: np.ndarray, amount: float, cfg: EditConfig) -> list[Patch]:
    """eye_contact's moves, one patch per eye. The iris is moved `amount` of the way to where it sits when the person looks
    into the lens (just off the middle of the eye's corners: gaze_temporal, gaze_up), at most gaze_max of
    the eye's width; the move is whole over the iris and eases out toward the corners, and is nothing at
    the lids' edge, so the lids and lashes stay where they are and the white of the eye takes up the change.
    The points are plain floats and the patch's grids broadcast rows against columns: it runs every frame."""
    h, w = shape
    loops = mesh.loops()
    (fx, fy), (cx, cy), (nx, ny) = local[FOREHEAD].tolist(), local[CHIN].tolist(), local[NOSE_TIP].tolist()
    un = math.hypot(fx - cx, fy - cy) or 1.0
    ux, uy = (fx - cx) / un, (fy - cy) / un                       # up the face
    out = []
    for eye_loop, (a, b), iris_loop in EYES:
        eye = local[loops[eye_loop]]
        ring = local[loops[iris_loop]]
        (ax, ay), (bx, by) = local[a].tolist(), local[b].tolist()
        eye_w = math.hypot(bx - ax, by - ay)
        if eye_w < 4.0:
            continue
        pts = ring[:, :2].tolist()
        ix, iy = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
        radius = max(1.0, sum(math.hypot(px - ix, py - iy) for px, py in pts) / len(pts))
        mx, my = (ax + bx) / 2.0, (ay + by) / 2.0
        tx, ty = mx - nx, my - ny                                 # away from the nose, across the face
        along = tx * ux + ty * uy
        tx, ty = tx - along * ux, ty - along * uy
        tn = math.hypot(tx, ty) or 1.0
        gx = mx + (cfg.gaze_temporal * tx / tn + cfg.gaze_up * ux) * eye_w
        gy = my + (cfg.gaze_temporal * ty / tn + cfg.gaze_up * uy) * eye_w
        dx, dy = (gx - ix) * amount, (gy - iy) * amount
        n = math.hypot(dx, dy)
        if n > cfg.gaze_max * eye_w:
            dx, dy, n = dx * cfg.gaze_max * eye_w / n, dy * cfg.gaze_max * eye_w / n, cfg.gaze_max * eye_w
        if n < 0.05:
            continue
        (ex0, ey0), (ex1, ey1) = eye.min(0).tolist(), eye.max(0).tolist()
        x0, y0 = max(0, math.floor(ex0) - 2), max(0, math.floor(ey0) - 2)
        x1, y1 = min(w, math.ceil(ex1) + 3), min(h, math.ceil(ey1) + 3)
        if x1 - x0 < 3 or y1 - y0 < 3:
            continue
        inside = polygon_coverage((y1 - y0, x1 - x0), [eye - np.array([x0, y0], np.float32)]) >= 128
        # nothing moves at the lids (the weight rises from 0 on the outline to 1 a little inside it) nor at
        # the corners (0 there, 1 over the middle of the opening): the white between them stretches
        weight = np.minimum(cv2.distanceTransform(inside.view(np.uint8), cv2.DIST_L2, 3)
                            * np.float32(1.0 / max(1.0, cfg.gaze_lid * eye_w)), 1.0)
        xs = np.arange(x0, x1, dtype=np.float32)[None, :]
        ys = np.arange(y0, y1, dtype=np.float32)[:, None]
        kx, ky = (bx - ax) / eye_w ** 2, (by - ay) / eye_w ** 2
        u = (xs - ax) * kx + (ys - ay) * ky                       # 0 at one corner, 1 at the other
        weight *= _smoothstep(np.minimum(u, 1.0 - u) * (1.0 / cfg.gaze_corner))
        r = np.sqrt((xs - (ix + dx)) ** 2 + (ys - (iy + dy)) ** 2)   # from where the iris lands
        weight *= 1.0 - _smoothstep((r - cfg.gaze_hold * radius) * (1.0 / (cfg.gaze_ease * radius + n)))
        out.append(((y0, y1, x0, x1), weight, (dx, dy)))
    return out


def _lip_moves(shape: tuple[int, int], local: np.ndarray, amount: float, cfg: EditConfig) -> list[Patch]:
    """lip_fullness's moves, one patch per lip. Each lip's outer edge moves out by lip_grow of the lip's height there (in for `amount` <
    0) and its inner edge stays, so the lip itself grows, evenly (magnified 1 / (1 - lip_grow) across its
    height), while the teeth and the mouth's opening keep their size; the skin beyond the edge takes the
    move up over lip_reach, and nothing moves at the corners (where a smile moves them)."""
    h, w = shape
    corners = local[list(MOUTH_CORNERS), :2]
    mouth_w = float(np.linalg.norm(corners[1] - corners[0]))
    if mouth_w < 6.0:
        return []
    reach = max(2.0, cfg.lip_reach * mouth_w)
    mouth = np.concatenate([local[list(LIPS[0][0]), :2], local[list(LIPS[1][0][-2:0:-1]), :2]])
    out = []
    for k, (outer_idx, inner_idx) in enumerate(LIPS):
        outer, inner = local[list(outer_idx), :2], local[list(inner_idx), :2]
        o_mid, i_mid = outer[len(outer) // 2], inner[len(inner) // 2]
        height = float(np.linalg.norm(i_mid - o_mid))
        move = amount * cfg.lip_grow * height
        if height < 1.0 or abs(move) < 0.05:
            continue
        into = (i_mid - o_mid) / height                      # from the outer edge into the lip
        pts = np.concatenate([outer, inner])
        x0, y0 = (np.floor(pts.min(0) - reach - 2)).astype(int).tolist()
        x1, y1 = (np.ceil(pts.max(0) + reach + 3)).astype(int).tolist()
        # the skin that takes up a lip's move lies beyond its outer edge: above the upper lip, below the
        # lower (past its inner edge lie the mouth and the other lip, which a lip's move leaves alone)
        if k == 0:
            y1 = math.ceil(float(pts[:, 1].max()) + 3)
        else:
            y0 = math.floor(float(pts[:, 1].min()) - 2)
        x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
        if x1 - x0 < 3 or y1 - y0 < 3:
            continue
        size, at = (y1 - y0, x1 - x0), np.array([x0, y0], np.float32)

        def dist_to(line: np.ndarray) -> np.ndarray:
            ink = np.full(size, 255, np.uint8)
            cv2.polylines(ink, [np.round((line - at) * 16).astype(np.int32)], False, 0, 1, cv2.LINE_8, shift=4)
            return cv2.distanceTransform(ink, cv2.DIST_L2, 3)

        d_out, d_in = dist_to(outer), dist_to(inner)
        lip = polygon_coverage(size, [np.concatenate([outer, inner[::-1]]) - at]) >= 128   # over half covered
        beyond = polygon_coverage(size, [mouth - at]) < 128   # outside the whole mouth: the skin around it
        # how far each pixel's sample moves: the lip's own depth there (so it grows by lip_grow of its local
        # height, thick at the middle, thin at the corners), and beyond the edge the edge's move, easing off
        weight = d_in * lip
        weight = np.where(beyond, np.maximum(d_in - d_out, 0.0) * (1.0 - _smoothstep(d_out * (1.0 / reach))),
                          weight).astype(np.float32)
        xs = np.arange(x0, x1, dtype=np.float32)[None, :]
        ys = np.arange(y0, y1, dtype=np.float32)[:, None]
        k = (corners[1] - corners[0]) / mouth_w ** 2
        u = (xs - corners[0, 0]) * k[0] + (ys - corners[0, 1]) * k[1]     # 0 at one corner, 1 at the other
        weight *= _smoothstep(np.minimum(u, 1.0 - u) * (1.0 / cfg.lip_corner))
        weight = cv2.GaussianBlur(weight, (0, 0), 0.7)
        into = into.astype(np.float32).tolist()
        out.append(((y0, y1, x0, x1), -amount * cfg.lip_grow * weight, (into[0], into[1])))
    return out


def _moved(map_xy: np.ndarray, box: tuple[int, int, int, int], patch_box: tuple[int, int, int, int],
           weight: np.ndarray, move: tuple[float, float]) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """A backward map with a patch's move taken off it (output pixels sample from weight * move back), its
    box grown to take the patch in. Each component on its own: a (h, w, 1) x (2,) product costs several
    times as much."""
    y0, y1, x0, x1 = patch_box
    part = map_xy[y0:y1, x0:x1]
    part[..., 0] -= weight * np.float32(move[0])
    part[..., 1] -= weight * np.float32(move[1])
    if box[1] <= box[0] or box[3] <= box[2]:
        return map_xy, patch_box
    return map_xy, (min(box[0], y0), max(box[1], y1), min(box[2], x0), max(box[3], x1))


def _smoothstep(t: np.ndarray) -> np.ndarray:
    t = np.clip(t, 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _slim_field(shape: tuple[int, int], step: int, local: np.ndarray, fw: float, amount: float,
                cfg: EditConfig) -> np.ndarray:
    """face_slim's offsets on moving_map's grid (every `step` px), (rows, cols, 2): the lower face squeezed
    toward its midline by slim_shift of the jaw's half-width at each height, the middle (slim_core, and beside
    the mouth out to its corners) kept, easing off from slim_inset inside the jaw line to nothing slim_reach outside it, and fading out
    above the nose tip. Gaussian moves at the jaw line would reach as far into the background as into
    the face and bend what stands beside it; this field stops a known distance from the jaw. The
    half-width is the mean of the two sides', so both move alike: a turned head's near side is wider in
    the picture (Biden's reaches 0.61 face widths, his far side 0.39), and squeezed by its own width the
    ease past its jaw line stretches the background 2.6 times."""
    h, w = shape
    up = _unit(local[FOREHEAD] - local[CHIN])
    right = np.array([up[1], -up[0]], np.float32)
    if np.dot(right, local[FACE_SIDES[1]] - local[FACE_SIDES[0]]) < 0:
        right = -right
    origin = local[CHIN]
    nose = float(np.dot(local[NOSE_TIP] - origin, up))
    oval = _loop(local, "face_oval") - origin
    ou, oh = oval @ right, oval @ up
    gx = (np.arange(0, w + step, step, dtype=np.float32) - origin[0])[None, :]   # the grid's nodes, broadcast
    gy = (np.arange(0, h + step, step, dtype=np.float32) - origin[1])[:, None]
    d = np.zeros((gy.shape[0], gx.shape[1]), np.float32)
    band = _smoothstep((nose - (gx * up[0] + gy * up[1])) / (0.2 * fw))   # none above the nose tip, all 0.2 fw below it
    rows = np.flatnonzero(band.any(axis=1))    # a half-plane: the rows it reaches are one run
    if not len(rows):
        return np.zeros(d.shape + (2,), np.float32)
    r0, r1 = int(rows[0]), int(rows[-1]) + 1   # the rest is worked out on those rows only (zero elsewhere)
    gy, band = gy[r0:r1], band[r0:r1]
    pu, ph = gx * right[0] + gy * right[1], gx * up[0] + gy * up[1]
    # the mouth keeps its width: a slimmer face is not a narrower smile (beside the mouth the kept middle
    # reaches its corners, fading out above and below it)
    corners = local[list(MOUTH_CORNERS), :2] - origin
    mouth_half = float(np.abs(corners @ right).max())
    mouth_h = float((corners @ up).mean())
    mouth_core = mouth_half * np.exp(-(((ph - mouth_h) / (cfg.slim_mouth_reach * fw)) ** 2))
    sides = {}   # each side's distance from the midline, jaw half-width and squeeze profile, at each grid node
    for sgn in (-1.0, 1.0):
        side = (ou * sgn > 0) & (oh < nose + 0.15 * fw)
        if side.sum() < 2:
            continue
        order = np.argsort(oh[side])
        half = np.interp(ph, oh[side][order], np.abs(ou[side][order]), left=0.0)   # the jaw's half-width here
        x = pu * sgn
        core = np.minimum(np.maximum(cfg.slim_core * half, mouth_core), 0.8 * half)
        ramp = np.where(x < half, np.clip((x - core) / np.maximum(half - core, 1e-3), 0.0, 1.0), 1.0)
        ease = 1.0 - _smoothstep((x - half + cfg.slim_inset * fw) / ((cfg.slim_reach + cfg.slim_inset) * fw))
        sides[sgn] = (x, half, ramp * ease)
    mean_half = sum(half for _, half, _ in sides.values()) / max(1, len(sides))
    for sgn, (x, _, profile) in sides.items():
        d[r0:r1] += np.where(x > 0, -sgn * amount * cfg.slim_shift * mean_half * profile * band, 0.0)
    return d[..., None] * right
