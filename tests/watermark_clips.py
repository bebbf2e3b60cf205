"""Test clips for the watermark: real photos with known motion and sensor noise, and the attacks."""

from __future__ import annotations

import fractions

import cv2
import numpy as np

PAYLOAD = 0x0123_4567_89AB_CDEF


def moving_clip(photo: np.ndarray, n: int = 30, size: tuple[int, int] = (640, 480), seed: int = 0) -> list[np.ndarray]:
    """`n` frames (W, H = size) panning over `photo` by one pixel a frame, with grain like a webcam's."""
    w, h = size
    scale = 1.2 * max(w / photo.shape[1], h / photo.shape[0])
    big = cv2.resize(photo, (int(photo.shape[1] * scale) + 1, int(photo.shape[0] * scale) + 1), interpolation=cv2.INTER_LINEAR)
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n):
        x, y = min(20 + i, big.shape[1] - w), min(10 + i // 2, big.shape[0] - h)
        f = big[y : y + h, x : x + w].astype(np.float32) + rng.normal(0.0, 2.0, (h, w, 3))
        frames.append(np.clip(f, 0, 255).astype(np.uint8))
    return frames


def reencode(frames: list[np.ndarray], codec: str, bit_rate: int) -> list[np.ndarray]:
    """Encode with PyAV as aiortc does (libvpx realtime CBR / libx264 zerolatency baseline) at `bit_rate`,
    and decode back to RGB."""
    import av

    h, w = frames[0].shape[:2]
    enc = av.CodecContext.create(codec, "w")
    enc.width, enc.height, enc.pix_fmt = w, h, "yuv420p"
    enc.bit_rate = bit_rate
    enc.time_base = fractions.Fraction(1, 30)
    enc.framerate = 30
    if codec == "libvpx":  # aiortc 1.16's own VP8 settings (aiortc/codecs/vpx.py), CBR at `bit_rate`
        enc.gop_size, enc.qmin, enc.qmax = 3000, 2, 56
        enc.options = {"bufsize": str(bit_rate), "cpu-used": "-6", "deadline": "realtime", "lag-in-frames": "0",
                       "minrate": str(bit_rate), "maxrate": str(bit_rate), "noise-sensitivity": "4",
                       "overshoot-pct": "15", "partitions": "0", "static-thresh": "1", "undershoot-pct": "100",
                       "threads": "1"}
    else:  # aiortc's H264 settings
        enc.options = {"level": "31", "tune": "zerolatency"}
        enc.profile = "Baseline"
    dec = av.CodecContext.create("vp8" if codec == "libvpx" else "h264", "r")
    out: list[np.ndarray] = []
    for i, f in enumerate(frames + [None]):
        vf = None
        if f is not None:
            vf = av.VideoFrame.from_ndarray(f, format="rgb24")
            vf.pts = i
        for packet in enc.encode(vf):
            out.extend(d.to_ndarray(format="rgb24") for d in dec.decode(packet))
    return out


def downscale(image: np.ndarray, factor: float = 0.5) -> np.ndarray:
    h, w = image.shape[:2]
    return cv2.resize(image, (round(w * factor), round(h * factor)), interpolation=cv2.INTER_AREA)


def crop(image: np.ndarray, share: float = 0.10) -> np.ndarray:
    """Cut `share` of each dimension away, off-centre (more from the left and bottom)."""
    h, w = image.shape[:2]
    top, left = int(h * share * 0.3), int(w * share * 0.7)
    return image[top : top + round(h * (1 - share)), left : left + round(w * (1 - share))]
