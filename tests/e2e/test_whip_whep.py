"""WHIP ingest (RFC 9725) with aiortc as the client, the fused video back on the same connection, and a
WHEP viewer watching that session's processed stream."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from streamer.rtc.audio import DelayedAudioTrack
from streamer.config import ServerConfig
from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration
from streamer.pipeline.pipeline import Pipeline
from bench._probe import CODE_ROWS_PX, ClipTrack, ProbeClient, clip_background, read_index
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices
import numpy as np

from tests.streaming_helpers import InvertBelowCode, Sleep, ToneTrack, dominant_hz


class Viewer:
    """A WHEP viewer: receive-only, keeps what it saw (and, with `audio`, what it heard)."""

    def __init__(self, audio: bool = False) -> None:
        self.pc = RTCPeerConnection(rtc_configuration(loopback=True))
        self.frames: list[tuple[int | None, object]] = []
        self.sound: list[np.ndarray] = []
        self.audio_rate = 0
        self.audio = audio
        self._tasks: list[asyncio.Task] = []

    async def offer(self) -> str:
        self.pc.addTransceiver("video", direction="recvonly")
        if self.audio:
            self.pc.addTransceiver("audio", direction="recvonly")
        self.pc.on("track", lambda t: self._tasks.append(asyncio.ensure_future(
            self._listen(t) if t.kind == "audio" else self._read(t))))
        with gathering_on(LOOPBACK_ADDRESSES):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def _read(self, track) -> None:
        try:
            while True:
                img = (await track.recv()).to_ndarray(format="rgb24")
                self.frames.append((read_index(img), img if len(self.frames) < 3 else None))
        except MediaStreamError:
            pass

    async def _listen(self, track) -> None:
        try:
            while True:
                frame = await track.recv()
                self.audio_rate = frame.sample_rate
                pcm = frame.to_ndarray().reshape(-1, len(frame.layout.channels))   # interleaved s16
                self.sound.append(pcm[:, 0])
        except MediaStreamError:
            pass


async def test_whip_ingest_returns_video_and_whep_viewer_watches():
    import skimage.data

    bg = clip_background(skimage.data.astronaut(), 320, 240)
    app = create_app(ServerConfig(max_viewers=1), NullServices(make_pipeline=lambda s: Pipeline([InvertBelowCode()])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    base = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    client = ProbeClient(ClipTrack(bg, frames=400))
    viewer = Viewer()
    try:
        async with aiohttp.ClientSession() as http:
            offer = await client.offer()
            async with http.post(f"{base}/whip", data=offer.sdp, headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201 and r.content_type == "application/sdp"
                location = r.headers["Location"]
                answer = await r.text()
            sid = location.rsplit("/", 1)[1]
            assert location == f"/whip/{sid}" and state.peers[sid].kind == "whip"
            await client.accept(answer)
            await client.wait_frames(15, timeout=30)
            idx = [r.index for r in client.received if r.index is not None]
            assert idx == sorted(idx)

            async with http.post(f"{base}/whep/{sid}", data=await viewer.offer(), headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201, await r.text()
                viewer_loc = r.headers["Location"]
                await viewer.pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))
            t0 = time.monotonic()
            while len([i for i, _ in viewer.frames if i is not None]) < 15 and time.monotonic() - t0 < 30:
                await asyncio.sleep(0.05)
            seen = [i for i, _ in viewer.frames if i is not None]
            assert len(seen) >= 15, (f"viewer got {len(viewer.frames)} frames in 30 s; viewer pc "
                                     f"{viewer.pc.connectionState}, source frames out {state.peers[sid].stats.frames_out}")
            assert seen == sorted(seen)
            # the viewer sees the processed stream (inverted below the code), not the raw camera
            img = next(im for _, im in viewer.frames if im is not None)
            assert abs(float(img[2 * CODE_ROWS_PX:].mean()) - (255 - float(bg[2 * CODE_ROWS_PX:].mean()))) < 12
            assert len(state.peers[sid].viewers) == 1
            second = Viewer()
            async with http.post(f"{base}/whep/{sid}", data=await second.offer(), headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 503 and r.headers["Retry-After"] and "viewers" in (await r.json())["error"]
            await second.pc.close()

            async with http.delete(f"{base}{viewer_loc}") as r:
                assert r.status == 200
            assert state.peers[sid].viewers == {}
            async with http.delete(f"{base}{location}") as r:
                assert r.status == 200
            assert sid not in state.peers
            async with http.delete(f"{base}{location}") as r:
                assert r.status == 404
            async with http.post(f"{base}/whip", data=offer.sdp, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 415
    finally:
        await client.close()
        await viewer.pc.close()
        await server.close()


@pytest.mark.parametrize("hold_audio", [True, False], ids=["audio held back", "audio as it arrives"])
async def test_sendonly_whip_like_obs_is_ingested_and_watchable_over_whep(astronaut, hold_audio):
    """OBS offers send-only video and audio: nothing comes back on its connection; the processed video and
    the sender's own sound are on WHEP (held back by the video's server delay unless `hold_audio` is off;
    a 100 ms stage makes that delay one to measure)."""
    app = create_app(ServerConfig(hold_audio=hold_audio),
                     NullServices(make_pipeline=lambda s: Pipeline([InvertBelowCode(), Sleep(100)])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    base = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    pc = RTCPeerConnection(rtc_configuration(loopback=True))
    viewer = Viewer(audio=True)
    try:
        pc.addTransceiver(ClipTrack(clip_background(astronaut, 320, 240), frames=400), direction="sendonly")
        pc.addTransceiver(ToneTrack(hz=440.0), direction="sendonly")
        with gathering_on(LOOPBACK_ADDRESSES):
            await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/whip", data=pc.localDescription.sdp, headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201
                sid = r.headers["Location"].rsplit("/", 1)[1]
                answer = await r.text()
            assert "a=recvonly" in answer and "a=sendrecv" not in answer.split("m=video", 1)[1]
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
            async with http.post(f"{base}/whep/{sid}", data=await viewer.offer(), headers={"Content-Type": "application/sdp"}) as r:
                assert r.status == 201
                await viewer.pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))
            t0 = time.monotonic()
            while len([i for i, _ in viewer.frames if i is not None]) < 10 and time.monotonic() - t0 < 30:
                await asyncio.sleep(0.05)
            seen = [i for i, _ in viewer.frames if i is not None]
            assert len(seen) >= 10 and seen == sorted(seen), f"viewer saw {len(viewer.frames)} frames"
            assert state.peers[sid].stats.frames_in >= 10
            while sum(map(len, viewer.sound)) < viewer.audio_rate // 2 and time.monotonic() - t0 < 30:
                await asyncio.sleep(0.05)
            heard = np.concatenate(viewer.sound[-25:]) if viewer.sound else np.zeros(0)
            assert len(heard) >= viewer.audio_rate // 4 > 0, f"viewer heard {len(heard)} samples"
            assert np.abs(heard).max() > 2000                                   # sound, not silence
            assert abs(dominant_hz(heard, viewer.audio_rate) - 440.0) < 10        # the sender's own tone
            # held back by what the video spends in the server, less what the audio already waited in
            # aiortc's receiver beyond the video's (4 audio frames against one video frame interval)
            (watching,) = state.peers[sid].viewers.values()
            (audio,) = [t.sender.track for t in watching.pc.getTransceivers() if t.kind == "audio"]
            stats = state.peers[sid].stats
            video_delay_ms = stats.delay_ms()
            assert video_delay_ms is not None and video_delay_ms > 90
            if not hold_audio:
                assert not isinstance(audio, DelayedAudioTrack)
                return
            assert isinstance(audio, DelayedAudioTrack)

            def expected_ms() -> float:
                return stats.delay_ms() + stats.frame_interval_ms() - 4 * 20

            settle = time.monotonic() + 10                  # the hold follows the video's over 2 s
            held, expected = audio.delay_s, expected_ms()
            while abs(held * 1000 - expected) > 25 and time.monotonic() < settle:
                await asyncio.sleep(0.2)
                held, expected = audio.delay_s, expected_ms()
            assert 0.02 < held < 0.4 and abs(held * 1000 - expected) <= 25, (held, expected)
    finally:
        await pc.close()
        await viewer.pc.close()
        await server.close()
