"""Headless Chromium on the real product: the fake webcam is the Grace Hopper photo, the page ticks consent
for the bundled demo face (the astronaut) and sets a prompt; the server's own faces -> fusion -> edits ->
watermark pipeline runs on every frame. What the page receives must be fused inside the face, unchanged
outside it, marked with this session's watermark, and the audit log must hold the whole session."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from engines.edit_vocabulary import EDIT_SPECS
from streamer.config import ServerConfig
from streamer.pipeline.pipeline import Pipeline
from bench._probe import clip_background
from streamer.web.server import SERVER_KEY, create_app
from tests.e2e.browser import open_page, write_y4m
from streamer.services import with_hooks

pytestmark = pytest.mark.browser

W, H = 640, 480
SCREENSHOT = os.environ.get("LIVEFUSE_SCREENSHOT")  # where to keep a picture of the page mid-stream, if anywhere
PROMPT = "a big smile, brighter skin"

# the frame the <video> element shows, losslessly, at its own size
FRAME_PNG_JS = """() => {
  const v = document.getElementById('remote');
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  c.getContext('2d').drawImage(v, 0, 0);
  return c.toDataURL('image/png');
}"""


class Observer:
    """A last stage after the product's own (which run unchanged and in order): keeps what each frame came
    out with, so the test can say what the server found and did (faces, fusion, watermark payload)
    without touching pixels. A stage rather than a Pipeline wrapper, so it sees every frame whichever
    worker runs the stages (the overlapped one runs them in two halves, not through Pipeline.__call__)."""

    name = "observer"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.frames = 0
        self.with_face = 0
        self.fused = 0
        self.last: dict[str, Any] = {}

    def __call__(self, state, context):
        with self.lock:
            self.frames += 1
            self.with_face += bool(state.faces)
            self.fused += bool(state.fused)
            self.last = {
                "faces": len(state.faces), "fusion": list(state.fused or []),
                "watermark": state.watermark, "errors": dict(state.errors),
                "edits": dict(state.edits or {}),
                "landmarks": state.faces[0].landmarks[:, :2].copy() if state.faces else None,
            }
        return state


def observed(inner: Pipeline) -> tuple[Pipeline, Observer]:
    """`inner`'s stages with an Observer after them."""
    observer = Observer()
    return Pipeline([*inner.stages, observer]), observer


def png_to_rgb(data_url: str) -> np.ndarray:
    from PIL import Image

    raw = base64.b64decode(data_url.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))


