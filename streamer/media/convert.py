"""The pipeline's two edges: a decoded frame to the FrameState the stages read, and a processed state
back to the yuv420p frame the encoders take. Every caller crosses them through `frame_to_state` and
`state_to_frame`, so pixels, pts and time base are carried over in one place.

OpenCV does the colour conversion for even-sized yuv420p (what aiortc's VP8 and H264 decoders give and
its encoders take), BT.601 limited range like FFmpeg's default: at 640x480 that is about 0.1 ms and 0.3 ms
against PyAV's (swscale's) 0.2-0.5 ms and 1.9-2.4 ms, and its round trip keeps luma to a thousandth of a
level on average where swscale's darkens it by one level each time (tests/media/test_convert.py).
Anything else (odd sizes, other pixel formats) goes through PyAV.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
from av import VideoFrame

from streamer.pipeline import VIDEO_TIME_BASE, FrameState, as_rgb_uint8


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


def frame_to_state(frame: VideoFrame) -> FrameState:
    """The state a decoded frame starts the stages as: its RGB pixels, its pts, and its time base (RTP
    video's when the frame names none)."""
    return FrameState(image=frame_to_rgb(frame), pts=frame.pts or 0, time_base=frame.time_base or VIDEO_TIME_BASE)


def state_to_frame(state: FrameState, like: VideoFrame) -> VideoFrame:
    """The encoders' frame of a processed state, timed like `like` (the frame the state was made from)."""
    return rgb_to_frame(state.image, like)
