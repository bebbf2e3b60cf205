"""The page's Calibrate in headless Chromium on the real product, the fake webcam a real photo: the Avatar
box shows where the face rig runs, Calibrate collects a neutral face, the page keeps it and sends it to the
next session; meanwhile VMC goes to a UDP receiver for the whole session (serve --vmc)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp.test_utils import TestServer

from bench._probe import clip_background
from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m

pytestmark = pytest.mark.browser


async def test_calibrate_from_the_page_and_the_neutral_comes_back_next_session(chromium, grace_hopper, tmp_path):
    from playwright.async_api import async_playwright

    from streamer.app.assembly import Product, ProductConfig
    from streamer.sinks.face_outputs import OutputSettings
    from streamer.web.kit import SafetyConfig

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    y4m = tmp_path / "hopper.y4m"
    write_y4m(y4m, clip_background(grace_hopper, 640, 480))
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(tmp_path / "audit.jsonl")),
                                    outputs=OutputSettings(vmc=f"127.0.0.1:{rx.getsockname()[1]}")))
    app = create_app(ServerConfig(stats_interval_s=0.5), product)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    state = app[SERVER_KEY]
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", str(server.make_url("/")), camera=y4m) as (page, logs):
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats "
                                             "&& window.livefuse.stats.frames_out > 5", timeout=60_000)
                assert not await page.evaluate("document.getElementById('avatar-box').hidden")
                await page.click("#calibrate")
                await page.wait_for_function(
                    "document.getElementById('avatar-status').textContent.startsWith('Calibrated')", timeout=30_000)
                kept = await page.evaluate("JSON.parse(localStorage.getItem('livefuse.faceNeutral'))")
                assert set(kept) == {"blendshapes", "rotation", "position", "gaze"}, logs[-5:]
                # the next session of this browser starts with that neutral
                await page.click("#stop")
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats", timeout=60_000)
                session = await page.evaluate("window.livefuse.session")
                for _ in range(100):
                    if session in state.peers and state.peers[session].session.controls.face_neutral is not None:
                        break
                    await asyncio.sleep(0.1)
                assert dict(state.peers[session].session.controls.face_neutral)["rotation"] == kept["rotation"]
        datagrams = 0
        while True:
            try:
                rx.recv(65536)
                datagrams += 1
            except BlockingIOError:
                break
        assert datagrams > 20          # serve --vmc: every session drove the receiver
    finally:
        await server.close()
        product.close()
        rx.close()