async def wait_for(check, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


def face_regions(landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inside the face oval, well outside it): the border band where fusion feathers out is left out."""
    import cv2

    from engines.face_masks import region_mask

    oval = region_mask((H, W), landmarks, ["face_oval"]) > 0.5
    inner = cv2.erode(oval.astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    near = cv2.dilate(oval.astype(np.uint8), np.ones((61, 61), np.uint8)) > 0
    return inner, ~near


async def test_page_on_the_real_product_fuses_marks_and_audits(chromium, grace_hopper, face_free_images, tmp_path):
    from PIL import Image
    from playwright.async_api import async_playwright

    from kernels.numpy import watermark as wm
    from streamer.app.assembly import Product, ProductConfig
    from streamer.safety.audit import iter_records, verify
    from streamer.web.kit import SafetyConfig
    from streamer.safety.watermark_policy import parse_payload, session_tag

    photo = clip_background(grace_hopper, W, H)
    y4m = tmp_path / "hopper.y4m"
    write_y4m(y4m, photo)
    audit_path = tmp_path / "audit.jsonl"
    no_face = tmp_path / "coffee.png"
    Image.fromarray(face_free_images["coffee"]).save(no_face)
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(audit_path))))
    observers: list[Observer] = []

    def make_pipeline(session):
        pipeline, observer = observed(product.make_pipeline(session))
        observers.append(observer)
        return pipeline

    services = with_hooks(product, make_pipeline=make_pipeline)
    app = create_app(ServerConfig(stats_interval_s=0.5), services)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()  # loads the shared models (services.startup)
    url = str(server.make_url("/"))
    state = app[SERVER_KEY]
    try:
        async with async_playwright() as p:
            async with open_page(p, chromium, tmp_path / "profile", url, camera=y4m, viewport=(1280, 900)) as (page, logs):
                # consent is off by default: the stream starts, but no face is uploaded and the page says why
                assert not await page.is_checked("#consent")
                await page.click("#start")
                await page.wait_for_function("window.livefuse.connected && window.livefuse.stats && window.livefuse.stats.frames_out > 5",
                                             timeout=30_000)
                session = await page.evaluate("window.livefuse.session")
                peer = state.peers[session]
                observer = observers[-1]
                assert peer.session.sources == {} and peer.session.controls.source_id is None
                assert "No face fusion" in await page.inner_text("#source-status")
                assert "I have the right to use this face" in await page.inner_text(".consent")
                await wait_for(lambda: observer.with_face >= 3, 20, f"the server to find a face; console: {logs[-5:]}")
                assert observer.fused == 0
                if SCREENSHOT:
                    shot = Path(SCREENSHOT)
                    await page.screenshot(path=str(shot.with_name(f"{shot.stem}_no_consent{shot.suffix}")))

                # tick consent: the demo face (astronaut) is uploaded with consent=true and fusion starts
                await page.check("#consent")
                await page.wait_for_function("window.livefuse.source && window.livefuse.source.source_id === 'demo'", timeout=20_000)
                # the line says "Fusing" once the server's stats report the face fused, not when the photo is sent
                await page.wait_for_function("document.getElementById('source-status').textContent.startsWith('Fusing Demo face')",
                                             timeout=20_000)
                await page.fill("#prompt", PROMPT)
                await page.click("#prompt-form button")
                await page.wait_for_function(
                    "window.livefuse.understood && window.livefuse.understood.text === " + repr(PROMPT), timeout=20_000)
                understood_text = await page.inner_text("#prompt-understood")
                understood = await page.evaluate("window.livefuse.understood")

                # the Edits panel has one slider per edit the server knows (GET /edits), in its order
                await page.click("#edits-panel summary")
                sliders = await page.eval_on_selector_all(
                    "#edit-sliders input[type=range]", "els => els.map((e) => [e.dataset.edit, e.min, e.max])")
                assert sliders == [[s.name, str(round(s.low * 100)), str(round(s.high * 100))] for s in EDIT_SPECS]
                # a slider reaches the session (debounced set_params.edits)
                await page.fill("#edit-lip_tint", "50")
                await wait_for(lambda: peer.session.controls.edits.get("lip_tint") == 0.5, 5, "the lip_tint slider")
                # the open panel is taller than the window: scrolled down to its last button, the output
                # video is still in full view (the videos are sticky), so a slider's effect can be watched
                await page.locator("#edits-reset").scroll_into_view_if_needed()
                view = await page.evaluate("""(() => { const r = document.getElementById('remote').getBoundingClientRect();
                    return {top: r.top, bottom: r.bottom, height: innerHeight, scrolled: scrollY}; })()""")
                assert view["scrolled"] > 0 and 0 <= view["top"] and view["bottom"] <= view["height"], view
                await page.evaluate("window.scrollTo(0, 0)")
                fused_before = observer.fused
                await wait_for(lambda: observer.fused >= fused_before + 15, 20, "fused frames")
                await asyncio.sleep(1.0)  # the prompt's blend is over and the browser shows recent frames
                info = await page.evaluate("fetch('/sessions/' + window.livefuse.session).then((r) => r.json())")
                frames = []
                for _ in range(4):
                    frames.append(png_to_rgb(await page.evaluate(FRAME_PNG_JS)))
                    await asyncio.sleep(0.25)
                with observer.lock:
                    last = dict(observer.last)
                demo_id = getattr(peer.session.sources.get("demo"), "id", None)
                overlay = await page.inner_text("#stats")
                if SCREENSHOT:
                    await page.screenshot(path=SCREENSHOT, full_page=True)

                # a refused prompt: the part that decided and why are shown, the previous prompt stays
                await page.fill("#prompt", "make me look like Tom Cruise")
                await page.click("#prompt-form button")
                await page.wait_for_function("document.getElementById('prompt-status').textContent.startsWith('Not applied')",
                                             timeout=10_000)
                refused_text = await page.inner_text("#prompt-status")
                prompt_after_refusal = peer.session.controls.prompt

                # reset puts every slider back at the centre, on the page and on the server
                await page.click("#edits-reset")
                await wait_for(lambda: not any(peer.session.controls.edits.values()), 5, "the edits reset")
                assert await page.input_value("#edit-lip_tint") == "0"

                # a new photo needs its own tick: picking it stops fusion until then; a photo with no face
                # is refused by the server (422 source_no_face) and the page says so in words
                await page.set_input_files("#upload", str(no_face))
                await wait_for(lambda: peer.session.controls.source_id is None, 5, "fusion to stop for an unticked photo")
                assert not await page.is_checked("#consent")
                untick_text = await page.inner_text("#source-status")
                await page.check("#consent")
                await page.wait_for_function("window.livefuse.sourceError && window.livefuse.sourceError.status === 422",
                                             timeout=20_000)
                source_error = await page.evaluate("window.livefuse.sourceError")
                no_face_text = await page.inner_text("#source-status")
    finally:
        await server.close()  # closes the session (audit session_closed), then the product (flushes the log)

    # (a) the server's pipeline is the product's, it found the face and fused the demo source into it
    # (the test's observer runs after the product's four)
    assert info["stages"] == ["faces", "face_out", "fusion", "edits", "background", "watermark", "observer"] and info["sources"] == ["demo"]
    assert info["controls"]["prompt"] == PROMPT and info["controls"]["source_id"] == "demo"
    assert set(info["stats"]["stages_ms"]) == {"faces", "face_out", "fusion", "edits", "background", "watermark", "observer"}
    assert last["faces"] == 1 and last["errors"] == {}
    assert demo_id and [f["source_id"] for f in last["fusion"]] == [demo_id] and last["fusion"][0]["weight"] > 0.5
    assert last["edits"]["lip_tint"] > 0.4 and last["watermark"]
    assert "fusion" in overlay and "watermark" in overlay and "fps" in overlay

    # (b) the pixels the page shows changed inside the face and stay close to the camera outside it
    assert frames[0].shape == (H, W, 3)
    inside, outside = face_regions(last["landmarks"])
    assert inside.sum() > 5000 and outside.sum() > 0.5 * H * W
    diff = np.abs(frames[-1].astype(np.int16) - photo.astype(np.int16)).mean(axis=2)
    inside_change, outside_change = float(diff[inside].mean()), float(diff[outside].mean())
    print(f"\nmean |received - camera|: inside the face {inside_change:.1f}, outside {outside_change:.1f}")
    assert inside_change > 15, inside_change
    assert outside_change < 6, outside_change
    assert inside_change > 4 * outside_change

    # (c) the page says what the prompt was understood as
    assert understood["text"] == PROMPT and understood["understood"].get("smile", 0) > 0.1
    assert "Understood as:" in understood_text and "smile +" in understood_text
    assert "“make me look like tom cruise”" in refused_text and "specific real person" in refused_text
    assert "previous look stays" in refused_text and prompt_after_refusal == PROMPT

    # (d) the frames the browser received carry this session's watermark
    det, _ = wm.extract_many(frames, wm.make_key(wm.WatermarkConfig()))
    assert det.watermarked, det
    assert parse_payload(det.payload)["session_tag"] == f"{session_tag(session):06x}"

    # (e) the audit log verifies and holds the session from start to end, with the payload found above
    report = verify(audit_path)
    assert report.ok, report.errors
    import json

    records = [json.loads(line) for _, _, line in iter_records(audit_path)]
    mine = [r for r in records if r["data"].get("session") == session]
    events = [r["event"] for r in mine]
    for event in ("session_opened", "source_registered", "prompt", "watermark", "session_closed"):
        assert event in events, (event, events)
    assert events[0] == "session_opened" and events[-1] == "session_closed"
    assert f"{det.payload:016x}" in {r["data"]["payload"] for r in mine if r["event"] == "watermark"}
    registered = [r["data"] for r in mine if r["event"] == "source_registered"]
    assert any(d.get("consent") is True for d in registered)
    refusals = [r["data"] for r in mine if r["event"] == "source_refused"]
    assert refusals and {d["reason"] for d in refusals} == {"no_face"}  # nothing was sent without a tick
    assert "No face fusion" in untick_text and "tick" in untick_text
    assert source_error["code"] == "source_no_face" and "no face was found in that photo" in no_face_text
    refused_prompt = [r["data"] for r in mine if r["event"] == "prompt" and r["data"].get("allowed") is False]
    assert refused_prompt and refused_prompt[0]["category"] == "impersonation"
