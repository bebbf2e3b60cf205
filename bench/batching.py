"""The photo API's landmark call batched three ways side by side in one run: unbatched (each caller runs
it on its own thread), the project's `DynamicBatcher` in-process, and, with `--triton`, PyTriton's Triton
server with its dynamic batcher (same max batch and max queue delay) on loopback; per-call p50/p95,
calls/s and the batch sizes each formed (Triton's from its own statistics endpoint), at each concurrency
from a thread pool.

nvidia-pytriton 0.7 pins numpy<2, so it lives in its own venv (`--triton-python`, or the
LIVEFUSE_TRITON_PYTHON environment variable): bench/_triton_side.py runs there, and each batch Triton
forms comes back here over a Unix socket to the same landmarker object the other two modes call."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np

SIDE = Path(__file__).resolve().with_name("_triton_side.py")


def add_arguments(parser) -> None:
    parser.add_argument("--concurrency", default="1,8,32", help="caller threads, comma-separated")
    parser.add_argument("--requests", type=int, default=64, help="calls per concurrency (at least 2x it)")
    parser.add_argument("--size", type=int, default=512, help="photo height in pixels (Grace Hopper, scaled)")
    parser.add_argument("--window-ms", type=float, default=4.0, help="max wait for company (PhotoConfig.window_ms)")
    parser.add_argument("--max-batch", type=int, default=8, help="PhotoConfig.max_batch")
    parser.add_argument("--triton", action="store_true", help="also serve it through PyTriton's Triton")
    parser.add_argument("--triton-python", default=os.environ.get("LIVEFUSE_TRITON_PYTHON", sys.executable),
                        help="a Python with nvidia-pytriton installed (default: $LIVEFUSE_TRITON_PYTHON or this one)")


def photos(size: int, n: int = 8) -> np.ndarray:
    """`n` target photos of one size (Grace Hopper, shifted), as the service bench sends."""
    import cv2

    from bench._product import grace_hopper

    g = grace_hopper()
    scale = size / g.shape[0]
    g = cv2.resize(g, (int(round(g.shape[1] * scale)), size), interpolation=cv2.INTER_AREA)
    return np.stack([np.roll(g, 7 * i, axis=1) for i in range(n)])


def photo_landmark_call() -> tuple[Callable[[list[Any]], list[Any]], Any]:
    """The batch function the photo API's `landmarks` batcher wraps (PhotoModels), on the landmarker
    Product builds for photos; and the landmarker, to close."""
    from streamer.web.api.photos import _each
    from streamer.app.assembly import Product, ProductConfig

    landmarker = Product(ProductConfig())._photo_landmarker()
    return _each(lambda image: landmarker.detect(image, 0)), landmarker


def face_rows(faces: Any) -> tuple[np.ndarray, int]:
    """What the Triton model answers per photo: the first face's 478x3 landmarks (zeros if none), and
    the number of faces."""
    if isinstance(faces, BaseException) or not faces:
        return np.zeros((478, 3), np.float32), 0
    return np.asarray(faces[0].landmarks, np.float32), len(faces)


def triton_python_ok(python: str) -> str | None:
    """None when `python` can import pytriton, else why not, in words."""
    try:
        r = subprocess.run([python, "-c", "import pytriton.triton"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python}: {exc}"
    if r.returncode != 0:
        return (f"nvidia-pytriton is not installed for {python} (pip install 'nvidia-pytriton>=0.7,<0.8' into "
                f"a venv of its own, since it pins numpy<2, and pass --triton-python or LIVEFUSE_TRITON_PYTHON)")
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def serve_through_triton(fn: Callable[[list[Any]], list[Any]], images: np.ndarray, python: str, extra: list[str],
                         timeout_s: float = 900.0) -> dict:
    """Run bench/_triton_side.py under `python` with `extra` arguments; answer each batch it forwards with
    `fn` here, on this process's landmarker. Returns its JSON."""
    import json

    from bench._triton_side import recv_array, send_array

    scratch = Path(tempfile.mkdtemp(prefix="livefuse-bench-triton-"))
    np.save(scratch / "images.npy", images)
    path = str(scratch / "model.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    batches: list[int] = []

    def owner() -> None:
        conn, _ = server.accept()
        with conn:
            while True:
                try:
                    batch = recv_array(conn)
                except ConnectionError:
                    return
                rows = [face_rows(f) for f in fn(list(batch))]
                batches.append(len(batch))
                send_array(conn, np.stack([r[0] for r in rows]))
                send_array(conn, np.array([[r[1]] for r in rows], np.int32))

    thread = threading.Thread(target=owner, name="triton-model-owner", daemon=True)
    thread.start()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [os.path.join(sys.base_prefix, "lib"), env.get("LD_LIBRARY_PATH")]))
    cmd = [python, str(SIDE), "--socket", path, "--images", str(scratch / "images.npy"),
           "--ports", ",".join(map(str, _free_ports(3))), *extra]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    finally:
        server.close()
    if r.returncode != 0:
        raise RuntimeError(f"the Triton side failed ({r.returncode}): {r.stderr[-3000:]}")
    thread.join(timeout=5.0)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["owner_batches"] = len(batches)
    return out


