"""Which pixels of a source's canonical face texture show the person's skin, and what to do where they do not.

A source photo often has something over part of the face: glasses, a hand, a cup, a deep shadow, a blown
highlight. Refusing every such photo refuses photos a user cannot fix (freckles, a beard, strong side light
tripped the old colour probes), and accepting it as it is carries the cover onto the live face. So a
registration computes, once, a validity mask over the 256-px canonical texture (1 = the person's skin,
0 = covered), fills what it can from the mirrored bare side of the face, and lets fusion lower its weight
where the mask stays low, so the live face's own skin shows there. A photo is refused only when a large
part of the face (a half, both eyes, most of it) is covered: then there is too little of the person left.

What counts as covered (all in texture pixels, cheap: a few OpenCV passes over 256 x 256):

- glasses: the eye zone (from the landmarks) holds many strong luminance edges that bare skin around the
  eyes does not have (frames, lens rims); then the whole zone, lenses included, is covered;
- a foreign colour: chromaticity (r, g = R/sum, G/sum) far from the face's own skin median. Chromaticity
  ignores how bright a pixel is, so side light, shading and a beard's darker mix stay skin; only regions
  that stay foreign after an opening and that are large (a share of the skin) count, so freckles, tattoo
  lines and stubble strokes, thin or small, do not;
- deep shadow (no channel above `dark`) and blown highlight (every channel above `bright`), large ones only;
- a hand in front of the face, whatever its colour: found in the photo by the hand networks at
  registration (engines/sources.py) and passed in as a coverage mask over the texture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import cv2
import numpy as np

from engines import mesh
from engines.face_masks import region_mask
from engines.fusion_mesh import fusion_mesh, signed_areas
from kernels.numpy.warp import affine_tables, rasterize_triangles, remap, triangle_maps

NOSE_TIP, CHIN, NOSE_BRIDGE = 1, 152, 168      # MediaPipe mesh landmark ids


@dataclass(frozen=True, slots=True)
class MaskConfig:
    chroma_far: float = 0.045     # rg-chromaticity distance from the skin median that is foreign ...
    chroma_spread: float = 5.0    # ... or this many robust spreads of the face's own skin, whichever is larger
    dark: int = 30                # deep shadow: no channel above this (nothing of the skin to take)
    bright: int = 248             # blown highlight: every channel above this
    open_px: int = 3              # opening radius (texture px) that removes thin strokes: tattoo lines, stubble
    min_region: float = 0.015     # a cover smaller than this share of the skin is detail (a mole, a freckle)
    glasses_edges: float = 0.2    # share of the eye zone on long strong edges above which glasses are present
    edge_strength: float = 60.0   # Sobel magnitude of the blurred grey texture that is a strong edge
    feather_px: float = 3.0       # softness of the mask's edges (Gaussian sigma, texture px)
    grow_px: int = 2              # a cover's edge (hair tips, a rim's shadow: pixels part cover, part skin) is
                                  # filled and masked with it; what refuses is measured without it
    fill_light_px: float = 6.0    # a fill takes the light of the bare skin around it (Gaussian sigma, texture
                                  # px; 0 = the mirrored pixels as they are): the face's two sides are lit apart
    mirror_area: tuple[float, float] = (0.5, 2.0)   # a mirrored triangle this much smaller / larger is not symmetric
    refuse_part: float = 0.6      # a part of the face this much covered (and not filled) refuses the photo
    refuse_total: float = 0.5     # as does this much of all the skin


@dataclass(frozen=True, slots=True)
class SourceMask:
    validity: np.ndarray          # (S, S) float32: 1 = the person's skin (or a mirrored fill), 0 = covered
    covered: np.ndarray           # (S, S) bool: what was found covering the face, before filling
    filled: np.ndarray            # (S, S) bool: covered pixels filled from the mirrored side
    glasses: bool
    parts: dict[str, float] = field(default_factory=dict)   # part name -> share of its skin covered (filled or not)
    unfilled: dict[str, float] = field(default_factory=dict)   # part name -> share covered and left to the live face
    hand_parts: dict[str, float] = field(default_factory=dict)   # part name -> share of its skin a hand covers

    def masked(self, at_least: float = 0.05) -> list[str]:
        """Words for what was masked: "glasses", then each part at least `at_least` covered, most first."""
        out = ["glasses"] if self.glasses else []
        named = sorted(((k, v) for k, v in self.parts.items() if k != "all" and v >= at_least), key=lambda kv: -kv[1])
        return out + [f"{PART_WORDS[k]} ({v:.0%}{self._how(k, v)})" for k, v in named]

    def left_to_live(self, at_least: float = 0.05) -> list[str]:
        """Words for what the live face shows instead of the source: "glasses", then each part at least
        `at_least` covered and not filled from the other side, most first (what a user is told)."""
        out = ["glasses"] if self.glasses else []
        named = sorted(((k, v) for k, v in self.unfilled.items() if k != "all" and v >= at_least), key=lambda kv: -kv[1])
        return out + [f"{PART_WORDS[k]} ({v:.0%})" for k, v in named]

    def _how(self, part: str, share: float) -> str:
        left = self.unfilled.get(part, share)
        return ", filled from the other side" if left < 0.5 * share else ""


# what a refusal names, and the face part it measures
PART_WORDS = {"lower": "the lower half of the face", "upper": "the upper half of the face",
              "right": "the right side of the face", "left": "the left side of the face",
              "eyes": "both eyes", "all": "most of the face"}
PLURAL = frozenset({"eyes"})


@cache
def mirror_index() -> np.ndarray:
    """(468,) landmark id of each landmark's mirror image across the face's midline, from MediaPipe's own
    canonical face (exactly symmetric: every vertex's mirror is a vertex)."""
    from engines.landmarks.geometry import canonical_face

    v = canonical_face().vertices
    flipped = v * np.array([-1.0, 1.0, 1.0])
    return np.linalg.norm(flipped[:, None] - v[None], axis=2).argmin(axis=1).astype(np.int32)


def skin_region(shape: tuple[int, int], lms: np.ndarray) -> np.ndarray:
    """bool: the face oval less eyes, brows and lips, pulled in 2 px (the outline's edge is background)."""
    skin = region_mask(shape, lms, ["face_oval"], fusion_mesh().skin_exclude)
    return cv2.erode((skin > 0.5).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0


def _eye_centres(lms: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    loops = mesh.loops()
    right, left = (lms[loops[n], :2].mean(axis=0) for n in ("right_eye", "left_eye"))
    return right, left, float(np.linalg.norm(left - right))


def eye_zone(shape: tuple[int, int], lms: np.ndarray) -> np.ndarray:
    """bool: where glasses sit, from the landmarks: an ellipse around each eye (1 x 0.72 of the eye
    distance, a large lens, a little toward the temple and down), joined across the nose bridge."""
    right, left, d = _eye_centres(lms)
    zone = np.zeros(shape, np.uint8)
    for c, out in ((right, -1.0), (left, 1.0)):      # lenses reach further toward the temples, and below the eye
        centre = (int(round(c[0] + out * 0.06 * d)), int(round(c[1] + 0.05 * d)))
        cv2.ellipse(zone, centre, (int(0.5 * d), int(0.36 * d)), 0, 0, 360, 1, -1)
    y = float(right[1] + left[1]) / 2
    cv2.rectangle(zone, (int(right[0]), int(y - 0.1 * d)), (int(left[0]), int(y + 0.05 * d)), 1, -1)
    return zone > 0


def edge_ring(zone: np.ndarray, lms: np.ndarray) -> np.ndarray:
    """bool: the eye zone less the eyes themselves (lashes, lids and creases are strong edges on a bare
    face) and the brows, each grown by a tenth of the eye distance."""
    d = _eye_centres(lms)[2]
    own = region_mask(zone.shape, lms, ["left_eye", "right_eye"]) > 0.5
    brows = np.zeros(zone.shape, np.uint8)
    loops = mesh.loops()
    for name in ("left_brow", "right_brow"):
        cv2.fillConvexPoly(brows, cv2.convexHull(np.round(lms[loops[name], :2]).astype(np.int32)), 1)
    grow = int(round(0.1 * d)) * 2 + 1
    k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (grow, grow))
    return zone & ~(cv2.dilate(own.astype(np.uint8) | brows, k) > 0)


def edge_strength(texture: np.ndarray) -> np.ndarray:
    grey = cv2.GaussianBlur(cv2.cvtColor(texture, cv2.COLOR_RGB2GRAY).astype(np.float32), (0, 0), 1.0)
    return cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3))


