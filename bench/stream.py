"""Loopback stream benchmark: fps out, end-to-end latency p50/p95, drops and server CPU per frame.

A client peer in this process sends a 30 fps clip made from a real photo with the frame index painted
into the pixels to a LiveFuse server in a child process, reads the returned stream, and matches each
returned frame to the moment it was sent. Runs pass-through at 640x480 and 1280x720 with VP8 and H264,
then 640x480 VP8 with an artificial 50 ms stage (delay must stay bounded; drops are counted).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per pass-through run (default 10)")
    parser.add_argument("--slow-duration", type=float, default=20.0, help="seconds for the 50 ms stage run (default 20)")
    parser.add_argument("--sizes", default="640x480,1280x720")
    parser.add_argument("--codecs", default="VP8,H264")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="the artificial stage (0: skip that run)")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds left out of the figures at the start")


def run(args: argparse.Namespace) -> dict[str, Any]:
    for noisy in ("aioice", "aiortc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    codecs = [c.strip().upper() for c in args.codecs.split(",") if c.strip()]
    runs = []
    for codec in codecs:
        for w, h in sizes:
            runs.append(asyncio.run(one_run(w, h, codec, 0.0, args.duration, args.fps, args.warmup)))
    if args.delay_ms > 0:
        runs.append(asyncio.run(one_run(640, 480, "VP8", args.delay_ms, args.slow_duration, args.fps, args.warmup)))
    return {"benchmark": "stream", "cpu_count": os.cpu_count(), "fps_in": args.fps, "runs": runs,
            "targets": {"passthrough_640x480": ">= 29 fps out, p95 <= 100 ms", "slow_stage": "p95 <= 250 ms, no growth, drops counted"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))], 1)


async def one_run(width: int, height: int, codec: str, delay_ms: float, duration: float, fps: float, warmup: float) -> dict[str, Any]:
    import aiohttp
    import skimage.data

    from streamer.probe import ClipTrack, ProbeClient, clip_background

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench._stream_server", "--port", str(port), "--codec", codec,
                             "--delay-ms", str(delay_ms)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline), 60)
        if "ready" not in line:
            raise RuntimeError(f"bench server did not start: {line!r}")
        base = f"http://127.0.0.1:{port}"
        track = ClipTrack(clip_background(skimage.data.astronaut(), width, height), fps=fps)
        client = ProbeClient(track)
        async with aiohttp.ClientSession() as http:
            await client.connect_http(base, http)
            await asyncio.sleep(warmup)
            n0, cpu0, t0 = len(client.received), _cpu_s(proc.pid), time.monotonic()
            info0 = await _info(http, base, client.session_id)
            await asyncio.sleep(duration)
            n1, cpu1, t1 = len(client.received), _cpu_s(proc.pid), time.monotonic()
            info1 = await _info(http, base, client.session_id)
            await client.close()
        window = client.received[n0:n1]
        lat = [(r.at - track.sent[r.index]) * 1000.0 for r in window if r.index is not None and r.index in track.sent]
        third = max(1, len(lat) // 3)
        server_frames = info1["stats"]["frames_out"] - info0["stats"]["frames_out"]
        sent_in_window = int(duration * fps)
        return {
            "size": f"{width}x{height}", "codec": codec, "stage_ms": delay_ms, "seconds": round(t1 - t0, 2),
            "fps_out": round(len(window) / (t1 - t0), 1),
            "latency_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95), "max": _pct(lat, 100)},
            "latency_growth_ms": round(statistics.median(lat[-third:]) - statistics.median(lat[:third]), 1) if len(lat) > 6 else None,
            "server_dropped": info1["stats"]["dropped"] - info0["stats"]["dropped"],
            "client_missing": max(0, sent_in_window - len(window)),
            "unreadable_frames": sum(1 for r in window if r.index is None),
            "server_cpu_ms_per_frame": round((cpu1 - cpu0) * 1000.0 / max(server_frames, 1), 2),
            "server_cpu_pct": round((cpu1 - cpu0) / (t1 - t0) * 100.0, 1),
            "server_frames_out": server_frames,
            "server_own_delay_ms_p50": info1["stats"]["server_delay_ms"],  # arrival -> processed, inside the server
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _info(http: Any, base: str, sid: str) -> dict[str, Any]:
    async with http.get(f"{base}/sessions/{sid}") as r:
        return await r.json()
