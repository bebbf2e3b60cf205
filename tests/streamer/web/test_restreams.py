"""Restreams from a live server: `serve --restream` pushes every session to a real RTMP server (FFmpeg in
listen mode), a session adds and stops its own over the data channel, the clients hear `restream` events,
the metrics count them, and the stream key appears in no event, metric, control or log."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background
from streamer.config import ServerConfig
from streamer.services import NullServices
from streamer.web.server import SERVER_KEY, create_app
from tests.streamer.sinks.test_restream import KEY, RtmpServer, decode_video, free_port


async def _serve(config: ServerConfig):
    app = create_app(config, NullServices())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    return server, str(server.make_url("")).rstrip("/"), app[SERVER_KEY]


async def test_every_session_restreamed_then_one_stopped_and_another_added(astronaut, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    port_a, port_b = free_port(), free_port()
    rtmp_a = await asyncio.to_thread(RtmpServer, port_a, tmp_path / "a.ts")
    url_a, url_b = f"rtmp://127.0.0.1:{port_a}/live/{KEY}", f"rtmp://127.0.0.1:{port_b}/live/{KEY}"
    server, url, state = await _serve(ServerConfig(restream=(url_a,), restream_keyframe_s=1.0))
    probe = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=6000))
    rtmp_b = None
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(url, http)
            await probe.wait_frames(3, timeout=30)
            live = await probe.wait_message(lambda m: m.get("type") == "restream" and m.get("state") == "live", 15)
            assert live["url"] == f"rtmp://127.0.0.1:{port_a}/live/***"
            await asyncio.sleep(2.0)
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
            assert 'livefuse_restreams{state="live"} 1.0' in metrics and KEY not in metrics
            async with http.get(f"{url}/v1/sessions/{probe.session_id}/outputs") as r:
                body = await r.json()
            assert body["restream"][0]["state"] == "live" and body["restream"][0]["frames"] > 20
            assert KEY not in str(body)

            # the session moves its restream: A stops, B starts (over the data channel)
            rtmp_b = await asyncio.to_thread(RtmpServer, port_b, tmp_path / "b.ts")
            probe.send({"type": "set_params", "id": 5, "outputs": {"restream": [url_b]}})
            ack = await probe.wait_message(lambda m: m.get("id") == 5)
            assert ack["type"] == "ack"
            await asyncio.to_thread(rtmp_a.wait, 10)     # A's publisher left: the listener ends
            await probe.wait_message(lambda m: m.get("type") == "restream" and m.get("state") == "live"
                                     and str(port_b) in m.get("url", ""), 15)
            await asyncio.sleep(1.5)
            probe.send({"type": "set_params", "id": 6, "outputs": {"restream": []}})
            await probe.wait_message(lambda m: m.get("type") == "restream" and m.get("state") == "off", 15)
            await asyncio.to_thread(rtmp_b.wait, 10)
            controls = state.peers[probe.session_id].session.controls
            assert controls.outputs is None                # destinations are not kept in the controls
    finally:
        await probe.close()
        await server.close()
    assert len(decode_video(tmp_path / "a.ts", 320, 240)) >= 40
    assert len(decode_video(tmp_path / "b.ts", 320, 240)) >= 20
    assert all(KEY not in str(m) for m in probe.messages)
    assert KEY not in caplog.text


async def test_a_session_restreamed_over_whip_to_another_server(astronaut):
    """WHIP out: one server's session pushes its output to another server's WHIP endpoint (LiveFuse's own
    POST /whip, a real aiortc answerer), which receives its frames; the token in the address never shows;
    stopping DELETEs the WHIP resource and the receiving session ends."""
    token = "whip-token-0123456789"
    sink, sink_url, sink_state = await _serve(ServerConfig())
    source, url, _ = await _serve(ServerConfig())
    probe = ProbeClient(ClipTrack(clip_background(astronaut, 320, 240), frames=6000))
    whip = sink_url.replace("http://", f"http://{token}@", 1) + "/whip"
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(url, http)
            await probe.wait_frames(3, timeout=30)
            probe.send({"type": "set_params", "id": 1, "outputs": {"restream": [whip]}})
            assert (await probe.wait_message(lambda m: m.get("id") == 1))["type"] == "ack"
            live = await probe.wait_message(lambda m: m.get("type") == "restream" and m.get("state") == "live", 20)
            assert live["url"] == sink_url + "/whip" and live["kind"] == "whip"
            deadline = asyncio.get_running_loop().time() + 20
            received = 0
            while asyncio.get_running_loop().time() < deadline:
                pushed = [p for p in sink_state.peers.values() if p.kind == "whip"]
                received = pushed[0].stats.snapshot()["frames_in"] if pushed else 0
                if received >= 30:
                    break
                await asyncio.sleep(0.2)
            assert received >= 30, received
            probe.send({"type": "set_params", "id": 2, "outputs": {"restream": []}})
            await probe.wait_message(lambda m: m.get("type") == "restream" and m.get("state") == "off", 15)
            for _ in range(50):
                if not any(p.kind == "whip" for p in sink_state.peers.values()):
                    break
                await asyncio.sleep(0.2)
            assert not any(p.kind == "whip" for p in sink_state.peers.values())   # the WHIP DELETE ended it
    finally:
        await probe.close()
        await source.close()
        await sink.close()
    assert all(token not in str(m) for m in probe.messages)
