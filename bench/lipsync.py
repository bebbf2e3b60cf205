"""Lip sync as a real player sees it: headless Chromium watching over WHEP, a sender that claps (a white
flash and a beep together, once a second), skew = when the flash is shown minus when the beep is played.

Three cases, one after another: the sender straight to the browser (the reference: what Chromium does
with an aiortc sender and no server), and through the server with a slow stage, its WHEP audio held back
by the video's server delay (the default) and not held back (`--no-hold-audio`). A server that keeps the
sender's own timing matches the reference.

    livefuse bench lipsync --json                       # about 2 minutes; needs Chromium and playwright
    livefuse bench lipsync --seconds 20 --cases direct,held
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

CASES = ("direct", "held", "unheld")
BROWSER_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--allow-loopback-in-peer-connection", "--autoplay-policy=no-user-gesture-required"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=30.0, help="claps watched per case (default 30)")
    parser.add_argument("--stage-ms", type=float, default=60.0,
                        help="the server's slow stage, ms a frame (default 60: under the 67 ms a 15 fps frame lasts)")
    parser.add_argument("--fps", type=int, default=15, help="the sender's frame rate (default 15)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    parser.add_argument("--browser", default=None, help="Chromium binary (default: chromium on PATH)")


def _summary(skews: list[float]) -> dict[str, Any]:
    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 1) if xs else None
    return {"claps": len(skews), "first_5_median_ms": med(skews[:5]), "after_5_median_ms": med(skews[5:]),
            "last_10_median_ms": med(skews[-10:]), "skews_ms": skews}


async def _watch(browser: str, url: str, path: str, seconds: float) -> list[float]:
    from playwright.async_api import async_playwright

    from bench._clap import VIEWER_JS, skews_ms

    with tempfile.TemporaryDirectory() as profile:
        async with async_playwright() as p:
            ctx = await p.chromium.launch_persistent_context(profile, executable_path=browser, headless=True,
                                                             args=BROWSER_FLAGS)
            try:
                page = ctx.pages[0] if ctx.pages else await ctx.new_page()
                await page.goto(url)
                errors = await page.evaluate(VIEWER_JS, path)
                if errors:
                    raise RuntimeError(f"the browser's viewer failed: {errors}")
                await asyncio.sleep(seconds)
                claps = await page.evaluate("window.__claps")
            finally:
                await ctx.close()
    return skews_ms(claps["video"], claps["audio"])


async def _direct(browser: str, seconds: float, fps: int) -> dict[str, Any]:
    """The clapper answering the browser's offer itself: no server in between."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from bench._clap import BeepTrack, Clapper, FlashTrack
    from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration

    clapper, pcs = Clapper(), []

    async def answer(request: web.Request) -> web.Response:
        pc = RTCPeerConnection(rtc_configuration(loopback=True))
        pcs.append(pc)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=await request.text(), type="offer"))
        for t in pc.getTransceivers():
            t.sender.replaceTrack(FlashTrack(clapper, fps=fps) if t.kind == "video" else BeepTrack(clapper))
            t.direction = "sendonly"
        with gathering_on(LOOPBACK_ADDRESSES):
            await pc.setLocalDescription(await pc.createAnswer())
        return web.Response(status=201, text=pc.localDescription.sdp, content_type="application/sdp")

    app = web.Application()
    app.router.add_post("/direct", answer)
    app.router.add_get("/", lambda r: web.Response(text="<!doctype html><body></body>", content_type="text/html"))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        return _summary(await _watch(browser, str(server.make_url("/")), "/direct", seconds))
    finally:
        for pc in pcs:
            await pc.close()
        await server.close()


async def _through_server(browser: str, seconds: float, stage_ms: float, hold_audio: bool, fps: int) -> dict[str, Any]:
    """The clapper as a send-only WHIP client (as OBS is), the browser a WHEP viewer of that session."""
    import aiohttp
    from aiohttp.test_utils import TestServer
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from bench._clap import BeepTrack, Clapper, FlashTrack
    from bench._stream_server import SleepStage
    from streamer.config import ServerConfig
    from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration
    from streamer.pipeline.pipeline import Pipeline
    from streamer.web.server import SERVER_KEY, create_app
    from streamer.services import NullServices

    app = create_app(ServerConfig(hold_audio=hold_audio),
                     NullServices(make_pipeline=lambda s: Pipeline([SleepStage(stage_ms)] if stage_ms > 0 else [])))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    clapper = Clapper()
    pc = RTCPeerConnection(rtc_configuration(loopback=True))
    pc.addTransceiver(FlashTrack(clapper, fps=fps), direction="sendonly")
    pc.addTransceiver(BeepTrack(clapper), direction="sendonly")
    try:
        with gathering_on(LOOPBACK_ADDRESSES):
            await pc.setLocalDescription(await pc.createOffer())
        async with aiohttp.ClientSession() as http:
            async with http.post(str(server.make_url("/whip")), data=pc.localDescription.sdp,
                                 headers={"Content-Type": "application/sdp"}) as r:
                if r.status != 201:
                    raise RuntimeError(f"WHIP refused: {r.status} {await r.text()}")
                sid = r.headers["Location"].rsplit("/", 1)[1]
                await pc.setRemoteDescription(RTCSessionDescription(sdp=await r.text(), type="answer"))
        out = _summary(await _watch(browser, str(server.make_url("/")), f"/whep/{sid}", seconds))
        peer = app[SERVER_KEY].peers.get(sid)
        delay = peer.stats.delay_ms() if peer is not None else None
        out["server_video_delay_ms"] = round(delay, 1) if delay is not None else None
        return out
    finally:
        await pc.close()
        await server.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import logging

    for noisy in ("aioice", "aiortc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    browser = args.browser or next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                                    if shutil.which(n)), None)
    if browser is None or not Path(browser).exists():
        raise SystemExit("livefuse bench lipsync needs Chromium (apt-get install chromium) and playwright")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
    out: dict[str, Any] = {"benchmark": "lipsync", "seconds": args.seconds, "stage_ms": args.stage_ms, "fps": args.fps,
                           "skew": "flash shown minus beep played, ms; below zero: picture first"}
    for case in cases:
        if case == "direct":
            out[case] = asyncio.run(_direct(browser, args.seconds, args.fps))
        else:
            out[case] = asyncio.run(_through_server(browser, args.seconds, args.stage_ms, hold_audio=case == "held",
                                                    fps=args.fps))
    # Chromium's own A/V sync keeps moving the skew over the first half minute in every case, so each case
    # is compared with the reference clap by clap (the k-th clap of each run), then the median taken
    if "direct" in out:
        ref = out["direct"]["skews_ms"]
        for case in ("held", "unheld"):
            if case in out and out[case]["skews_ms"] and ref:
                diffs = [c - d for c, d in zip(out[case]["skews_ms"], ref)]
                out[f"{case}_minus_direct_ms"] = {"median": round(statistics.median(diffs), 1),
                                                  "first_5": round(statistics.median(diffs[:5]), 1),
                                                  "after_5": round(statistics.median(diffs[5:]), 1) if diffs[5:] else None}
    return out
