"""The first ten minutes, as a new user meets them (issue 33), in headless Chromium on the real product with a
fake camera showing a real face (Grace Hopper): the watch link from the share panel, Stop / Start, what the
page says the server applies, face mapping by the picker's names, a failed upload, the stats toggle.

What the page says is checked against what the server holds (GET /sessions/{id}, the session's controls)
and what its stats report, never against what the page merely sent."""

from __future__ import annotations

import time

import pytest
from aiohttp.test_utils import TestServer

from bench._probe import clip_background
from streamer.config import ServerConfig
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m
from tests.e2e.test_product_browser import wait_for

pytestmark = pytest.mark.browser

W, H = 640, 480
PLAYING_JS = """() => { const v = document.getElementById('output');
  return {t: v.currentTime, w: v.videoWidth, state: window.livefuseWatch, message: document.getElementById('message').innerText,
          messageShown: !document.getElementById('message').hidden}; }"""
VISIBLE_JS = """(sel) => { const el = document.querySelector(sel);
  return !!el && !el.hidden && el.offsetParent !== null && el.innerText.trim().length > 0; }"""


async def _product_server(tmp_path):
    from streamer.app.assembly import Product, ProductConfig
    from streamer.web.kit import SafetyConfig

    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(tmp_path / "audit.jsonl"))))
    services = product
    app = create_app(ServerConfig(stats_interval_s=0.5), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    return server, app[SERVER_KEY]


async def _playing_after(page, t: float, timeout_ms: int = 40_000) -> dict:
    await page.wait_for_function(
        f"(() => {{ const v = document.getElementById('output'); return v.videoWidth > 0 && v.currentTime > {t}; }})()",
        timeout=timeout_ms)
    return await page.evaluate(PLAYING_JS)


async def test_the_watch_link_plays_across_stop_and_start_and_the_page_sends_its_controls_again(chromium, grace_hopper, tmp_path):
    from playwright.async_api import async_playwright

    y4m = tmp_path / "hopper.y4m"
    write_y4m(y4m, clip_background(grace_hopper, W, H))
    server, state = await _product_server(tmp_path)
    url = str(server.make_url("/"))
    base = url.rstrip("/")
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", url, camera=y4m, viewport=(1280, 900)) as (page, logs):
                ctx = page.context
                await ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
                # the share panel holds the tab's watch link before anything starts; Copy puts it on the clipboard
                await page.wait_for_function("window.livefuse.watch && !document.getElementById('copy-watch').disabled")
                shown = await page.input_value("#watch-url")
                await page.click("#copy-watch")
                await page.wait_for_function("document.getElementById('share-status').textContent.startsWith('Copied')")
                copied = await page.evaluate("navigator.clipboard.readText()")
                assert copied == shown and copied.startswith(f"{base}/watch/w-"), (copied, shown)
                assert "Browser" in await page.text_content("#obs-help")   # the OBS steps are there to open

                # the watch page before Start: waiting, in words
                viewer = await ctx.new_page()
                await viewer.goto(copied)
                await viewer.wait_for_function("window.livefuseWatch && window.livefuseWatch.state === 'waiting'", timeout=20_000)
                assert "Waiting for the stream" in await viewer.inner_text("#message")

                # an id the server never gave: its message, and retries that back off
                unknown = await ctx.new_page()
                await unknown.goto(f"{base}/watch/0123456789abcdef")
                await unknown.wait_for_function("window.livefuseWatch && window.livefuseWatch.retries >= 3", timeout=20_000)
                unknown_state = await unknown.evaluate(PLAYING_JS)
                await unknown.close()

                # what the user sets before the first Start: the photo's tick, a prompt, a slider, the strength
                await page.check("#consent")
                await page.fill("#prompt", "a slight smile")
                await page.click("#prompt-add")
                assert "applied when you start the camera" in await page.inner_text("#prompt-status")
                await page.click("#edits-panel summary")
                await page.fill("#edit-lip_tint", "50")
                await page.fill("#strength", "60")

                await page.click("#start")
                await page.wait_for_function("window.livefuse.synced && window.livefuse.connected", timeout=40_000)
                first = await page.evaluate("window.livefuse.session")
                c = state.peers[first].session.controls
                assert (c.prompt, c.edits.get("lip_tint"), c.strength, c.source_id) == ("a slight smile", 0.5, 0.6, "demo")
                assert await page.evaluate(VISIBLE_JS, "#prompt-status") is False   # "applied when…" is gone
                played = await _playing_after(viewer, 1.0)
                assert played["state"]["playing"] == first and not played["messageShown"]

                # a second phrase adds to the first; the list says what is active
                await page.fill("#prompt", "warmer skin")
                await page.click("#prompt-add")
                await page.wait_for_function("document.querySelectorAll('#active-prompts li').length === 2", timeout=10_000)
                assert state.peers[first].session.controls.prompt == "a slight smile, warmer skin"
                active = await page.eval_on_selector_all("#active-prompts li span", "els => els.map(e => e.textContent)")
                assert active == ["a slight smile", "warmer skin"]
                assert "the look is now" in await page.inner_text("#prompt-status")

                # Stop: the watch page says the stream ended
                t_stop = time.monotonic()
                await page.click("#stop")
                await viewer.wait_for_function("window.livefuseWatch.state === 'ended'", timeout=20_000)
                stop_to_ended = time.monotonic() - t_stop
                ended_text = await viewer.inner_text("#message")
                # a slider moved while stopped, then Start: a new session gets everything, read back from it
                await page.fill("#edit-lip_tint", "-30")
                t_before = (await viewer.evaluate(PLAYING_JS))["t"]
                t_start = time.monotonic()
                await page.click("#start")
                await page.wait_for_function(f"window.livefuse.synced && window.livefuse.session !== '{first}'", timeout=40_000)
                second = await page.evaluate("window.livefuse.session")
                c = state.peers[second].session.controls
                applied = await page.evaluate("window.livefuse.applied")
                stale = {sel: await page.evaluate(VISIBLE_JS, sel) for sel in ("#notice", "#prompt-status")}
                # what is explained under the prompt is this session's reply to the prompt it holds now
                understood = await page.evaluate("window.livefuse.understood && window.livefuse.understood.text")
                # the same watch page plays the new session, with no reload
                await viewer.wait_for_function(f"window.livefuseWatch.playing === '{second}'", timeout=30_000)
                again = await _playing_after(viewer, 0.5)
                start_to_playing = time.monotonic() - t_start
                watch_link = await page.evaluate("window.livefuse.watch.id")
                assert state.watch_links.resolve(watch_link) == second
                assert not [line for line in logs if "error" in line.lower()], logs
    finally:
        await server.close()

    print(f"\nwatch page: Stop -> 'ended' {stop_to_ended:.1f} s; Start -> the new session playing {start_to_playing:.1f} s")
    assert unknown_state["state"]["status"] == 404 and "No stream at this address" in unknown_state["message"]
    assert unknown_state["state"]["retryMs"] >= 4000      # 1, 2, 4 s: backing off, not every 3 s for ever
    assert "This stream has ended" in ended_text and "Start camera again" in ended_text
    assert c.prompt == "a slight smile, warmer skin" and c.edits.get("lip_tint") == -0.3 and c.strength == 0.6
    assert c.source_id == "demo" and second != first
    assert applied["prompt"] == c.prompt and applied["edits"]["lip_tint"] == -0.3 and applied["strength"] == 0.6
    assert stale == {"#notice": False, "#prompt-status": False}, stale
    assert understood in (None, c.prompt), understood
    assert again["w"] == W and not again["messageShown"]
    assert t_before >= 0


async def test_status_mapping_uploads_and_stats_say_what_the_server_does(chromium, grace_hopper, astronaut,
                                                                         face_free_images, tmp_path):
    from PIL import Image
    from playwright.async_api import async_playwright

    y4m = tmp_path / "hopper.y4m"
    write_y4m(y4m, clip_background(grace_hopper, W, H))
    second_face = tmp_path / "eileen_collins_portrait.png"
    Image.fromarray(astronaut).save(second_face)
    no_face = tmp_path / "coffee.png"
    Image.fromarray(face_free_images["coffee"]).save(no_face)
    server, state = await _product_server(tmp_path)
    url = str(server.make_url("/"))
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", url, camera=y4m, viewport=(1280, 900)) as (page, logs):
                assert await page.inner_text("#local-empty") == "Press Start camera"       # with its space
                assert await page.text_content("label[for=strength]") == "Identity strength"
                await page.check("#consent")
                await page.click("#start")
                await page.wait_for_function("window.livefuse.synced && window.livefuse.faces.length === 1", timeout=40_000)
                session = await page.evaluate("window.livefuse.session")
                peer = state.peers[session]
                await page.wait_for_function("document.getElementById('now-fusion').textContent.startsWith('Fusion: on')", timeout=20_000)
                fusing = (await page.inner_text("#source-status"), await page.inner_text("#now-fusion"))

                # a second photo: shown by its whole name, unticked until its own tick (said next to the photo)
                await page.set_input_files("#upload", str(second_face))
                tile = '.source[data-id="upload1"]'
                await page.wait_for_selector(tile)
                unticked = (await page.inner_text(f"{tile} .name"), await page.inner_text(f"{tile} .badge"),
                            await page.inner_text("#source-status"))
                await page.check("#consent")
                await page.wait_for_function("window.livefuse.sources.includes('upload1')", timeout=20_000)
                # back to the demo face; the mapping lists both photos by the picker's names, in full
                await page.click('.source[data-id="demo"]')
                track = (await page.evaluate("window.livefuse.faces"))[0]["track_id"]
                select = f'.face[data-track="{track}"] select'
                await page.wait_for_function(f"document.querySelectorAll('{select} option').length === 4 && "
                                             f"document.querySelector('{select} option').textContent.includes('Demo face')", timeout=20_000)
                options = await page.eval_on_selector_all(f"{select} option", "os => os.map(o => [o.value, o.textContent])")
                need, room = await page.eval_on_selector(select, """s => { const cs = getComputedStyle(s);
                    const ctx = document.createElement('canvas').getContext('2d'); ctx.font = `${cs.fontSize} ${cs.fontFamily}`;
                    return [Math.max(...[...s.options].map(o => ctx.measureText(o.textContent).width)), s.clientWidth]; }""")

                # "leave unchanged": the server stops fusing that face, and the status line says so
                await page.select_option(select, "keep")
                await wait_for(lambda: dict(peer.session.controls.face_sources) == {track: "keep"}, 10, "the mapping")
                await page.wait_for_function("document.getElementById('now-fusion').textContent.includes('leave unchanged')", timeout=20_000)
                kept = (await page.inner_text("#source-status"), await page.inner_text("#now-fusion"),
                        await page.evaluate("window.livefuse.faces[0].source_id"))
                await page.select_option(select, "")
                await page.wait_for_function("document.getElementById('now-fusion').textContent.startsWith('Fusion: on')", timeout=20_000)

                # identity strength 0: nothing is fused, and the page does not say "Fusing"
                await page.fill("#strength", "0")
                await wait_for(lambda: peer.session.controls.strength == 0, 10, "strength 0")
                await page.wait_for_function("document.getElementById('now-fusion').textContent.includes('0 %')", timeout=20_000)
                zero = (await page.inner_text("#source-status"), await page.inner_text("#now-fusion"),
                        await page.evaluate("window.livefuse.faces.map(f => f.source_id)"))
                await page.fill("#strength", "100")

                # a photo with no face: refused by the server, and no tile is left behind
                tiles_before = await page.eval_on_selector_all(".source", "els => els.map(e => e.dataset.id)")
                await page.set_input_files("#upload", str(no_face))
                await page.check("#consent")
                await page.wait_for_function("window.livefuse.sourceError && window.livefuse.sourceError.status === 422", timeout=20_000)
                await page.wait_for_function("window.livefuse.sourceName === 'demo'", timeout=10_000)
                tiles_after = await page.eval_on_selector_all(".source", "els => els.map(e => e.dataset.id)")
                refused_text = await page.inner_text("#source-status")
                await wait_for(lambda: peer.session.controls.source_id == "demo", 10, "the demo face again")

                # stats: shown on a wide screen, with words for each figure; the toggle hides them
                await page.wait_for_function("!document.getElementById('stats').hidden", timeout=20_000)
                stats_text = await page.inner_text("#stats")
                await page.click("#stats-toggle")
                hidden_after_toggle = await page.evaluate("document.getElementById('stats').hidden")
                output_box = await page.evaluate("(() => { const r = document.getElementById('remote').getBoundingClientRect(); return [r.width, r.height]; })()")

                # at phone width the stats start hidden (they would take the screen) and the toggle shows them
                phone = await page.context.new_page()
                await phone.set_viewport_size({"width": 390, "height": 844})
                await phone.goto(url)
                await phone.click("#start")
                await phone.wait_for_function("window.livefuse.stats && window.livefuse.synced", timeout=40_000)
                phone_hidden = await phone.evaluate("document.getElementById('stats').hidden")
                await phone.click("#stats-toggle")
                phone_shown = not await phone.evaluate("document.getElementById('stats').hidden")
                phone_overflow = await phone.evaluate("document.documentElement.scrollWidth > window.innerWidth")
                await phone.click("#stop")
                assert not [line for line in logs if "error" in line.lower()], logs
    finally:
        await server.close()

    assert fusing[0] == "Fusing Demo face into the face in view." and fusing[1] == "Fusion: on (Demo face → 1 of 1 face)", fusing
    assert unticked[0] == "eileen_collins_portrait.png" and unticked[1] == "not ticked", unticked
    assert "tick" in unticked[2] and "eileen_collins_portrait.png" in unticked[2], unticked
    assert options == [["", "the selected face (Demo face)"], ["keep", "leave unchanged"], ["demo", "Demo face"],
                       ["upload1", "eileen_collins_portrait.png"]], options
    assert need + 24 <= room, (need, room)   # the longest name, and the select's arrow, fit: nothing cut off
    assert kept[2] is None and "Fusing" not in kept[0] and f"face {track}" in kept[0] and "leave unchanged" in kept[0], kept
    assert kept[1].startswith("Fusion: off"), kept
    assert zero[2] == [None] and "Fusing" not in zero[0] and "Identity strength is at 0 %" in zero[0], zero
    assert zero[1] == "Fusion: off (identity strength 0 %)", zero
    assert tiles_after == tiles_before == ["demo", "upload1"], (tiles_before, tiles_after)
    assert "no face was found in that photo" in refused_text and "coffee.png” was not added" in refused_text, refused_text
    assert "frames skipped to stay live" in stats_text and "fps in / out" in stats_text and "fusion" in stats_text
    assert hidden_after_toggle is True and output_box[0] > 400
    assert phone_hidden is True and phone_shown is True and phone_overflow is False
