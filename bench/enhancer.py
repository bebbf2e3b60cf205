"""Face enhancer cost on the live stream path: 640x480 yuv420p frames of a moving face (Grace Hopper, one
face) through faces -> fusion -> enhance on the CPU, the enhancer off and on for alternate frames of one
run (so a noisy machine slows both alike), the frame rate each holds, the enhance stage's cost per face,
and the model call alone per face.

`--enhancer NAME|FILE` times a catalogue model installed with `livefuse models get` (or a file);
`--test-models` times the tiny models of the enhancer families' signatures (bench/_catalogue_models.py):
those figures say what the path around the model costs (align, convert, paste back), not what a real
restoration network costs (GFPGAN-class networks take hundreds of ms per face on a CPU).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--enhancer", help="a catalogue enhancer name or an ONNX file to time")
    parser.add_argument("--test-models", action="store_true", help="time the tiny models of the families instead")
    parser.add_argument("--frames", type=int, default=60, help="timed frames per setting (off and on alternate)")
    parser.add_argument("--warmup", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime CPU threads (default 1: one core)")
    parser.add_argument("--size", default="640x480", help="frame size WxH (default 640x480)")


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3)}


def _frames(w: int, h: int, n: int) -> list:
    from av import VideoFrame

    from bench._product import grace_hopper, moving_face

    photo = grace_hopper()
    out = []
    for i in range(n):
        f = VideoFrame.from_ndarray(moving_face(photo, w, h, i), format="rgb24").reformat(format="yuv420p")
        out.append(f)
    return out


def bench_file(path: str, name: str | None, args) -> dict:
    from engines.enhancer import FaceEnhancer
    from engines.face_nets import FaceNetConfig
    from streamer.pipeline.convert import frame_to_state
    from streamer.pipeline.pipeline import Pipeline
    from streamer.pipeline.stages.enhance import EnhanceStage
    from streamer.pipeline.stages.faces import FaceStage
    from streamer.pipeline.stages.fusion import FusionStage
    from streamer.session.session import Session

    w, h = (int(v) for v in args.size.lower().split("x"))
    t = time.perf_counter()
    enh = FaceEnhancer(FaceNetConfig(path, name=name, device="cpu", threads=args.threads, window_ms=0.0))
    out: dict = {"file": Path(path).name, "model": enh.entry.name, "crop_px": enh.prep.size,
                 "licence": enh.entry.licence.label, "load_ms": round((time.perf_counter() - t) * 1000.0, 1)}
    try:
        frames = _frames(w, h, args.warmup + 2 * args.frames)
        from engines.sources import SourceRegistry

        from bench._product import demo_source

        src = SourceRegistry().register(demo_source())
        sessions = {}
        for key, enhance in (("off", 0.0), ("on", 1.0)):
            s = Session()
            s.add_source(src.id, src)
            s.update(source_id=src.id, enhance=enhance)
            sessions[key] = s
        pipes = {k: Pipeline([FaceStage(), FusionStage(), EnhanceStage(enh, live=True)]) for k in sessions}
        totals: dict[str, list[float]] = {"off": [], "on": []}
        stage_ms: list[float] = []
        faces_seen: list[int] = []
        for i, frame in enumerate(frames):
            key = "on" if i % 2 else "off"
            state = frame_to_state(frame)
            t0 = time.perf_counter()
            state = pipes[key](state, sessions[key].frame_context())
            state.planes.flush()
            dt = (time.perf_counter() - t0) * 1000.0
            if i < args.warmup:
                continue
            totals[key].append(dt)
            if key == "on":
                stage_ms.append(state.timings.get("enhance", 0.0))
                faces_seen.append(len(state.enhanced))
        for p in pipes.values():
            p.close()
        per_face = [ms / n for ms, n in zip(stage_ms, faces_seen) if n]
        out["stream"] = {k: {**_stats(v), "fps_capacity": round(1000.0 / float(np.median(v)), 1)} for k, v in totals.items()}
        out["stream"]["on_over_off"] = round(float(np.median(totals["on"])) / float(np.median(totals["off"])), 3)
        out["enhance_stage_per_face"] = _stats(per_face) if per_face else "no face enhanced"
        out["frames_with_a_face_enhanced"] = f"{sum(1 for n in faces_seen if n)}/{len(faces_seen)}"
        crop, _ = enh.crop(np.zeros((h, w, 3), np.uint8) + 128, _landmarks_of(frames[0]))
        calls = []
        for _ in range(args.warmup + args.frames):
            t0 = time.perf_counter()
            enh.enhance(crop[None])
            calls.append((time.perf_counter() - t0) * 1000.0)
        out["model_call_per_face"] = _stats(calls[args.warmup:])
    finally:
        enh.close()
    return out


def _landmarks_of(frame) -> np.ndarray:
    from engines.faces import MediaPipeLandmarker

    lm = MediaPipeLandmarker()
    try:
        faces = lm.detect(frame.to_ndarray(format="rgb24"), 0)
    finally:
        lm.close()
    if not faces:
        raise RuntimeError("no face in the bench frame")
    return faces[0].landmarks


def run(args) -> dict:
    import cv2

    cv2.setNumThreads(1)
    if not args.enhancer and not args.test_models:
        raise SystemExit("livefuse bench enhancer: give --enhancer NAME|FILE or --test-models")
    result: dict = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "frame": f"{args.size} yuv420p, one moving face",
                    "stages": "faces -> fusion (geometric) -> enhance, on the stream's planes; off and on alternate",
                    "threads": args.threads, "frames": args.frames}
    if args.test_models:
        from bench import _catalogue_models as cm

        result["models"] = "tiny test models of the families' signatures: figures of the path, not of a real network"
        with tempfile.TemporaryDirectory(prefix="livefuse-enhance-bench-") as tmp:
            files = {"gfpgan_1.4": cm.enhancer(Path(tmp) / "gfpgan_1.4.onnx", 512, batch="N"),
                     "gpen_bfr_256": cm.enhancer(Path(tmp) / "gpen_bfr_256.onnx", 256, batch="N")}
            result["files"] = {n: bench_file(str(p), n, args) for n, p in files.items()}
    else:
        from engines.catalogue.entries import resolve

        found = resolve(args.enhancer, "enhancer")
        result["files"] = {args.enhancer: bench_file(str(found.path), found.entry.name if found.entry else None, args)}
    return result
