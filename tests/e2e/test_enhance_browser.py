"""The page's optional fusion sliders in headless Chromium with a fake webcam: Face enhancer and Face shape,
each hidden where the session's pipeline lacks its stage (enhance; the geometric fusion stage), shown
where it has it, reading "server default" until moved; its value reaches the session
(`set_params.enhance` / `set_params.shape`) and the frames' context; the session read back reports it."""

from __future__ import annotations

import asyncio
import threading

import aiohttp

import pytest
from aiohttp.test_utils import TestServer

from bench._probe import clip_background
from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from streamer.services import NullServices
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m
from tests.streaming_helpers import keep_decoded

pytestmark = pytest.mark.browser


class RecordControl:
    """A stage named as one of the product's stages: records one control's value each frame's context carries."""

    def __init__(self, name: str, control: str) -> None:
        self.name = name
        self.control = control
        self.seen: list = []
        self.lock = threading.Lock()

    def __call__(self, state, context):
        with self.lock:
            self.seen.append(getattr(context.controls, self.control))
        return state


async def _run(chromium, astronaut, tmp_path, stage_name: str, slider: str, slide: bool):
    from playwright.async_api import async_playwright

    tmp_path.mkdir(parents=True, exist_ok=True)
    y4m = tmp_path / "face.y4m"
    write_y4m(y4m, clip_background(astronaut, 640, 480))
    stage = RecordControl(stage_name, slider)
    app = create_app(ServerConfig(stats_interval_s=0.5), NullServices(make_pipeline=lambda s: Pipeline([stage]),
                                                                    register_source=keep_decoded([])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", str(server.make_url("/")), camera=y4m) as (page, logs):
                await page.check("#consent")
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats", timeout=30_000)
                hidden = await page.evaluate(f"document.getElementById('{slider}-box').hidden")
                controls = None
                if slide:
                    assert await page.text_content(f"#{slider}-value") == "server default"
                    await page.fill(f"#{slider}", "60")          # the slider sends set_params
                    await asyncio.sleep(1.0)
                    session = await page.evaluate("window.livefuse.session")
                    peer = app[SERVER_KEY].peers.get(session)
                    assert peer is not None, logs[-5:]
                    controls = peer.session.controls
                    label = await page.inner_text(f"#{slider}-value")
                    async with aiohttp.ClientSession() as http:
                        async with http.get(str(server.make_url(f"/sessions/{session}"))) as r:
                            info = await r.json()
                    return hidden, controls, stage.seen, label, info
        return hidden, controls, stage.seen, None, None
    finally:
        await server.close()


@pytest.mark.parametrize("slider, stage_name", [("enhance", "enhance"), ("shape", "fusion")])
async def test_a_fusion_slider_is_shown_only_with_its_stage_and_reaches_the_session(chromium, astronaut, tmp_path,
                                                                                  slider, stage_name):
    hidden, _, _, _, _ = await _run(chromium, astronaut, tmp_path / "a", "swap", slider, slide=False)
    assert hidden is True                                       # not its stage: no slider
    hidden, controls, seen, label, info = await _run(chromium, astronaut, tmp_path / "b", stage_name, slider, slide=True)
    assert hidden is False
    assert getattr(controls, slider) == pytest.approx(0.6) and label == "60%"
    assert seen[0] is None and seen[-1] == pytest.approx(0.6)   # the server's default, then the slider's value
    assert info["controls"][slider] == pytest.approx(0.6)
