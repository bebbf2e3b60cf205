"""Photos that arrive together share model calls: 50 concurrent requests from a client pool all come
back fused and watermarked (none lost, none mixed up), and /metrics shows batches of more than one."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import numpy as np

from tests.streamer.web.api.conftest import encode, fuse_form


def batch_histogram(text: str, model: str) -> tuple[float, float, float]:
    """(calls, items, calls of one item) for `model` from the Prometheus text."""
    def value(name: str, extra: str = "") -> float:
        m = re.search(rf'^{name}{{{extra}model="{model}"}} ([0-9.e+]+)$', text, re.M) or \
            re.search(rf'^{name}{{model="{model}"{"," + extra.rstrip(",") if extra else ""}}} ([0-9.e+]+)$', text, re.M)
        return float(m.group(1)) if m else 0.0

    return (value("livefuse_batch_size_count"), value("livefuse_batch_size_sum"),
            value("livefuse_batch_size_bucket", 'le="1.0",'))


async def test_fifty_concurrent_requests_none_lost_batches_formed(api, api_world, astronaut, grace_hopper):
    url, _, _ = api
    src = encode(astronaut)
    # each target a little different (so no two answers could be swapped unnoticed): shifted by i pixels
    targets = [encode(np.roll(grace_hopper, i, axis=1)) for i in range(50)]
    latencies: list[float] = []

    async def one(http: aiohttp.ClientSession, i: int) -> tuple[int, str, str, int]:
        t0 = time.perf_counter()
        async with http.post(f"{url}/v1/fuse", data=fuse_form(src, targets[i], consent="true"),
                             headers=api_world.headers()) as r:
            body = await r.read()
            latencies.append(time.perf_counter() - t0)
            return r.status, r.headers.get("X-LiveFuse-Audit-Record", ""), r.headers.get("X-LiveFuse-Watermark", ""), len(body)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as http:   # a pool of 16 connections
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(http, i) for i in range(50)))
        wall = time.perf_counter() - t0
        async with http.get(f"{url}/metrics", headers=api_world.headers()) as r:   # a token, as every route asks
            metrics = await r.text()
    statuses = [s for s, *_ in results]
    assert statuses == [200] * 50, statuses
    ids = {rid for _, rid, _, _ in results}
    assert len(ids) == 50 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert all(re.fullmatch(r"[0-9a-f]{16}", wm) for _, _, wm, _ in results)
    logged = {r["data"]["request"] for r in api_world.records("api_fuse")}
    assert ids <= logged
    calls, items, single = batch_histogram(metrics, "landmarks")
    assert items >= 50 and calls < items, f"no batch of more than one: {calls} calls for {items} items"
    lat = np.array(latencies) * 1000
    print(f"\n50 requests, 16 connections: {wall:.1f} s, {50 / wall:.1f} photos/s, p50 {np.percentile(lat, 50):.0f} ms, "
          f"p95 {np.percentile(lat, 95):.0f} ms; landmark calls {calls:.0f} for {items:.0f} images "
          f"(mean batch {items / calls:.2f}, {single:.0f} of one)")


async def test_photos_past_the_inflight_bound_are_told_busy(api_world, astronaut, grace_hopper):
    """Photos beyond `ServerConfig.max_photos` (counted once their bodies are read) are refused at once
    with 503 + Retry-After, not queued in memory."""
    from streamer.config import ServerConfig
    from tests.streamer.web.api.conftest import serve_product

    async with serve_product(api_world.product, ServerConfig(max_photos=1)) as (url, http, _):
        async def one():
            async with http.post(f"{url}/v1/fuse", data=fuse_form(encode(astronaut), encode(grace_hopper), consent="true"),
                                 headers=api_world.headers()) as r:
                return r.status, r.headers.get("Retry-After"), (await r.json())["code"] if r.status != 200 else None

        results = await asyncio.gather(*(one() for _ in range(4)))
    assert (200, None, None) in results
    assert (503, "1", "busy") in results, results
