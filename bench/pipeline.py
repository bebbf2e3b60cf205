"""The product pipeline alone (faces -> fusion -> edits -> watermark), frame by frame, no network.

A clip of the Grace Hopper photo with known motion (sway and roll) at 640x480, 1280x720 and 1920x1080, the bundled
demo source registered through the consent-checked service hook, a prompt encoded before timing starts.
Reports per-stage wall median/p95 (from FrameState.timings), the whole pipeline's wall and this thread's
CPU time, the frame conversions the frame worker adds around it (decoded frame in, yuv420p out), and
the frame's whole thread CPU (conversions + stages) and the process's over the same span (with the search
passes that run beside the frame on their own thread). The frame paths (`--paths rgb,planes,torch-planes`:
the whole-frame RGB state, the yuv420p planes the stream uses in host memory, and the same planes on a
torch device: CUDA where torch finds it, else torch's CPU device) and all sizes are timed in turn
(A, B, C, A, B, C, ...) so a busy machine slows them alike.

Then (`--paced-seconds`, 0 to skip) the frame workers themselves at 640x480 (`--paced-size`): decoded frames are handed to
a worker at 30 fps as a camera would, for the plain FrameWorker and the OverlappedFrameWorker in
alternating bursts, and fps out, arrival -> published latency and drops are reported: whether the
pipeline keeps up with the camera, without the network in the way.

`--still` times and scores still-face reuse instead (bench/_still.py).
"""

from __future__ import annotations

import fractions
import os
import time
from typing import Any

import numpy as np

from bench import _still


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=90, help="timed frames per size (default 90)")
    parser.add_argument("--warmup", type=int, default=10, help="frames run before timing (default 10)")
    parser.add_argument("--sizes", default="640x480,1280x720,1920x1080")
    parser.add_argument("--paths", default="rgb,planes",
                        help="frame paths timed side by side, frame by frame: rgb (whole-frame RGB state), "
                             "planes (yuv420p planes in host memory, face regions in RGB; what the stream runs) "
                             "and torch-planes (the planes on a torch device: cuda when present, else cpu; "
                             "`livefuse serve --pixels cuda`); planes-fresh: planes with still-face reuse off (a clip's "
                             "stages), so every frame pays for fusion and edits; default rgb,planes")
    parser.add_argument("--photo-px", type=float, default=None,
                        help="the portrait's height in pixels in every frame size (default: 90%% of the frame's height)")
    parser.add_argument("--prompt", default=None, help="prompt for the edits stage (default: a slight smile, more confident; '' = none)")
    parser.add_argument("--paced-seconds", type=float, default=4.0, help="seconds per paced burst (default 4; 0 skips)")
    parser.add_argument("--paced-size", default="640x480", help="frame size of the paced bursts (default 640x480)")
    parser.add_argument("--paced-bursts", type=int, default=2, help="bursts per worker, alternating (default 2)")
    parser.add_argument("--threads", default=None,
                        help="cv2/torch threads; a comma list (e.g. 1,2) times each setting in turn, frame by frame, "
                             "side by side in one run (default: OpenCV's as livefuse serve sets it, torch's own)")
    _still.add_arguments(parser)


PATHS = ("rgb", "planes", "planes-fresh", "torch-planes")


def _upload(path: str, device: str | None) -> Any:
    """The torch-planes path's uploader (one per case, reused frame after frame as a frame worker does)."""
    if path != "torch-planes":
        return None
    from streamer.media.device_planes import DeviceUpload

    return DeviceUpload(device)


def _stats(ms: list[float]) -> dict[str, float] | None:
    if not ms:
        return None
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2),
            "mean_ms": round(float(a.mean()), 2)}


