"""Source registration: an image -> the chosen face -> everything fusion needs per frame, computed once.

A source face is aligned by a similarity (eye centres to fixed points) into a square canonical texture, so
per-frame work only samples it. The record also keeps its landmarks in that texture, the mesh triangles
oriented for back-face culling, its skin colour statistics (Lab), its identity embedding and a validity
mask over the texture (engines/source_mask.py): glasses, a hand or an object, deep shadow are masked and
filled from the mirrored side where it is bare, so a partly covered photo is accepted and what covered it
does not travel; only a photo with a large part of the face covered is refused, naming the part. Records
are cached by the hash of the image content and the face choice. Unusable images are refused with a reason
a client can show.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import cv2
import numpy as np

from engines.images import ImageError, image_size, load_image
from engines.face_masks import region_mask
from engines.faces import Face, MaskPatch
from engines.fusion_mesh import fusion_mesh, orient_triangles
from engines.source_mask import MaskConfig, SourceMask, build_mask, refusal
from kernels.numpy import color

log = logging.getLogger(__name__)

REASONS = ("bad_image", "too_large", "no_face", "bad_index", "too_small", "too_turned", "occluded")

class SourceRefused(ValueError):
    """The image cannot be a source; `reason` is one of REASONS, the message says why in words."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def as_event(self) -> dict[str, str]:
        return {"type": "error", "code": f"source_{self.reason}", "message": str(self)}


# A source id names a face in a session, in URLs, log lines and file names: ASCII only (str.isalnum would
# let every script's letters and digits through), so one rule serves the protocol and the upload form.
SOURCE_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
SOURCE_ID_RULE = "1 to 64 ASCII letters, digits, '-' or '_'"


