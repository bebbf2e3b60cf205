"""Fusion stage cost per frame with one face, landmarks excluded (found once, outside the timing).

Times wall clock and this thread's CPU time (OpenCV and torch held to one thread, so CPU time is the
cost on one core even on a busy machine), and the share spent on geometry (mesh, raster, masks) versus
pixel work. Runs the numpy path and, with --torch, the torch path on CPU and on CUDA when present
(CUDA at 1080p).

`--work-px 128,192,256,0` adds the working-resolution sweep (FusionConfig.work_px, 0 = full resolution) on
the Grace Hopper clip with known motion (bench/_product.py) at `--work-sizes`, the portrait at each of
`--work-photo-scale` (photo height / frame height): per value the stage's thread CPU and, against the
full-resolution output of the same frame, PSNR / SSIM / max abs difference over the fused box, PSNR over
the pixels the full-resolution fusion changed, and whether everything outside the box is bit-exact.
"""

from __future__ import annotations

import os
import time

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=60, help="timed frames per case")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--mask-runs", type=int, default=30, help="timed runs of the source's validity mask")
    parser.add_argument("--torch", action="store_true", help="also time the torch path (CPU, and CUDA if present)")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--work-px", default=None,
                        help="comma list of FusionConfig.work_px values for the working-resolution sweep (0 = full)")
    parser.add_argument("--work-sizes", default="1920x1080,1280x720", help="frame sizes of the sweep")
    parser.add_argument("--work-photo-scale", default="0.9,1.4",
                        help="portrait heights in the sweep, as fractions of the frame height (1.4: a close face)")
    parser.add_argument("--work-frames", type=int, default=30, help="clip frames per size in the sweep")


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
    from streamer.pipeline.pipeline import FrameState

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


