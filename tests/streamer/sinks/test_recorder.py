"""Recording a live session to S3-compatible storage (moto on loopback): a real WebRTC client streams
video and audio with `"record": true`; the session info names the recording while it runs; when the
session ends the recording is finalised, and what is stored plays, with its audio; a server without a
recorder refuses the ask."""

from __future__ import annotations

import asyncio
import io
import time
import urllib.request

import aiohttp
import av
from aiohttp.test_utils import TestServer
from aiortc.mediastreams import AudioStreamTrack

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.web.server import create_app
from streamer.services import NullServices, Services
from streamer.sinks.recorder import SessionRecording
from streamer.storage.s3 import S3Store


async def _serve(services: Services):
    app = create_app(ServerConfig(), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    return server, str(server.make_url("")).rstrip("/")


async def _offer(client: ProbeClient, http, url: str, **extra) -> tuple[int, dict]:
    offer = await client.offer()
    async with http.post(f"{url}/offer", json={"sdp": offer.sdp, "type": offer.type, **extra}) as r:
        body = await r.json()
    if r.status == 200:
        client.session_id = body["session"]
        await client.accept(body["sdp"])
    return r.status, body


async def test_a_recorded_session_is_stored_with_its_audio(moto_s3, astronaut):
    store = S3Store("results", "livefuse")
    services = NullServices(record=lambda session, video, audio: SessionRecording(session.id, video, audio, store, poll_s=0.2))
    server, url = await _serve(services)
    client = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=400))
    client.pc.addTransceiver(AudioStreamTrack(), direction="sendonly")   # the sender's audio (silence)
    async with aiohttp.ClientSession() as http:
        try:
            status, body = await _offer(client, http, url, record=True)
            assert status == 200, body
            await client.wait_frames(60)
            async with http.get(f"{url}/sessions/{client.session_id}") as r:
                info = await r.json()
            assert info["recording"]["state"] == "recording" and info["recording"]["key"] == \
                f"recordings/{client.session_id}.mp4"
        finally:
            await client.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            async with http.get(f"{url}/sessions/{client.session_id}/recording") as r:
                rec = await r.json()
            if rec["state"] in ("done", "failed"):
                break
            await asyncio.sleep(0.2)
    await server.close()
    assert rec["state"] == "done" and rec["error"] is None, rec
    with urllib.request.urlopen(rec["url"], timeout=10) as r:   # presigned, plain HTTP
        data = r.read()
    with av.open(io.BytesIO(data)) as c:
        assert c.streams.audio, "the recording lost the audio"
        frames = sum(1 for _ in c.decode(video=0))
    assert frames >= 30, frames


async def test_asking_for_a_recording_without_a_recorder_is_refused(astronaut):
    server, url = await _serve(NullServices())
    client = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=10))
    async with aiohttp.ClientSession() as http:
        try:
            status, body = await _offer(client, http, url, record=True)
            assert (status, body.get("code")) == (400, "recording_unavailable")
            status, body = await _offer(ProbeClient(ClipTrack(clip_background(astronaut, 160, 120), frames=10)), http, url,
                                        record="yes")
            assert status == 400 and "record" in body["error"]
        finally:
            await client.close()
    await server.close()
