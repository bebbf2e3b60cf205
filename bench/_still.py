"""`livefuse bench pipeline --still`: what a still face's reuse (streamer/pipeline/stages/still.py) saves and costs.

A 640x480 clip of the Grace Hopper photo with sensor noise (sigma `--still-noise`, new every frame): first
`--frames` frames still, then `--frames` frames of the pipeline bench's slow sway and roll. One face stage
(the product's, which keeps a still face's landmarks: engines/landmarks/still.py) finds and smooths the
landmarks on each frame's planes, as the stream does, and a second one with keeping off runs on the same
planes beside it: `faces` reports both stages' thread CPU, the share of frames whose landmarks were kept,
and how far the kept (raw) landmarks lie from the ones the network gives on that frame, in pixels, beside
the network's own frame-to-frame jitter, and the signature change (engines.landmarks.still.change, grey
levels) from each frame to the next over the face's box: what `still_change` is set against. Every case
gets the first stage's faces: the product's fusion and edits stages of its own session, without reuse ("fresh")
and with reuse at each `--still-thresholds` value (`max_move`, fraction of the face width) and
`--still-max-run`. The cases run frame by frame in turn, so a busy machine slows them alike. Per case:
the fraction of faces each stage reused, fusion + edits wall and thread CPU (median / p95 / mean; the
mean is the saving, since reused and fresh frames alternate), and the
quality against the fresh case's output over the face's box (the face's landmark box grown by a quarter
of its width; both outputs read back as RGB from their planes): PSNR and max abs difference on frames
where a stage reused, per segment. For comparison, `hold_*` is what showing the last frame's pixels on
which both stages were fresh would give on the same frames (null when no such frame came: the two
stages' runs fell out of step).
"""

from __future__ import annotations

import fractions
import os
import time
from dataclasses import replace
from typing import Any

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--still", action="store_true",
                        help="time and score still-face reuse instead (a still then slowly moving noisy face)")
    parser.add_argument("--still-thresholds", default="0.002,0.003,0.005,0.01",
                        help="max landmark move, fraction of the face width, one case each (default %(default)s)")
    parser.add_argument("--still-max-run", default="3,6",
                        help="reused frames in a row, a comma list crosses with the thresholds (default 3,6)")
    parser.add_argument("--still-noise", type=float, default=2.0, help="sensor noise sigma in levels (default 2)")


def _stats(ms: list[float]) -> dict[str, float] | None:
    if not ms:
        return None
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2),
            "mean_ms": round(float(a.mean()), 2)}


def _spread(values: list[float]) -> dict[str, float] | None:
    """Mean, p95 and max of per-frame mean landmark distances, pixels."""
    if not values:
        return None
    a = np.asarray(values)
    return {"mean": round(float(a.mean()), 3), "p95": round(float(np.percentile(a, 95)), 3), "max": round(float(a.max()), 3)}


def _levels(values: list[float], threshold: float) -> dict[str, float] | None:
    """p50 / p95 of signature changes, and the share under the face stage's `still_change`."""
    if not values:
        return None
    a = np.asarray(values)
    return {"p50": round(float(np.median(a)), 3), "p95": round(float(np.percentile(a, 95)), 3),
            "under_still_change": round(float((a < threshold).mean()), 3)}


def _quality(diffs: list[np.ndarray]) -> dict[str, float] | None:
    """PSNR over all the frames' boxes together, and the worst frame's PSNR and max abs difference."""
    if not diffs:
        return None
    mse = [float((d ** 2).mean()) for d in diffs]
    psnr = lambda m: round(10 * np.log10(255.0 ** 2 / max(m, 1e-9)), 2)  # noqa: E731
    return {"frames": len(diffs), "psnr_db": psnr(float(np.mean(mse))), "worst_frame_psnr_db": psnr(max(mse)),
            "mean_abs": round(float(np.mean([np.abs(d).mean() for d in diffs])), 3),
            "max_abs": int(max(np.abs(d).max() for d in diffs)),
            "p99_abs": round(float(np.percentile(np.concatenate([np.abs(d).ravel() for d in diffs]), 99)), 1)}


