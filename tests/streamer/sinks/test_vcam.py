"""The virtual-camera sink: frames from a processed stream reach the camera at its size; a machine without a
virtual camera device gets a clear error."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

pyvirtualcam = pytest.importorskip("pyvirtualcam")

from bench._probe import clip_background, paint_index, read_index  # noqa: E402
from streamer.sinks.vcam import VirtualCameraSink  # noqa: E402
from streamer.media.broadcast import Broadcast  # noqa: E402
from streamer.media.tracks import FusedTrack  # noqa: E402


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


async def test_serve_vcam_feeds_the_oldest_live_session(astronaut):
    """`livefuse serve --vcam`: a real client streams to the server; its processed frames reach the camera,
    and a second session does not take the camera while the first is live."""
    import aiohttp
    from aiohttp.test_utils import TestServer

    from streamer.config import ServerConfig
    from bench._probe import ClipTrack, ProbeClient
    from streamer.web.server import SERVER_KEY, create_app

    RecordingBackend.sent.clear()
    app = create_app(ServerConfig(vcam="auto", vcam_width=320, vcam_height=240, vcam_backend="livefuse-recording"))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    first = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=300))
    second = ProbeClient(ClipTrack(clip_background(astronaut[:, ::-1].copy(), 320, 240), frames=300))
    try:
        async with aiohttp.ClientSession() as http:
            await first.connect_http(url, http)
            await first.wait_frames(10)
            await second.connect_http(url, http)
            await second.wait_frames(5)
            camera = app[SERVER_KEY].camera
            assert camera.owner == first.session_id and camera.failed is None
            deadline = time.monotonic() + 10
            while len(RecordingBackend.sent) < 10 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            got = list(RecordingBackend.sent)
            assert len(got) >= 10 and got[-1].shape == (240, 320, 3)
            indices = [read_index(g) for g in got]
            assert indices == sorted(indices)  # in order, newest-frame-wins may skip some
            await first.close()
            deadline = time.monotonic() + 15
            while camera.owner == first.session_id and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert camera.owner is None  # released with its session
    finally:
        await first.close()
        await second.close()
        await server.close()
