"""The Triton half of `livefuse bench batching --triton`, run as its own process by a Python that has
nvidia-pytriton (its numpy<2 pin keeps it out of the project's venv): PyTriton serves one model,
`landmarks`, on loopback with Triton's dynamic batcher; each batch Triton forms is handed, as one
message, to the model's owner (the bench process, over a Unix socket), which runs the photo API's
landmark call on it. Clients from a thread pool call it over HTTP; the figures and Triton's own batch
metrics (the /metrics endpoint: inference and execution counts, queue time; the stats
endpoint answers 403 under PyTriton) go to stdout as one JSON object.

Imports nothing of the project (it runs under another venv); the wire format is raw bytes plus shapes,
never pickled arrays (numpy 1 and 2 pickle differently)."""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def send_array(conn: socket.socket, a: np.ndarray) -> None:
    a = np.ascontiguousarray(a)
    head = json.dumps({"dtype": a.dtype.str, "shape": list(a.shape)}).encode()
    conn.sendall(struct.pack("!II", len(head), a.nbytes) + head + a.tobytes())


def _exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the model's owner closed the socket")
        buf += chunk
    return bytes(buf)


def recv_array(conn: socket.socket) -> np.ndarray:
    hl, nb = struct.unpack("!II", _exact(conn, 8))
    head = json.loads(_exact(conn, hl))
    return np.frombuffer(_exact(conn, nb), dtype=np.dtype(head["dtype"])).reshape(head["shape"])


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and 'model="landmarks"' in line)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True, help="the model owner's Unix socket")
    ap.add_argument("--images", required=True, help=".npy file, N images of one size (uint8 HxWx3)")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--window-ms", type=float, default=4.0)
    ap.add_argument("--ports", default="18100,18101,18102", help="loopback ports: HTTP,gRPC,metrics")
    ap.add_argument("--check", action="store_true", help="infer each image once and print its rows, no load")
    args = ap.parse_args()

    from pytriton.client import ModelClient
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    images = np.load(args.images)
    owner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    owner.connect(args.socket)
    owner_lock = threading.Lock()
    seen: list[int] = []   # batch sizes as the bound callable received them (cross-check of Triton's stats)

    @batch
    def infer(image: np.ndarray) -> dict[str, np.ndarray]:
        with owner_lock:
            seen.append(len(image))
            send_array(owner, image)
            landmarks, faces = recv_array(owner), recv_array(owner)
        return {"landmarks": landmarks, "faces": faces}

    http, grpc, metrics = (int(v) for v in args.ports.split(","))
    config = TritonConfig(http_address="127.0.0.1", grpc_address="127.0.0.1", metrics_address="127.0.0.1",
                          http_port=http, grpc_port=grpc, metrics_port=metrics, allow_metrics=True,
                          allow_gpu_metrics=False, log_verbose=0)
    out: dict = {}
    t_start = time.perf_counter()
    with Triton(config=config) as triton:
        triton.bind(model_name="landmarks", infer_func=infer,
                    inputs=[Tensor(name="image", dtype=np.uint8, shape=(-1, -1, 3))],
                    outputs=[Tensor(name="landmarks", dtype=np.float32, shape=(-1, 3)),
                             Tensor(name="faces", dtype=np.int32, shape=(1,))],
                    config=ModelConfig(max_batch_size=args.max_batch,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.window_ms * 1000))))
        triton.run()
        out["start_s"] = round(time.perf_counter() - t_start, 2)
        local = threading.local()

        def call(i: int) -> tuple[float, dict]:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = ModelClient(f"http://127.0.0.1:{http}", "landmarks", init_timeout_s=60)
            t0 = time.perf_counter()
            res = client.infer_sample(image=images[i % len(images)])
            return (time.perf_counter() - t0) * 1000.0, res

        if args.check:
            rows = [call(i)[1] for i in range(len(images))]
            out["rows"] = [{"faces": int(r["faces"][0]), "landmarks": r["landmarks"].tolist()} for r in rows]
        else:
            with ThreadPoolExecutor(max(int(v) for v in args.levels.split(","))) as warm:
                list(warm.map(call, range(4)))
            for c in (int(v) for v in args.levels.split(",")):
                n = max(args.requests, 2 * c)
                before_seen = len(seen)
                before = {k: _metric(metrics, k) for k in ("nv_inference_count", "nv_inference_exec_count", "nv_inference_queue_duration_us")}
                with ThreadPoolExecutor(c) as pool:
                    t0 = time.perf_counter()
                    lat = np.array([ms for ms, _ in pool.map(call, range(n))])
                    wall = time.perf_counter() - t0
                d = {k: _metric(metrics, k) - v for k, v in before.items()}
                formed = seen[before_seen:]
                out[f"c{c}"] = {
                    "calls": n, "calls_per_s": round(n / wall, 1),
                    "p50_ms": round(float(np.percentile(lat, 50)), 1), "p95_ms": round(float(np.percentile(lat, 95)), 1),
                    "batches": int(d["nv_inference_exec_count"]),
                    "mean_batch": round(d["nv_inference_count"] / d["nv_inference_exec_count"], 2) if d["nv_inference_exec_count"] else 0.0,
                    "batch_sizes": {str(b): formed.count(b) for b in sorted(set(formed))},
                    "queue_ms_per_call": round(d["nv_inference_queue_duration_us"] / n / 1000.0, 2),
                }
    owner.close()
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
