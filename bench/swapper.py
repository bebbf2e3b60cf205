"""Neural swapper cost: per face on the CPU (the model call alone, and the whole swap stage on a 640x480
frame with one face: align, model, colour match, smoothing, paste back), and on CUDA with batches of 1, 8
and 32 when this ONNX Runtime has its CUDA provider (skipped with a note otherwise).

`--swapper FILE` is the user's model (with `--swapper-embedder FILE`, or a tiny stand-in embedder, which
only the source vector uses); `--test-models` times the tiny models of every family's signature
(bench/_swap_models.py) instead: those figures say what the path around the model costs, not what a real
swap network costs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

BATCHES = (1, 8, 32)


def add_arguments(parser) -> None:
    parser.add_argument("--swapper", help="the swap model (.onnx) to time")
    parser.add_argument("--swapper-embedder", help="its embedder (.onnx); default: a tiny stand-in")
    parser.add_argument("--swapper-card", help="name the card when the signature fits several")
    parser.add_argument("--test-models", action="store_true", help="time the tiny models of every family instead")
    parser.add_argument("--frames", type=int, default=30, help="timed runs per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime CPU threads (default 1: the cost on one core)")


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "min_ms": round(float(a.min()), 3)}


def _timed(fn, frames: int, warmup: int) -> dict[str, dict[str, float]]:
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(frames):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000.0)
        cpu.append((time.thread_time() - c) * 1000.0)
    return {"wall": _stats(wall), "cpu": _stats(cpu)}


def _scene():
    """The bench frame (Grace Hopper at 640x480, as `bench fusion` uses), its one face (tracked id 1) and a
    registered source."""
    import matplotlib.cbook
    import skimage.data
    from PIL import Image

    from bench.fusion import _frame
    from engines.faces import MediaPipeLandmarker
    from engines.sources import SourceRegistry

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        target = np.asarray(Image.open(f).convert("RGB"))
    image = _frame(target, 640, 480)
    lm = MediaPipeLandmarker()
    try:
        faces = lm.detect(image, 0)
    finally:
        lm.close()
    if len(faces) != 1:
        raise RuntimeError(f"expected one face in the bench frame, found {len(faces)}")
    faces[0].track_id = 1
    source = SourceRegistry().register(np.ascontiguousarray(skimage.data.astronaut()))
    return image, faces, source


def bench_file(swapper_path: str, embedder_path: str, args, scene) -> dict:
    from engines.swappers.swapper import SwapperConfig, load_swapper
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.session import Session
    from streamer.pipeline.stages.swap import SwapStage

    image, faces, source = scene
    t = time.perf_counter()
    cpu = load_swapper(SwapperConfig(swapper=swapper_path, embedder=embedder_path, card=args.swapper_card,
                                     device="cpu", threads=args.threads, window_ms=0.0))
    out: dict = {"file": Path(swapper_path).name, "card": cpu.card.name, "crop_px": cpu.card.size,
                 "dynamic_batch": cpu.model.dynamic_batch, "load_ms": round((time.perf_counter() - t) * 1000.0, 1),
                 "warm_up_ms": round(cpu.warm_up_ms or 0.0, 1)}
    try:
        crop, _ = cpu.crop(image, faces[0].landmarks)
        vec = cpu.source_vector(source)
        x = (_network_batch(cpu, crop, 1), vec[None].astype(np.float32))
        out["cpu_model_per_face"] = _timed(lambda: cpu._forward(x), args.frames, args.warmup)
        session = Session()
        session.add_source(source.id, source)
        stage = SwapStage(cpu)
        out["cpu_stage_per_face"] = _timed(lambda: stage(FrameState(image=image, faces=list(faces)),
                                                         session.frame_context()), args.frames, args.warmup)
    finally:
        cpu.close()
    out["cuda"] = _bench_cuda(swapper_path, embedder_path, args, image, faces, source)
    return out


def _network_batch(swapper, crop: np.ndarray, n: int) -> np.ndarray:
    from engines.swappers.swapper import to_network

    return to_network(np.repeat(crop[None], n, axis=0), swapper.card)


def _bench_cuda(swapper_path: str, embedder_path: str, args, image, faces, source) -> dict | str:
    try:
        import onnxruntime
    except ImportError:
        return "skipped: ONNX Runtime is not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return ("skipped: this ONNX Runtime has no CUDA provider (install onnxruntime-gpu on a machine with an "
                "NVIDIA GPU)")
    from engines.swappers.swapper import SwapperConfig, load_swapper

    gpu = load_swapper(SwapperConfig(swapper=swapper_path, embedder=embedder_path, card=args.swapper_card,
                                     device="cuda", window_ms=0.0))
    out: dict = {"providers": list(gpu.model.providers), "warm_up_ms": round(gpu.warm_up_ms or 0.0, 1),
                 "note": "" if gpu.model.dynamic_batch else "the file's batch is fixed at 1: a batch runs its rows one after another"}
    try:
        crop, _ = gpu.crop(image, faces[0].landmarks)
        vec = gpu.source_vector(source)
        for n in BATCHES:
            x = (_network_batch(gpu, crop, n), np.repeat(vec[None], n, axis=0).astype(np.float32))
            t = _timed(lambda: gpu._forward(x), max(5, args.frames // 2), args.warmup)
            out[f"batch_{n}"] = {"call_wall": t["wall"], "per_face_ms": round(t["wall"]["median_ms"] / n, 3)}
    finally:
        gpu.close()
    return out


def run(args) -> dict:
    import cv2

    cv2.setNumThreads(1)
    if not args.swapper and not args.test_models:
        raise SystemExit("livefuse bench swapper: give --swapper FILE.onnx (your model) or --test-models")
    scene = _scene()
    result: dict = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "frame": "640x480, one face",
                    "threads": args.threads, "frames": args.frames,
                    "note": "cpu = this thread's CPU time; stage = align + model + colour match + smoothing + paste back"}
    with tempfile.TemporaryDirectory(prefix="livefuse-swap-bench-") as tmp:
        embedder = args.swapper_embedder
        if not embedder:
            from bench import _swap_models as sm

            embedder = str(sm.embedder(Path(tmp) / "tiny_arcface.onnx", batch="N"))
            result["embedder"] = "tiny stand-in (only the source vector uses it; not timed per frame)"
        if args.test_models:
            from bench import _swap_models as sm

            result["models"] = "tiny test models of each family's signature: figures of the path, not of a real network"
            files = {"inswapper_128": sm.swapper(Path(tmp) / "inswapper_128.onnx", "inswapper_128", batch="N"),
                     "hyperswap_256": sm.swapper(Path(tmp) / "hyperswap_1a_256.onnx", "hyperswap_256", batch="N"),
                     "simswap_512": sm.swapper(Path(tmp) / "simswap_unofficial_512.onnx", "simswap_512", batch="N")}
            result["files"] = {name: bench_file(str(path), embedder, args, scene) for name, path in files.items()}
        else:
            result["files"] = {Path(args.swapper).name: bench_file(args.swapper, embedder, args, scene)}
    return result
