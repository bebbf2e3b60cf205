"""The page's Restream box in headless Chromium with a fake webcam: an rtmp:// address with a stream key goes
live on a real RTMP server (FFmpeg in listen mode), the page shows the server's account of it with the key
hidden, Stop ends it, and FFmpeg's own decoder reads back what arrived."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestServer

from bench._probe import clip_background
from streamer.config import ServerConfig
from streamer.services import NullServices
from streamer.web.server import create_app
from tests.e2e.browser import open_page, write_y4m
from tests.streamer.sinks.test_restream import KEY, RtmpServer, decode_video, free_port

pytestmark = pytest.mark.browser


async def test_go_live_and_stop_from_the_page(chromium, astronaut, tmp_path):
    from playwright.async_api import async_playwright

    y4m = tmp_path / "face.y4m"
    write_y4m(y4m, clip_background(astronaut, 640, 480))
    port = free_port()
    rtmp = await asyncio.to_thread(RtmpServer, port, tmp_path / "got.ts")
    app = create_app(ServerConfig(stats_interval_s=0.5), NullServices())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", str(server.make_url("/")), camera=y4m) as (page, logs):
                await page.check("#consent")
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats", timeout=30_000)
                assert await page.evaluate("document.getElementById('avatar-box').hidden")   # no face rig here
                assert await page.get_attribute("#restream-url", "type") == "password"
                await page.fill("#restream-url", f"rtmp://127.0.0.1:{port}/live/{KEY}")
                await page.click("#restream-go")
                await page.wait_for_function(
                    "document.getElementById('restream-status').textContent.includes(': live')", timeout=20_000)
                status = await page.inner_text("#restream-status")
                assert f"rtmp://127.0.0.1:{port}/live/***" in status and KEY not in status
                await asyncio.sleep(2.0)
                await page.click("#restream-stop")
                await page.wait_for_function(
                    "document.getElementById('restream-status').textContent.includes(': off')", timeout=20_000)
                page_text = await page.inner_text("body")
                assert KEY not in page_text, logs[-5:]
        await asyncio.to_thread(rtmp.wait, 10)
    finally:
        await server.close()
    assert len(decode_video(tmp_path / "got.ts", 640, 480)) >= 30