def _in_process(fn: Callable, images: np.ndarray, levels: list[int], args, enabled: bool) -> dict:
    from engines.batching import DynamicBatcher

    batcher = DynamicBatcher(fn, name="landmarks", max_batch=args.max_batch, window_ms=args.window_ms, enabled=enabled)
    sizes: list[int] = []
    batcher.add_listener(lambda _name, n: sizes.append(n))

    def call(i: int) -> float:
        t0 = time.perf_counter()
        batcher(images[i % len(images)])
        return (time.perf_counter() - t0) * 1000.0

    out: dict = {}
    try:
        with ThreadPoolExecutor(max(levels)) as warm:
            list(warm.map(call, range(4)))
        for c in levels:
            n = max(args.requests, 2 * c)
            start = len(sizes)
            with ThreadPoolExecutor(c) as pool:
                t0 = time.perf_counter()
                lat = np.array(list(pool.map(call, range(n))))
                wall = time.perf_counter() - t0
            formed = sizes[start:]
            hist = {str(b): formed.count(b) for b in sorted(set(formed))}
            out[f"c{c}"] = {"calls": n, "calls_per_s": round(n / wall, 1),
                            "p50_ms": round(float(np.percentile(lat, 50)), 1), "p95_ms": round(float(np.percentile(lat, 95)), 1),
                            "batches": len(formed), "mean_batch": round(sum(formed) / len(formed), 2) if formed else 0.0,
                            "batch_sizes": hist}
    finally:
        batcher.close()
    return out


def run(args) -> dict:
    levels = [int(v) for v in args.concurrency.split(",") if v.strip()]
    images = photos(args.size)
    fn, landmarker = photo_landmark_call()
    result: dict = {"machine": {"cpus": os.cpu_count(), "load_1m_start": round(os.getloadavg()[0], 2)},
                    "model": "the photo API's landmarks call (PhotoModels.landmarks: IMAGE-mode landmarker, item by item)",
                    "photo": f"{images.shape[2]}x{images.shape[1]}", "max_batch": args.max_batch, "window_ms": args.window_ms}
    try:
        result["unbatched"] = _in_process(fn, images, levels, args, enabled=False)
        result["dynamic_batcher"] = _in_process(fn, images, levels, args, enabled=True)
        if args.triton:
            why = triton_python_ok(args.triton_python)
            if why is not None:
                result["triton"] = {"skipped": why}
            else:
                result["triton"] = serve_through_triton(fn, images, args.triton_python, [
                    "--levels", ",".join(map(str, levels)), "--requests", str(args.requests),
                    "--max-batch", str(args.max_batch), "--window-ms", str(args.window_ms)])
                result["triton"]["python"] = args.triton_python
                for c in levels:
                    ours, theirs = result["dynamic_batcher"][f"c{c}"], result["triton"][f"c{c}"]
                    result.setdefault("triton_over_ours", {})[f"c{c}"] = {
                        "p50": round(theirs["p50_ms"] / ours["p50_ms"], 2), "p95": round(theirs["p95_ms"] / ours["p95_ms"], 2),
                        "calls_per_s": round(theirs["calls_per_s"] / ours["calls_per_s"], 2)}
    finally:
        landmarker.close()
    result["machine"]["load_1m_end"] = round(os.getloadavg()[0], 2)
    return result
