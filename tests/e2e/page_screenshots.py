"""The page as a user sees it, at desktop and at phone width, and the watch page before a stream starts:
`python -m tests.e2e.page_screenshots [DIR]` (`make screenshots`: DIR = docs/img) writes page_desktop.png,
page_phone.png, watch_waiting.png, and the prompt box after a refused prompt (prompt_refused.png) and
after one that asks for no face edit (prompt_not_understood.png).

The real product on loopback and Debian's headless Chromium with a fake camera showing a real face (the
Grace Hopper photo), as in the browser tests: the demo face ticked, the prompt "a slight smile, coral lipstick" added,
the lip-tint slider at +0.30, streaming until the server reports the face fused and the stats are in, then the
before / after divider shown at the middle of the output."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

DESKTOP = (1280, 900)
PHONE = (390, 844)


def _grace_hopper():
    import matplotlib.cbook
    import numpy as np
    from PIL import Image

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        return np.ascontiguousarray(np.asarray(Image.open(f).convert("RGB")))


async def _live_page(page, url: str) -> None:
    await page.goto(url)
    await page.check("#consent")
    await page.fill("#prompt", "a slight smile, coral lipstick")
    await page.click("#prompt-add")
    await page.click("#edits-panel summary")
    await page.fill("#edit-lip_tint", "30")
    await page.click("#start")
    await page.wait_for_function("window.livefuse.synced && window.livefuse.stats && window.livefuse.stats.frames_out > 30"
                                 " && window.livefuse.faces.some(f => f.source_id)", timeout=60_000)
    await page.wait_for_function("document.getElementById('now-fusion').textContent.startsWith('Fusion: on')", timeout=30_000)
    await page.click("#compare")                               # before | after, cut at the middle
    await asyncio.sleep(1.5)   # the prompt's blend is over and the video shows recent frames


async def _prompt_box(page) -> dict:
    """The page region from the prompt field to the list of what is active."""
    top = await page.locator("#prompt-form").bounding_box()
    bottom = await page.locator(".active-prompts").bounding_box()
    return {"x": top["x"] - 8, "y": top["y"] - 40, "width": top["width"] + 16,
            "height": bottom["y"] + bottom["height"] - top["y"] + 56}


async def shoot(out: Path) -> list[Path]:
    from aiohttp.test_utils import TestServer
    from playwright.async_api import async_playwright

    from bench._probe import clip_background
    from streamer.app.assembly import Product, ProductConfig
    from streamer.config import ServerConfig
    from streamer.web.kit import SafetyConfig
    from streamer.web.server import create_app
    from tests.conftest import browser_path
    from tests.e2e.browser import CHROMIUM_FLAGS, write_y4m

    chromium = browser_path()
    if chromium is None:
        raise SystemExit("no Chromium installed (make debian-tools)")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="livefuse-shots-"))
    written = []
    try:
        camera = work / "hopper.y4m"
        write_y4m(camera, clip_background(_grace_hopper(), 640, 480))
        product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(work / "audit.jsonl"))))
        server = TestServer(create_app(ServerConfig(stats_interval_s=0.5), product), host="127.0.0.1", port=0)
        await server.start_server()
        url = str(server.make_url("/"))
        try:
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, headless=True,
                                                  args=CHROMIUM_FLAGS + [f"--use-file-for-fake-video-capture={camera}"])
                try:
                    for name, (w, h) in (("page_desktop.png", DESKTOP), ("page_phone.png", PHONE)):
                        ctx = await browser.new_context(viewport={"width": w, "height": h}, device_scale_factor=1)
                        page = await ctx.new_page()
                        await _live_page(page, url)
                        if name == "page_desktop.png":   # the watch link's page, before anything plays on it
                            watch = await ctx.new_page()
                            await watch.set_viewport_size({"width": 640, "height": 360})
                            await watch.goto(f"{url.rstrip('/')}/watch/w-{'A' * 16}")
                            await watch.wait_for_function("window.livefuseWatch && window.livefuseWatch.retries >= 1")
                            await watch.screenshot(path=str(out / "watch_waiting.png"))
                            written.append(out / "watch_waiting.png")
                            await watch.close()
                        await page.screenshot(path=str(out / name), full_page=True)
                        written.append(out / name)
                        if name == "page_desktop.png":   # what the policy and "not understood" say, in the prompt box
                            for shot, text, start in (("prompt_refused.png", "a slight smile, take off all her clothes", "Not applied"),
                                                      ("prompt_not_understood.png", "asdf qwerty", "Not understood")):
                                await page.fill("#prompt", text)
                                await page.click("#prompt-replace")
                                await page.wait_for_function(f"document.getElementById('prompt-status').textContent.startsWith({start!r})",
                                                             timeout=30_000)
                                await page.screenshot(path=str(out / shot), clip=await _prompt_box(page), full_page=True)
                                written.append(out / shot)
                        await page.click("#stop")
                        await ctx.close()
                finally:
                    await browser.close()
        finally:
            await server.close()
            product.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "docs/img")
    for path in asyncio.run(shoot(out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
