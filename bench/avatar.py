"""Avatar outputs: what face data, VMC and VTube Studio cost per frame, side by side with the outputs off,
on real faces (a clip of a real photo through the stream's face stage, paced at 30 fps).

    flock /tmp/livefuse-bench.lock livefuse bench avatar --json
    livefuse bench avatar --json --frames 150 --repeats 3

Rows, each over the same frames, the sides interleaved run by run:
- `off`: the face-out stage with nothing asked for (what every session pays).
- `outputs`: face events at 30 a second (made into JSON text as the server sends them) + VMC to a UDP receiver +
  VTube Studio to a fake VTS (tests/vts_fake.py) on loopback. The receiving apps run in a process of their
  own, as VSeeFace or VTube Studio do: in this process their threads would take the GIL from the sender at
  every datagram, and that hand-over, not the send, would be what the frame thread is charged.
  `frame_thread` is the stage's own time on the frame thread (wall and thread CPU: a live VTube Studio
  client writes there); `vts_thread` the client's own thread (connecting, keepalives), per frame.
- `network_cpu_ms_per_frame`: the blendshapes network's CPU in place (the face rig's one model; it runs once per
  frame the face's landmarks change, `network_runs_per_frame`; a still face keeps its landmarks and its scores);
  `network_alone` the same network timed in a loop of its own. `outputs_ms_cpu` (the summary) is the frame
  thread's median less the network, plus the VTube Studio thread's share: the outputs' cost against the issue's 0.5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from typing import Any

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frames", type=int, default=150, help="frames per side per run (default 150: 5 s at 30 fps)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, interleaved (default 2)")
    parser.add_argument("--fps", type=float, default=30.0, help="the pace frames arrive at (default 30)")


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 4), "p95_ms": round(float(np.percentile(a, 95)), 4), "n": len(ms)}


def _frames(n: int) -> list[Any]:
    """Face-stage states of a clip from a real photo: Grace Hopper drifting and nodding slightly, with noise,
    the stream's face stage (landmarks kept while still, smoothing) run once, up front."""
    import cv2
    import matplotlib.cbook
    from PIL import Image

    from streamer.pipeline.pipeline import FrameState
    from streamer.pipeline.stages.faces import FaceStage
    from tests.faceclips import add_noise, place

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        photo = np.ascontiguousarray(np.asarray(Image.open(f).convert("RGB")))
    cv2.setNumThreads(1)
    rng = np.random.default_rng(5)
    stage = FaceStage()
    states = []
    try:
        for i in range(n):
            frame, _ = place(photo, size=(640, 480), scale=0.8, angle=3.0 * np.sin(i / 9.0),
                             shift=(6.0 * np.sin(i / 15.0), 0.0))
            states.append(stage(FrameState(image=add_noise(frame, 3.0, rng), pts=i * 3000), None))
    finally:
        stage.close()
    return states


