"""Cluster figures: sessions one replica holds at 640x480@30 before frames drop, SIGTERM-to-exit with and
without a live session, and how long HAProxy takes to stop routing to a replica killed with SIGKILL.

Real `livefuse serve` processes on loopback (bench/_cluster.py); run under `flock /tmp/livefuse-bench.lock`
on a shared machine. Every phase is bounded (--max-sessions-probe, --window-s, --drain-timeout)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._cluster import CHECK_INTERVAL_S, Cluster, Replica, free_port, missing_tools, wait_for


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stages", default="faces,fusion,edits,watermark", help="the replica's pipeline (default: all)")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--max-sessions-probe", type=int, default=6, help="stop adding sessions here")
    p.add_argument("--window-s", type=float, default=5.0, help="seconds each load step is measured")
    p.add_argument("--drop-limit", type=float, default=0.05, help="dropped fraction that counts as 'frames drop'")
    p.add_argument("--drain-timeout", type=float, default=3.0, help="drain timeout for the live-session exit figure")


def _counter(node: Replica, name: str) -> float:
    return node.metric(name) or 0.0


async def _capacity(node: Replica, a: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    from bench._probe import ClipTrack, ProbeClient, clip_background
    import skimage.data

    photo = skimage.data.astronaut()
    clients, steps, held = [], [], 0
    async with aiohttp.ClientSession() as http:
        try:
            for n in range(1, a.max_sessions_probe + 1):
                c = ProbeClient(ClipTrack(clip_background(photo, a.width, a.height), fps=a.fps))
                await c.connect_http(node.url, http)
                clients.append(c)
                await c.wait_frames(5, timeout=30)
                await asyncio.sleep(1.0)   # settle
                f0, d0 = _counter(node, "livefuse_frames_in_total"), _counter(node, "livefuse_frames_dropped_total")
                r0 = [len(x.received) for x in clients]
                await asyncio.sleep(a.window_s)
                f1, d1 = _counter(node, "livefuse_frames_in_total"), _counter(node, "livefuse_frames_dropped_total")
                fps_out = [(len(x.received) - b) / a.window_s for x, b in zip(clients, r0)]
                dropped = (d1 - d0) / max(1.0, f1 - f0)
                budget = node.metric("livefuse_frame_budget_used_ratio")
                steps.append({"sessions": n, "dropped_fraction": round(dropped, 4),
                              "fps_out_min": round(min(fps_out), 1), "frame_budget_used": budget})
                if dropped > a.drop_limit:
                    break
                held = n
        finally:
            for c in clients:
                await c.close()
    return {"sessions_before_drops": held, "steps": steps}


def _exit_time(cluster: Cluster, session: bool, a: argparse.Namespace) -> dict[str, Any]:
    node = Replica("exit", free_port(), cluster.folder / f"exit-{int(session)}")
    node.folder.mkdir(exist_ok=True)
    cluster.start_replica(node)
    wait_for(lambda: node.readyz()[0] == 200, 120, "replica ready")
    loop = asyncio.new_event_loop()
    client = None
    try:
        if session:
            import aiohttp
            import skimage.data

            from bench._probe import ClipTrack, ProbeClient, clip_background

            async def open_one():
                c = ProbeClient(ClipTrack(clip_background(skimage.data.astronaut(), 320, 240), fps=15))
                async with aiohttp.ClientSession() as http:
                    await c.connect_http(node.url, http)
                await c.wait_frames(5, timeout=30)
                return c

            client = loop.run_until_complete(open_one())
        t0 = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)

        async def wait_exit():   # keep the client's loop running while the replica drains
            while node.proc.poll() is None:
                await asyncio.sleep(0.02)

        loop.run_until_complete(asyncio.wait_for(wait_exit(), a.drain_timeout + 60))
        took = time.monotonic() - t0
        out = {"seconds": round(took, 2), "exit_status": node.proc.returncode}
        if session:
            out["drain_timeout_s"] = cluster.drain_timeout
            out["after_timeout_s"] = round(took - cluster.drain_timeout, 2)
            out["client_told"] = [m.get("type") for m in client.messages if m.get("type") in ("draining", "bye")]
        return out
    finally:
        if client is not None:
            loop.run_until_complete(client.close())
        loop.close()
        if node.proc.poll() is None:
            node.proc.kill()


def _front_cutoff(folder: Path) -> dict[str, Any]:
    c = Cluster(folder / "front", replicas=2, extra_args=("--stages", "watermark"))
    try:
        c.start()
        victim = c.nodes[1]
        t0 = time.monotonic()
        victim.proc.send_signal(signal.SIGKILL)
        took = wait_for(lambda: c.backend_status()[victim.name] == "DOWN", 30, "front marks the replica down", step=0.01)
        return {"seconds": round(took, 3), "check_interval_s": CHECK_INTERVAL_S, "fall": 1,
                "since_kill_s": round(time.monotonic() - t0, 3)}
    finally:
        c.stop()


def run(a: argparse.Namespace) -> dict[str, Any]:
    import os
    import platform

    missing = missing_tools()
    with tempfile.TemporaryDirectory(prefix="livefuse-bench-cluster-") as tmp:
        folder = Path(tmp)
        base = Cluster(folder, replicas=0, max_sessions=max(8, a.max_sessions_probe), drain_timeout=a.drain_timeout,
                       extra_args=("--stages", a.stages))
        node = Replica("cap", free_port(), folder / "cap")
        node.folder.mkdir()
        base.start_replica(node)
        try:
            wait_for(lambda: node.readyz()[0] == 200, 180, "replica ready")
            capacity = asyncio.run(_capacity(node, a))
        finally:
            node.proc.send_signal(signal.SIGINT)
            node.proc.wait(timeout=30)
        light = Cluster(folder, replicas=0, drain_timeout=a.drain_timeout, extra_args=("--stages", "watermark"))
        exits = {"no_session": _exit_time(light, False, a), "live_session": _exit_time(light, True, a)}
        front = _front_cutoff(folder) if not missing else {"skipped": f"not installed: {', '.join(missing)}"}
    return {"bench": "cluster", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "gpu": False},
            "video": f"{a.width}x{a.height}@{a.fps:g}", "stages": a.stages,
            "capacity": capacity, "sigterm_to_exit": exits, "front_stops_routing_to_killed_replica": front}