def glasses_edges(texture: np.ndarray, zone: np.ndarray, lms: np.ndarray, cfg: MaskConfig) -> float:
    """Share of the eye zone, less the eyes and brows themselves, on long strong luminance edges (a
    connected run at least 0.4 of the eye distance across): frames and rims are long lines, freckles,
    moles and wrinkles' ends short ones."""
    ring = edge_ring(zone, lms)
    if not ring.any():
        return 0.0
    strong = ((edge_strength(texture) > cfg.edge_strength) & ring).astype(np.uint8)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(strong, connectivity=8)
    span = np.maximum(stats[:, cv2.CC_STAT_WIDTH], stats[:, cv2.CC_STAT_HEIGHT])
    long = np.zeros(n, bool)
    long[1:] = span[1:] >= 0.4 * _eye_centres(lms)[2]
    return float(long[labels][ring].mean())


def chromaticity(texture: np.ndarray) -> np.ndarray:
    """(S, S, 2) float32 r, g chromaticity: a pixel's colour with its brightness divided out."""
    x = texture.astype(np.float32)
    return x[..., :2] / np.maximum(x.sum(axis=2, keepdims=True), 1.0)


def foreign_colour(texture: np.ndarray, skin: np.ndarray, cfg: MaskConfig) -> np.ndarray:
    """bool: pixels whose chromaticity is far from the face's skin model: the median over the skin, then
    again over the skin within `chroma_far` of it, so a cover over nearly half the face moves neither the
    model nor its spread (the spread read from the inliers alone)."""
    rg = chromaticity(texture)
    ref = np.median(rg[skin], axis=0)
    for _ in range(2):
        dist = np.linalg.norm(rg - ref, axis=2)
        inliers = skin & (dist < cfg.chroma_far)
        if inliers.sum() < 0.2 * skin.sum():
            break
        ref = np.median(rg[inliers], axis=0)
    dist = np.linalg.norm(rg - ref, axis=2)
    spread = float(np.median(dist[skin & (dist < cfg.chroma_far)])) if (skin & (dist < cfg.chroma_far)).any() else 0.0
    return dist > max(cfg.chroma_far, cfg.chroma_spread * spread)


