"""The REST API end to end over loopback HTTP: photos/s and p50/p95 latency of POST /v1/fuse at several
concurrencies, with dynamic batching on and off side by side (two products, one after the other, same
photos), and the model batch sizes each run formed."""

from __future__ import annotations

import asyncio
import io
import tempfile
import time
from pathlib import Path


def add_arguments(parser) -> None:
    parser.add_argument("--concurrency", default="1,8,32", help="client concurrencies, comma-separated")
    parser.add_argument("--requests", type=int, default=32, help="requests per concurrency (at least 2x it)")
    parser.add_argument("--size", type=int, default=512, help="target photo height in pixels (Grace Hopper, scaled)")
    parser.add_argument("--window-ms", type=float, default=4.0, help="the batchers' wait for company")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--clip-frames", type=int, default=48, help="frames of the clip job (640x480, 24 fps, audio); 0 skips it")


def _jpeg(img) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=92)
    return buf.getvalue()


async def _run_mode(batching: bool, args, source: bytes, targets: list[bytes], levels: list[int]) -> dict:
    import aiohttp
    import numpy as np
    from aiohttp.test_utils import TestServer

    from streamer.api.photos import PhotoConfig
    from streamer.assembly import Product, ProductConfig
    from streamer.config import ServerConfig
    from streamer.safety.kit import SafetyConfig
    from streamer.server import create_app

    from streamer.safety.auth import TokenStore

    scratch = Path(tempfile.mkdtemp(prefix="livefuse-bench-service-"))
    store = TokenStore()   # a client token with room for the whole run (the open loopback rate is 120/min)
    token = store.issue("bench", rate_per_minute=1e6, burst=10_000)
    store.save(scratch / "tokens.json")
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(scratch / "audit.jsonl"),
                                                        tokens_file=str(scratch / "tokens.json")),
                                    photos=PhotoConfig(batching=batching, window_ms=args.window_ms, max_batch=args.max_batch)))
    await asyncio.get_running_loop().run_in_executor(None, product.warm_up)
    app = create_app(ServerConfig(), product.services())
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/v1/fuse"))
    out: dict = {}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=max(levels)),
                                         headers={"Authorization": f"Bearer {token}"}) as http:
            async def one(i: int) -> float:
                form = aiohttp.FormData()
                form.add_field("source", source, filename="s.jpg", content_type="image/jpeg")
                form.add_field("target", targets[i % len(targets)], filename="t.jpg", content_type="image/jpeg")
                form.add_field("consent", "true")
                t0 = time.perf_counter()
                async with http.post(url, data=form) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"request {i}: HTTP {r.status}")
                return (time.perf_counter() - t0) * 1000.0

            await one(0)   # first request pays for the watermark pattern and the source's registration
            for c in levels:
                n = max(args.requests, 2 * c)
                before = {b.name: (b.stats.batches, b.stats.items, b.stats.largest) for b in product.photos.models.batchers}
                gate = asyncio.Semaphore(c)

                async def limited(i: int) -> float:
                    async with gate:
                        return await one(i)

                t0 = time.perf_counter()
                lat = np.array(await asyncio.gather(*(limited(i) for i in range(n))))
                wall = time.perf_counter() - t0
                batches = {}
                for b in product.photos.models.batchers:
                    calls, items = b.stats.batches - before[b.name][0], b.stats.items - before[b.name][1]
                    batches[b.name] = {"calls": calls, "items": items,
                                       "mean_batch": round(items / calls, 2) if calls else 0.0}
                out[f"c{c}"] = {"requests": n, "photos_per_s": round(n / wall, 2),
                                "p50_ms": round(float(np.percentile(lat, 50)), 1),
                                "p95_ms": round(float(np.percentile(lat, 95)), 1), "batches": batches}
            if batching and args.clip_frames > 0:
                out["clip_job"] = await _clip_job(http, str(server.make_url("")).rstrip("/"), source, args.clip_frames)
    finally:
        await server.close()
        product.close()
    return out


async def _clip_job(http, base: str, source: bytes, frames: int) -> dict:
    """One clip job through POST /v1/jobs and its events: frames per second while it runs."""
    import json

    import aiohttp

    from bench._product import grace_hopper
    from tests.streamer.api.conftest import make_clip

    path = make_clip(Path(tempfile.mkdtemp(prefix="livefuse-bench-clip-")) / "clip.mp4", grace_hopper(), frames, (640, 480))
    form = aiohttp.FormData()
    form.add_field("source", source, filename="s.jpg", content_type="image/jpeg")
    form.add_field("target", path.read_bytes(), filename="clip.mp4", content_type="video/mp4")
    form.add_field("consent", "true")
    t0 = time.perf_counter()
    async with http.post(f"{base}/v1/jobs", data=form) as r:
        job = await r.json()
    started = done = None
    async with http.get(f"{base}/v1/jobs/{job['id']}/events") as r:
        async for raw in r.content:
            line = raw.decode().strip()
            if line == "event: running" and started is None:
                started = time.perf_counter()
            if line.startswith("data: "):
                job = json.loads(line[6:])
        done = time.perf_counter()
    run_s = done - (started or t0)
    return {"frames": job["frames_done"], "size": "640x480", "state": job["state"],
            "frames_per_s": round(job["frames_done"] / run_s, 1) if run_s > 0 else None,
            "submit_to_done_s": round(done - t0, 2), "results": "a local folder"}


def run(args) -> dict:
    import os

    import cv2
    import numpy as np
    import skimage.data

    from bench._product import grace_hopper

    levels = [int(v) for v in args.concurrency.split(",") if v.strip()]
    grace = grace_hopper()
    scale = args.size / grace.shape[0]
    grace = cv2.resize(grace, (int(round(grace.shape[1] * scale)), args.size), interpolation=cv2.INTER_AREA)
    targets = [_jpeg(np.roll(grace, i, axis=1)) for i in range(8)]
    source = _jpeg(np.ascontiguousarray(skimage.data.astronaut()))
    result: dict = {"machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)},
                    "target": f"{grace.shape[1]}x{grace.shape[0]}", "window_ms": args.window_ms, "max_batch": args.max_batch}
    for batching in (True, False):
        result["batching_on" if batching else "batching_off"] = asyncio.run(_run_mode(batching, args, source, targets, levels))
    return result
