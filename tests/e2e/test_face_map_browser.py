"""Headless Chromium on the real product with two people on one camera (Grace Hopper left, the astronaut
right, real photos): the page lists both tracked faces as thumbnails with their numbers, and picking
"leave unchanged" for one face keeps the demo face off that person while the other stays fused."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestServer

from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m
from tests.e2e.test_product_browser import Observer, observed, wait_for
from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame
from streamer.services import with_hooks

pytestmark = pytest.mark.browser

THUMB_SPREAD_JS = """(track) => {
  const c = document.querySelector(`.face[data-track="${track}"] canvas`);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let lo = 255, hi = 0;
  for (let i = 0; i < d.length; i += 4) { lo = Math.min(lo, d[i]); hi = Math.max(hi, d[i]); }
  return hi - lo;
}"""


async def test_page_maps_each_face_on_its_own(chromium, astronaut, grace_hopper, tmp_path):
    from playwright.async_api import async_playwright

    from streamer.app.assembly import Product, ProductConfig
    from streamer.web.kit import SafetyConfig

    frame, _ = group_frame([(grace_hopper, GRACE_HOPPER_FACE, 120, (170, 240)), (astronaut, ASTRONAUT_FACE, 120, (470, 240))],
                           size=(640, 480))
    y4m = tmp_path / "two.y4m"
    write_y4m(y4m, frame)
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(tmp_path / "audit.jsonl"))))
    observers: list[Observer] = []

    def make_pipeline(session):
        pipeline, observer = observed(product.make_pipeline(session))
        observers.append(observer)
        return pipeline

    app = create_app(ServerConfig(stats_interval_s=0.5), with_hooks(product, make_pipeline=make_pipeline))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    state = app[SERVER_KEY]
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", str(server.make_url("/")), camera=y4m,
                                 viewport=(1280, 900)) as (page, logs):
                await page.click("#start")
                await page.check("#consent")            # the demo face (the astronaut) for every face by default
                await page.wait_for_function("window.livefuse.source && window.livefuse.source.source_id === 'demo'",
                                             timeout=30_000)
                await page.wait_for_function("document.querySelectorAll('#faces .face').length === 2 && "
                                             "window.livefuse.faces.every(f => f.source_id === 'demo')", timeout=30_000)
                faces = sorted(await page.evaluate("window.livefuse.faces"), key=lambda f: f["box"][0])
                left, right = (f["track_id"] for f in faces)
                assert await page.inner_text(f'.face[data-track="{left}"] span') == f"face {left}"
                for t in (left, right):                  # thumbnails hold a picture, not a blank canvas
                    assert await page.evaluate(THUMB_SPREAD_JS, t) > 60
                options = await page.eval_on_selector_all(f'.face[data-track="{left}"] option', "os => os.map(o => o.value)")
                assert options == ["", "keep", "demo"]
                await page.select_option(f'.face[data-track="{left}"] select', "keep")
                session = await page.evaluate("window.livefuse.session")
                peer = state.peers[session]
                await wait_for(lambda: dict(peer.session.controls.face_sources) == {left: "keep"}, 10, "the mapping")
                await page.wait_for_function(
                    f"window.livefuse.faces.length === 2 && window.livefuse.faces.find(f => f.track_id === {left}).source_id === null"
                    f" && window.livefuse.faces.find(f => f.track_id === {right}).source_id === 'demo'", timeout=20_000)
                observer = observers[-1]
                await wait_for(lambda: [f["track_id"] for f in observer.last["fusion"]] == [right], 10,
                               "the server to fuse only the right face")
                assert await page.evaluate(f'window.livefuse.faceChoices["{left}"]') == "keep"
    finally:
        await server.close()
