"""The tracked face as avatar apps and digital-human backends read it: ARKit's 52 blendshapes, head rotation
and position, and eye gaze from the iris, relative to a per-user neutral face and smoothed.

Blendshapes come from the face landmarker's own blendshapes network (MediaPipe's, trained on ARKit's names:
it reads 146 of the 478 mesh points), run on the raw landmarks of the one face that drives the rig;
`tongueOut`, which that network lacks, stays 0. Rotation and position come from the face transform
(MediaPipe's geometry pipeline: the canonical face fitted to the mesh, centimetres in the camera's frame).
Gaze is the iris centre's offset inside the eye, read along the line through both eyes' outer corners.

Frames are in the person's own terms, never mirrored: x is the person's left (the image's right in a camera
that does not mirror), y up, z toward the camera. Yaw > 0 turns the face toward the person's left, pitch > 0
tips the chin down, roll > 0 lifts the person's left side; gaze yaw > 0 looks toward the person's left, gaze
pitch > 0 looks up. The outputs (VMC, VTube Studio) mirror at their end when asked.

Neutral calibration: `calibrate()` collects the next `neutral_seconds` of frames (hold a relaxed face
toward the camera); their medians become the neutral, which every later frame is measured against: a score
s becomes (s - n) / (1 - n), the rotation is taken relative to the neutral head's, position and gaze are
offsets from it. Without a neutral the rotation is relative to facing the camera and the position to the
first frame's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from engines.faces import Face
from engines.landmarks.geometry import face_transform
from engines.smoothing import OneEuroValues

# Apple's ARFaceAnchor.BlendShapeLocation names, in Apple's order (MediaPipe's face blendshapes are these
# less tongueOut, plus `_neutral`)
ARKIT_NAMES: tuple[str, ...] = (
    "eyeBlinkLeft", "eyeLookDownLeft", "eyeLookInLeft", "eyeLookOutLeft", "eyeLookUpLeft", "eyeSquintLeft",
    "eyeWideLeft", "eyeBlinkRight", "eyeLookDownRight", "eyeLookInRight", "eyeLookOutRight", "eyeLookUpRight",
    "eyeSquintRight", "eyeWideRight", "jawForward", "jawLeft", "jawRight", "jawOpen", "mouthClose", "mouthFunnel",
    "mouthPucker", "mouthLeft", "mouthRight", "mouthSmileLeft", "mouthSmileRight", "mouthFrownLeft",
    "mouthFrownRight", "mouthDimpleLeft", "mouthDimpleRight", "mouthStretchLeft", "mouthStretchRight",
    "mouthRollLower", "mouthRollUpper", "mouthShrugLower", "mouthShrugUpper", "mouthPressLeft", "mouthPressRight",
    "mouthLowerDownLeft", "mouthLowerDownRight", "mouthUpperUpLeft", "mouthUpperUpRight", "browDownLeft",
    "browDownRight", "browInnerUp", "browOuterUpLeft", "browOuterUpRight", "cheekPuff", "cheekSquintLeft",
    "cheekSquintRight", "noseSneerLeft", "noseSneerRight", "tongueOut",
)
INDEX: Mapping[str, int] = {n: i for i, n in enumerate(ARKIT_NAMES)}


def mirrored_name(name: str) -> str:
    """The name for the other side (eyeBlinkLeft <-> eyeBlinkRight, mouthLeft <-> mouthRight)."""
    if name.endswith("Left"):
        return name[:-4] + "Right"
    if name.endswith("Right"):
        return name[:-5] + "Left"
    return name


# where each of the 52 lands when the rig is mirrored (left and right swapped; mouthLeft/jawLeft too)
MIRROR_ORDER: np.ndarray = np.array([INDEX[mirrored_name(n)] for n in ARKIT_NAMES])

# mesh points of the eyes: outer corner, inner corner, iris centre (the person's right eye, then left)
RIGHT_EYE = (33, 133, 468)
LEFT_EYE = (263, 362, 473)
# eye model for gaze angles: an eyeball of radius ~12 mm behind an eye opening ~30 mm wide, so the iris
# offset over the half opening g gives sin(angle) = g * 15 / 12 (approximate: eyes and faces vary; the
# neutral removes each person's resting offset)
EYE_HALF_OVER_RADIUS = 1.25


@dataclass(frozen=True, slots=True)
class RigConfig:
    """neutral_seconds: how long `calibrate()` collects. Smoothing is One-Euro per value: min_cutoff (Hz)
    when still, beta (Hz per unit per second) how fast it opens: scores open fully for a blink (about 10/s),
    angles (degrees) and position (metres) for a quick head turn."""

    neutral_seconds: float = 2.0
    smoothing: bool = True
    score_cutoff: tuple[float, float] = (2.0, 3.0)
    angle_cutoff: tuple[float, float] = (1.0, 0.08)
    position_cutoff: tuple[float, float] = (1.0, 40.0)
    gaze_cutoff: tuple[float, float] = (1.5, 0.1)

    def __post_init__(self) -> None:
        if not (0.1 <= self.neutral_seconds <= 30.0):
            raise ValueError(f"neutral_seconds must be within 0.1..30, got {self.neutral_seconds}")


@dataclass(frozen=True, slots=True)
class Neutral:
    """One person's relaxed face: what every frame is measured against. JSON round trip for the page to
    keep it (a user calibrates once) and hand it back to the next session."""

    scores: tuple[float, ...]                          # 52, ARKIT_NAMES order
    rotation: tuple[float, float, float, float]        # quaternion x, y, z, w (camera frame)
    position: tuple[float, float, float]               # metres, camera frame
    gaze: tuple[float, float, float, float]            # iris offsets: left x, y, right x, y

    def as_json(self) -> dict[str, Any]:
        return {"blendshapes": {n: round(v, 4) for n, v in zip(ARKIT_NAMES, self.scores)},
                "rotation": [round(v, 6) for v in self.rotation], "position": [round(v, 5) for v in self.position],
                "gaze": [round(v, 5) for v in self.gaze]}

    @classmethod
    def from_json(cls, data: Any) -> "Neutral":
        """A neutral from `as_json`'s shape; a clear ValueError for anything else."""
        if not isinstance(data, dict):
            raise ValueError("neutral must be an object with blendshapes, rotation, position, gaze")
        shapes = data.get("blendshapes")
        if not isinstance(shapes, dict) or any(not isinstance(v, (int, float)) for v in shapes.values()):
            raise ValueError("neutral.blendshapes must map ARKit names to numbers")
        unknown = sorted(set(shapes) - set(ARKIT_NAMES))
        if unknown:
            raise ValueError(f"neutral.blendshapes has unknown names: {', '.join(unknown[:5])}")

        def numbers(key: str, n: int) -> tuple[float, ...]:
            v = data.get(key)
            if not isinstance(v, list) or len(v) != n or any(not isinstance(x, (int, float)) or not math.isfinite(x) for x in v):
                raise ValueError(f"neutral.{key} must be a list of {n} finite numbers")
            return tuple(float(x) for x in v)

        rot = np.array(numbers("rotation", 4))
        if not (0.5 < float(np.linalg.norm(rot)) < 2.0):
            raise ValueError("neutral.rotation must be a unit quaternion (x, y, z, w)")
        scores = tuple(min(0.95, max(0.0, float(shapes.get(n, 0.0)))) for n in ARKIT_NAMES)
        return cls(scores, tuple(float(x) for x in rot / np.linalg.norm(rot)), numbers("position", 3),  # type: ignore[arg-type]
                   numbers("gaze", 4))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FaceFrame:
    """One frame of the rig: what every output encodes. `found` False: no face this frame (the values are
    the last ones seen, or neutral ones)."""

    t: float
    found: bool
    track_id: int
    scores: np.ndarray                                  # (52,) float in [0, 1], ARKIT_NAMES order
    yaw: float                                          # degrees, relative to the neutral head
    pitch: float
    roll: float
    quaternion: tuple[float, float, float, float]       # the same rotation: x, y, z, w (camera frame)
    position: tuple[float, float, float]                # metres, offset from the neutral head
    gaze: tuple[float, float, float, float]             # degrees: left eye yaw, pitch; right eye yaw, pitch
    calibrated: bool = False
    frame_size: tuple[int, int] = (0, 0)
    extra: Mapping[str, Any] = field(default_factory=dict)
    _floats: tuple[float, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def blendshapes(self) -> dict[str, float]:
        return dict(zip(ARKIT_NAMES, self.score_floats()))

    def score_floats(self) -> tuple[float, ...]:
        """The 52 scores as plain floats, converted once per frame (the rig hands over the ones it made) for
        all the frame's outputs, which read them one by one, where NumPy scalars cost more."""
        floats = self._floats
        if floats is None:
            floats = tuple(self.scores.tolist())
            object.__setattr__(self, "_floats", floats)
        return floats

    def as_json(self) -> dict[str, Any]:
        """The `face` event's body (docs/api.md, Face events) as a dict: `json_text` read back."""
        return json.loads(self.json_text())

    def json_text(self) -> str:
        """The `face` event's body as JSON text, made in one formatting step over a layout written once
        (the rig's outputs send it up to 60 times a second: a dict and a JSON encoder cost three times as
        much). ValueError for a value that is not finite, as strict JSON would."""
        values = (self.t, self.track_id, *self.score_floats(), self.yaw, self.pitch, self.roll, *self.quaternion,
                  *self.position, *self.gaze)
        if not math.isfinite(math.fsum(values)):
            raise ValueError("a face frame holds a value that is not finite")
        text = _BODY % (self.t, "true" if self.found else "false", self.track_id,
                        "true" if self.calibrated else "false", *values[2:])
        if not self.extra:
            return text + "}"
        return text + "," + _EXTRA_JSON.encode(dict(self.extra))[1:]


# a face event's extra fields, strict and compact (one encoder: json.dumps with options makes one a call)
_EXTRA_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)

