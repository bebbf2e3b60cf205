"""An independent WHIP client: ffmpeg 9's WHIP muxer (the binary inside the imageio-ffmpeg wheel), publishing
H.264 from a real face photo to the product server. The session runs the product pipeline, a WHEP viewer
watches the fused result, the frames it gets carry the LiveFuse watermark, and ffmpeg's own teardown ends
the session."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from PIL import Image

from kernels.numpy import watermark as wm
from streamer.app.assembly import build_services
from streamer.config import ServerConfig
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration
from streamer.web.server import SERVER_KEY, create_app
from tests.streaming_helpers import until

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="the dev extra installs imageio-ffmpeg (ffmpeg 9)")


class FrameViewer:
    """Receive-only WHEP viewer that keeps the last frames it decoded."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(rtc_configuration(loopback=True))
        self.frames: list[np.ndarray] = []
        self.count = 0
        self._task: asyncio.Task | None = None
        self.pc.on("track", self._on_track)

    def _on_track(self, track) -> None:
        if track.kind == "video":
            self._task = asyncio.ensure_future(self._read(track))

    async def _read(self, track) -> None:
        try:
            while True:
                frame = await track.recv()
                self.count += 1
                self.frames = (self.frames + [frame.to_ndarray(format="rgb24")])[-8:]
        except MediaStreamError:
            pass

    async def watch(self, http: aiohttp.ClientSession, url: str) -> None:
        self.pc.addTransceiver("video", direction="recvonly")
        with gathering_on(LOOPBACK_ADDRESSES):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        async with http.post(url, data=self.pc.localDescription.sdp, headers={"Content-Type": "application/sdp"}) as r:
            assert r.status == 201, await r.text()
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.pc.close()


@pytest.mark.timeout(240)
async def test_ffmpeg_publishes_over_whip_and_a_whep_viewer_gets_the_fused_watermarked_stream(
        astronaut, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    face = tmp_path / "face.png"
    Image.fromarray(astronaut).resize((480, 480)).save(face)
    app = create_app(ServerConfig(), build_services())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    viewer = FrameViewer()
    ffmpeg = None
    try:
        async with aiohttp.ClientSession() as http:
            await until(lambda: state.warm, 180, "the shared models")
            ffmpeg = await asyncio.create_subprocess_exec(
                imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-loglevel", "warning",
                "-re", "-loop", "1", "-framerate", "15", "-i", str(face), "-t", "12",
                "-vf", "scale=320:240,format=yuv420p", "-c:v", "libx264", "-profile:v", "baseline",
                "-tune", "zerolatency", "-bf", "0", "-g", "30",
                "-f", "whip", "-whip_flags", "dtls_active", f"{url}/whip",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            await until(lambda: any(p.stats.frames_in >= 15 for p in state.peers.values()), 60,
                         "ffmpeg's frames at the server")
            (sid, peer), = state.peers.items()
            assert peer.kind == "whip"
            await viewer.watch(http, f"{url}/whep/{sid}")
            await until(lambda: viewer.count >= 20, 60, "frames at the WHEP viewer")
            assert viewer.frames[-1].shape == (240, 320, 3)
            detection, _ = wm.extract_many(viewer.frames, wm.make_key(wm.WatermarkConfig()))
            assert detection.watermarked, detection
            assert peer.stats.frames_out >= 20
            # ffmpeg ends its stream with a WHIP DELETE: the session goes with it
            await asyncio.wait_for(ffmpeg.wait(), 60)
            await until(lambda: sid not in state.peers, 20, "the session to end after ffmpeg's DELETE")
    finally:
        if ffmpeg is not None and ffmpeg.returncode is None:
            ffmpeg.kill()
            await ffmpeg.wait()
        await viewer.close()
        await server.close()
