"""What a session or viewer takes, it gives back: 100 real WHIP sessions and 100 WHEP viewers opened and
closed against `livefuse serve` (the product pipeline, in its own process so its RSS is its own) leave
its memory, threads, file descriptors and slots where they were.

Every cycle ends another way (viewer DELETE or hang-up, sender DELETE or hang-up; see bench/_churn.py).
One token opens all of them with 4 slots (and a rate limit the churn stays under), so a slot kept by any
ended session or viewer would refuse a later cycle."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bench._churn import ChurnConfig, background, cycle, issue_token, process_figures, until_ready
from bench._cluster import free_port

ROOT = Path(__file__).resolve().parents[3]
WARM_CYCLES, CYCLES = 10, 100
# Before the per-session runtimes were given back on close and the heap collected after each peer,
# the server grew by 14 MB per cycle here (1.4 GB over 100); now it moves by a few MB in all.
RSS_GROWTH_LIMIT_MB = 60.0


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


async def _settled(http: aiohttp.ClientSession, url: str, pid: int) -> tuple[dict, str]:
    """The server's figures once every peer has gone and its memory pass has run."""
    for _ in range(100):
        async with http.get(f"{url}/metrics") as r:
            text = await r.text()
        if _metric(text, "livefuse_sessions") == 0 and _metric(text, "livefuse_whep_viewers") == 0:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)    # the heap keeper's pass after the last peer
    return process_figures(pid).as_dict(), text


@pytest.mark.timeout(900)
async def test_100_sessions_and_100_viewers_leave_memory_threads_fds_and_slots_flat(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, LIVEFUSE_AUDIT_LOG=str(tmp_path / "audit.jsonl"))
    tokens = tmp_path / "tokens.json"
    token = issue_token(tokens, "churn", env, rate=6000, max_sessions=4)
    log = open(tmp_path / "server.log", "w")     # a file, not a pipe nobody drains: the server logs every session
    proc = subprocess.Popen([sys.executable, "-m", "streamer.app.cli", "serve", "--port", str(port),
                             "--max-sessions", "4", "--tokens", str(tokens), "--drain-timeout", "5"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    config = ChurnConfig(viewers=1)
    frame = background(config.width, config.height)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            await until_ready(http, url, proc)
            for i in range(WARM_CYCLES):        # first sessions fill caches and pools that then stay
                await cycle(url, http, frame, config, i)
            before, _ = await _settled(http, url, proc.pid)
            for i in range(WARM_CYCLES, WARM_CYCLES + CYCLES):
                await cycle(url, http, frame, config, i)
            after, metrics = await _settled(http, url, proc.pid)
    except Exception as exc:
        raise AssertionError(f"{exc}; server log: {(tmp_path / 'server.log').read_text()[-1500:]}") from exc
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()

    grown = after["rss_mb"] - before["rss_mb"]
    assert grown < RSS_GROWTH_LIMIT_MB, f"RSS grew {grown:.1f} MB over {CYCLES} cycles: {before} -> {after}"
    assert after["threads"] <= before["threads"] + 2, (before, after)
    assert after["fds"] <= before["fds"] + 2, (before, after)
    assert _metric(metrics, "livefuse_sessions") == 0 and _metric(metrics, "livefuse_whep_viewers") == 0
    # the memory pass ran after peers ended (at least once per batch of ends), off the event loop
    assert _metric(metrics, "livefuse_heap_release_seconds_count") >= 1
