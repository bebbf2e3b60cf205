"""Colour conversion at the pipeline's two edges: a decoded frame to the RGB array the stages read, and
the stages' RGB back to the yuv420p frame the encoders take.

OpenCV does both for even-sized yuv420p (what aiortc's VP8 and H264 decoders give and its encoders take),
BT.601 limited range like FFmpeg's default: at 640x480 that is about 0.1 ms and 0.3 ms against PyAV's
(swscale's) 0.2-0.5 ms and 1.9-2.4 ms, and its round trip keeps luma to a thousandth of a level on average
where swscale's darkens it by one level each time (tests/test_frames.py). Anything else (odd sizes, other
pixel formats) goes through PyAV.
"""

from __future__ import annotations

import fractions
from typing import Any

import cv2
import numpy as np
from av import VideoFrame

from streamer.pipeline import as_rgb_uint8

VIDEO_TIME_BASE = fractions.Fraction(1, 90000)


def _even_i420(width: int, height: int) -> bool:
    return width % 2 == 0 and height % 2 == 0


def frame_to_rgb(frame: VideoFrame) -> np.ndarray:
    """H x W x 3 uint8 RGB of a decoded frame."""
    if frame.format.name == "yuv420p" and _even_i420(frame.width, frame.height):
        return cv2.cvtColor(frame.to_ndarray(), cv2.COLOR_YUV2RGB_I420)
    return frame.to_ndarray(format="rgb24")


def rgb_to_frame(image: Any, like: VideoFrame | None = None) -> VideoFrame:
    """A yuv420p frame of `image` (H x W x 3 uint8 RGB; a torch tensor comes back to host memory here,
    once, at the edge), with the pts and time base of `like`."""
    if not isinstance(image, np.ndarray):
        image = image.detach().to("cpu").numpy()
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    if _even_i420(w, h):
        out = VideoFrame.from_ndarray(cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420), format="yuv420p")
    else:
        out = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    if like is not None:
        out.pts = like.pts
        out.time_base = like.time_base or VIDEO_TIME_BASE
    return out