def _quality(ref: np.ndarray, got: np.ndarray, before: np.ndarray, box: tuple[int, int, int, int]) -> dict:
    """`got` against the full-resolution `ref` over the fused box, over the pixels `ref` changed, and outside
    the box (bit-exact or not)."""
    from skimage.metrics import structural_similarity

    x0, y0, x1, y1 = box
    a, b = ref[y0:y1, x0:x1].astype(np.float64), got[y0:y1, x0:x1].astype(np.float64)
    mse = float(((a - b) ** 2).mean())
    changed = np.any(ref[y0:y1, x0:x1] != before[y0:y1, x0:x1], axis=2)
    mse_face = float(((a[changed] - b[changed]) ** 2).mean()) if changed.any() else 0.0
    outside = np.ones(ref.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    psnr = lambda m: 99.0 if m == 0 else 10 * np.log10(255.0 ** 2 / m)  # noqa: E731  (99: identical)
    return {"psnr": psnr(mse), "psnr_face": psnr(mse_face),
            "ssim": float(structural_similarity(ref[y0:y1, x0:x1], got[y0:y1, x0:x1], channel_axis=2, data_range=255)),
            "max_abs": int(np.abs(a - b).max()), "outside_exact": bool(np.array_equal(got[outside], before[outside]))}


def _work_px_sweep(args, source) -> dict:
    """The working-resolution sweep: every work_px value frame by frame in turn on the same clip frames."""
    import time

    from bench._product import grace_hopper, moving_face
    from engines.faces import MediaPipeLandmarker
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.session import Session
    from streamer.pipeline.stages.fusion import FusionConfig, FusionStage

    values = [int(v) for v in args.work_px.split(",") if v.strip()]
    if 0 not in values:
        values.append(0)                       # the reference
    session = Session()
    session.add_source(source.id, source)
    photo = grace_hopper()
    out: dict = {"values": values, "frames": args.work_frames,
                 "quality_note": "against work_px=0 on the same frame; psnr/ssim/max_abs over the fused box, "
                                 "psnr_face over the pixels the full-resolution fusion changed; 99 dB = identical"}
    for size in args.work_sizes.split(","):
        w, h = (int(v) for v in size.lower().split("x"))
        for scale in (float(v) for v in args.work_photo_scale.split(",")):
            lm = MediaPipeLandmarker()
            clip = []
            for n in range(args.work_frames + args.warmup):
                img = moving_face(photo, w, h, n, photo_px=scale * h)
                faces = lm.detect(img, 33 * n)
                if len(faces) != 1:
                    raise RuntimeError(f"expected one face in clip frame {n} at {size}, found {len(faces)}")
                clip.append((img, faces))
            lm.close()
            stages = {v: FusionStage(FusionConfig(work_px=v)) for v in values}
            geos: dict[int, object] = {}
            for v, st in stages.items():
                inner = st._geometry

                def keep_geometry(*a, _inner=inner, _v=v, **k):
                    geos[_v] = r = _inner(*a, **k)
                    return r

                st._geometry = keep_geometry
            cpu: dict[int, list[float]] = {v: [] for v in values}
            qual: dict[int, list[dict]] = {v: [] for v in values if v != 0}
            for n, (img, faces) in enumerate(clip):
                outs = {}
                for v, st in stages.items():
                    c0 = time.thread_time()
                    outs[v] = st(FrameState(image=img, faces=list(faces)), session.frame_context()).image
                    if n >= args.warmup:
                        cpu[v].append((time.thread_time() - c0) * 1000)
                if n >= args.warmup:
                    for v in qual:
                        qual[v].append(_quality(outs[0], outs[v], img, geos[0].box))
            ref_geo = geos[0]
            case: dict = {"face_width_px": round(float(ref_geo.face_w), 1),
                          "box": [ref_geo.box[2] - ref_geo.box[0], ref_geo.box[3] - ref_geo.box[1]], "work_px": {}}
            for v in values:
                g = geos[v]
                row: dict = {"working_width_px": g.work[1] if g.work else g.box[2] - g.box[0],
                             "reduced": g.work is not None, "cpu": _stats(cpu[v]),
                             "cpu_ratio_to_full": round(float(np.median(cpu[v]) / np.median(cpu[0])), 3)}
                if v in qual:
                    q = qual[v]
                    for k in ("psnr", "psnr_face", "ssim"):
                        vals = np.asarray([x[k] for x in q])
                        row[k] = {"min": round(float(vals.min()), 4), "median": round(float(np.median(vals)), 4)}
                    row["max_abs"] = max(x["max_abs"] for x in q)
                    row["outside_box_bit_exact"] = all(x["outside_exact"] for x in q)
                case["work_px"][str(v)] = row
            out[f"{size}_photo{scale:g}"] = case
            for st in stages.values():
                st.close()
    return out


def _mask_cost(registry, photo: np.ndarray, runs: int) -> dict:
    """CPU of the source's validity mask and fill (engines/source_mask.py: build_mask) and of the look for
    hands in front of the face (palm detector, hand landmarks where a palm is found), once each per
    registration, on the astronaut: her fringe is found and filled from the bare side of her forehead; she
    holds no hand up, so the hand look is the palm detector's pass."""
    from engines.source_mask import build_mask
    from engines.sources import canonical_texture

    face = max(registry.detect(photo), key=lambda f: f.bbox[2] - f.bbox[0])
    raw, lms = canonical_texture(photo, face, registry.config)
    ms, hand_ms = [], []
    for _ in range(runs + 2):
        t = time.process_time()
        build_mask(raw, lms, registry.config.mask)
        ms.append((time.process_time() - t) * 1000)
        t = time.process_time()
        registry.hands(photo, face)
        hand_ms.append((time.process_time() - t) * 1000)
    return {"cpu": _stats(ms[2:]), "hand_look_cpu": _stats(hand_ms[2:]), "runs": runs, "texture_px": raw.shape[0],
            "photo": f"{photo.shape[1]}x{photo.shape[0]}"}


def run(args) -> dict:
    import cv2
    import matplotlib.cbook
    import skimage.data
    from PIL import Image

    from engines.faces import MediaPipeLandmarker
    from engines.sources import SourceRegistry
    from streamer.session.session import Session
    from streamer.pipeline.stages.fusion import FusionConfig, FusionStage

    cv2.setNumThreads(1)
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        target = np.asarray(Image.open(f).convert("RGB"))
    registry = SourceRegistry()
    source = registry.register(np.ascontiguousarray(skimage.data.astronaut()))
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
    out["source_mask"] = _mask_cost(registry, np.ascontiguousarray(skimage.data.astronaut()), args.mask_runs)
    out["load_avg_1m_start"] = round(os.getloadavg()[0], 2)
    out.update(_time_cases({"numpy": FusionStage(), "numpy_feather_only": FusionStage(FusionConfig(blend_levels=0))},
                           image, faces, session, args.frames, args.warmup))
    out["ratio_multiband_over_feather_cpu"] = round(out["numpy"]["cpu"]["median_ms"] / out["numpy_feather_only"]["cpu"]["median_ms"], 3)
    if args.work_px:
        out["work_px_sweep"] = _work_px_sweep(args, source)
    out["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
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