def extreme_light(texture: np.ndarray, cfg: MaskConfig) -> np.ndarray:
    """bool: deep shadow (no channel above `dark`) or blown highlight (every channel above `bright`)."""
    return (texture.max(axis=2) <= cfg.dark) | (texture.min(axis=2) >= cfg.bright)


def _disc(radius: int) -> np.ndarray:
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))


def coherent(mask: np.ndarray, min_px: float, open_px: int) -> np.ndarray:
    """The regions of `mask` that survive an opening of `open_px` and hold at least `min_px` pixels: a
    cover is one solid region, not scattered dots or thin lines."""
    k = _disc(open_px)
    opened = cv2.morphologyEx(mask.astype(np.uint8), cv2.MORPH_OPEN, k)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(opened, connectivity=8)
    keep = np.zeros(n, bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= min_px
    return cv2.dilate(keep[labels].astype(np.uint8), k) > 0


def mirror_maps(shape: tuple[int, int], lms: np.ndarray, cfg: MaskConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampling maps (map_x, map_y) that show the texture from the other side of the face: each mesh
    triangle takes its mirror triangle's pixels; and where that is trustworthy (bool): both triangles face
    the camera and neither is foreshortened much more than the other (a turned face's far side is squeezed)."""
    fm = fusion_mesh()
    tris = fm.triangles[: fm.n_tessellation]
    pts = lms[:468, :2].astype(np.float32)
    other = pts[mirror_index()]
    a, b = signed_areas(tris, pts), signed_areas(tris, other)
    ratio = np.abs(b) / np.maximum(np.abs(a), 1e-6)
    lo, hi = cfg.mirror_area
    ok = (np.sign(a) == -np.sign(b)) & (ratio > lo) & (ratio < hi)   # a mirror image turns the other way round
    ids = rasterize_triangles(shape, pts, tris[ok])
    map_x, map_y = triangle_maps(ids, affine_tables(other, pts, tris[ok]))
    return map_x, map_y, ids >= 0


def mirrored(image: np.ndarray, maps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    return remap(image, maps[0], maps[1])


def face_parts(shape: tuple[int, int], lms: np.ndarray, skin: np.ndarray) -> dict[str, np.ndarray]:
    """The parts a refusal names, as skin masks: halves above / below the nose tip, the person's right and
    left side of the midline (the image's left is the person's right), all of it."""
    h, w = shape
    ys, xs = np.mgrid[0:h, 0:w]
    mid = (lms[NOSE_BRIDGE, 0] + lms[NOSE_TIP, 0] + lms[CHIN, 0]) / 3.0
    return {"lower": skin & (ys > lms[NOSE_TIP, 1]), "upper": skin & (ys <= lms[NOSE_TIP, 1]),
            "right": skin & (xs < mid), "left": skin & (xs >= mid), "all": skin}


def _eyes(zone: np.ndarray, lms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eye zone split at the midline: the person's right eye (image left), then the left."""
    xs = np.arange(zone.shape[1])[None, :]
    mid = lms[NOSE_BRIDGE, 0]
    return zone & (xs < mid), zone & (xs >= mid)


def covered_share(left: np.ndarray, part: np.ndarray) -> float:
    return float((left & part).sum() / max(int(part.sum()), 1))


def light_offset(texture: np.ndarray, mirror: np.ndarray, known: np.ndarray, fill: np.ndarray, sigma: float) -> np.ndarray:
    """(S, S, 3) float32: what to add to the mirrored pixels so a fill takes the light of the skin around it.

    The two sides of a face are lit differently (a window on one side, a cheek turned to the lamp), so
    mirrored skin is brighter or darker than the skin it continues. Read the difference texture - mirror on
    `known` pixels (bare, with a bare mirror image) in a ring around the fill and carry it across the fill
    by normalised convolution: at `sigma` where the ring is near, at 3 sigma deeper inside a large fill."""
    reach = int(math.ceil(1.5 * sigma))
    ring = (known & (cv2.dilate(fill.astype(np.uint8), _disc(reach)) > 0)).astype(np.float32)
    stack = np.dstack([(texture.astype(np.float32) - mirror) * ring[..., None], ring])
    near = cv2.GaussianBlur(stack, (0, 0), sigma)
    h, w = ring.shape                                        # the wide one is smooth: at a quarter of the size
    small = cv2.GaussianBlur(cv2.resize(stack, (w // 4, h // 4), interpolation=cv2.INTER_AREA), (0, 0), 0.75 * sigma)
    wide = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
    near_den, wide_den = near[..., 3:], wide[..., 3:]
    trust = near_den / (near_den + 0.05)                    # how much of the near estimate is read, not guessed
    wide_part = wide[..., :3] / np.maximum(wide_den, 1e-6) * np.minimum(wide_den / 1e-2, 1.0)
    return trust * near[..., :3] / np.maximum(near_den, 1e-6) + (1.0 - trust) * wide_part


def build_mask(texture: np.ndarray, lms: np.ndarray, cfg: MaskConfig = MaskConfig(),
               hands: np.ndarray | None = None, hand_reach: np.ndarray | None = None) -> tuple[np.ndarray, SourceMask]:
    """The texture with its covered parts filled from the mirrored side where that side is bare, and its
    `SourceMask`. Glasses are never filled from the other side (both sides wear them); what stays covered
    is left to the live face at fusion time (validity near 0 there). A fill takes the light of the bare skin
    around it and its edge is feathered outward over that skin, so it shows no patch. `hands`: (S, S) float
    coverage of hands found in front of the face (engines/sources.py), covers whatever their colour, and
    what refuses; `hand_reach`: the same grown, what is masked (None: `hands` itself)."""
    shape = texture.shape[:2]
    skin = skin_region(shape, lms)
    zone = eye_zone(shape, lms)
    glasses = glasses_edges(texture, zone, lms, cfg) > cfg.glasses_edges
    min_px = cfg.min_region * max(int(skin.sum()), 1)
    face = region_mask(shape, lms, ["face_oval"]) > 0.5 if hands is not None else None   # lips and brows too
    hand = (hands > 0.5) & face if hands is not None else np.zeros(shape, bool)
    reach = (hand_reach > 0.5) & face if hand_reach is not None and face is not None else hand
    # the skin's colour is read without the hand's: a hand of another skin tone would become the face's own
    objects = coherent((foreign_colour(texture, skin & ~reach if reach.any() else skin, cfg) | extreme_light(texture, cfg))
                       & (skin | zone), min_px, cfg.open_px)
    objects |= hand
    grown = objects
    if cfg.grow_px > 0 and objects.any():
        grown = (cv2.dilate(objects.astype(np.uint8), _disc(cfg.grow_px)) > 0) & (skin | zone)
    grown |= reach
    cover = grown | zone if glasses else grown
    maps = mirror_maps(shape, lms, cfg)
    bare_other = (mirrored((~cover).astype(np.float32), maps) > 0.99) & maps[2]
    fill = grown & bare_other
    if glasses:
        fill &= ~zone
    out = texture.copy()
    if fill.any():
        mirror = mirrored(texture, maps).astype(np.float32)
        known = skin & ~cover & bare_other            # bare skin whose mirror image is bare skin too
        if cfg.fill_light_px > 0:
            mirror += light_offset(texture, mirror, known, fill, cfg.fill_light_px)
        # the switch to the fill: 1 over it, feathered outward over bare skin (where the mirror is sound)
        a = np.where(fill, 1.0, cv2.GaussianBlur(fill.astype(np.float32), (0, 0), 1.0) * known).astype(np.float32)
        blended = texture + a[..., None] * (mirror - texture)
        out = np.clip(blended + 0.5, 0, 255).astype(np.uint8)
    left = cover & ~fill
    validity = cv2.GaussianBlur(1.0 - left.astype(np.float32), (0, 0), cfg.feather_px)
    validity[left] = 0.0          # fully off over the cover itself; the ramp lies outside it
    # what refuses is what covers the face, filled or not (half a face mirrored is not the person's face),
    # glasses apart: they alone never refuse
    named, eyes = face_parts(shape, lms, skin), _eyes(zone, lms)
    parts = {k: covered_share(objects, m & ~zone if glasses else m) for k, m in named.items()}
    parts["eyes"] = min(covered_share(objects, e) for e in eyes)
    unfilled = {k: covered_share(objects & ~fill, m) for k, m in named.items()}
    hand_parts = {}
    if hand.any():
        hand_parts = {k: covered_share(hand, m) for k, m in named.items()}
        hand_parts["eyes"] = min(covered_share(hand, e) for e in eyes)
    return out, SourceMask(validity.astype(np.float32), cover, fill, glasses, parts, unfilled, hand_parts)


def refusal(mask: SourceMask, cfg: MaskConfig = MaskConfig()) -> str | None:
    """Words naming the covered part when too much of the face is covered to fuse, else None."""
    over = {k: v for k, v in mask.parts.items() if v >= (cfg.refuse_total if k == "all" else cfg.refuse_part)}
    if not over:
        return None
    name = max(over, key=lambda k: over[k] if k != "all" else over[k] - 1.0)   # a named part before "most"
    verb = "are" if name in PLURAL else "is"
    by = " by a hand" if mask.hand_parts.get(name, 0.0) >= 0.5 * over[name] else ""
    return f"{PART_WORDS[name]} {verb} covered{by} ({over[name]:.0%} of it)"
