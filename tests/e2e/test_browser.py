"""Headless Chromium with a fake webcam fed from a real face photo: the page connects, the server decodes
the photo's frames, the page plays the returned track and its pixels are what the pipeline made."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from bench._probe import clip_background
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices
from tests.e2e.browser import CHROMIUM_FLAGS, open_page, write_y4m
from tests.streaming_helpers import keep_decoded

pytestmark = pytest.mark.browser

W, H = 640, 480


class InvertAndRecord:
    """Inverts the frame (a visible, real change) and keeps what it was given."""

    name = "invert"

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []
        self.lock = threading.Lock()

    def __call__(self, state, session):
        with self.lock:
            if len(self.seen) < 5 or len(self.seen) % 10 == 0:
                self.seen.append(state.image.copy())
            else:
                self.seen.append(None)
        state.image = 255 - state.image
        return state


PIXELS_JS = """(id) => {
  const v = document.getElementById(id);
  const c = document.createElement('canvas'); c.width = 80; c.height = 60;
  const g = c.getContext('2d'); g.drawImage(v, 0, 0, 80, 60);
  return Array.from(g.getImageData(0, 0, 80, 60).data);
}"""


def small(image: np.ndarray) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((80, 60), Image.BILINEAR)).astype(np.int16)


def rgba_to_rgb(values: list[int]) -> np.ndarray:
    return np.asarray(values, np.int16).reshape(60, 80, 4)[..., :3]


async def test_page_streams_the_fake_webcam_through_the_pipeline(chromium, astronaut, tmp_path):
    from playwright.async_api import async_playwright

    photo = clip_background(astronaut, W, H)
    y4m = tmp_path / "face.y4m"
    write_y4m(y4m, photo)
    stage = InvertAndRecord()
    app = create_app(ServerConfig(stats_interval_s=0.5), NullServices(make_pipeline=lambda s: Pipeline([stage]),
                                                                    register_source=keep_decoded([])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/"))
    state = app[SERVER_KEY]
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", url, camera=y4m, viewport=(1280, 720)) as (page, logs):
                await page.check("#consent")  # the demo face is sent only with the tick
                await page.click("#start")
                await page.wait_for_function(
                    "window.livefuse.connected && window.livefuse.stats && window.livefuse.stats.frames_out > 30",
                    timeout=30_000)
                await page.wait_for_function(
                    "(() => { const v = document.getElementById('remote'); return v.readyState >= 2 && v.currentTime > 0.5; })()",
                    timeout=15_000)
                await page.fill("#prompt", "a slight smile")
                await page.click("#prompt-form button")
                await page.wait_for_function("document.getElementById('prompt-status').textContent.startsWith('Applied')")
                await page.fill("#strength", "40")  # the slider sends set_params
                await asyncio.sleep(1.0)  # let the stats overlay refresh once more
                session = await page.evaluate("window.livefuse.session")
                peer = state.peers.get(session)  # before the browser goes and the session with it
                info = await page.evaluate("({w: document.getElementById('remote').videoWidth, h: document.getElementById('remote').videoHeight, src: window.livefuse.source})")
                remote = rgba_to_rgb(await page.evaluate(PIXELS_JS, "remote"))
                local = rgba_to_rgb(await page.evaluate(PIXELS_JS, "local"))
                overlay = await page.inner_text("#stats")
        assert peer is not None, f"no session {session}; console: {logs[-5:]}"
        # the server decoded the photo's frames
        seen = [im for im in stage.seen if im is not None]
        assert peer.stats.frames_in > 30 and seen[0].shape == (H, W, 3)
        assert np.abs(small(seen[-1]) - small(photo)).mean() < 12
        # the page plays the returned track, and it is the pipeline's output (the inverted photo)
        assert (info["w"], info["h"]) == (W, H)
        assert np.abs(remote - (255 - small(photo))).mean() < 20
        assert np.abs(local - small(photo)).mean() < 20
        assert np.abs(remote - local).mean() > 60
        # the bundled demo face was registered as the source, and the overlay shows live figures
        assert info["src"]["source_id"] == "demo" and peer.session.controls.source_id == "demo"
        # the prompt box and the strength slider reach the session
        assert peer.session.controls.prompt == "a slight smile" and peer.session.controls.strength == 0.4
        assert "invert" in overlay and "fps" in overlay
    finally:
        await server.close()


async def _notice_after_start(page) -> str:
    await page.click("#start")
    await page.wait_for_selector("#notice:not([hidden])", timeout=20_000)
    return await page.inner_text("#notice")


async def test_page_explains_no_camera_denied_camera_full_server_and_unreachable_server(chromium, astronaut, tmp_path):
    import aiohttp
    from playwright.async_api import async_playwright

    from bench._probe import ClipTrack, ProbeClient

    y4m = tmp_path / "face.y4m"
    write_y4m(y4m, clip_background(astronaut, 320, 240), frames=5)
    app = create_app(ServerConfig(max_sessions=1, retry_after_s=10))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/"))
    occupant = ProbeClient(ClipTrack(clip_background(astronaut, 160, 120)))
    try:
        async with async_playwright() as p:
            no_camera = [f for f in CHROMIUM_FLAGS if f != "--use-fake-device-for-media-stream"]
            async with open_page(p, chromium, tmp_path / "p1", url, flags=no_camera) as (page, _):
                assert "No camera found" in await _notice_after_start(page)
                assert app[SERVER_KEY].peers == {}

            no_permission = [f for f in CHROMIUM_FLAGS if f != "--use-fake-ui-for-media-stream"]
            async with open_page(p, chromium, tmp_path / "p0", url, camera=y4m, flags=no_permission) as (page, _):
                page.on("dialog", lambda d: asyncio.ensure_future(d.dismiss()))
                assert "Camera permission was denied" in await _notice_after_start(page)

            async with aiohttp.ClientSession() as http:
                await occupant.connect_http(url.rstrip("/"), http)
            async with open_page(p, chromium, tmp_path / "p2", url, camera=y4m) as (page, _):
                full = await _notice_after_start(page)
                assert "server is full" in full and "10 seconds" in full
                assert not await page.is_disabled("#start")
                await occupant.close()
                await server.close()
                assert "Can't reach the LiveFuse server" in await _notice_after_start(page)
    finally:
        await occupant.close()
        await server.close()