def apps_main() -> None:
    """The receiving apps, in a process of their own (`python -c "from bench.avatar import apps_main;
    apps_main()"`): a UDP socket counting VMC datagrams on a thread and a fake VTube Studio on the main
    loop. Prints {"vmc_port", "vts_url"} as a line, then, when stdin closes, {"vmc_datagrams", "injects"}."""
    import json
    import sys

    from tests.vts_fake import FakeVts, VtsApp

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    count = [0]

    def receive() -> None:
        while True:
            try:
                sock.recv(65536)
            except OSError:
                return
            count[0] += 1

    threading.Thread(target=receive, daemon=True).start()

    async def main() -> None:
        app = VtsApp()
        vts = await FakeVts(app).start()
        print(json.dumps({"vmc_port": sock.getsockname()[1], "vts_url": vts.url}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await vts.stop()
        print(json.dumps({"vmc_datagrams": count[0], "injects": len(app.injects)}), flush=True)

    asyncio.run(main())


class _Apps:
    """The child process of `apps_main`."""

    def __init__(self) -> None:
        import json
        import os
        import subprocess
        import sys
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen([sys.executable, "-c", "from bench.avatar import apps_main; apps_main()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the avatar apps' process did not start")
        ready = json.loads(line)
        self.vmc_port, self.vts_url = int(ready["vmc_port"]), str(ready["vts_url"])

    def close(self) -> dict[str, int]:
        import json

        out, _ = self.proc.communicate(timeout=10.0)
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


def _thread_cpu(thread: threading.Thread) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))   # type: ignore[arg-type]


def _side(states: list[Any], outputs_on: bool, fps: float, vts_url: str, vmc_port: int, token_file: str) -> dict[str, Any]:
    from streamer.pipeline.stages.face_out import FaceOutStage
    from streamer.session.protocol import dumps
    from streamer.session.session import Controls, frame_context
    from streamer.sinks.face_outputs import FaceOutputs
    from streamer.sinks.vtube_studio import VtsSettings

    from engines.face_rig import open_blendshapes

    events: list[str] = []
    outputs = FaceOutputs(vts_settings=VtsSettings(token_file=token_file))
    net = open_blendshapes()
    net_ms: list[float] = []

    def timed(landmarks):   # the network's own CPU time, in place, frame by frame
        c0 = time.thread_time()
        try:
            return net(landmarks)
        finally:
            net_ms.append((time.thread_time() - c0) * 1000.0)

    stage = FaceOutStage(outputs, blendshapes=timed)
    asked = {"vmc": f"127.0.0.1:{vmc_port}", "vtube_studio": vts_url, "face_events": 30.0} if outputs_on else None
    # each event as the server sends it: JSON text (on the server this runs on the event loop)
    context = frame_context(Controls(outputs=asked), notify=lambda e: events.append(dumps(e)))
    wall, cpu = [], []
    try:
        stage(states[0], context)                  # the network loads, the client connects
        if outputs_on:
            end = time.monotonic() + 5.0
            while outputs.vts.state != "live" and time.monotonic() < end:
                time.sleep(0.02)
        runs0 = stage.rig.network_runs
        net_ms.clear()
        vts_thread = outputs.vts._thread if outputs.vts is not None else None
        vts_cpu0 = _thread_cpu(vts_thread) if vts_thread is not None else 0.0
        t_next = time.perf_counter()
        for st in states:
            t_next += 1.0 / fps
            w0, c0 = time.perf_counter(), time.thread_time()
            stage(st, context)
            cpu.append((time.thread_time() - c0) * 1000.0)
            wall.append((time.perf_counter() - w0) * 1000.0)
            left = t_next - time.perf_counter()
            if left > 0:
                time.sleep(left)
        time.sleep(0.2)
        vts_ms = (_thread_cpu(vts_thread) - vts_cpu0) * 1000.0 / len(states) if vts_thread is not None else 0.0
        status = outputs.status()
        less_net = sorted(c - n for c, n in zip(cpu, _per_frame(net_ms, stage, states))) if outputs_on else cpu
        return {"frame_thread_wall": _stats(wall), "frame_thread_cpu": _stats(cpu),
                "frame_thread_cpu_less_network": _stats(less_net),
                "network_cpu_ms_per_frame": round(sum(net_ms) / len(states), 4),
                "vts_thread_cpu_ms_per_frame": round(vts_ms, 4),
                "network_runs_per_frame": round((stage.rig.network_runs - runs0) / len(states), 3),
                "face_events": sum(1 for e in events if e.startswith('{"type":"face"')),
                "vts_sent": status.get("vtube_studio", {}).get("sent", 0),
                "vmc_frames": status.get("vmc", {}).get("frames", 0)}
    finally:
        stage.close()


def _per_frame(net_ms: list[float], stage: Any, states: list[Any]) -> list[float]:
    """The network's time on each frame (0 where a still face kept its scores): the runs, in order, land
    on the frames whose landmarks changed; approximated by spreading them evenly when counts differ."""
    frames = len(states)
    out = [0.0] * frames
    if not net_ms:
        return out
    step = frames / len(net_ms)
    for i, v in enumerate(net_ms):
        out[min(frames - 1, int(i * step))] += v
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    import torch

    from engines.face_rig import open_blendshapes
    torch.set_num_threads(1)
    states = _frames(args.frames)
    apps = _Apps()
    sides: dict[str, list[dict[str, Any]]] = {"off": [], "outputs": []}
    received: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            token_file = f"{tmp}/tokens.json"
            for i in range(args.repeats):
                for name in (("off", "outputs") if i % 2 == 0 else ("outputs", "off")):
                    sides[name].append(_side(states, name == "outputs", args.fps, apps.vts_url, apps.vmc_port,
                                             token_file))
        net = open_blendshapes()
        pts = next(s for s in states if s.faces).faces[0].landmarks
        for _ in range(20):
            net(pts)
        net_ms = []
        for _ in range(300):
            t0 = time.thread_time()
            net(pts)
            net_ms.append((time.thread_time() - t0) * 1000.0)
    finally:
        received = apps.close()
    network = _stats(net_ms)

    def med(side: str, *path: str) -> float:
        vals = []
        for r in sides[side]:
            v: Any = r
            for p in path:
                v = v[p]
            vals.append(float(v))
        return float(np.median(vals))

    frame_less = med("outputs", "frame_thread_cpu_less_network", "median_ms")
    vts_cpu = med("outputs", "vts_thread_cpu_ms_per_frame")
    return {"benchmark": "avatar", "frames": args.frames, "fps": args.fps, "repeats": args.repeats,
            "runs": sides, "network_alone": network, "received": received,
            "summary": {"off_ms_cpu": round(med("off", "frame_thread_cpu", "median_ms"), 4),
                        "outputs_ms_cpu": round(frame_less + vts_cpu, 4),
                        "outputs_frame_thread_ms_cpu": round(frame_less, 4),
                        "outputs_vts_thread_ms_cpu": round(vts_cpu, 4),
                        "network_ms_cpu_per_frame": round(med("outputs", "network_cpu_ms_per_frame"), 4),
                        "budget_ms": 0.5}}


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser()
    add_arguments(p)
    print(run(p.parse_args()))