def run(args) -> dict[str, Any]:
    from av import VideoFrame

    from bench._product import DEFAULT_PROMPT, build_product, grace_hopper, moving_face, prepare_session
    from bench._scenes import add_noise
    from streamer.pipeline.convert import frame_to_rgb, frame_to_state, state_to_frame
    from streamer.pipeline.pipeline import Pipeline
    from streamer.session.session import Session
    from engines.landmarks.still import change as still_change, face_box as still_box, signature
    from streamer.pipeline.stages.faces import FaceStage
    from streamer.pipeline.stages.still import StillConfig, StillFaces

    w, h = (int(v) for v in args.sizes.split(",")[0].split("x"))
    prompt = DEFAULT_PROMPT if args.prompt is None else args.prompt
    thresholds = [float(t) for t in args.still_thresholds.split(",") if t]
    runs = [int(r) for r in str(args.still_max_run).split(",") if r]
    configs: dict[str, StillConfig | None] = {"fresh": None}
    for r in runs:
        for t in thresholds:
            configs[f"max_move={t} max_run={r}"] = StillConfig(max_move=t, max_run=r)
    photo = grace_hopper()
    rng = np.random.default_rng(16)
    tb = fractions.Fraction(1, 90000)
    product = build_product()
    cases: dict[str, dict[str, Any]] = {}
    faces_stage = None
    no_keep = product.config.faces
    fresh_faces = FaceStage(replace(no_keep, landmarker=replace(no_keep.landmarker, still_change=0.0)))
    faces_log: dict[str, dict[str, list[float]]] = {seg: {"keep_cpu": [], "fresh_cpu": [], "kept": [], "error": [],
                                                           "jitter": [], "change": []} for seg in ("still", "moving")}
    last_fresh: np.ndarray | None = None
    last_rgb: np.ndarray = np.zeros((0, 0, 3), np.uint8)   # set with last_fresh
    try:
        for name, cfg in configs.items():
            session = Session(f"bench-still-{len(cases)}")
            prepare_session(product, session, prompt)
            pipe = product.make_pipeline(session)
            by_name = {s.name: s for s in pipe.stages}
            if faces_stage is None:
                faces_stage = by_name["faces"]
            for st in (by_name["fusion"], by_name["edits"]):
                st.still = StillFaces(cfg) if cfg is not None else None
            cases[name] = {"session": session, "pipe": pipe, "run": Pipeline([by_name["fusion"], by_name["edits"]]),
                           "wall": {"still": [], "moving": []}, "cpu": {"still": [], "moving": []},
                           "reused": {"still": {"fusion": 0, "edits": 0}, "moving": {"fusion": 0, "edits": 0}},
                           "diff": {"still": [], "moving": []}, "hold": {"still": [], "moving": []},
                           "held": None, "errors": {}}
        total = 2 * (args.warmup + args.frames)
        counted = {"still": 0, "moving": 0}
        for n in range(total):
            segment = "still" if n < args.warmup + args.frames else "moving"
            k = n - (args.warmup + args.frames) if segment == "moving" else 0
            warm = (n if segment == "still" else k) < args.warmup
            img = add_noise(moving_face(photo, w, h, k), args.still_noise, rng)
            decoded = VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
            decoded.pts, decoded.time_base = n * 3000, tb
            context = cases["fresh"]["session"].frame_context()
            runs = getattr(faces_stage.detector, "landmark_runs", {"kept": 0})
            kept_before = runs["kept"]
            c0 = time.thread_time()
            found = faces_stage(frame_to_state(decoded, planes=True), context)
            c1 = time.thread_time()
            beside = fresh_faces(frame_to_state(decoded, planes=True), context)
            c2 = time.thread_time()
            if len(found.faces) != 1 or len(beside.faces) != 1:
                raise RuntimeError(f"frame {n}: expected one face, found {len(found.faces)} and {len(beside.faces)}")
            raw = next(iter(found.raw_landmarks.values()))[:, :2]
            net = next(iter(beside.raw_landmarks.values()))[:, :2]
            rgb = frame_to_rgb(decoded)
            if not warm:
                log = faces_log[segment]
                log["keep_cpu"].append((c1 - c0) * 1000.0)
                log["fresh_cpu"].append((c2 - c1) * 1000.0)
                kept = runs["kept"] > kept_before
                log["kept"].append(float(kept))
                if kept:
                    log["error"].append(float(np.linalg.norm(raw - net, axis=1).mean()))
                if last_fresh is not None:
                    log["jitter"].append(float(np.linalg.norm(net - last_fresh, axis=1).mean()))
                    box = still_box(last_fresh, (h, w))
                    if box is not None:
                        log["change"].append(still_change(signature(rgb, box), signature(last_rgb, box)))
            last_fresh, last_rgb = net, rgb
            face = found.faces[0]
            x0, y0 = face.landmarks[:, :2].min(axis=0)
            x1, y1 = face.landmarks[:, :2].max(axis=0)
            m = 0.25 * (x1 - x0)
            box = np.s_[max(0, int(y0 - m)):min(h, int(y1 + m)), max(0, int(x0 - m)):min(w, int(x1 + m))]
            outs = {}
            for name, c in cases.items():
                state = frame_to_state(decoded, planes=True)
                state.faces, state.raw_landmarks = list(found.faces), dict(found.raw_landmarks)
                stills = [s.still for s in c["run"].stages]
                before = [s.reused if s is not None else 0 for s in stills]
                t0, c0 = time.perf_counter(), time.thread_time()
                state = c["run"](state, c["session"].frame_context())
                state_to_frame(state, decoded)      # writes the regions back, as the worker's edge does
                t1, c1 = time.perf_counter(), time.thread_time()
                c["errors"].update(state.errors)
                out = frame_to_rgb(state_to_frame(state, decoded))[box].astype(np.float32)
                outs[name] = out
                reused = [(s.reused if s is not None else 0) - b for s, b in zip(stills, before)]
                c["last_reused"] = any(reused)
                if not any(reused):
                    c["held"] = out
                if warm:
                    continue
                c["wall"][segment].append((t1 - t0) * 1000.0)
                c["cpu"][segment].append((c1 - c0) * 1000.0)
                for stage, r in zip(("fusion", "edits"), reused):
                    c["reused"][segment][stage] += r
            if warm:
                continue
            counted[segment] += 1
            ref = outs["fresh"]
            for name, c in cases.items():
                if name != "fresh" and c["last_reused"]:
                    c["diff"][segment].append(outs[name] - ref)
                    if c["held"] is not None and c["held"].shape == ref.shape:
                        c["hold"][segment].append(c["held"] - ref)
    finally:
        for c in cases.values():
            c["pipe"].close()
        fresh_faces.close()
        product.close()
    out: dict[str, Any] = {"benchmark": "pipeline --still", "frame": f"{w}x{h}", "prompt": prompt,
                           "noise_sigma": args.still_noise, "frames_per_segment": counted, "cpu_count": os.cpu_count(),
                           "note": "fusion + edits per frame; quality against the fresh case over the face box, "
                                   "on frames where a stage reused", "cases": {}}
    out["still_change"] = no_keep.landmarker.still_change
    out["faces"] = {seg: {"keeping_thread_cpu": _stats(log["keep_cpu"]), "fresh_thread_cpu": _stats(log["fresh_cpu"]),
                          "kept_fraction": round(float(np.mean(log["kept"])), 3) if log["kept"] else None,
                          "kept_error_px": _spread(log["error"]), "network_jitter_px": _spread(log["jitter"]),
                          "frame_to_frame_change_levels": _levels(log["change"], no_keep.landmarker.still_change)}
                    for seg, log in faces_log.items()}
    fresh = cases["fresh"]
    for name, c in cases.items():
        res: dict[str, Any] = {}
        for seg in ("still", "moving"):
            n = max(counted[seg], 1)
            res[seg] = {"fusion_edits_wall": _stats(c["wall"][seg]), "fusion_edits_thread_cpu": _stats(c["cpu"][seg]),
                        "reused_fraction": {k: round(v / n, 3) for k, v in c["reused"][seg].items()}}
            if name != "fresh":
                res[seg]["cpu_mean_over_fresh"] = round(np.mean(c["cpu"][seg]) / np.mean(fresh["cpu"][seg]), 3)
                res[seg]["quality_vs_fresh"] = _quality(c["diff"][seg])
                res[seg]["hold_last_fresh_vs_fresh"] = _quality(c["hold"][seg])
        res["stage_errors"] = c["errors"]
        out["cases"][name] = res
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out
