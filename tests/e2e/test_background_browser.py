"""The page's background control in headless Chromium with a fake webcam showing a person in a room:
off / blur / colour / picture reach the session and the returned video shows them; a picture that is no
image is refused in words and the stream goes on."""

from __future__ import annotations

import asyncio

import cv2
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from bench import _person_scenes as ps
from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from streamer.pipeline.stages.background import BackgroundStage
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m

pytestmark = pytest.mark.browser

W, H = 640, 360
ROOM_JS = """([x0, y0, x1, y1]) => {
  const v = document.getElementById('remote');
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d'); g.drawImage(v, 0, 0);
  const d = g.getImageData(x0, y0, x1 - x0, y1 - y0).data;
  let r = 0, gr = 0, b = 0; const n = d.length / 4;
  for (let i = 0; i < d.length; i += 4) { r += d[i]; gr += d[i + 1]; b += d[i + 2]; }
  return [r / n, gr / n, b / n];
}"""


async def _room(page, box) -> np.ndarray:
    await asyncio.sleep(1.5)                      # a few frames after the change
    return np.asarray(await page.evaluate(ROOM_JS, list(box)))


async def test_page_background_control(chromium, tmp_path, face_free_images):
    from playwright.async_api import async_playwright

    scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    frame = cv2.resize(scene.image, (W, H), interpolation=cv2.INTER_AREA)
    y4m = tmp_path / "person.y4m"
    write_y4m(y4m, frame)
    box = (470, 40, 620, 200)                     # the room, right of the person
    assert not cv2.resize(scene.person.astype(np.uint8), (W, H))[box[1]:box[3], box[0]:box[2]].any()
    picture = tmp_path / "room.jpg"
    cv2.imwrite(str(picture), face_free_images["rocket"][..., ::-1])
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"GIF89a not really")
    from streamer.services import NullServices, log_event, store_prompt
    from streamer.session.background_prompt import set_background_prompt

    services = NullServices(make_pipeline=lambda s: Pipeline([BackgroundStage()]),
                        set_prompt=lambda s, text: set_background_prompt(s, text, store_prompt, log_event))
    app = create_app(ServerConfig(stats_interval_s=0.5), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/"))
    state = app[SERVER_KEY]
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", url, camera=y4m, viewport=(1280, 800)) as (page, logs):
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats && "
                                             "window.livefuse.stats.frames_out > 20", timeout=30_000)
                await page.wait_for_function("document.getElementById('remote').currentTime > 0.5", timeout=15_000)
                sid = await page.evaluate("window.livefuse.session")
                controls = lambda: state.peers[sid].session.controls   # noqa: E731
                plain = await _room(page, box)

                await page.select_option("#background", "color")
                await page.wait_for_function("document.getElementById('background-status').textContent.includes('Chroma Key')")
                assert controls().background.color == (0, 255, 0)
                green = await _room(page, box)
                assert np.abs(green - [0, 255, 0]).max() < 30, green

                await page.select_option("#background", "image")
                await page.set_input_files("#background-upload", str(bad))
                await page.wait_for_function("document.getElementById('background-status').textContent.includes(\"can't be used\")")
                assert "not a recognised image" in await page.inner_text("#background-status")
                await page.set_input_files("#background-upload", str(picture))
                await page.wait_for_function("document.getElementById('background-status').textContent.includes('picture is behind')")
                assert controls().background.mode == "image"
                pictured = await _room(page, box)
                assert np.abs(pictured - plain).max() > 20 and np.abs(pictured - green).max() > 60

                await page.select_option("#background", "blur")
                await page.wait_for_function("document.getElementById('background-status').textContent.includes('blurred')")
                assert controls().background.mode == "blur"
                # words in the prompt box set it too, and the control follows
                await page.fill("#prompt", "green screen background")
                await page.click("#prompt-form button")
                await page.wait_for_function("document.getElementById('background').value === 'color'", timeout=10_000)
                assert controls().background.color == (0, 255, 0)
                await page.select_option("#background", "none")
                await page.wait_for_function("window.livefuse.applied && window.livefuse.applied.background "
                                             "&& window.livefuse.applied.background.mode === 'none'", timeout=10_000)
                assert controls().background is None
                assert np.abs(await _room(page, box) - plain).max() < 15
                assert await page.evaluate("window.livefuse.stats.frames_out") > 60
    finally:
        await server.close()
