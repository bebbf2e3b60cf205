"""The virtual-camera sink: frames from a processed stream reach the camera at its size; a machine without a
virtual camera device gets a clear error."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

pyvirtualcam = pytest.importorskip("pyvirtualcam")

from streamer.probe import clip_background, paint_index, read_index  # noqa: E402
from streamer.sinks.vcam import VirtualCameraSink  # noqa: E402
from streamer.tracks import Broadcast, FusedTrack  # noqa: E402


class RecordingBackend:
    """A pyvirtualcam backend that keeps what it is sent (pyvirtualcam.register_backend is made for this)."""

    sent: list[np.ndarray] = []

    def __init__(self, *, width, height, fps, fourcc, device, **kw):
        self.width, self.height = width, height

    def send(self, frame):
        RecordingBackend.sent.append(frame.reshape(self.height, self.width, 3).copy())

    def close(self):
        pass

    def device(self):
        return "recording"


pyvirtualcam.register_backend("livefuse-recording", RecordingBackend)


async def test_processed_frames_reach_the_camera_scaled(astronaut):
    from av import VideoFrame

    RecordingBackend.sent.clear()
    sink = VirtualCameraSink(640, 480, 30, backend="livefuse-recording")
    source = Broadcast()
    track = FusedTrack(source, private=True)
    task = asyncio.ensure_future(sink.follow(track))
    bg = clip_background(astronaut, 320, 240)
    for i in range(5):
        f = VideoFrame.from_ndarray(paint_index(bg, i), format="rgb24")
        f.pts = i * 3000
        source.publish(f, time.monotonic())
        await asyncio.sleep(0.05)
    source.close()
    await asyncio.wait_for(task, 5)
    assert sink.device == "recording"
    sink.close()
    got = RecordingBackend.sent
    assert len(got) == 5 and got[0].shape == (480, 640, 3)
    from PIL import Image

    back = [np.asarray(Image.fromarray(g).resize((320, 240), Image.BILINEAR)) for g in got]  # undo the scaling
    assert [read_index(b) for b in back] == [0, 1, 2, 3, 4]


def test_no_virtual_camera_device_is_a_clear_error():
    import glob

    if glob.glob("/dev/video*"):
        pytest.skip("this machine has a video device")
    with pytest.raises(RuntimeError, match="no virtual camera"):
        VirtualCameraSink(640, 480, 30, backend="v4l2loopback")
