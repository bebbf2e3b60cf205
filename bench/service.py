"""The REST API end to end over loopback HTTP: photos/s and p50/p95 latency of POST /v1/fuse at several
concurrencies, with dynamic batching on and off side by side (two products, one after the other, same
photos), and the model batch sizes each run formed; the interfaces row: the same photos through REST and
through gRPC (livefuse.v1.Fusion/Fuse) against one server, rounds alternating between them; and the memory
row: `livefuse serve` in a process of its own, its RSS sampled while many large photos arrive at once
(the memory budget answers the excess 503 + Retry-After)."""

from __future__ import annotations

import asyncio
import io
import json
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
    parser.add_argument("--memory-requests", type=int, default=16, help="photos sent at once for the memory row; 0 skips it")
    parser.add_argument("--memory-size", type=int, default=4096, help="the memory row's target photos, N x N pixels")
    parser.add_argument("--memory-only", action="store_true", help="only the memory row")
    parser.add_argument("--interface-photos", type=int, default=64,
                        help="photos per round of the REST vs gRPC row (each a different target); 0 skips it")
    parser.add_argument("--interface-concurrency", default="1,8", help="the REST vs gRPC row's concurrencies")
    parser.add_argument("--interface-rounds", type=int, default=3, help="rounds per interface, alternating (A B, B A, ...)")
    parser.add_argument("--interfaces-only", action="store_true", help="only the REST vs gRPC row")
    parser.add_argument("--memory-cold", action="store_true",
                        help="warm up on a small photo only: the burst also builds the large size's watermark pattern")


def _jpeg(img) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=92)
    return buf.getvalue()


