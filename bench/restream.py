"""Restream: what pushing a session's output to an RTMP server costs the session's own stream, side by side
with no push in one invocation: a real aiortc client sends a clip of a real photo at 30 fps to a live server
(the pipeline empty, so the push's cost is not hidden under the face stages) and measures the fps and the
added latency of what comes back; the push goes to FFmpeg in listen mode on loopback (imageio-ffmpeg).

    flock /tmp/livefuse-bench.lock livefuse bench restream --json
    livefuse bench restream --json --seconds 8 --repeats 2 --size 1280x720

`push_cpu_ms_per_frame` is the destination's worker thread per frame it wrote (x264's own threads are not in
it); `process_cpu_ms_per_frame` the whole process's CPU per frame the client received (server and client
together), whose difference between the sides is what the push costs; `fps` and `latency_ms` are the
session's own stream as its client receives it.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds streamed per side per run (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, interleaved (default 2)")
    parser.add_argument("--size", default="640x480", help="the client's frames, WIDTHxHEIGHT (default 640x480)")


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values) if values else np.zeros(1)
    return {"median": round(float(np.median(a)), 2), "p95": round(float(np.percentile(a, 95)), 2)}


async def _side(push: bool, seconds: float, size: tuple[int, int], photo: np.ndarray) -> dict[str, Any]:
    import aiohttp
    from aiohttp.test_utils import TestServer

    from bench._probe import ClipTrack, ProbeClient, clip_background
    from streamer.config import ServerConfig
    from streamer.services import NullServices
    from streamer.web.server import SERVER_KEY, create_app
    from tests.streamer.sinks.test_restream import KEY, RtmpServer, free_port

    port = free_port()
    rtmp = await asyncio.to_thread(RtmpServer, port, "/dev/null") if push else None
    config = ServerConfig(restream=(f"rtmp://127.0.0.1:{port}/live/{KEY}",) if push else ())
    app = create_app(config, NullServices())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    track = ClipTrack(clip_background(photo, *size), frames=int(seconds * 30) + 300)
    probe = ProbeClient(track)
    try:
        async with aiohttp.ClientSession() as http:
            await probe.connect_http(str(server.make_url("")).rstrip("/"), http)
            await probe.wait_frames(10, timeout=30)
            state = app[SERVER_KEY]
            held = state.restreams.sessions.get(probe.session_id)
            t0 = time.monotonic()
            n0 = len(probe.received)
            cpu0 = _push_cpu(held)
            proc0 = time.process_time()
            frames0 = sum(p.frames for p in held.pushes) if held else 0
            await asyncio.sleep(seconds)
            elapsed = time.monotonic() - t0
            proc = time.process_time() - proc0
            got = probe.received[n0:]
            cpu = _push_cpu(held) - cpu0
            written = (sum(p.frames for p in held.pushes) if held else 0) - frames0
            lat = [(r.at - track.sent[r.index]) * 1000.0 for r in got if r.index is not None and r.index in track.sent]
            return {"fps": round(len(got) / elapsed, 2), "latency_ms": _stats(lat),
                    "process_cpu_ms_per_frame": round(proc * 1000.0 / max(1, len(got)), 3),
                    "push_frames_per_s": round(written / elapsed, 2),
                    "push_cpu_ms_per_frame": round(cpu * 1000.0 / written, 3) if written else None,
                    "push_state": held.status()[0]["state"] if held else None}
    finally:
        await probe.close()
        await server.close()
        if rtmp is not None:
            await asyncio.to_thread(rtmp.wait, 10)


def _push_cpu(held: Any) -> float:
    """CPU seconds of the destinations' worker threads so far."""
    if held is None:
        return 0.0
    total = 0.0
    for p in held.pushes:
        t: threading.Thread = p._thread
        if t.is_alive():
            total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))   # type: ignore[arg-type]
    return total


def run(args: argparse.Namespace) -> dict[str, Any]:
    import skimage.data

    w, h = (int(v) for v in args.size.lower().split("x"))
    photo = np.ascontiguousarray(skimage.data.astronaut()[..., :3])
    sides: dict[str, list[dict[str, Any]]] = {"off": [], "restream": []}

    async def main() -> None:
        for i in range(args.repeats):
            for name in (("off", "restream") if i % 2 == 0 else ("restream", "off")):
                sides[name].append(await _side(name == "restream", args.seconds, (w, h), photo))

    asyncio.run(main())

    def med(side: str, key: str, sub: str | None = None) -> float:
        vals = [r[key][sub] if sub else r[key] for r in sides[side] if r[key] is not None]
        return round(float(np.median(vals)), 3) if vals else 0.0

    return {"benchmark": "restream", "size": args.size, "seconds": args.seconds, "repeats": args.repeats,
            "runs": sides,
            "summary": {"fps_off": med("off", "fps"), "fps_restream": med("restream", "fps"),
                        "latency_p95_ms_off": med("off", "latency_ms", "p95"),
                        "latency_p95_ms_restream": med("restream", "latency_ms", "p95"),
                        "push_cpu_ms_per_frame": med("restream", "push_cpu_ms_per_frame"),
                        "process_cpu_ms_per_frame_off": med("off", "process_cpu_ms_per_frame"),
                        "process_cpu_ms_per_frame_restream": med("restream", "process_cpu_ms_per_frame"),
                        "push_frames_per_s": med("restream", "push_frames_per_s")}}
