"""Clips with known motion built from real photos: each frame comes with the 2x3 affine that made it,
so the true position of every landmark is known."""

from __future__ import annotations

import cv2
import numpy as np


def place(photo: np.ndarray, size=(640, 480), scale=1.0, angle=0.0, shift=(0.0, 0.0), mirror=False):
    """The photo centred on a grey canvas of `size` (w, h), scaled, rotated by `angle` degrees
    (counter-clockwise on screen) about the canvas centre, shifted, optionally mirrored. Returns the
    frame and the 2x3 affine mapping photo pixels to frame pixels."""
    w, h = size
    ph, pw = photo.shape[:2]
    m = cv2.getRotationMatrix2D((pw / 2, ph / 2), angle, scale)
    m[:, 2] += (w / 2 - pw / 2 + shift[0], h / 2 - ph / 2 + shift[1])
    if mirror:
        flip = np.array([[-1.0, 0.0, w], [0.0, 1.0, 0.0]])
        m = flip @ np.vstack([m, [0, 0, 1]])
    frame = cv2.warpAffine(photo, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=(118, 118, 118))
    return frame, m


def apply(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    return pts[:, :2] @ m[:, :2].T + m[:, 2]


# where the face lies in each fixture photo (x0, y0, x1, y1), frames of several pasted faces and sensor noise: shared
# with the benchmarks (bench/_scenes.py)
from bench._scenes import (ASTRONAUT_FACE, ASTRONAUT_SKIN, GRACE_HOPPER_FACE, add_noise, group_frame,  # noqa: E402,F401
                           paste_face, skin_hand)


def face_tile(photo: np.ndarray, face_box, size: int = 320, margin: float = 2.2) -> np.ndarray:
    """A size x size crop centred on the face, the face about size / margin across."""
    x0, y0, x1, y1 = face_box
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    k = size / (max(x1 - x0, y1 - y0) * margin)
    m = np.array([[k, 0, size / 2 - cx * k], [0, k, size / 2 - cy * k]])
    return cv2.warpAffine(photo, m, (size, size), flags=cv2.INTER_LINEAR, borderValue=(118, 118, 118))


def write_video(path, frames, fps: int = 30, codec: str = "libx264") -> None:
    """Encode RGB frames to a video file with PyAV (for tests of video inputs)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = frames[0].shape[1], frames[0].shape[0]
        stream.pix_fmt = "yuv420p"
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def landmarks_of(image: np.ndarray) -> np.ndarray:
    """The 478 landmarks of the one face MediaPipe's graph finds in a still image."""
    from engines.faces import MediaPipeLandmarker

    lmk = MediaPipeLandmarker()
    try:
        faces = lmk.detect(image, 0)
    finally:
        lmk.close()
    assert faces, "the landmarker found no face"
    return faces[0].landmarks
