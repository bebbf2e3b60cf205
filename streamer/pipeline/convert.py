"""The pipeline's two edges: a decoded frame to the FrameState the stages read, and a processed state
back to the yuv420p frame the encoders take. Every caller crosses them through `frame_to_state` and
`state_to_frame`, so pixels, pts and time base are carried over in one place.

OpenCV does the colour conversion for even-sized yuv420p (what aiortc's VP8 and H264 decoders give and
its encoders take), BT.601 limited range like FFmpeg's default: several times faster than PyAV's (swscale's)
conversion (docs/performance.md), and its round trip keeps luma to a thousandth of a level on average where
swscale's darkens it by one level each time (tests/streamer/pipeline/test_convert.py).
Anything else (odd sizes, other pixel formats) goes through PyAV.

The stream's frames stay in their planes: `frame_to_state` keeps an even yuv420p frame as `Planes`
(one copy out of the decoder's frame, no conversion) and `state_to_frame` makes the encoders' frame from
them (one copy; none when no stage changed a pixel), so only the regions the stages ask for are
converted (streamer/media/planes.py). `device` puts the planes on a torch device instead of host memory
(streamer/media/device_planes.py: uploaded once, downloaded once); `planes=False` gives the whole-frame
RGB state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from av import VideoFrame

from kernels.numpy.color import i420_to_rgb, rgb_to_i420
from streamer.media.planes import Planes
from streamer.pipeline.pipeline import VIDEO_TIME_BASE, FrameState, as_rgb_uint8

if TYPE_CHECKING:  # pragma: no cover
    from streamer.media.device_planes import DeviceUpload


def _even_i420(width: int, height: int) -> bool:
    return width % 2 == 0 and height % 2 == 0


def frame_to_rgb(frame: VideoFrame) -> np.ndarray:
    """H x W x 3 uint8 RGB of a decoded frame."""
    if keeps_planes(frame):
        p = to_planes(frame)
        return i420_to_rgb(p.y, p.u, p.v)
    return frame.to_ndarray(format="rgb24")


def rgb_to_frame(image: Any, like: VideoFrame | None = None) -> VideoFrame:
    """A yuv420p frame of `image` (H x W x 3 uint8 RGB; a torch tensor comes back to host memory here,
    once, at the edge), with the pts and time base of `like`."""
    if not isinstance(image, np.ndarray):
        image = image.detach().to("cpu").numpy()
    rgb = as_rgb_uint8(image)
    h, w = rgb.shape[:2]
    if _even_i420(w, h):
        y, u, v = rgb_to_i420(rgb)
        out = VideoFrame.from_ndarray(np.concatenate([y.reshape(-1), u.reshape(-1), v.reshape(-1)]).reshape(h * 3 // 2, w),
                                      format="yuv420p")
    else:
        out = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    return timed_like(out, like) if like is not None else out


def to_planes(frame: VideoFrame) -> Planes:
    """The planes of an even-sized yuv420p frame (a copy: the decoder's frame is left as it is)."""
    return Planes(frame.to_ndarray(), frame.width, frame.height)


def keeps_planes(frame: VideoFrame) -> bool:
    """Whether a frame can travel as planes (even-sized yuv420p, what aiortc's decoders give)."""
    return frame.format.name == "yuv420p" and _even_i420(frame.width, frame.height)


def frame_to_state(frame: VideoFrame, *, planes: bool = True, device: "str | DeviceUpload | None" = None) -> FrameState:
    """The state a decoded frame starts the stages as: its planes (an even yuv420p frame with `planes`)
    or its RGB pixels, its pts, and its time base (RTP video's when the frame names none). `device`: None
    keeps the planes in host memory (NumPy); a torch device name, or the `DeviceUpload` a stream reuses
    (its page-locked buffer on CUDA), puts them on that device. Frames that cannot travel as planes
    (odd sizes, other formats) stay whole-frame RGB in host memory either way."""
    timing = dict(pts=frame.pts or 0, time_base=frame.time_base or VIDEO_TIME_BASE)
    if planes and keeps_planes(frame):
        if device is None:
            return FrameState(image=None, planes=to_planes(frame), **timing)
        if isinstance(device, str):
            from streamer.media.device_planes import DeviceUpload

            device = DeviceUpload(device)
        return FrameState(image=None, planes=device.planes(frame), **timing)
    return FrameState(image=frame_to_rgb(frame), **timing)


def state_to_frame(state: FrameState, like: VideoFrame) -> VideoFrame:
    """The encoders' frame of a processed state, timed like `like` (the frame the state was made from):
    made from its planes (a device's buffer downloaded once; `like` itself, with nothing downloaded, when
    no pixel changed), or from its RGB pixels."""
    p = state.planes
    if p is None:
        return rgb_to_frame(state.image, like)
    p.flush()
    if not p.changed:
        return like
    return timed_like(VideoFrame.from_ndarray(p.i420(), format="yuv420p"), like)


def timed_like(out: VideoFrame, like: VideoFrame) -> VideoFrame:
    """`out` with the pts and time base of `like` (RTP video's time base when `like` names none): a
    processed frame leaves at the time its decoded frame came in."""
    out.pts = like.pts
    out.time_base = like.time_base or VIDEO_TIME_BASE
    return out