# FaceFrame.json_text's layout: scores to 4 places, angles to 2, the quaternion to 5, position (m) to 4
_BODY = ('{"t":%.4f,"found":%s,"track_id":%d,"calibrated":%s,"blendshapes":{'
         + ",".join('"%s":%%.4f' % n for n in ARKIT_NAMES)
         + '},"head":{"yaw":%.2f,"pitch":%.2f,"roll":%.2f,"quaternion":[%.5f,%.5f,%.5f,%.5f],'
           '"position":[%.4f,%.4f,%.4f]},"gaze":{"left":{"yaw":%.2f,"pitch":%.2f},"right":{"yaw":%.2f,"pitch":%.2f}}')


BlendshapeRunner = Callable[[np.ndarray], Mapping[str, float]]


def open_blendshapes() -> BlendshapeRunner:
    """The blendshapes network on the CPU: LiteRT's interpreter when it is installed (the leanest;
    docs/performance.md), else the exact torch port of the same network."""
    from engines.landmarks.networks import BLENDSHAPES_MEMBER, BlendshapeNet

    try:
        from engines.backends.interpreter import InterpreterBackend
        from engines.backends.base import BackendSettings

        graph = InterpreterBackend(BackendSettings(preference=("interpreter",), device="cpu")).network(BLENDSHAPES_MEMBER)
    except Exception:   # not installed here: the torch port runs the same network
        graph = None
    return BlendshapeNet("cpu", graph=graph)


