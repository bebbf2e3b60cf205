"""What the planes tests share: a decoded frame made from RGB, and the check that every pixel outside the
faces leaves the planes path as decoded plus the watermark alone."""

from __future__ import annotations

import fractions

import numpy as np
from av import VideoFrame

from kernels.numpy import watermark as wm


def decoded(rgb: np.ndarray, pts: int = 0) -> VideoFrame:
    """A yuv420p frame of `rgb` as a decoder would hand it over (swscale's conversion), RTP's time base."""
    f = VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24").reformat(format="yuv420p")
    f.pts, f.time_base = pts, fractions.Fraction(1, 90000)
    return f


def assert_outside_faces_is_decoded_plus_mark(got: np.ndarray, frame: VideoFrame, key: wm.WatermarkKey,
                                              payload: int, bbox) -> tuple[np.ndarray, tuple[slice, slice]]:
    """`got` (the output I420 buffer) holds, outside the face box grown by 0.6 of its width, the decoded Y
    plus the Y-plane mark of `payload` and the decoded U and V, exactly. Returns that marked decoded Y
    (the expectation everywhere a stage left the pixels alone) and the grown face box."""
    h, w = frame.height, frame.width
    dec = frame.to_ndarray()
    y_expected = wm.embed(np.ascontiguousarray(dec[:h]), wm.luma_pattern_for(key, (h, w), payload))
    fx0, fy0, fx1, fy1 = (int(v) for v in bbox)
    pad = int(0.6 * (fx1 - fx0))
    face = (slice(max(0, fy0 - pad), fy1 + pad), slice(max(0, fx0 - pad), fx1 + pad))
    outside = np.ones((h, w), bool)
    outside[face] = False
    assert np.array_equal(got[:h][outside], y_expected[outside])
    out_c = outside.reshape(h // 2, 2, w // 2, 2).all(axis=(1, 3))
    uv_got, uv_dec = got[h:].reshape(2, h // 2, w // 2), dec[h:].reshape(2, h // 2, w // 2)
    assert np.array_equal(uv_got[:, out_c], uv_dec[:, out_c])
    return y_expected, face


def swaying_clip(photo: np.ndarray, size: tuple[int, int], frames: int, face_scale: float = 0.55):
    """Decoded frames of `photo` (a portrait, `face_scale` x the frame height / 480) at `size` (w, h),
    swaying and rolling a little frame by frame."""
    from tests.faceclips import place

    h = size[1]
    for n in range(frames):
        img, _ = place(photo, size=size, scale=face_scale * h / 480, angle=2.0 * n - 5, shift=(8.0 * n - 20, 3.0 * n))
        yield decoded(img, pts=n * 3000)


def fusing_session(name: str, sources: dict) -> "Session":
    """A session holding `sources`, wearing the astronaut, with three edits set."""
    from streamer.session.session import Session

    session = Session(name)
    for src in sources.values():
        session.add_source(src.id, src, activate=False)
    session.update(source_id=sources["astronaut"].id, edits={"smile": 0.8, "brightness": 0.3, "smooth": 0.5})
    return session
