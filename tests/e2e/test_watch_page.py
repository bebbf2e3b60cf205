"""The watch page (GET /watch/SESSION, for OBS's browser source) and a WHEP player on a second origin, in
Debian's Chromium: each plays a live aiortc session's output. On the product, the frames the page shows
are the watermarked output of that session; the token travels in the URL fragment only, so no request
line or log holds it. Cross-origin, the player page on another loopback port publishes nothing and
watches through CORS (preflight, exposed Location)."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench._probe import ClipTrack, ProbeClient, clip_background, read_index
from streamer.config import ServerConfig
from streamer.web.cors import cors_middleware
from streamer.safety.auth import AccessPolicy, TokenStore, auth_middleware, is_admin, slot_release, token_id_of
from streamer.web.server import SERVER_KEY, WEB_ROOT, create_app
from streamer.services import NullServices
from tests.e2e.browser import open_page
from tests.e2e.test_product_browser import png_to_rgb

pytestmark = pytest.mark.browser

W, H = 640, 480

FRAME_PNG_JS = """() => {
  const v = document.getElementById('output');
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  c.getContext('2d').drawImage(v, 0, 0);
  return c.toDataURL('image/png');
}"""
PLAYING_JS = """() => { const v = document.getElementById('output');
  const q = v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality().totalVideoFrames : 0;
  return {w: v.videoWidth, h: v.videoHeight, t: v.currentTime, frames: q, paused: v.paused,
          box: [v.clientWidth, v.clientHeight], controls: v.controls, state: window.livefuseWatch}; }"""


STEER_JS = """({url, token}) => new Promise((resolve, reject) => {
  const ws = new WebSocket(url, ["livefuse.control.v1", "livefuse.token." + token]);
  const seen = [];
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data); seen.push(m.type);
    if (m.type === "welcome") ws.send(JSON.stringify({type: "set_prompt", text: "a slight smile", id: 5}));
    if (m.id === 5) { ws.close(); resolve({protocol: ws.protocol, reply: m, seen}); }
  };
  ws.onerror = () => reject(new Error("websocket failed"));
  setTimeout(() => reject(new Error("no reply: " + seen.join(","))), 10000);
})"""


async def playing(page, min_time: float = 1.0, timeout_ms: int = 40_000) -> dict:
    await page.wait_for_function(
        f"(() => {{ const v = document.getElementById('output'); return v && v.videoWidth > 0 && v.currentTime > {min_time}; }})()",
        timeout=timeout_ms)
    return await page.evaluate(PLAYING_JS)


async def test_the_watch_page_plays_the_sessions_watermarked_output_full_window(chromium, grace_hopper, tmp_path, caplog):
    from kernels.numpy import watermark as wm
    from streamer.app.assembly import Product, ProductConfig
    from streamer.web.kit import SafetyConfig
    from streamer.safety.watermark_policy import parse_payload, session_tag

    tokens_file = tmp_path / "tokens.json"
    seed = TokenStore()
    token = seed.issue("obs", burst=50)
    seed.save(tokens_file)
    # tokens required (a server bound beyond loopback), reached as 127.0.0.1 (its page's own origin)
    product = Product(ProductConfig(safety=SafetyConfig(host="0.0.0.0", public_hosts=("127.0.0.1",),
                                                        tokens_file=str(tokens_file),
                                                        audit_path=str(tmp_path / "audit.jsonl"))))
    app = create_app(ServerConfig(), product)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    caplog.set_level(logging.INFO)
    url = str(server.make_url("")).rstrip("/")
    state = app[SERVER_KEY]
    probe = ProbeClient(ClipTrack(clip_background(grace_hopper, W, H), frames=100_000))
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            await probe.connect_http(url, http)
            sid = probe.session_id
            await probe.wait_frames(3, timeout=60)
        async with aiohttp.ClientSession() as anonymous:
            async with anonymous.get(f"{url}/watch/{sid}") as r:   # the page itself holds nothing secret
                assert r.status == 200 and "watch.js" in await r.text()
                assert r.headers["Referrer-Policy"] == "no-referrer"
        from playwright.async_api import async_playwright

        async with async_playwright() as p:
            # without the token the page cannot watch (401), and says so
            async with open_page(p, chromium, tmp_path / "p0", f"{url}/watch/{sid}") as (page, _):
                await page.wait_for_function("window.livefuseWatch && window.livefuseWatch.status === 401", timeout=20_000)
            async with open_page(p, chromium, tmp_path / "p1", f"{url}/watch/{sid}#token={token}",
                                 viewport=(960, 540)) as (page, logs):
                first = await playing(page)
                frames = [png_to_rgb(await page.evaluate(FRAME_PNG_JS))]
                await asyncio.sleep(1.0)
                later = await page.evaluate(PLAYING_JS)
                for _ in range(3):
                    frames.append(png_to_rgb(await page.evaluate(FRAME_PNG_JS)))
                    await asyncio.sleep(0.25)
                assert len(state.peers[sid].viewers) == 1
    finally:
        await probe.close()
        await server.close()
        product.close()

    # full-window, no controls, the stream's own size, time moving
    assert (first["w"], first["h"]) == (W, H) and first["box"] == [960, 540] and first["controls"] is False
    assert later["t"] > first["t"] + 0.5 and later["frames"] > first["frames"] + 10, (first, later)
    # the fused output of THIS session: its watermark, its session tag
    assert frames[0].shape == (H, W, 3) and frames[0].std() > 20         # a picture, not black
    assert np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean() > 0.5   # and it moves
    det, _ = wm.extract_many(frames, wm.make_key(wm.WatermarkConfig()))
    assert det.watermarked, det
    assert parse_payload(det.payload)["session_tag"] == f"{session_tag(sid):06x}"
    # the token never reached a request line or any log line of the server
    server_log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"/watch/{sid}" in server_log and token not in server_log


async def test_a_player_on_a_second_origin_plays_whep_cross_origin(chromium, astronaut, tmp_path):
    from playwright.async_api import async_playwright

    # the player site: another loopback port serving the same player files, knowing nothing of LiveFuse
    player_app = web.Application()
    player_app.router.add_get("/player.html", lambda _r: web.FileResponse(WEB_ROOT / "watch.html"))
    player_app.router.add_static("/static/", WEB_ROOT)
    player = TestServer(player_app, host="127.0.0.1", port=0)
    await player.start_server()
    origin = str(player.make_url("")).rstrip("/")

    store = TokenStore()
    token = store.issue("overlay", burst=50)
    policy = AccessPolicy(require_tokens=True, allowed_origins=(origin,))
    services = NullServices(authorize=token_id_of, is_admin=is_admin, claim=slot_release, middlewares=(
        cors_middleware(policy.allowed_origins, policy.protected_prefixes), auth_middleware(store, policy)))
    app = create_app(ServerConfig(), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    assert url != origin
    state = app[SERVER_KEY]
    clip = clip_background(astronaut, 320, 240)
    probe = ProbeClient(ClipTrack(clip, frames=100_000))
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            await probe.connect_http(url, http)
            sid = probe.session_id
            await probe.wait_frames(3)
        page_url = f"{origin}/player.html#server={url}&session={sid}&token={token}"
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "p", page_url) as (page, logs):
                first = await playing(page)
                a = png_to_rgb(await page.evaluate(FRAME_PNG_JS))
                await asyncio.sleep(1.0)
                later = await page.evaluate(PLAYING_JS)
                b = png_to_rgb(await page.evaluate(FRAME_PNG_JS))
                viewers = list(state.peers[sid].viewers)
                # an overlay on that origin steers the session over the control socket, the token as a
                # subprotocol (a browser cannot set Authorization on a WebSocket)
                steered = await page.evaluate(STEER_JS, {"url": url.replace("http://", "ws://") + f"/sessions/{sid}/control",
                                                         "token": token})
                prompt_after = state.peers[sid].session.controls.prompt
                # the page read the exposed Location: the resource it DELETEs when it goes
                location = later["state"]["location"]
                await page.close()                        # pagehide: DELETE, cross-origin, preflighted
                for _ in range(50):
                    if not state.peers[sid].viewers:
                        break
                    await asyncio.sleep(0.1)
                left_after_close = list(state.peers[sid].viewers)
    finally:
        await probe.close()
        await server.close()
        await player.close()

    assert (first["w"], first["h"]) == (320, 240)
    assert later["t"] > first["t"] + 0.5 and later["frames"] > first["frames"] + 10, (first, later, logs[-5:])
    assert len(viewers) == 1 and location == f"{url}/whep/{sid}/{viewers[0]}"
    # the stream's own frames: the clip's picture (pass-through server), its frame counter moving on
    ia, ib = read_index(a), read_index(b)
    assert ia is not None and ib is not None and ib > ia + 10, (ia, ib)
    assert np.abs(a.astype(int)[48:, :] - clip.astype(int)[48:, :]).mean() < 25
    assert left_after_close == []
    assert steered["protocol"] == "livefuse.control.v1" and steered["seen"][0] == "welcome"
    assert steered["reply"]["type"] == "ack" and prompt_after == "a slight smile"