async def _run_mode(batching: bool, args, source: bytes, targets: list[bytes], levels: list[int]) -> dict:
    import aiohttp
    import numpy as np
    from aiohttp.test_utils import TestServer

    from streamer.web.api.photos import PhotoConfig
    from streamer.app.assembly import Product, ProductConfig
    from streamer.config import ServerConfig
    from streamer.web.kit import SafetyConfig
    from streamer.web.server import create_app

    from streamer.safety.auth import TokenStore

    scratch = Path(tempfile.mkdtemp(prefix="livefuse-bench-service-"))
    store = TokenStore()   # a client token with room for the whole run (the open loopback rate is 120/min)
    token = store.issue("bench", rate_per_minute=1e6, burst=10_000)
    store.save(scratch / "tokens.json")
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(scratch / "audit.jsonl"),
                                                        tokens_file=str(scratch / "tokens.json")),
                                    photos=PhotoConfig(batching=batching, window_ms=args.window_ms, max_batch=args.max_batch)))
    await asyncio.get_running_loop().run_in_executor(None, product.warm_up)
    app = create_app(ServerConfig(), product)
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
    from tests.streamer.web.api.conftest import make_clip

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


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _memory_row(args, source: bytes) -> dict:
    """`livefuse serve --tokens` in a process of its own; once warm (a small photo, then one large photo
    alone: the models, the batchers and the large size's watermark pattern are in place), its idle RSS;
    then `--memory-requests` large photos at once, its RSS sampled every 5 ms (and the kernel's own
    high-water mark, reset at the start where the kernel allows): peak over idle, and what each answer was."""
    import os
    import subprocess
    import sys
    import threading

    import aiohttp
    import cv2

    from bench._churn import until_ready
    from bench._product import grace_hopper
    from streamer.config import ServerConfig
    from streamer.safety.auth import TokenStore

    n = args.memory_size
    big = cv2.resize(grace_hopper(), (n, n), interpolation=cv2.INTER_CUBIC)
    target = _jpeg(big)
    scratch = Path(tempfile.mkdtemp(prefix="livefuse-bench-memory-"))
    store = TokenStore()
    token = store.issue("bench", rate_per_minute=1e6, burst=10_000)
    store.save(scratch / "tokens.json")
    port = _free_port()
    env = {**os.environ, "LIVEFUSE_AUDIT_LOG": str(scratch / "audit.jsonl"), "LIVEFUSE_RESULTS": str(scratch / "results")}
    log = (scratch / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "streamer.app.cli", "serve", "--port", str(port),
                             "--tokens", str(scratch / "tokens.json")], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=600)) as http:
            await until_ready(http, base, proc)

            async def one(photo: bytes) -> tuple[int, str | None, str | None]:
                form = aiohttp.FormData()
                form.add_field("source", source, filename="s.jpg", content_type="image/jpeg")
                form.add_field("target", photo, filename="t.jpg", content_type="image/jpeg")
                form.add_field("consent", "true")
                async with http.post(f"{base}/v1/fuse", data=form) as r:
                    body = await r.read()
                    code = None if r.status == 200 else json.loads(body).get("code")
                    return r.status, r.headers.get("Retry-After"), code

            small = cv2.resize(big, (512, 512), interpolation=cv2.INTER_AREA)
            warm = [await one(_jpeg(small))] + ([] if args.memory_cold else [await one(target)])
            await asyncio.sleep(2.0)
            idle = _status_kib(proc.pid, "VmRSS")
            try:
                Path(f"/proc/{proc.pid}/clear_refs").write_text("5")   # the high-water mark from here
                hwm_reset = True
            except OSError:
                hwm_reset = False
            peak, stop = [idle], threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    try:
                        peak[0] = max(peak[0], _status_kib(proc.pid, "VmRSS"))
                    except (OSError, KeyError):
                        return
                    stop.wait(0.005)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t0 = time.perf_counter()
            answers = await asyncio.gather(*(one(target) for _ in range(args.memory_requests)))
            wall = time.perf_counter() - t0
            stop.set()
            sampler.join()
            hwm = _status_kib(proc.pid, "VmHWM") if hwm_reset else None
            top = max(peak[0], hwm or 0)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    statuses: dict[str, int] = {}
    for status, _, code in answers:
        key = str(status) if code is None else f"{status} {code}"
        statuses[key] = statuses.get(key, 0) + 1
    refused = [a for a in answers if a[0] == 503]
    return {"requests_at_once": args.memory_requests, "target": f"{n}x{n}", "target_jpeg_bytes": len(target),
            "large_size_warmed": not args.memory_cold,
            "warm_up": [a[0] for a in warm], "memory_budget_mib": ServerConfig().memory_budget >> 20,
            "idle_rss_mib": round(idle / 1024), "peak_rss_mib": round(top / 1024),
            "peak_over_idle_mib": round((top - idle) / 1024), "within_1_gib": (top - idle) <= 1 << 20,
            "peak_from": "VmRSS sampled every 5 ms" + (" and VmHWM reset at the start" if hwm_reset else ""),
            "answers": statuses, "refused_with_retry_after": all(a[1] for a in refused), "wall_s": round(wall, 1)}


