"""Soak: sessions and WHEP viewers opened and closed against one `livefuse serve` for minutes, with the
server's RSS, threads and open fds sampled as it goes. What a long-running replica must show: the figures
follow the open sessions, not the number ever opened.

A real server in a child process (the product pipeline unless --stages says otherwise) and real aiortc
peers (bench/_churn.py: the client the resource test uses). Run it under `flock /tmp/livefuse-bench.lock`
on a shared machine; `--minutes 10` is the issue's soak, `--minutes 1` a quick look."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._churn import ChurnConfig, background, cycle, issue_token, process_figures, until_ready
from bench._cluster import free_port

ROOT = Path(__file__).resolve().parents[1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=10.0, help="how long sessions keep opening and closing")
    p.add_argument("--stages", default="", help="the server's pipeline (default: the product)")
    p.add_argument("--viewers", type=int, default=1, help="WHEP viewers per session")
    p.add_argument("--concurrent", type=int, default=2, help="cycles running at once")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples")


async def _soak(a: argparse.Namespace, url: str, proc: subprocess.Popen, token: str) -> dict[str, Any]:
    import aiohttp

    config = ChurnConfig(viewers=a.viewers)
    frame = background(config.width, config.height)
    samples: list[dict[str, Any]] = []
    counts = {"cycles": 0, "failed": 0}
    failures: list[str] = []
    t0 = time.monotonic()
    end = t0 + a.minutes * 60.0

    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        await until_ready(http, url, proc)
        samples.append({"t_s": 0.0, "cycles": 0, **process_figures(proc.pid).as_dict(),
                        "client_fds": process_figures().fds})

        async def runner(lane: int) -> None:
            k = lane
            while time.monotonic() < end:
                try:
                    await cycle(url, http, frame, config, k)
                    counts["cycles"] += 1
                except Exception as exc:     # counted and kept: a soak reports failures, it does not stop
                    counts["failed"] += 1
                    if len(failures) < 5:
                        failures.append(f"{type(exc).__name__}: {exc}"[:300])
                k += a.concurrent

        async def sampler() -> None:
            while time.monotonic() < end:
                await asyncio.sleep(a.sample_s)
                samples.append({"t_s": round(time.monotonic() - t0, 1), "cycles": counts["cycles"],
                                **process_figures(proc.pid).as_dict(), "client_fds": process_figures().fds})

        await asyncio.gather(sampler(), *(runner(lane) for lane in range(a.concurrent)))
        await asyncio.sleep(2.0)     # every peer gone, the heap keeper's pass done
        samples.append({"t_s": round(time.monotonic() - t0, 1), "cycles": counts["cycles"], "idle": True,
                        **process_figures(proc.pid).as_dict()})
    rss = np.array([s["rss_mb"] for s in samples])
    half = len(rss) // 2
    return {"samples": samples, **counts, "failures": failures,
            "rss_mb": {"start": float(rss[0]), "max": float(rss.max()), "end_idle": float(rss[-1]),
                       # growth per 100 cycles over the second half (after caches and pools filled)
                       "second_half_growth_per_100_cycles": (
                           round(float(rss[-1] - rss[half]) * 100.0 /
                                 max(1, samples[-1]["cycles"] - samples[half]["cycles"]), 2))},
            "threads": {"start": samples[0]["threads"], "max": max(s["threads"] for s in samples),
                        "end_idle": samples[-1]["threads"]},
            "fds": {"start": samples[0]["fds"], "max": max(s["fds"] for s in samples), "end_idle": samples[-1]["fds"]}}


def run(a: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="livefuse-soak-") as tmp:
        args = [sys.executable, "-m", "streamer.app.cli", "serve", "--port", str(port), "--max-sessions", "8"]
        if a.stages:
            args += ["--stages", a.stages]
        env = dict(os.environ, LIVEFUSE_AUDIT_LOG=str(Path(tmp) / "audit.jsonl"))
        # a token of its own, so the churn is measured and not the loopback rate limit
        tokens = Path(tmp) / "tokens.json"
        token = issue_token(tokens, "soak", env, rate=60000, max_sessions=8)
        args += ["--tokens", str(tokens), "--drain-timeout", "5"]
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            figures = asyncio.run(_soak(a, f"http://127.0.0.1:{port}", proc, token))
        finally:
            proc.terminate()
            proc.wait(30)
    return {"bench": "soak", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "minutes": a.minutes, "stages": a.stages or "product", "viewers_per_session": a.viewers,
            "concurrent_cycles": a.concurrent, **figures}