def valid_source_id(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(SOURCE_ID_PATTERN, value) is not None


@dataclass(frozen=True, slots=True)
class SourceConfig:
    texture_size: int = 256          # canonical texture side, pixels
    eye_distance: float = 0.30       # eye-centre distance as a fraction of the side
    eye_height: float = 0.42         # eye line height as a fraction of the side
    min_face_px: float = 64.0        # narrowest usable face (landmark box width) in the source image
    max_yaw: float = 30.0            # degrees
    max_pitch: float = 30.0
    mask: MaskConfig = MaskConfig()  # what covers the face, how it is filled, when it refuses (engines/source_mask.py)
    hands: bool = True               # look for hands in front of the face (the stream's palm detector and hand
                                     # landmarks): a hand covers the face whatever its colour
    max_pixels: int = 40_000_000
    max_bytes: int = 25 << 20
    max_faces: int = 4
    formats: tuple[str, ...] = ("JPEG", "PNG", "WEBP")   # what a photo may arrive as (PIL's names)
    min_side: int = 32               # a narrower image holds no usable face


@dataclass(frozen=True, eq=False)
class SourceFace:
    id: str
    texture: np.ndarray              # (S, S, 3) uint8 RGB canonical texture
    levels: tuple[np.ndarray, ...]   # texture, then half-size copies (sampled when the live face is small)
    lab_levels: tuple[np.ndarray, ...]  # the same in float32 Lab: fusion samples colour it need not convert
    landmarks: np.ndarray            # (478, 3) float32 in texture pixels (z on the same scale)
    triangles: np.ndarray            # fusion mesh, oriented (outward normals)
    skin_stats: tuple[np.ndarray, np.ndarray]  # Lab mean, std over the source skin
    pose: tuple[float, float, float]
    face_index: int
    image_size: tuple[int, int]      # (width, height) of the image it came from
    bbox: tuple[float, float, float, float]
    embedding: np.ndarray | None = None
    blendshapes: dict[str, float] = field(default_factory=dict)
    validity: tuple[np.ndarray, ...] | None = None   # per level, (S, S) float32: 1 = the person's skin, 0 = covered
                                                     # (fusion lowers its weight there); None = all valid
    masked: tuple[str, ...] = ()     # what the mask took away, in words ("glasses", "the left side of the face (12%)")
    left_to_live: tuple[str, ...] = ()   # of that, what the live face shows instead (not filled from the other side)

    def summary(self) -> dict[str, Any]:
        """What a client is told about a registered source; `warnings` names what was masked and not filled,
        so a client can say why part of the face will show the live person's own skin."""
        return {"id": self.id, "face_index": self.face_index, "pose": [round(v, 1) for v in self.pose],
                "bbox": [round(v, 1) for v in self.bbox], "image_size": list(self.image_size),
                "has_embedding": self.embedding is not None,
                "warnings": [f"masked: {m}" for m in self.left_to_live]}


def decode_image(data: Any, config: SourceConfig = SourceConfig()) -> np.ndarray:
    """bytes / ndarray -> H x W x 3 uint8 RGB through `engines.images.load_image`, or SourceRefused."""
    if not isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        raise SourceRefused("bad_image", f"expected image bytes or an array, got {type(data).__name__}")
    if isinstance(data, np.ndarray) and data.dtype != np.uint8:   # arrays come from our own decoders: uint8 only
        raise SourceRefused("bad_image", f"image array must be uint8, got {data.dtype}")
    if not isinstance(data, np.ndarray) and len(data) > config.max_bytes:
        raise SourceRefused("too_large", f"image file is {len(data)} bytes; the limit is {config.max_bytes}")
    try:
        return load_image(data, max_pixels=config.max_pixels, min_side=config.min_side, formats=config.formats)
    except ImageError as exc:
        raise SourceRefused(exc.reason, str(exc)) from None


def probe_image(data: bytes | bytearray | memoryview, config: SourceConfig = SourceConfig()) -> tuple[int, int]:
    """(width, height) of an upload from its header alone, with `decode_image`'s checks, or SourceRefused."""
    if len(data) > config.max_bytes:
        raise SourceRefused("too_large", f"image file is {len(data)} bytes; the limit is {config.max_bytes}")
    try:
        return image_size(data, max_pixels=config.max_pixels, formats=config.formats)
    except ImageError as exc:
        raise SourceRefused(exc.reason, str(exc)) from None


def parse_index(raw: Any) -> int | None:
    """The optional `index` form field: which face of the photo (0 = leftmost); empty means the largest."""
    if raw in (None, ""):
        return None
    try:
        index = int(raw)
    except (TypeError, ValueError):
        raise SourceRefused("bad_index", f"face index must be a whole number, got {raw!r}") from None
    if index < 0:
        raise SourceRefused("bad_index", "face index must be 0 or more")
    return index


def content_hash(image: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(str(image.shape).encode())
    h.update(np.ascontiguousarray(image).tobytes())
    return h.hexdigest()[:16]


def choose_face(faces: list[Face], index: int | None) -> tuple[int, Face]:
    """The largest face by default; `index` counts faces from left to right (0 = leftmost)."""
    if not faces:
        raise SourceRefused("no_face", "no face was found in the image")
    if index is None:
        areas = [(f.bbox[2] - f.bbox[0]) * (f.bbox[3] - f.bbox[1]) for f in faces]
        best = int(np.argmax(areas))
        order = sorted(range(len(faces)), key=lambda i: faces[i].bbox[0])
        return order.index(best), faces[best]
    order = sorted(faces, key=lambda f: f.bbox[0])
    if not 0 <= index < len(order):
        raise SourceRefused("bad_index", f"face index {index} asked for, but the image has {len(order)} face(s)")
    return index, order[index]


def canonical_transform(landmarks: np.ndarray, config: SourceConfig) -> np.ndarray:
    """2x3 similarity taking the eye centres to their canonical places (removes roll, fixes scale)."""
    from engines import mesh

    loops = mesh.loops()
    # subject's right eye is on the image left
    right = landmarks[loops["right_eye"], :2].mean(axis=0)
    left = landmarks[loops["left_eye"], :2].mean(axis=0)
    s = config.texture_size
    dst_r = np.array([s * (0.5 - config.eye_distance / 2), s * config.eye_height])
    dst_l = np.array([s * (0.5 + config.eye_distance / 2), s * config.eye_height])
    v_src = left - right
    v_dst = dst_l - dst_r
    scale = np.linalg.norm(v_dst) / max(np.linalg.norm(v_src), 1e-6)
    ang = np.arctan2(v_dst[1], v_dst[0]) - np.arctan2(v_src[1], v_src[0])
    c, si = scale * np.cos(ang), scale * np.sin(ang)
    rot = np.array([[c, -si], [si, c]])
    t = dst_r - rot @ right
    return np.hstack([rot, t[:, None]]).astype(np.float64)


def canonical_texture(image: np.ndarray, face: Face, config: SourceConfig = SourceConfig()) -> tuple[np.ndarray, np.ndarray]:
    """The face warped to the canonical texture (eye centres at fixed points: roll and scale gone), as it
    is before anything covering it is masked, and its landmarks there ((478, 3), z on the same scale)."""
    m = canonical_transform(face.landmarks, config)
    s = config.texture_size
    scale = float(np.hypot(m[0, 0], m[0, 1]))
    src = image
    if scale < 0.5:  # shrink first with area averaging so the warp does not alias
        f = 1.0 / scale / 1.5
        src = cv2.resize(image, (max(1, int(image.shape[1] / f)), max(1, int(image.shape[0] / f))), interpolation=cv2.INTER_AREA)
        m = m.copy()
        m[:, :2] *= f
    # bicubic: a bilinear warp here and fusion's bilinear remap would smooth the skin's finest detail twice
    texture = cv2.warpAffine(src, m.astype(np.float32), (s, s), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
    m_full = canonical_transform(face.landmarks, config)
    lms = np.empty((478, 3), np.float32)
    lms[:, :2] = face.landmarks[:, :2] @ m_full[:, :2].T + m_full[:, 2]
    lms[:, 2] = face.landmarks[:, 2] * scale
    return texture, lms


def hand_cover(image: np.ndarray, face: Face, finder: Any,
               reach: float = 0.35) -> tuple[MaskPatch, MaskPatch] | None:
    """What the hands in front of `face` cover in `image`, twice: as the stream keeps a hand's pixels
    (engines/landmarks/hands.py's mask), which decides a refusal, and grown to `reach` of the palm's
    width, which is masked: a masked patch is filled from the other side or left to the live face, so a
    wide one costs little, and a finger the landmarks miss would come along as the source's skin. None
    when the photo shows no hand there."""
    from dataclasses import replace

    from engines.landmarks.hands import face_box, hand_patch, palm_regions

    shape = image.shape[:2]
    hands = finder.find(image, palm_regions([face], finder.config.region_scale, shape))
    box = face_box(face, shape)
    covers = []
    for config in (finder.config, replace(finder.config, margin=reach)):
        patches = [p for p in (hand_patch(h, box, config) for h in hands) if p is not None]
        if not patches:
            return None
        covers.append(MaskPatch(box[0], box[1], np.maximum.reduce([p.mask for p in patches])))
    return covers[0], covers[1]


def canonical_cover(cover: MaskPatch, face: Face, config: SourceConfig = SourceConfig()) -> np.ndarray:
    """(S, S) float32: a mask over the photo (a `MaskPatch`) in the canonical texture's pixels."""
    m = canonical_transform(face.landmarks, config).copy()
    m[:, 2] += m[:, :2] @ np.array([cover.x0, cover.y0], np.float64)
    s = config.texture_size
    return cv2.warpAffine(cover.mask.astype(np.float32), m.astype(np.float32), (s, s), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def build_source(image: np.ndarray, face: Face, face_index: int, config: SourceConfig = SourceConfig(),
                 embedding: np.ndarray | None = None, source_id: str | None = None,
                 hands: tuple[MaskPatch, MaskPatch] | None = None) -> SourceFace:
    """Checks and canonicalises one detected face (see `SourceRegistry.register` for the whole path);
    `hands`: what hands in front of it cover in the photo, and that grown (`hand_cover`)."""
    width = face.bbox[2] - face.bbox[0]
    if width < config.min_face_px:
        raise SourceRefused("too_small", f"the face is {width:.0f} px wide; at least {config.min_face_px:.0f} px is needed")
    yaw, pitch, _ = face.pose
    if abs(yaw) > config.max_yaw or abs(pitch) > config.max_pitch:
        raise SourceRefused("too_turned", f"the face is turned (yaw {yaw:.0f}, pitch {pitch:.0f} degrees); "
                            f"use a frontal photo (within {config.max_yaw:.0f} / {config.max_pitch:.0f} degrees)")
    texture, lms = canonical_texture(image, face, config)
    s = config.texture_size
    hand, reach = (canonical_cover(p, face, config) for p in hands) if hands is not None else (None, None)
    texture, smask = build_mask(texture, lms, config.mask, hands=hand, hand_reach=reach)
    words = refusal(smask, config.mask)
    if words is not None:
        raise SourceRefused("occluded", f"{words}: something seems to cover the face; use a photo where it is uncovered")
    lab = color.rgb_to_lab(texture)
    fm = fusion_mesh()
    skin = region_mask((s, s), lms, ["face_oval"], fm.skin_exclude)
    skin = cv2.erode(skin, np.ones((5, 5), np.uint8)) * (smask.validity > 0.5)   # the covers' colour is not the skin's
    stats = color.lab_stats(lab, skin)
    levels = [texture]
    while levels[-1].shape[0] >= 128:
        levels.append(cv2.pyrDown(levels[-1]))
    return SourceFace(
        id=source_id or content_hash(image), texture=texture, levels=tuple(levels),
        lab_levels=tuple(color.rgb_to_lab(t) for t in levels), landmarks=lms,
        triangles=orient_triangles(fm.triangles, lms), skin_stats=stats, pose=tuple(face.pose), face_index=face_index,
        image_size=(image.shape[1], image.shape[0]), bbox=tuple(face.bbox), embedding=embedding,
        blendshapes=dict(face.blendshapes), validity=validity_levels(smask, len(levels)), masked=tuple(smask.masked()),
        left_to_live=tuple(smask.left_to_live()))


def validity_levels(smask: SourceMask, n: int) -> tuple[np.ndarray, ...] | None:
    """The mask at each texture level (fusion samples the level it samples the texture from); None when
    nothing is masked, so a clean source costs fusion nothing."""
    if float(smask.validity.min()) >= 0.999:
        return None
    levels = [smask.validity]
    while len(levels) < n:
        levels.append(cv2.pyrDown(levels[-1]))
    return tuple(levels)


def _default_landmarker(max_faces: int):
    """IMAGE mode with the wide search: a photo's faces may be of any size (a group, a far shot)."""
    from engines.backends import select_backend
    from engines.faces import LandmarkerConfig

    return select_backend().landmarker(LandmarkerConfig(max_faces=max_faces, mode="image"))


def _default_hand_finder():
    from engines.landmarks.hands import open_hand_finder

    return open_hand_finder()


class SourceRegistry:
    """Registers source images; shared by sessions (thread-safe), records cached by content + face choice.

    A fresh landmarker runs each registration: the stream's VIDEO-mode landmarker tracks from frame to
    frame, and a still photo must not inherit another image's face. Registration is rare and runs a
    landmarker and the identity embedding, so it runs off the event loop."""

    def __init__(self, config: SourceConfig = SourceConfig(), *, embedder: Any = None,
                 landmarker_factory: Callable[[int], Any] = _default_landmarker, cache_size: int = 32,
                 hand_finder_factory: Callable[[], Any] = _default_hand_finder) -> None:
        self.config = config
        self.embedder = embedder
        self._factory = landmarker_factory
        self._hand_factory = hand_finder_factory
        self._hands: Any = None           # one hand finder, made at the first registration, used under its lock
        self._hands_lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, int | None], SourceFace] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def detect(self, image: np.ndarray) -> list[Face]:
        lm = self._factory(self.config.max_faces)
        try:
            return lm.detect(image, 0)
        finally:
            lm.close()

    def hands(self, image: np.ndarray, face: Face) -> tuple[MaskPatch, MaskPatch] | None:
        """What hands in front of `face` cover in `image` (None: none, `SourceConfig.hands` off, or the
        hand networks failed: the look is a refinement, so a photo is registered without it, and the
        failure is logged)."""
        if not self.config.hands:
            return None
        with self._hands_lock:
            try:
                if self._hands is None:
                    self._hands = self._hand_factory()
                return hand_cover(image, face, self._hands)
            except Exception:   # any failure of the networks leaves the photo as the colour tests see it
                log.warning("source registration: the look for hands failed; registering without it", exc_info=True)
                return None

    def register(self, data: Any, index: int | None = None) -> SourceFace:
        """Image bytes or array -> SourceFace, or SourceRefused saying why not."""
        image = decode_image(data, self.config)
        key = (content_hash(image), index)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        faces = self.detect(image)
        face_index, face = choose_face(faces, index)
        embedding = self.embedder.embed(image, face) if self.embedder is not None else None
        record = build_source(image, face, face_index, self.config, embedding=embedding,
                              source_id=f"{key[0]}-{face_index}", hands=self.hands(image, face))
        with self._lock:
            self._cache[key] = record
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return record

    def __len__(self) -> int:
        return len(self._cache)
