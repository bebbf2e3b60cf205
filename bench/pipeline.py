"""The product pipeline alone (faces -> fusion -> edits -> watermark), frame by frame, no network.

A clip of the Grace Hopper photo with known motion (sway and roll) at 640x480 and 1280x720, the bundled
demo source registered through the consent-checked service hook, a prompt encoded before timing starts.
Reports per-stage wall median/p95 (from FrameState.timings), the whole pipeline's wall and this thread's
CPU time, and the frame conversions the frame worker adds around it (ndarray in, yuv420p out). Sizes
are timed in turn (A, B, A, B, ...) so a busy machine slows them alike.
"""

from __future__ import annotations

import fractions
import os
import time
from typing import Any

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=90, help="timed frames per size (default 90)")
    parser.add_argument("--warmup", type=int, default=10, help="frames run before timing (default 10)")
    parser.add_argument("--sizes", default="640x480,1280x720")
    parser.add_argument("--prompt", default=None, help="prompt for the edits stage (default: a slight smile, more confident; '' = none)")
    parser.add_argument("--threads", default=None,
                        help="cv2/torch threads; a comma list (e.g. 1,2) times each setting in turn, frame by frame, "
                             "side by side in one run (default: the libraries' own defaults)")


def _stats(ms: list[float]) -> dict[str, float] | None:
    if not ms:
        return None
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2)}


def run(args) -> dict[str, Any]:
    from av import VideoFrame

    from bench._product import DEFAULT_PROMPT, build_product, grace_hopper, moving_face, prepare_session
    from streamer.pipeline import FrameState
    from streamer.session import Session
    from streamer.threads import ThreadConfig, apply_thread_config

    settings = [None] if args.threads is None else [int(t) for t in str(args.threads).split(",") if t]
    configs = {t: ThreadConfig() if t is None else ThreadConfig(cv2=t, torch=t) for t in settings}
    threads = {("default" if t is None else f"threads={t}"): apply_thread_config(c) for t, c in configs.items()}
    prompt = DEFAULT_PROMPT if args.prompt is None else args.prompt
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    photo = grace_hopper()
    product = build_product()
    tb = fractions.Fraction(1, 90000)
    cases = {}
    try:
        for (w, h), t in [(sz, t) for sz in sizes for t in settings]:
            session = Session(f"bench-{w}x{h}-{t}")
            hooks = prepare_session(product, session, prompt)
            cases[(w, h, t)] = {"config": configs[t], "session": session, "pipe": product.make_pipeline(session), "hooks": hooks,
                             "stages": {}, "total": [], "cpu": [], "convert": [], "faces": [], "errors": {}}
        for n in range(args.warmup + args.frames):
            for (w, h, t), c in cases.items():
                if len(settings) > 1:
                    apply_thread_config(c["config"])
                decoded = VideoFrame.from_ndarray(moving_face(photo, w, h, n), format="rgb24").reformat(format="yuv420p")
                ta = time.perf_counter()   # what the frame worker does around the pipeline: decoded -> RGB ...
                frame = decoded.to_ndarray(format="rgb24")
                tb0 = time.perf_counter()
                state = FrameState(image=frame, pts=n * 3000, extras={"time_base": tb})
                t0, c0 = time.perf_counter(), time.thread_time()
                state = c["pipe"](state, c["session"])
                t1, c1 = time.perf_counter(), time.thread_time()
                # ... and RGB -> the encoders' yuv420p
                VideoFrame.from_ndarray(np.ascontiguousarray(state.image), format="rgb24").reformat(format="yuv420p")
                t2 = time.perf_counter() + (tb0 - ta)
                if n < args.warmup:
                    continue
                for name, ms in state.timings.items():
                    c["stages"].setdefault(name, []).append(ms)
                for name, err in state.errors.items():
                    c["errors"][name] = err
                c["total"].append((t1 - t0) * 1000.0)
                c["cpu"].append((c1 - c0) * 1000.0)
                c["convert"].append((t2 - t1) * 1000.0)
                c["faces"].append(len(state.faces))
                c["fused"] = c.get("fused", 0) + bool(state.extras.get("fusion"))
    finally:
        for c in cases.values():
            c["pipe"].close()
        product.close()
    out: dict[str, Any] = {"benchmark": "pipeline", "cpu_count": os.cpu_count(), "threads": threads,
                           "prompt": prompt, "frames": args.frames, "sizes": {}}
    for (w, h, t), c in cases.items():
        total = _stats(c["total"])
        key = f"{w}x{h}" if len(settings) == 1 else f"{w}x{h} threads={t}"
        out["sizes"][key] = {
            "stages": {k: _stats(v) for k, v in c["stages"].items()},
            "pipeline_wall": total,
            "pipeline_thread_cpu": _stats(c["cpu"]),
            "worker_conversions_wall": _stats(c["convert"]),
            "fps_ceiling_one_worker": round(1000.0 / total["median_ms"], 1) if total else None,
            "faces_per_frame": sorted(set(c["faces"])),
            "frames_fused": c.get("fused", 0),
            "stage_errors": c["errors"],
            "source": c["hooks"].get("source"),
        }
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out