def iris_offsets(landmarks: np.ndarray) -> np.ndarray:
    """(4,) each iris centre's offset from its eye's centre over half the eye's width: left x, y, right x,
    y; x toward the person's left, y up, along and across the line through both outer corners."""
    return np.array(_iris_floats(landmarks))


def _eye_flat(columns: int) -> np.ndarray:
    """Where the x and y of the six points iris_offsets reads lie in landmarks of `columns` columns, read
    flat: left outer, inner, iris, right outer, inner, iris."""
    return np.array([p * columns + k for p in LEFT_EYE + RIGHT_EYE for k in (0, 1)])


_EYE_FLAT = {2: _eye_flat(2), 3: _eye_flat(3)}


def _iris_floats(landmarks: np.ndarray) -> list[float]:
    """iris_offsets as plain floats: the six points are read in one `take` (a fancy index with a slice
    costs three times as much) and the rest is float arithmetic (the rig runs it every frame, where a
    dozen NumPy scalar reads cost more than the sums)."""
    columns = landmarks.shape[1]
    flat = _EYE_FLAT[columns] if columns in _EYE_FLAT else _eye_flat(columns)
    lox, loy, lix, liy, lcx, lcy, rox, roy, rix, riy, rcx, rcy = landmarks.take(flat).tolist()
    n = math.hypot(lox - rox, loy - roy) or 1e-9
    ex, ey = (lox - rox) / n, (loy - roy) / n
    ux, uy = ey, -ex                    # image y runs down: up is ex turned a quarter back
    out: list[float] = []
    for ox, oy, ix, iy, cx, cy in ((lox, loy, lix, liy, lcx, lcy), (rox, roy, rix, riy, rcx, rcy)):
        half = max(math.hypot(ox - ix, oy - iy) * 0.5, 1e-9)
        dx, dy = cx - (ox + ix) * 0.5, cy - (oy + iy) * 0.5
        out += ((dx * ex + dy * ey) / half, (dx * ux + dy * uy) / half)
    return out


