"""The page's makeup colours and before / after view in headless Chromium with a fake webcam, on the real
edits stage and prompt model: a prompt's colour word comes back as a swatch and a mark on the slider, a
shade picked in the colour input reaches the session (`set_params.colours`) and the frames, "Reset all"
gives the prompt's shade back, and the before / after divider cuts the unprocessed camera over the output where it is
dragged."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp.test_utils import TestServer

from bench._probe import clip_background
from engines.prompt.model import load_prompt_model
from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from streamer.pipeline.stages.edits import EditsStage, EditsStageConfig
from streamer.services import NullServices
from streamer.session.prompts import PromptCache
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m

pytestmark = pytest.mark.browser


class RecordColours:
    """After the edits stage: the shades each frame's context carried."""

    name = "record"

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, state, context):
        with self.lock:
            self.seen.append(dict(context.controls.colours))
        return state


async def test_makeup_colours_and_before_after_on_the_page(chromium, astronaut, tmp_path):
    from playwright.async_api import async_playwright

    y4m = tmp_path / "face.y4m"
    write_y4m(y4m, clip_background(astronaut, 640, 480))
    cache = PromptCache(load_prompt_model())
    record = RecordColours()
    app = create_app(ServerConfig(stats_interval_s=0.5), NullServices(
        make_pipeline=lambda s: Pipeline([EditsStage(cache, EditsStageConfig(blend_frames=1)), record])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", str(server.make_url("/")), camera=y4m) as (page, logs):
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats", timeout=30_000)
                session = await page.evaluate("window.livefuse.session")
                peer = app[SERVER_KEY].peers[session]

                await page.fill("#prompt", "coral lipstick")
                await page.click("#prompt-add")
                await page.wait_for_function("!document.getElementById('understood-colours').hidden", timeout=30_000)
                swatch = await page.inner_text("#understood-colours")
                prompted = await page.evaluate("document.getElementById('edit-lip_tint').closest('.edit').dataset.prompt")
                marked = await page.evaluate("[...document.querySelectorAll('.edit.prompted input')].map((i) => i.dataset.edit)")
                shown_shade = await page.input_value("#colour-lip_tint")     # the prompt's coral, until the user picks

                await page.click("#edits-panel summary")            # the sliders and shades fold away by default
                await page.evaluate("""() => { const i = document.getElementById('colour-lip_tint');
                                               i.value = '#6e2a4f'; i.dispatchEvent(new Event('change')); }""")
                await asyncio.sleep(1.0)
                picked = dict(peer.session.controls.colours)
                with record.lock:
                    framed = record.seen[-1]

                await page.click("#edits-reset")
                await asyncio.sleep(1.0)
                reset = dict(peer.session.controls.colours)
                reset_input = await page.input_value("#colour-lip_tint")

                hidden_before = await page.evaluate("document.getElementById('before').hidden")
                await page.click("#compare")
                shown = await page.evaluate("!document.getElementById('before').hidden")
                half = await page.evaluate("getComputedStyle(document.getElementById('before')).clipPath")
                await page.fill("#divider", "30")
                third = await page.evaluate("getComputedStyle(document.getElementById('before')).clipPath")
                camera = await page.evaluate("document.getElementById('before').srcObject === document.getElementById('local').srcObject")
    finally:
        await server.close()
        cache.close()
    assert swatch.strip() == "Lipstick: coral", swatch
    assert float(prompted) > 0.4 and marked == ["lip_tint"], (prompted, marked)
    assert picked == {"lip_tint": "#6e2a4f"} and framed == picked, logs[-5:]
    assert shown_shade == "#f0715a"
    assert reset == {} and reset_input == "#f0715a"                       # the prompt's shade again
    assert hidden_before is True and shown is True and camera is True
    assert half == "inset(0px 50% 0px 0px)" and third == "inset(0px 70% 0px 0px)", (half, third)