async def _interfaces(args, source: bytes, targets: list[bytes]) -> dict:
    """The same photos through POST /v1/fuse and through gRPC Fuse, one server (REST and gRPC ports of one
    app, batching on), each request a different target; rounds alternate REST, gRPC, gRPC, REST, ... so
    a drifting machine slows both alike. Per interface: photos/s (median over its rounds) and p50/p95 of
    every request's latency; the ratio gRPC / REST."""
    import socket

    import aiohttp
    import grpc
    import numpy as np
    from aiohttp.test_utils import TestServer

    from livefuse.v1 import fusion_pb2 as pb
    from livefuse.v1 import fusion_pb2_grpc
    from streamer.app.assembly import Product, ProductConfig
    from streamer.config import ServerConfig
    from streamer.rpc.server import attach
    from streamer.safety.auth import TokenStore
    from streamer.web.kit import SafetyConfig
    from streamer.web.server import create_app

    scratch = Path(tempfile.mkdtemp(prefix="livefuse-bench-interfaces-"))
    store = TokenStore()
    token = store.issue("bench", rate_per_minute=1e6, burst=10_000)
    store.save(scratch / "tokens.json")
    product = Product(ProductConfig(safety=SafetyConfig(audit_path=str(scratch / "audit.jsonl"),
                                                        tokens_file=str(scratch / "tokens.json"))))
    await asyncio.get_running_loop().run_in_executor(None, product.warm_up)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        grpc_port = s.getsockname()[1]
    config = ServerConfig(grpc_port=grpc_port)
    app = create_app(config, product)
    attach(app, config)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    url = str(server.make_url("/v1/fuse"))
    levels = [int(v) for v in args.interface_concurrency.split(",") if v.strip()]
    auth = (("authorization", f"Bearer {token}"),)
    out: dict = {"photos": len(targets), "rounds": args.interface_rounds, "server": "one app: REST and gRPC ports"}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=max(levels)),
                                         headers={"Authorization": f"Bearer {token}"}) as http, \
                grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=[
                    ("grpc.max_receive_message_length", 256 << 20)]) as channel:
            stub = fusion_pb2_grpc.FusionStub(channel)

            async def rest(target: bytes) -> float:
                form = aiohttp.FormData()
                form.add_field("source", source, filename="s.jpg", content_type="image/jpeg")
                form.add_field("target", target, filename="t.jpg", content_type="image/jpeg")
                form.add_field("consent", "true")
                t0 = time.perf_counter()
                async with http.post(url, data=form) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"REST: HTTP {r.status}")
                return (time.perf_counter() - t0) * 1000.0

            async def rpc(target: bytes) -> float:
                t0 = time.perf_counter()
                await stub.Fuse(pb.FuseRequest(source=source, target=target, consent=True), metadata=auth)
                return (time.perf_counter() - t0) * 1000.0

            kinds = {"rest": rest, "grpc": rpc}
            await rest(targets[0])   # the watermark pattern and the source's registration, before any timing
            await rpc(targets[0])
            for c in levels:
                lat: dict[str, list[float]] = {"rest": [], "grpc": []}
                rates: dict[str, list[float]] = {"rest": [], "grpc": []}
                for r in range(args.interface_rounds):
                    for kind in (("rest", "grpc") if r % 2 == 0 else ("grpc", "rest")):
                        gate = asyncio.Semaphore(c)

                        async def limited(target: bytes, call=kinds[kind]) -> float:
                            async with gate:
                                return await call(target)

                        t0 = time.perf_counter()
                        lat[kind] += await asyncio.gather(*(limited(t) for t in targets))
                        rates[kind].append(len(targets) / (time.perf_counter() - t0))
                row = {kind: {"photos_per_s": round(float(np.median(rates[kind])), 2),
                              "p50_ms": round(float(np.percentile(lat[kind], 50)), 1),
                              "p95_ms": round(float(np.percentile(lat[kind], 95)), 1)} for kind in kinds}
                row["grpc_over_rest_photos_per_s"] = round(row["grpc"]["photos_per_s"] / row["rest"]["photos_per_s"], 3)
                out[f"c{c}"] = row
    finally:
        await server.close()
        product.close()
    return out


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
    if args.interfaces_only:
        photos = [_jpeg(np.roll(grace, 3 * i, axis=1)) for i in range(args.interface_photos)]
        result["interfaces"] = asyncio.run(_interfaces(args, source, photos))
        return result
    if not args.memory_only:
        for batching in (True, False):
            result["batching_on" if batching else "batching_off"] = asyncio.run(_run_mode(batching, args, source, targets, levels))
    if not args.memory_only and args.interface_photos > 0:
        photos = [_jpeg(np.roll(grace, 3 * i, axis=1)) for i in range(args.interface_photos)]
        result["interfaces"] = asyncio.run(_interfaces(args, source, photos))
    if args.memory_requests > 0:
        result["memory"] = asyncio.run(_memory_row(args, source))
    return result
