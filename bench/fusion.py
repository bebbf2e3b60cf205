"""Fusion stage cost per frame with one face, landmarks excluded (found once, outside the timing).

Times wall clock and this thread's CPU time (OpenCV and torch held to one thread, so CPU time is the
cost on one core even on a busy machine), and the share spent on geometry (mesh, raster, masks) versus
pixel work. Runs the numpy path and, with --torch, the torch path on CPU and on CUDA when present
(CUDA at 1080p).
"""

from __future__ import annotations

import time

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=60, help="timed frames per case")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--torch", action="store_true", help="also time the torch path (CPU, and CUDA if present)")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)


def _frame(img: np.ndarray, w: int, h: int) -> np.ndarray:
    import cv2

    s = h / img.shape[0]
    r = cv2.resize(img, (int(img.shape[1] * s), h), interpolation=cv2.INTER_AREA)[:, :w]
    out = np.full((h, w, 3), 90, np.uint8)
    x = (w - r.shape[1]) // 2
    out[:, x: x + r.shape[1]] = r
    return out


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3),
            "min_ms": round(float(a.min()), 3)}


def _time_cases(cases: dict, image, faces, session, frames: int, warmup: int, sync=None) -> dict:
    """Times several stages frame by frame in turn (A, B, A, B, ...), so a busy machine slows them alike
    and their ratio stays fair."""
    from streamer.pipeline import FrameState

    geo_ms: dict[str, list[float]] = {k: [] for k in cases}
    for name, stage in cases.items():
        inner = stage._geometry

        def timed_geometry(*a, _inner=inner, _name=name, **k):
            t = time.thread_time()
            r = _inner(*a, **k)
            geo_ms[_name].append((time.thread_time() - t) * 1000)
            return r

        stage._geometry = timed_geometry
        for _ in range(warmup):
            stage(FrameState(image=image, faces=list(faces)), session.frame_context())
        geo_ms[name].clear()
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(frames):
        for name, stage in cases.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            st = stage(FrameState(image=image, faces=list(faces)), session.frame_context())
            if sync is not None:
                sync(st.image)
            cpu[name].append((time.thread_time() - c0) * 1000)
            wall[name].append((time.perf_counter() - t0) * 1000)
    return {name: {"wall": _stats(wall[name]), "cpu": _stats(cpu[name]), "geometry_cpu": _stats(geo_ms[name])}
            for name in cases}


def run(args) -> dict:
    import cv2
    import matplotlib.cbook
    import skimage.data
    from PIL import Image

    from engines.faces import MediaPipeLandmarker
    from engines.sources import SourceRegistry
    from streamer.session import Session
    from streamer.stages.fusion import FusionConfig, FusionStage

    cv2.setNumThreads(1)
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        target = np.asarray(Image.open(f).convert("RGB"))
    source = SourceRegistry().register(np.ascontiguousarray(skimage.data.astronaut()))
    image = _frame(target, args.width, args.height)
    lm = MediaPipeLandmarker()
    faces = lm.detect(image, 0)
    lm_ms = []
    for k in range(1, 21):                      # for context only: the landmarker on the same frame, tracked
        t = time.perf_counter()
        lm.detect(image, 33 * k)
        lm_ms.append((time.perf_counter() - t) * 1000)
    lm.close()
    if len(faces) != 1:
        raise RuntimeError(f"expected one face in the bench frame, found {len(faces)}")
    session = Session()
    session.add_source(source.id, source)
    fw = faces[0].bbox[2] - faces[0].bbox[0]
    out: dict = {"frame": f"{args.width}x{args.height}", "face_width_px": round(float(fw), 1), "frames": args.frames,
                 "threads": 1, "note": "landmarks excluded; cpu = this thread's CPU time"}
    out["landmarker_wall_for_context"] = _stats(lm_ms)
    out.update(_time_cases({"numpy": FusionStage(), "numpy_feather_only": FusionStage(FusionConfig(blend_levels=0))},
                           image, faces, session, args.frames, args.warmup))
    out["ratio_multiband_over_feather_cpu"] = round(out["numpy"]["cpu"]["median_ms"] / out["numpy_feather_only"]["cpu"]["median_ms"], 3)
    if args.torch:
        import torch

        torch.set_num_threads(1)
        tstage = FusionStage()
        out["torch_cpu"] = _time_cases({"t": tstage}, torch.from_numpy(image), faces, session, max(10, args.frames // 3), args.warmup)["t"]
        if torch.cuda.is_available():

            big = _frame(target, 1920, 1080)
            lm = MediaPipeLandmarker()
            bf = lm.detect(big, 0)
            lm.close()
            dev = torch.device("cuda")
            timg = torch.from_numpy(big).to(dev)
            out["torch_cuda_1080p"] = _time_cases({"t": FusionStage()}, timg, bf, session, args.frames,
                                                  args.warmup, sync=lambda _: torch.cuda.synchronize())["t"]
            out["torch_cuda_1080p"]["device"] = torch.cuda.get_device_name(0)
        else:
            out["torch_cuda_1080p"] = "no CUDA device here"
    return out
