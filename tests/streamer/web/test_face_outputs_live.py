"""Avatar outputs on a live session of the real product, steered over the WebSocket control API: `face`
events at the asked rate with ARKit's 52 names, VMC to a UDP receiver, VTube Studio to a fake VTS
(tests/vts_fake.py), a neutral calibration that ends in a `face_calibrated` event, an output pointed away
from the client's own machine refused, an output turned off again; the stream goes on throughout."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from websockets.asyncio.client import connect

from bench._probe import ClipTrack, ProbeClient, clip_background
from engines.face_rig import ARKIT_NAMES
from streamer.config import ServerConfig
from streamer.web.control_socket import CONTROL_SUBPROTOCOL
from streamer.web.server import SERVER_KEY, create_app
from tests.streamer.web.test_control_socket import ws_url
from tests.vts_fake import FakeVts, VtsApp

SEEN: list[dict] = []


async def next_message(ws, pred, timeout: float = 15.0, *, earlier: bool = False) -> dict:
    """The first message `pred` accepts (`earlier`: one already seen counts too); every message is kept."""
    if earlier:
        for m in SEEN:
            if pred(m):
                return m

    async def find() -> dict:
        while True:
            msg = json.loads(await ws.recv())
            SEEN.append(msg)
            if pred(msg):
                return msg
    return await asyncio.wait_for(find(), timeout)


async def test_outputs_events_calibration_over_the_control_socket(product, grace_hopper, tmp_path, monkeypatch):
    monkeypatch.setenv("LIVEFUSE_VTS_TOKENS", str(tmp_path / "vts_tokens.json"))
    app = create_app(ServerConfig(stats_interval_s=0.5), product)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    vts_app = VtsApp()
    vts = await FakeVts(vts_app).start()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    probe = ProbeClient(ClipTrack(clip_background(grace_hopper, 320, 240), frames=6000, motion_px=1))
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(url, http)
            sid = probe.session_id
            await probe.wait_frames(3, timeout=60)
            async with connect(ws_url(url, sid), subprotocols=[CONTROL_SUBPROTOCOL], max_size=1 << 22) as ws:
                await ws.send(json.dumps({"type": "set_params", "id": 1, "outputs": {
                    "face_events": 10, "vmc": f"127.0.0.1:{rx.getsockname()[1]}", "vtube_studio": vts.url}}))
                ack = await next_message(ws, lambda m: m.get("id") == 1)
                assert ack["type"] == "ack" and ack["result"] == ["outputs"], ack

                # face events at about the asked rate, every ARKit name, values in [0, 1]
                first = await next_message(ws, lambda m: m.get("type") == "face", timeout=30)
                t0, count = time.monotonic(), 0
                while time.monotonic() - t0 < 2.0:
                    ev = await next_message(ws, lambda m: m.get("type") == "face")
                    count += 1
                rate = count / (time.monotonic() - t0)
                assert 6.0 <= rate <= 12.0, rate
                assert set(ev["blendshapes"]) == set(ARKIT_NAMES) and ev["found"] is True
                assert all(0.0 <= v <= 1.0 for v in ev["blendshapes"].values())
                assert set(ev["head"]) == {"yaw", "pitch", "roll", "quaternion", "position"}
                assert set(first["gaze"]) == {"left", "right"}

                # VMC datagrams arrived; VTube Studio authenticated and receives parameters
                got = 0
                while True:
                    try:
                        rx.recv(65536)
                        got += 1
                    except BlockingIOError:
                        break
                assert got > 10
                live = await next_message(ws, lambda m: m.get("type") == "output" and m.get("output") == "vtube_studio"
                                          and m.get("state") == "live", timeout=15, earlier=True)
                assert live["url"] == vts.url and vts_app.injects

                # calibration: hold still for two seconds; the neutral comes back to keep
                await ws.send(json.dumps({"type": "set_params", "id": 2, "calibrate": True}))
                await next_message(ws, lambda m: m.get("type") == "face_calibrating")
                done = await next_message(ws, lambda m: m.get("type") == "face_calibrated", timeout=20)
                assert set(done["neutral"]) == {"blendshapes", "rotation", "position", "gaze"}
                calibrated = await next_message(ws, lambda m: m.get("type") == "face" and m.get("calibrated"))
                assert abs(calibrated["head"]["yaw"]) < 5.0
                # ... and restored in a later request, as a page would
                await ws.send(json.dumps({"type": "set_params", "id": 3, "face_neutral": done["neutral"]}))
                assert (await next_message(ws, lambda m: m.get("id") == 3))["type"] == "ack"

                # a VMC target that is neither loopback nor the client's own address is refused
                await ws.send(json.dumps({"type": "set_params", "id": 4, "outputs": {"vmc": "192.0.2.7:39539"}}))
                refused = await next_message(ws, lambda m: m.get("id") == 4)
                assert refused["type"] == "error" and refused["code"] == "output_refused"
                await ws.send(json.dumps({"type": "set_params", "id": 5, "outputs": {"face_events": 100}}))
                assert (await next_message(ws, lambda m: m.get("id") == 5))["code"] == "invalid"

                # the same over REST: POST /v1/sessions/{id}/outputs takes the protocol's names, GET says the state
                rest = f"{url}/v1/sessions/{sid}/outputs"
                async with http.post(rest, json={"outputs": {"face_events": 5}}) as r:
                    body = await r.json()
                    assert r.status == 200 and body["outputs"]["face_events"] == 5, body
                async with http.get(rest) as r:
                    body = await r.json()
                    assert body["state"]["vtube_studio"]["state"] == "live" and body["state"]["vmc"]["frames"] > 0
                    assert body["calibration"] == 1
                for payload, status, code in (({"outputs": {"vmc": "192.0.2.7:39539"}}, 403, "output_refused"),
                                              ({"outputs": {"face_events": -1}}, 400, "invalid"),
                                              ({"prompt": "x"}, 400, "invalid")):
                    async with http.post(rest, json=payload) as r:
                        assert r.status == status and (await r.json())["code"] == code, (payload, await r.text())
                async with http.post(rest, data=b"{}", headers={"Content-Type": "text/plain"}) as r:
                    assert r.status == 415
                async with http.get(f"{url}/v1/sessions/nope/outputs") as r:
                    assert r.status == 404

                # off again: vmc null, no events; the other outputs keep their settings
                await ws.send(json.dumps({"type": "set_params", "id": 6, "outputs": {"vmc": None, "face_events": 0}}))
                await next_message(ws, lambda m: m.get("id") == 6)
                off = await next_message(ws, lambda m: m.get("type") == "output" and m.get("output") == "vmc")
                assert off["state"] == "off"
                controls = state.peers[sid].session.controls
                assert controls.outputs == {"vmc": None, "vtube_studio": vts.url, "face_events": 0}
                await asyncio.sleep(0.5)
                with pytest.raises(asyncio.TimeoutError):
                    await next_message(ws, lambda m: m.get("type") == "face", timeout=1.0)
                stats = await next_message(ws, lambda m: m.get("type") == "stats")
                assert stats["frames_out"] > 0 and "face_out" in stats["stages_ms"]
    finally:
        await probe.close()
        await server.close()
        await vts.stop()
        rx.close()
