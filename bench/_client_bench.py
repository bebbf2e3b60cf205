"""One stream-benchmark run per independent client (`livefuse bench stream --client ...`): seconds from
the client's first signalling POST to the first frame back, and the fps it gets back, against a
pass-through or product server in a child process (bench._stream_server).

- gstreamer: webrtcbin publishes and receives (bench/_gst_whip.py, timed inside that client).
- ffmpeg: its WHIP muxer publishes only, so the frames come back through an aiortc WHEP viewer; its POST
  time is the moment ffmpeg starts (it POSTs at once), so the figure includes its start-up.
- aiortc: bench._probe.ProbeClient over POST /offer (the page's route), sendrecv.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

CLIENTS = ("gstreamer", "ffmpeg", "aiortc")


async def client_run(client: str, base: str, image: Path, codec: str, frames: int, width: int, height: int,
                     fps: int) -> dict[str, Any]:
    if client == "gstreamer":
        from bench._clients import run_gstreamer

        r = await run_gstreamer(f"{base}/whip", image, codec=codec, frames=frames, width=width, height=height, fps=fps)
        return {"first_frame_s": r.get("first_frame_s"), "fps_back": r.get("fps"), "frames_back": r["frames_received"],
                "error": r.get("error"), "delete_status": r.get("delete_status")}
    if client == "ffmpeg":
        return await _ffmpeg(base, image, codec, frames, width, height, fps)
    if client == "aiortc":
        return await _aiortc(base, image, frames, width, height, fps)
    raise SystemExit(f"unknown client {client!r}: choose from {', '.join(CLIENTS)}")


def _rate(times: list[float]) -> float | None:
    return round((len(times) - 1) / (times[-1] - times[0]), 1) if len(times) > 1 and times[-1] > times[0] else None


async def _ffmpeg(base: str, image: Path, codec: str, frames: int, width: int, height: int, fps: int) -> dict[str, Any]:
    import aiohttp
    import imageio_ffmpeg
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration

    if codec != "H264":
        raise SystemExit("ffmpeg's WHIP muxer publishes H264 only here: use --codecs H264")
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-re", "-loop", "1",
        "-framerate", str(fps), "-i", str(image), "-t", str(frames / fps + 20),
        "-vf", f"scale={width}:{height},format=yuv420p", "-c:v", "libx264", "-profile:v", "baseline",
        "-tune", "zerolatency", "-bf", "0", "-g", str(2 * fps), "-f", "whip", "-whip_flags", "dtls_active", f"{base}/whip",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    pc = RTCPeerConnection(rtc_configuration(loopback=True))
    times: list[float] = []
    done = asyncio.Event()

    async def read(track) -> None:
        while len(times) < frames:
            await track.recv()
            times.append(time.monotonic())
        done.set()

    pc.on("track", lambda track: asyncio.ensure_future(read(track)) if track.kind == "video" else None)
    try:
        async with aiohttp.ClientSession() as http:
            sid = None
            while sid is None and time.monotonic() - t0 < 60:
                async with http.get(f"{base}/bench/sessions") as r:
                    ids = await r.json()
                sid = ids[0] if ids else None
                await asyncio.sleep(0.02)
            pc.addTransceiver("video", direction="recvonly")
            with gathering_on(LOOPBACK_ADDRESSES):
                await pc.setLocalDescription(await pc.createOffer())
            async with http.post(f"{base}/whep/{sid}", data=pc.localDescription.sdp,
                                 headers={"Content-Type": "application/sdp"}) as r:
                answer = await r.text()
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
            await asyncio.wait_for(done.wait(), frames / fps + 60)
    finally:
        await pc.close()
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    return {"first_frame_s": round(times[0] - t0, 3), "fps_back": _rate(times), "frames_back": len(times),
            "via": "WHEP viewer (ffmpeg publishes only)"}


async def _aiortc(base: str, image: Path, frames: int, width: int, height: int, fps: int) -> dict[str, Any]:
    import aiohttp
    import numpy as np
    from PIL import Image

    from bench._probe import ClipTrack, ProbeClient, clip_background

    track = ClipTrack(clip_background(np.asarray(Image.open(image).convert("RGB")), width, height), fps=fps)
    client = ProbeClient(track)
    async with aiohttp.ClientSession() as http:
        t0 = time.monotonic()
        await client.connect_http(base, http)
        deadline = time.monotonic() + frames / fps + 60
        while len(client.received) < frames and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await client.close()
    times = [r.at for r in client.received[:frames]]
    return {"first_frame_s": round(times[0] - t0, 3) if times else None, "fps_back": _rate(times),
            "frames_back": len(times), "via": "POST /offer"}


