"""The background through every live control: set_params over the data channel and the WebSocket, the
picture upload (POST /sessions/{id}/background) with a source photo's refusals, and the stream that
comes back through the real codec path showing it; bad requests answered with reasons, the stream going on."""

from __future__ import annotations

import io
import json

import aiohttp
import cv2
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from PIL import Image
from websockets.asyncio.client import connect

from bench import _person_scenes as ps
from bench._probe import ClipTrack, ProbeClient
from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from streamer.pipeline.stages.background import BackgroundStage
from streamer.services import NullServices
from streamer.web.control_socket import CONTROL_SUBPROTOCOL
from streamer.web.server import SERVER_KEY, create_app

W, H = 320, 180


def jpeg(img, quality=90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


@pytest.fixture(scope="module")
def scene():
    s = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    room = cv2.resize((~s.person).astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST).astype(bool)
    far = cv2.erode(room.astype(np.uint8), np.ones((15, 15), np.uint8)).astype(bool)
    far[:24] = False                                   # the probe paints each frame's index in the top rows
    return cv2.resize(s.image, (W, H), interpolation=cv2.INTER_AREA), far


async def _frames_after(probe: ProbeClient, start: int, n: int = 8) -> list[np.ndarray]:
    """Frames start .. start + n as they came back (counted whole: the stage keys out the painted index too)."""
    import asyncio

    for _ in range(600):
        if len(probe.received) >= start + n:
            break
        await asyncio.sleep(0.05)
    frames = [r.image for r in probe.received[start:start + n] if r.image is not None]
    assert len(frames) == n, f"{len(probe.received)} frames back, wanted {start + n}"
    return frames


def _room_colour(frames, far) -> np.ndarray:
    return np.median(np.stack([f[far] for f in frames]).reshape(-1, 3), axis=0)


async def test_every_live_control_sets_the_background(scene, astronaut, face_free_images):
    frame, far = scene
    app = create_app(ServerConfig(max_source_bytes=300_000, max_source_pixels=4_000_000), NullServices(make_pipeline=lambda s: Pipeline([BackgroundStage()])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    probe = ProbeClient(ClipTrack(frame, frames=900, motion_px=0), keep_images=900)
    try:
        async with aiohttp.ClientSession() as http:
            body = await probe.connect_http(url, http)
            assert body["stages"] == ["background"]
            sid = probe.session_id
            await probe.wait_frames(10, timeout=30)
            plain = _room_colour(await _frames_after(probe, 2), far)

            # the data channel: a green key
            probe.send({"type": "set_params", "background": {"mode": "color", "color": "#00ff00"}, "id": 1})
            ack = await probe.wait_message(lambda m: m.get("id") == 1)
            assert ack["type"] == "ack" and ack["result"] == ["background"]
            start = len(probe.received) + 5
            green = _room_colour(await _frames_after(probe, start), far)
            assert np.abs(green - [0, 255, 0]).max() <= 12, green

            # bad requests: an error each, the stream goes on
            probe.send({"type": "set_params", "background": "greenish", "id": 2})
            bad = await probe.wait_message(lambda m: m.get("id") == 2)
            assert bad["code"] == "invalid" and "not a CSS colour" in bad["message"]
            probe.send({"type": "set_params", "background": {"mode": "image", "image_id": "bg-0123456789ab"}, "id": 3})
            bad = await probe.wait_message(lambda m: m.get("id") == 3)
            assert bad["code"] == "unknown_background"
            probe.send({"type": "set_params", "background": {"mode": "blur", "strength": 3}, "id": 4})
            bad = await probe.wait_message(lambda m: m.get("id") == 4)
            assert bad["code"] == "invalid"

            # the WebSocket control: blur, then off
            async with connect(f"{url.replace('http', 'ws')}/sessions/{sid}/control", subprotocols=[CONTROL_SUBPROTOCOL]) as ws:
                json.loads(await ws.recv())                                   # welcome
                await ws.send(json.dumps({"type": "set_params", "background": "blur", "id": 5}))
                while (m := json.loads(await ws.recv())).get("id") != 5:
                    pass
                assert m["type"] == "ack"
                assert state.peers[sid].session.controls.background.mode == "blur"
                start = len(probe.received) + 5
                blurred = await _frames_after(probe, start)
                assert np.abs(_room_colour(blurred, far) - [0, 255, 0]).max() > 60     # no longer green

            # the picture: refusals first, each named as a source photo's would be
            bg = f"{url}/sessions/{sid}/background"
            async with http.post(bg, data=b"GIF89a not really", headers={"Content-Type": "image/png"}) as r:
                body = await r.json()
                assert r.status == 422 and body["code"] == "background_bad_image" and "not a recognised image" in body["error"]
            async with http.post(bg, data=b"hello", headers={"Content-Type": "text/plain"}) as r:
                assert r.status == 415
            noisy = (astronaut.astype("uint16") * 7 % 256).astype("uint8")
            async with http.post(bg, data=jpeg(noisy, quality=100), headers={"Content-Type": "image/jpeg"}) as r:
                assert r.status == 413
            async with http.post(bg, data=jpeg(astronaut[:20, :20]), headers={"Content-Type": "image/jpeg"}) as r:
                body = await r.json()
                assert r.status == 422 and body["code"] == "background_bad_image" and "too small" in body["error"]
            huge = io.BytesIO()                       # a small file of too many pixels (a decompression bomb's shape)
            Image.new("RGB", (2500, 2500)).save(huge, format="PNG")
            async with http.post(bg, data=huge.getvalue(), headers={"Content-Type": "image/png"}) as r:
                body = await r.json()
                assert r.status == 422 and body["code"].startswith("background_") and "pixels" in body["error"], body
            assert state.peers[sid].session.backgrounds == {}
            # a real picture, multipart as the page sends it: applied at once
            form = aiohttp.FormData()
            form.add_field("image", jpeg(astronaut), filename="room.jpg", content_type="image/jpeg")
            async with http.post(bg, data=form) as r:
                assert r.status == 200, await r.text()
                got = await r.json()
            assert got["applied"] is True and got["width"] == 512 and got["image_id"].startswith("bg-")
            assert state.peers[sid].session.controls.background.image_id == got["image_id"]
            await probe.wait_message(lambda m: m.get("type") == "background")
            start = len(probe.received) + 5
            pictured = _room_colour(await _frames_after(probe, start), far)
            assert np.abs(pictured - plain).max() > 20 and np.abs(pictured - [0, 255, 0]).max() > 60
            # a picture kept without switching to it, then named over the data channel
            form = aiohttp.FormData()
            form.add_field("image", jpeg(face_free_images["coffee"]), filename="cup.jpg", content_type="image/jpeg")
            async with http.post(f"{bg}?apply=false", data=form) as r:
                kept = await r.json()
            assert r.status == 200 and "applied" not in kept
            assert state.peers[sid].session.controls.background.image_id == got["image_id"]
            probe.send({"type": "set_params", "background": {"mode": "image", "image_id": kept["image_id"]}, "id": 7})
            ack = await probe.wait_message(lambda m: m.get("id") == 7)
            assert ack["type"] == "ack" and state.peers[sid].session.controls.background.image_id == kept["image_id"]
            # back to the room itself
            probe.send({"type": "set_params", "background": None, "id": 6})
            await probe.wait_message(lambda m: m.get("id") == 6)
            start = len(probe.received) + 5
            assert np.abs(_room_colour(await _frames_after(probe, start), far) - plain).max() <= 12
    finally:
        await probe.close()
        await server.close()