def run(args) -> dict[str, Any]:
    if args.still:
        return _still.run(args)
    from av import VideoFrame

    from bench._product import DEFAULT_PROMPT, build_product, grace_hopper, moving_face, prepare_session
    from streamer.pipeline.convert import frame_to_state, state_to_frame
    from streamer.session.session import Session
    from streamer.ops.threads import ThreadConfig, apply_thread_config

    from streamer.config import ServerConfig

    settings = [None] if args.threads is None else [int(t) for t in str(args.threads).split(",") if t]
    # unset: what `livefuse serve` sets (ServerConfig.cv2_threads), torch left at its default
    configs = {t: ThreadConfig(cv2=ServerConfig().cv2_threads) if t is None else ThreadConfig(cv2=t, torch=t) for t in settings}
    threads = {("default" if t is None else f"threads={t}"): apply_thread_config(c) for t, c in configs.items()}
    prompt = DEFAULT_PROMPT if args.prompt is None else args.prompt
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    photo = grace_hopper()
    product = build_product()
    tb = fractions.Fraction(1, 90000)
    paths = [p for p in args.paths.split(",") if p]
    if not paths or any(p not in PATHS for p in paths):
        raise SystemExit(f"--paths takes any of {', '.join(PATHS)}, got {args.paths!r}")
    torch_device = None
    if "torch-planes" in paths:
        import torch

        torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = {}
    try:
        for (w, h), t, path in [(sz, t, p) for sz in sizes for t in settings for p in paths]:
            session = Session(f"bench-{w}x{h}-{t}-{path}")
            hooks = prepare_session(product, session, prompt)
            cases[(w, h, t, path)] = {"config": configs[t], "session": session, "pipe": product.make_pipeline(session, live=path != "planes-fresh"),
                                      "upload": _upload(path, torch_device),
                                      "hooks": hooks, "stages": {}, "total": [], "cpu": [], "convert": [], "frame_cpu": [], "frame_process_cpu": [],
                                      "faces": [], "errors": {}}
        for n in range(args.warmup + args.frames):
            for (w, h, t, path), c in cases.items():
                if len(settings) > 1:
                    apply_thread_config(c["config"])
                decoded = VideoFrame.from_ndarray(moving_face(photo, w, h, n, args.photo_px), format="rgb24").reformat(format="yuv420p")
                decoded.pts, decoded.time_base = n * 3000, tb
                ta, ca, pa = time.perf_counter(), time.thread_time(), time.process_time()   # what the frame worker does: decoded -> state ...
                state = frame_to_state(decoded, planes=path != "rgb", device=c["upload"])
                tb0 = time.perf_counter()
                t0, c0 = time.perf_counter(), time.thread_time()
                state = c["pipe"](state, c["session"].frame_context())
                t1, c1 = time.perf_counter(), time.thread_time()
                # ... and state -> the encoders' yuv420p
                state_to_frame(state, decoded)
                t2 = time.perf_counter() + (tb0 - ta)
                c2, p2 = time.thread_time(), time.process_time()
                if n < args.warmup:
                    continue
                c["frame_cpu"].append((c2 - ca) * 1000.0)
                c["frame_process_cpu"].append((p2 - pa) * 1000.0)
                for name, ms in state.timings.items():
                    c["stages"].setdefault(name, []).append(ms)
                for name, err in state.errors.items():
                    c["errors"][name] = err
                c["total"].append((t1 - t0) * 1000.0)
                c["cpu"].append((c1 - c0) * 1000.0)
                c["convert"].append((t2 - t1) * 1000.0)
                c["faces"].append(len(state.faces))
                c["fused"] = c.get("fused", 0) + bool(state.fused)
                c["faces_fused"] = c.get("faces_fused", 0) + len(state.fused)
                c["faces_reused"] = c.get("faces_reused", 0) + sum(bool(f.get("reused")) for f in state.fused)
    finally:
        for c in cases.values():
            c["pipe"].close()
        product.close()
    out: dict[str, Any] = {"benchmark": "pipeline", "cpu_count": os.cpu_count(), "threads": threads,
                           "prompt": prompt, "frames": args.frames, "paths": paths, "torch_planes_device": torch_device,
                           "photo_px": args.photo_px, "sizes": {}}
    for (w, h, t, path), c in cases.items():
        total = _stats(c["total"])
        key = f"{w}x{h}" if len(settings) == 1 else f"{w}x{h} threads={t}"
        key += f" {path}" if len(paths) > 1 else ""
        out["sizes"][key] = {
            "path": path,
            "frame_thread_cpu": _stats(c["frame_cpu"]),
            # ... and every thread of the process over the same span: the search thread's passes
            # (SearchConfig.background) run beside the frame and are the frame's cost too
            "frame_process_cpu": _stats(c["frame_process_cpu"]),
            "stages": {k: _stats(v) for k, v in c["stages"].items()},
            "pipeline_wall": total,
            "pipeline_thread_cpu": _stats(c["cpu"]),
            "worker_conversions_wall": _stats(c["convert"]),
            "fps_ceiling_one_worker": round(1000.0 / total["median_ms"], 1) if total else None,
            "faces_per_frame": sorted(set(c["faces"])),
            "frames_fused": c.get("fused", 0),
            # fused faces that took fusion's previous result (still-face reuse, streamer/pipeline/stages/still.py)
            "fusion_reused_share": round(c.get("faces_reused", 0) / max(c.get("faces_fused", 0), 1), 3),
            "stage_errors": c["errors"],
            "source": c["hooks"].get("source"),
        }
    if len(paths) > 1 and len(settings) == 1:
        def ratio(a: str, b: str, field: str) -> dict[str, float]:
            return {f"{w}x{h}": round(out["sizes"][f"{w}x{h} {a}"][field]["median_ms"]
                                      / out["sizes"][f"{w}x{h} {b}"][field]["median_ms"], 3) for (w, h) in sizes}

        if {"rgb", "planes"} <= set(paths):
            out["planes_vs_rgb_frame_cpu_median"] = ratio("planes", "rgb", "frame_thread_cpu")
        if {"planes", "planes-fresh"} <= set(paths):
            out["planes_vs_fresh_frame_cpu_median"] = ratio("planes", "planes-fresh", "frame_thread_cpu")
        if {"planes", "torch-planes"} <= set(paths):   # wall: on a GPU the thread waits for the device
            out["torch_planes_vs_planes_pipeline_wall_median"] = ratio("torch-planes", "planes", "pipeline_wall")
    if args.paced_seconds > 0:
        pw, ph = (int(v) for v in args.paced_size.split("x"))
        out[f"paced_{pw}x{ph}_30fps"] = paced(photo, prompt, args.paced_seconds, args.paced_bursts, size=(pw, ph))
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out