def gaze_degrees(offsets: "np.ndarray | list[float]") -> tuple[float, ...]:
    """Iris offsets (iris_offsets, less the neutral's) -> eye rotation in degrees, by the eye model above."""
    return tuple([math.degrees(math.asin(max(-1.0, min(1.0, float(g) * EYE_HALF_OVER_RADIUS)))) for g in offsets])


def quaternion_of(r: np.ndarray) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of a 3x3 rotation matrix."""
    m = np.asarray(r, np.float64)
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = math.sqrt(tr + 1.0) * 2
        q = ((m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s)
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = (0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s)
    elif m[1, 1] > m[2, 2]:
        s = math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = ((m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s)
    else:
        s = math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = ((m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s)
    out = np.array(q)
    out /= np.linalg.norm(out)
    return out if out[3] >= 0 else -out


def matrix_of(q: np.ndarray) -> np.ndarray:
    x, y, z, w = (float(v) for v in q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def angles_of(r: "np.ndarray | list[list[float]]") -> tuple[float, float, float]:
    """Yaw, pitch, roll in degrees of R = Rz(roll) Ry(yaw) Rx(pitch), signs as the module says (pitch > 0:
    chin down, the rotation about x that takes up toward the camera). R as an array or as nested lists."""
    r0, r1, r2 = (r.tolist() if isinstance(r, np.ndarray) else r)
    yaw = math.degrees(math.asin(max(-1.0, min(1.0, -r2[0]))))
    pitch = math.degrees(math.atan2(r2[1], r2[2]))
    roll = math.degrees(math.atan2(r1[0], r0[0]))
    return yaw, pitch, roll


_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


class FaceRig:
    """One session's rig: face in, FaceFrame out. Not thread-safe: one caller (the session's frame thread);
    `calibrate` and `set_neutral` may come from another thread (they swap one attribute)."""

    def __init__(self, config: RigConfig = RigConfig(), blendshapes: BlendshapeRunner | None = None,
                 neutral: Neutral | None = None) -> None:
        """`blendshapes` runs the network (default: `open_blendshapes()`, made on the first face that
        carries no scores of its own)."""
        self.config = config
        self._net = blendshapes
        self.neutral = neutral
        self._collect_until: float | None = None
        self._calibrate_request: float | None = None
        self._samples: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._origin: tuple[float, ...] | None = None
        c = config
        groups = ((c.score_cutoff, len(ARKIT_NAMES)), (c.angle_cutoff, 3), (c.position_cutoff, 3), (c.gaze_cutoff, 4))
        # one filter over all 62 values (scores, yaw/pitch/roll, position, gaze), each group its own cutoffs
        self._filter = OneEuroValues([cut[0] for cut, n in groups for _ in range(n)],
                                     [cut[1] for cut, n in groups for _ in range(n)])
        self._order: list[int] | None = None      # the network's output order -> ARKIT_NAMES
        self._order_len = 0
        self._last: FaceFrame | None = None
        self._last_pts: np.ndarray | None = None
        self._last_key = b""                       # the last network run's landmarks, as bytes
        self._last_shapes: Mapping[str, float] | None = None
        self._neutral_for: Neutral | None = None
        self._neutral_cache: tuple[tuple[float, ...], tuple[float, ...], list[list[float]]] = ((), (), [])
        self.network_runs = 0
        self.calibrated_at: float | None = None     # stream time the last calibration ended

    # --- calibration -----------------------------------------------------------------------------------

    def calibrate(self, seconds: float | None = None) -> None:
        """Collect a neutral from the next `seconds` (default config.neutral_seconds) of frames with a face."""
        s = self.config.neutral_seconds if seconds is None else float(seconds)
        if not (0.1 <= s <= 30.0):
            raise ValueError(f"calibration seconds must be within 0.1..30, got {seconds}")
        self._calibrate_request = s

    @property
    def calibrating(self) -> bool:
        return self._calibrate_request is not None or self._collect_until is not None

    def set_neutral(self, neutral: Neutral | None) -> None:
        self.neutral = neutral

    def _collect(self, t: float, scores: np.ndarray, r: np.ndarray, pos: np.ndarray, iris: np.ndarray) -> None:
        if self._calibrate_request is not None:
            self._collect_until, self._calibrate_request, self._samples = t + self._calibrate_request, None, []
        if self._collect_until is None:
            return
        self._samples.append((scores, r, pos, iris))
        if t < self._collect_until or len(self._samples) < 3:
            return
        s = np.array([x[0] for x in self._samples])
        mean_r = np.mean([x[1] for x in self._samples], axis=0)
        u, _, vt = np.linalg.svd(mean_r)        # the nearest rotation to the mean of the rotations
        rot = u @ vt
        if np.linalg.det(rot) < 0:
            u[:, 2] *= -1
            rot = u @ vt
        self.neutral = Neutral(tuple(float(v) for v in np.clip(np.median(s, axis=0), 0.0, 0.95)),
                               tuple(float(v) for v in quaternion_of(rot)),  # type: ignore[arg-type]
                               tuple(float(v) for v in np.median([x[2] for x in self._samples], axis=0)),  # type: ignore[arg-type]
                               tuple(float(v) for v in np.median([x[3] for x in self._samples], axis=0)))  # type: ignore[arg-type]
        self._collect_until, self._samples = None, []
        self.calibrated_at = t
        self._filter.reset()

    # --- frames ----------------------------------------------------------------------------------------

    def __call__(self, face: Face | None, t: float, frame_size: tuple[int, int],
                 raw_landmarks: np.ndarray | None = None, extra: Mapping[str, Any] = _NO_EXTRA) -> FaceFrame:
        """The rig's frame for `face` (None: no face this frame) at stream time `t` (seconds) in a frame of
        `frame_size` (width, height). `raw_landmarks`: the face's unsmoothed landmarks, which the
        blendshapes network reads when given (a blink is over in a few frames; the scores are smoothed after).
        `extra`: fields the frame carries for its outputs (the face event's `source`).

        After the network a frame is some 70 numbers, worked in plain floats: paced at a camera's rate the
        caches are cold, and each NumPy call costs more than the arithmetic it does here."""
        t = float(t)               # a frame's time may come as a Fraction (pts x time base): slow in every filter step
        if face is None:
            return self._lost(t, frame_size)
        pts = face.landmarks if raw_landmarks is None else raw_landmarks
        scores = self._vector(self._shapes(face, pts))
        # the face transform's rotation (unit rows) and position (metres: the geometry pipeline's centimetres)
        m = face.transform if face.transform is not None else face_transform(pts, frame_size)
        m0, m1, m2 = m.tolist()[:3]
        inv = 1.0 / max(math.sqrt(m0[0] * m0[0] + m1[0] * m1[0] + m2[0] * m2[0]), 1e-9)
        r = [[m0[0] * inv, m0[1] * inv, m0[2] * inv], [m1[0] * inv, m1[1] * inv, m1[2] * inv],
             [m2[0] * inv, m2[1] * inv, m2[2] * inv]]
        pos = [m0[3] / 100.0, m1[3] / 100.0, m2[3] / 100.0]
        iris = _iris_floats(pts)
        if self.calibrating:
            self._collect(t, np.array(scores), np.array(r), np.array(pos), np.array(iris))
        n = self.neutral
        if n is not None:
            base, less, nt = self._neutral_terms(n)
            scores = [(v - b) / d for v, b, d in zip(scores, base, less)]
            r = [[a[0] * b[0] + a[1] * b[1] + a[2] * b[2] for b in nt] for a in r]    # r @ neutral.T
            pos = [p - q for p, q in zip(pos, n.position)]
            iris = [g - q for g, q in zip(iris, n.gaze)]
        else:
            if self._origin is None:
                self._origin = tuple(pos)
            pos = [p - q for p, q in zip(pos, self._origin)]
        angles = angles_of(r)
        gaze = gaze_degrees(iris)
        if self.config.smoothing:
            v = self._filter(_unit_floats(scores) + [*angles, *pos, *gaze], t)
            floats = tuple(_unit_floats(v[:52]))
            yaw, pitch, roll = v[52:55]
            quaternion = quaternion_of_angles(yaw, pitch, roll)
            position, gazes = tuple(v[55:58]), tuple(v[58:62])
        else:
            floats = tuple(_unit_floats(scores))
            yaw, pitch, roll = angles
            quaternion = tuple(float(q) for q in quaternion_of(np.array(r)))
            position, gazes = tuple(pos), gaze
        frame = FaceFrame(t=t, found=True, track_id=int(face.track_id), scores=np.array(floats), yaw=yaw,
                          pitch=pitch, roll=roll, quaternion=quaternion, position=position, gaze=gazes,  # type: ignore[arg-type]
                          calibrated=n is not None, frame_size=(int(frame_size[0]), int(frame_size[1])),
                          extra=extra)
        object.__setattr__(frame, "_floats", floats)     # the outputs read the floats the array was made from
        self._last = frame
        return frame

    def _shapes(self, face: Face, pts: np.ndarray) -> Mapping[str, float]:
        """The face's blendshape scores by name: its own when the landmarker gave them, else the network's,
        run only when the landmarks changed (a still face keeps its landmarks, engines.landmarks.still, and
        so its scores). Unchanged is the same bytes: one comparison in C, where np.array_equal costs several
        calls."""
        if face.blendshapes:
            return face.blendshapes
        if self._last_shapes is not None and pts is self._last_pts:
            return self._last_shapes
        last = self._last_pts
        key = pts.tobytes()
        if (self._last_shapes is not None and last is not None and key == self._last_key
                and pts.shape == last.shape and pts.dtype == last.dtype):
            return self._last_shapes
        if self._net is None:
            self._net = open_blendshapes()
        shapes = self._net(pts)
        self.network_runs += 1
        self._last_pts, self._last_key, self._last_shapes = pts, key, shapes
        return shapes

    def _neutral_terms(self, n: Neutral) -> tuple[tuple[float, ...], tuple[float, ...], list[list[float]]]:
        """The neutral's scores, one less each (the scale of what is left above them) and its rotation
        matrix as rows, worked out once per neutral."""
        if self._neutral_for is not n:
            self._neutral_for = n
            self._neutral_cache = (n.scores, tuple(1.0 - b for b in n.scores), matrix_of(np.asarray(n.rotation)).tolist())
        return self._neutral_cache

    def _vector(self, shapes: Mapping[str, float]) -> list[float]:
        """The 52 scores in ARKIT_NAMES order from the network's name -> score mapping (its order is fixed,
        so the reordering is worked out once; a name it lacks, tongueOut, reads the 0 put after its values)."""
        values = [float(v) for v in shapes.values()]
        if self._order is None or len(shapes) != self._order_len:
            keys = list(shapes)
            self._order = [keys.index(n) if n in shapes else -1 for n in ARKIT_NAMES]
            self._order_len = len(shapes)
        values.append(0.0)
        return [values[i] for i in self._order]

    def _lost(self, t: float, frame_size: tuple[int, int]) -> FaceFrame:
        last = self._last
        if last is None:
            return FaceFrame(t=t, found=False, track_id=-1, scores=np.zeros(len(ARKIT_NAMES)), yaw=0.0, pitch=0.0,
                             roll=0.0, quaternion=(0.0, 0.0, 0.0, 1.0), position=(0.0, 0.0, 0.0),
                             gaze=(0.0, 0.0, 0.0, 0.0), calibrated=self.neutral is not None,
                             frame_size=(int(frame_size[0]), int(frame_size[1])))
        return FaceFrame(t=t, found=False, track_id=last.track_id, scores=last.scores, yaw=last.yaw, pitch=last.pitch,
                         roll=last.roll, quaternion=last.quaternion, position=last.position, gaze=last.gaze,
                         calibrated=last.calibrated, frame_size=last.frame_size)


def _unit_floats(values: "list[float]") -> list[float]:
    """Each value clipped to 0..1 as np.clip does (a NaN and -0.0 pass as they are)."""
    return [0.0 if v < 0.0 else 1.0 if v > 1.0 else v for v in values]


def quaternion_of_angles(yaw: float, pitch: float, roll: float) -> tuple[float, float, float, float]:
    """The unit quaternion (x, y, z, w), w >= 0, of R = Rz(roll) Ry(yaw) Rx(pitch) from degrees: the
    product of the three axis rotations' half angles, in plain floats (a frame's rig runs it every frame)."""
    cp, sp = math.cos(math.radians(pitch) * 0.5), math.sin(math.radians(pitch) * 0.5)
    cy, sy = math.cos(math.radians(yaw) * 0.5), math.sin(math.radians(yaw) * 0.5)
    cr, sr = math.cos(math.radians(roll) * 0.5), math.sin(math.radians(roll) * 0.5)
    w = cp * cy * cr + sp * sy * sr
    x = sp * cy * cr - cp * sy * sr
    y = cp * sy * cr + sp * cy * sr
    z = cp * cy * sr - sp * sy * cr
    return (x, y, z, w) if w >= 0 else (-x, -y, -z, -w)


def _rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """R = Rz(roll) Ry(yaw) Rx(pitch) from degrees (angles_of's inverse)."""
    y, p, r = (math.radians(v) for v in (yaw, pitch, roll))
    cy, sy, cp, sp, cr, sr = math.cos(y), math.sin(y), math.cos(p), math.sin(p), math.cos(r), math.sin(r)
    rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1.0]])
    ry = np.array([[cy, 0, sy], [0, 1.0, 0], [-sy, 0, cy]])
    rx = np.array([[1.0, 0, 0], [0, cp, -sp], [0, sp, cp]])
    return rz @ ry @ rx


def pick_face(faces: list[Face], track_id: int | None = None) -> Face | None:
    """The face that drives the rig: the one with `track_id` when given and present, else the largest."""
    if not faces:
        return None
    if len(faces) == 1 and (track_id is None or faces[0].track_id == track_id):
        return faces[0]
    if track_id is not None:
        for f in faces:
            if f.track_id == track_id:
                return f
    return max(faces, key=lambda f: (f.bbox[2] - f.bbox[0]) * (f.bbox[3] - f.bbox[1]))
