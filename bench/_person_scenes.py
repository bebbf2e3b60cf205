"""Frames with a known person mask, for the background stage's tests and benchmark: the project's own
photos with hand-drawn person polygons (data/background/person_masks.json), and a person cut out along
that polygon and pasted on other real photos and a studio backdrop at 1280x720 (the truth is the pasted
polygon)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

MASKS = Path(__file__).resolve().parent.parent / "data" / "background" / "person_masks.json"


@dataclass(frozen=True)
class Scene:
    """A frame, its person mask (bool), the pixels not scored (bool), the face's box (x0, y0, x1, y1: the
    box of its landmarks) and the face itself (the landmarks' convex hull, (N, 2) frame pixels)."""

    name: str
    image: np.ndarray
    person: np.ndarray
    void: np.ndarray
    face: tuple[int, int, int, int]
    face_hull: np.ndarray

    def face_region(self) -> np.ndarray:
        """bool mask of the face (inside its landmarks' hull)."""
        m = np.zeros(self.image.shape[:2], np.uint8)
        cv2.fillConvexPoly(m, np.round(self.face_hull).astype(np.int32), 1)
        return m.astype(bool)


def photo(name: str) -> np.ndarray:
    """One of the project's photos (tests/photos.py; "grace_hopper" is its "hopper")."""
    from tests import photos

    return photos.load("hopper" if name == "grace_hopper" else name)


def _fill(polys: list, shape: tuple[int, int]) -> np.ndarray:
    m = np.zeros(shape, np.uint8)
    if polys:
        cv2.fillPoly(m, [np.asarray(p, np.int32) for p in polys], 1)
    return m.astype(bool)


@lru_cache(maxsize=4)
def _face_hull(name: str) -> np.ndarray:
    """The face's landmarks' convex hull in the photo, from the product's landmarker (MediaPipe, image mode)."""
    from engines.faces import LandmarkerConfig, MediaPipeLandmarker

    lm = MediaPipeLandmarker(LandmarkerConfig(mode="image", blendshapes=False, max_faces=1))
    try:
        (face,) = lm.detect(photo(name), 0)
    finally:
        lm.close()
    return cv2.convexHull(face.landmarks[:, :2].astype(np.float32))[:, 0]


def photo_scene(name: str) -> Scene:
    """A photo as it is, with its hand-drawn mask."""
    spec = json.loads(MASKS.read_text())["photos"][name]
    img = photo(name)
    shape = img.shape[:2]
    return Scene(name, img, _fill(spec["person"], shape), _fill(spec["void"], shape), tuple(spec["face"]),
                 _face_hull(name))


def backgrounds() -> dict[str, np.ndarray]:
    """Rooms to paste a person on: real photos with no person in them, and a plain studio backdrop."""
    import skimage.data

    from tests.photos import _rgb

    h, w = 720, 1280
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    studio = 70 + 60 * np.exp(-(((xx - 640) / 700) ** 2 + ((yy - 300) / 500) ** 2))
    return {
        "coffee": _rgb(skimage.data.coffee()),
        "rocket": _rgb(skimage.data.rocket()),
        "chelsea": _rgb(skimage.data.chelsea()),
        "brick": _rgb(skimage.data.brick()),
        "studio": np.stack([studio * 0.9, studio, studio * 1.1], -1).clip(0, 255).astype(np.uint8),
    }


def held_out_rooms() -> dict[str, np.ndarray]:
    """Rooms no setting of the matte was chosen on (the background stage's held-out check): a garage with a
    red motorcycle, a deep-sky photo, a stained tissue section, a retina, grass, gravel and a cell
    micrograph (scikit-image's bundled images; grey ones as grey RGB)."""
    import skimage.data

    from tests.photos import _rgb

    grey = lambda x: np.repeat(x[..., None], 3, axis=2)  # noqa: E731
    return {
        "motorcycle": _rgb(skimage.data.stereo_motorcycle()[0]),
        "hubble": _rgb(skimage.data.hubble_deep_field()),
        "tissue": _rgb(skimage.data.immunohistochemistry()),
        "retina": _rgb(skimage.data.retina()),
        "grass": _rgb(grey(skimage.data.grass())),
        "gravel": _rgb(grey(skimage.data.gravel())),
        "cell": _rgb(grey(skimage.data.cell())),
    }


def room_photo(room: str) -> np.ndarray:
    """A room of `backgrounds()` or of `held_out_rooms()` by name."""
    rooms = backgrounds()
    return rooms[room] if room in rooms else held_out_rooms()[room]


def pasted_scene(name: str, room: str, size: tuple[int, int] = (1280, 720), height: float = 1.0,
                 centre_x: float = 0.5) -> Scene:
    """The person of photo `name` cut along the drawn polygon (void areas with them), scaled to `height` of
    the frame and standing on its bottom edge at `centre_x`, on the room photo `room` (room_photo) scaled to
    cover."""
    from kernels.numpy.background import cover

    src = photo_scene(name)
    w, h = size
    frame = cover(room_photo(room), size)
    k = height * h / src.image.shape[0]
    pw, ph = int(round(src.image.shape[1] * k)), int(round(src.image.shape[0] * k))
    x0, y0 = int(round(centre_x * w - pw / 2)), h - ph
    m = np.array([[k, 0, x0], [0, k, y0]], np.float64)
    img = cv2.warpAffine(src.image, m, size, flags=cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR)
    cut = cv2.warpAffine((src.person | src.void).astype(np.uint8), m, size, flags=cv2.INTER_NEAREST).astype(bool)
    person = cv2.warpAffine(src.person.astype(np.uint8), m, size, flags=cv2.INTER_NEAREST).astype(bool)
    void = cv2.warpAffine(src.void.astype(np.uint8), m, size, flags=cv2.INTER_NEAREST).astype(bool)
    frame[cut] = img[cut]
    fx0, fy0, fx1, fy1 = src.face
    face = (int(fx0 * k + x0), int(fy0 * k + y0), int(fx1 * k + x0), int(fy1 * k + y0))
    return Scene(f"{name}_on_{room}", frame, person, void, face, src.face_hull * k + np.array([x0, y0]))


def iou(alpha: np.ndarray, scene: Scene, threshold: float = 0.5) -> float:
    """Intersection over union of alpha > threshold with the person, void pixels left out."""
    pred = np.asarray(alpha) > threshold
    keep = ~scene.void
    inter = np.count_nonzero(pred & scene.person & keep)
    union = np.count_nonzero((pred | scene.person) & keep)
    return inter / max(1, union)


def mask_iou(a: np.ndarray, b: np.ndarray, void: np.ndarray | None = None, threshold: float = 0.5) -> float:
    pa, pb = np.asarray(a) > threshold, np.asarray(b) > threshold
    keep = ~void if void is not None else np.ones(pa.shape, bool)
    return np.count_nonzero(pa & pb & keep) / max(1, np.count_nonzero((pa | pb) & keep))