def paced(photo: np.ndarray, prompt: str, seconds: float, bursts: int, fps: float = 30.0,
          size: tuple[int, int] = (640, 480)) -> dict[str, Any]:
    """Plain and overlapped workers fed at `fps`, in alternating bursts (A, B, A, B) on one product."""
    import threading

    from av import VideoFrame

    from bench._product import build_product, moving_face, prepare_session
    from streamer.pipeline.overlap import OverlappedFrameWorker
    from streamer.pipeline.stats import StreamStats
    from streamer.pipeline.worker import FrameWorker
    from streamer.session.session import Session

    product = build_product()
    workers = {"plain": FrameWorker, "overlapped": OverlappedFrameWorker}
    res: dict[str, dict[str, list]] = {k: {"fps": [], "lat": [], "dropped": [], "cpu": []} for k in workers}
    tb = fractions.Fraction(1, 90000)
    try:
        for b in range(bursts):
            for name, cls in workers.items():
                session = Session(f"paced-{name}-{b}")
                prepare_session(product, session, prompt)
                stats = StreamStats()
                worker = cls(session, product.make_pipeline(session), stats)
                lat: list[float] = []
                seen = [0]
                lock = threading.Lock()

                def wake(worker=worker, lat=lat, seen=seen, lock=lock) -> None:
                    seq, item = worker.outbox.latest()
                    with lock:
                        if item is not None and seq != seen[0]:
                            seen[0] = seq
                            lat.append((time.monotonic(), (time.monotonic() - item[1]) * 1000.0))

                worker.outbox.subscribe(wake)
                worker.start()
                n_total = int(seconds * fps)
                warm = int(fps)                        # the first second is left out
                t0 = time.monotonic()
                t_warm = c_warm = None
                for n in range(n_total + warm):
                    if n == warm:
                        t_warm, c_warm, d_warm = time.monotonic(), time.process_time(), stats.dropped
                    f = VideoFrame.from_ndarray(moving_face(photo, size[0], size[1], n), format="rgb24").reformat(format="yuv420p")
                    f.pts, f.time_base = n * 3000, tb
                    delay = t0 + n / fps - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    worker.submit(f)
                t_end, c_end = time.monotonic(), time.process_time()
                time.sleep(0.2)
                worker.stop()
                with lock:
                    window = [ms for at, ms in lat if t_warm <= at <= t_end]
                res[name]["fps"].append(len(window) / (t_end - t_warm))
                res[name]["lat"].extend(window)
                res[name]["dropped"].append(stats.dropped - d_warm)
                res[name]["cpu"].append((c_end - c_warm) * 1000.0 / max(len(window), 1))
    finally:
        product.close()
    out: dict[str, Any] = {"fps_in": fps, "seconds_per_burst": seconds, "bursts": bursts,
                           "note": "process CPU includes making and converting the input frames (~a decoder's share)"}
    for name, r in res.items():
        lat = _stats(r["lat"])
        out[name] = {"fps_out_per_burst": [round(v, 1) for v in r["fps"]],
                     "latency_ms": {"p50": lat["median_ms"], "p95": lat["p95_ms"]} if lat else None,
                     "dropped_per_burst": r["dropped"],
                     "process_cpu_ms_per_frame_out": [round(v, 1) for v in r["cpu"]]}
    return out
