"""Face engines: landmarker ms per frame, wall and CPU (LiteRT's interpreter and MediaPipe's graph side by
side, unpaced and paced at 30 fps, with every output and, as `<backend>_stream`, as the stream's face stage
runs them: blendshapes off; the torch port), jitter on a still noisy photo (raw vs smoothed RMS px)
and lag on a moving clip (px at a set speed).

    livefuse bench faces --json            # about a minute on 2 busy cores
    livefuse bench faces --frames 30 --cores 0
    livefuse bench faces --no-torch --repeats 8      # each run's medians: the machine drifts by ~1.4x
    livefuse bench faces --json --wide-only          # the wide face search alone: cost, faces per group photo
    livefuse bench faces --json --hands-only         # the hand check alone: its cost, the stage with and without it
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

ASTRONAUT_FACE_CENTRE = (225.0, 125.0)   # where the face lies in skimage's astronaut photo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frames", type=int, default=60, help="frames per timing / jitter run (default 60)")
    parser.add_argument("--cores", type=int, default=1, help="pin the process to this many CPU cores (0: leave as is)")
    parser.add_argument("--noise", type=float, default=6.0, help="sensor noise sigma in 8-bit levels (default 6)")
    parser.add_argument("--speed", type=float, default=150.0, help="lag clip speed in px per second (default 150)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch port timings")
    parser.add_argument("--no-interpreter", action="store_true", help="skip LiteRT's interpreter (the `interpreter` backend)")
    parser.add_argument("--int8", action="store_true",
                        help="also time a dynamic-range int8 copy of the landmark net against the shipped one, with the landmark difference")
    parser.add_argument("--wide-only", action="store_true",
                        help="only the wide search figures (detection cost, faces per group photo, the stream stage)")
    parser.add_argument("--hands-only", action="store_true",
                        help="only the hand check figures (its cost; the stream's face stage with and without it, side by side)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the 640x480 one-face timing this many more times, side by side, and list each run's medians")


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2), "n": len(ms)}


def _place(photo, size, face_px, dx=0.0, noise=None):
    import cv2

    w, h = size
    k = face_px / 95.0                           # her face is about 95 px wide in the photo
    cx, cy = ASTRONAUT_FACE_CENTRE
    m = np.array([[k, 0, w / 2 - cx * k + dx], [0, k, h / 2 - cy * k]], np.float64)
    frame = cv2.warpAffine(photo, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=(118, 118, 118))
    if noise is not None:
        sigma, rng = noise
        frame = np.clip(frame + rng.normal(0, sigma, frame.shape), 0, 255).astype(np.uint8)
    return frame, m


def _time_side_by_side(makers: dict[str, Any], frames: list[np.ndarray], pace_s: float = 0.0) -> dict[str, dict]:
    """Each landmarker on the same frames, interleaved frame by frame so the machine's load falls on all
    alike: wall ms and process CPU ms per call (the CPU counts every thread a runtime uses). `pace_s` > 0
    sleeps between frames as a 30 fps camera would, which leaves caches cold as in a stream."""
    dets = {name: make() for name, make in makers.items()}
    wall: dict[str, list[float]] = {n: [] for n in dets}
    cpu: dict[str, list[float]] = {n: [] for n in dets}
    try:
        for i in range(3):
            for d in dets.values():
                d.detect(frames[0], i)
        for i, f in enumerate(frames):
            for name, d in dets.items():
                t0, c0 = time.perf_counter(), time.process_time()
                d.detect(f, 1000 + i * 33)
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name].append((time.process_time() - c0) * 1000)
                if pace_s:
                    time.sleep(pace_s)
    finally:
        for d in dets.values():
            d.close()
    return {n: {**_stats(wall[n]), "cpu_median_ms": round(float(np.median(cpu[n])), 2),
                "cpu_p95_ms": round(float(np.percentile(cpu[n], 95)), 2)} for n in dets}


def _int8_side_by_side(backend: Any, photo: np.ndarray, rng: np.random.Generator, n: int) -> dict[str, Any]:
    """The interpreter backend with its landmark net as shipped and as a dynamic-range int8 copy
    (bench/_int8.py), the stream's setting, frame by frame on one clip: ms each, and how far the int8
    landmarks land from the shipped net's (mean and worst frame, mean px over the 478)."""
    from bench._int8 import dynamic_int8_copy
    from engines.backends.interpreter import InterpreterRunner
    from engines.faces import LandmarkerConfig
    from engines.landmarks.graph import LandmarkGraph
    from engines.landmarks.networks import LANDMARKS_MEMBER, graph_bytes

    cfg = LandmarkerConfig(max_faces=1, blendshapes=False)
    int8_net = dynamic_int8_copy(graph_bytes(LANDMARKS_MEMBER))
    frames = [_place(photo, (640, 480), 160.0, dx=2.0 * np.sin(i / 5), noise=(2.0, rng))[0] for i in range(n)]
    makers = {"shipped": lambda: backend.landmarker(cfg),
              "int8": lambda: LandmarkGraph(cfg, "cpu", network_factory=lambda member: InterpreterRunner(int8_net)
                                              if member == LANDMARKS_MEMBER else backend.network(member))}
    out = _time_side_by_side(makers, frames)
    dets = {name: make() for name, make in makers.items()}
    err = []
    try:
        for i, f in enumerate(frames):
            a, b = (dets[name].detect(f, i * 33) for name in ("shipped", "int8"))
            if a and b:
                err.append(float(np.linalg.norm(a[0].landmarks[:, :2] - b[0].landmarks[:, :2], axis=1).mean()))
    finally:
        for d in dets.values():
            d.close()
    out["int8_vs_shipped_px"] = {"mean": round(float(np.mean(err)), 3), "worst_frame": round(float(np.max(err)), 3),
                                 "frames": len(err)}
    return out


def _streams(device: str, frames: list[np.ndarray], streams: int, share: bool) -> dict[str, Any]:
    """`streams` landmarkers on the torch backend, each on its own thread and frames (one face each, as
    sessions would be), with the landmark network shared across them (batched) or each its own: total
    frames a second, and each call's ms."""
    import threading

    from engines.backends import BackendSettings, select_backend
    from engines.faces import LandmarkerConfig

    backend = select_backend(BackendSettings(preference=("torch",), device=device, share_across_streams=share,
                                             max_batch=max(streams, 1)))
    cfg = LandmarkerConfig(max_faces=1, blendshapes=False)
    dets = [backend.landmarker(cfg) for _ in range(streams)]
    runner = dets[0].net.net
    ms: list[float] = []
    lock = threading.Lock()

    def work(d):
        for i, f in enumerate(frames):
            t0 = time.perf_counter()
            d.detect(f, 1000 + i * 33)
            with lock:
                ms.append((time.perf_counter() - t0) * 1000)

    try:
        for d in dets:                 # warm up, and the first (detector) frame, outside the timing
            d.detect(frames[0], 0)
        t0 = time.perf_counter()
        threads = [threading.Thread(target=work, args=(d,)) for d in dets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        stats = getattr(runner, "stats", None)
        for d in dets:
            d.close()
    out = {**_stats(ms), "frames_per_s": round(len(ms) / wall, 1)}
    if stats is not None:
        out["batches"] = stats.as_dict()
    return out


def _rms_jitter(track: np.ndarray) -> float:
    return float(np.sqrt(((track - track.mean(axis=0)) ** 2).sum(axis=-1).mean()))


def run(args: argparse.Namespace) -> dict[str, Any]:
    import skimage.data
    import torch

    from engines.faces import LandmarkerConfig, MediaPipeLandmarker
    from streamer.pipeline.pipeline import FrameState
    from streamer.pipeline.stages.faces import FaceStage

    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
        torch.set_num_threads(args.cores)
    photo = np.ascontiguousarray(skimage.data.astronaut())
    rng = np.random.default_rng(0)
    n = args.frames
    out: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                           "frames": n}

    out["hands"] = _hand_check(photo, n)
    if args.hands_only:
        return out
    out["wide_search"] = _wide_search(photo, n)
    if args.wide_only:
        return out

    # 1. per frame, tracking one face (VIDEO mode), a little motion each frame: MediaPipe's graph (`litert`)
    #    and LiteRT's interpreter under our tracking graph (`interpreter`), side by side; then paced at 30 fps
    from engines.backends import BackendSettings, select_backend

    backends = {"litert": None}
    if not args.no_interpreter:
        backends["interpreter"] = select_backend(BackendSettings(preference=("interpreter",)))
    def makers(max_faces: int, stream_too: bool = False) -> dict[str, Any]:
        """Each backend with every output (blendshapes too); with `stream_too`, also as the stream's face
        stage runs it (`<backend>_stream`: blendshapes off, FaceStageConfig's default)."""
        configs = {"": LandmarkerConfig(max_faces=max_faces)}
        if stream_too:
            configs["_stream"] = LandmarkerConfig(max_faces=max_faces, blendshapes=False)
        return {name + suffix: (lambda b=b, cfg=cfg: MediaPipeLandmarker(cfg) if b is None else b.landmarker(cfg))
                for suffix, cfg in configs.items() for name, b in backends.items()}

    for name, size, face in (("640x480", (640, 480), 160.0), ("1280x720", (1280, 720), 240.0)):
        frames = [_place(photo, size, face, dx=2.0 * np.sin(i / 5), noise=(2.0, rng))[0] for i in range(n)]
        for faces in (1, 4):
            for key, stats in _time_side_by_side(makers(faces, stream_too=name == "640x480"), frames).items():
                backend, _, suffix = key.partition("_")
                out[f"{backend}_{name}_{'1face' if faces == 1 else 'max4'}{'_' + suffix if suffix else ''}"] = stats
        if name == "640x480":
            paced = makers(1, stream_too=True)
            for key, stats in _time_side_by_side(paced, frames, pace_s=1 / 30 / len(paced)).items():
                backend, _, suffix = key.partition("_")
                out[f"{backend}_{name}_1face_paced30{'_' + suffix if suffix else ''}"] = stats
            if args.repeats > 1:   # the machine's speed drifts from minute to minute: show each run's medians
                runs = [_time_side_by_side(makers(1, stream_too=True), frames) for _ in range(args.repeats)]
                out[f"repeats_{name}_1face"] = {key: [r[key]["median_ms"] for r in runs] for key in runs[0]}
                out[f"repeats_{name}_1face"]["best_median_ms"] = {
                    key: min(r[key]["median_ms"] for r in runs) for key in runs[0]}
                if "interpreter_stream" in runs[0]:   # the robust figure on a drifting machine: each run's ratio
                    out[f"repeats_{name}_1face"]["ratio_interpreter_stream_to_litert"] = [
                        round(r["interpreter_stream"]["median_ms"] / r["litert"]["median_ms"], 3) for r in runs]

    if args.int8 and "interpreter" in backends:
        out["int8_landmark_net_640x480_1face"] = _int8_side_by_side(backends["interpreter"], photo, rng, n)

    # 2. the torch port on this machine's CPU (and CUDA when present)
    if not args.no_torch:
        from engines.landmarks.graph import LandmarkGraph
        from engines.landmarks.networks import LandmarkNet

        frames = [_place(photo, (640, 480), 160.0, dx=2.0 * np.sin(i / 5))[0] for i in range(min(n, 20))]
        out["torch_cpu_640x480_1face"] = _time_side_by_side(
            {"torch": lambda: LandmarkGraph(LandmarkerConfig(max_faces=1))}, frames)["torch"]
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        # several streams on one runtime: the landmark network shared and batched across them, or not;
        # alternating, twice, since the machine drifts
        for dev in devices:
            n_streams = 4 if dev == "cpu" else 16
            for round_ in range(2):
                for share in (True, False):
                    out[f"torch_{dev}_{n_streams}streams_{'shared' if share else 'own'}_run{round_ + 1}"] = \
                        _streams(dev, frames[:10] if dev == "cpu" else frames, n_streams, share)
        crops = np.stack([np.asarray(frames[0][100:356, 180:436])] * 32)
        for dev in devices:
            net = LandmarkNet(dev)
            for batch in ((1, 8) if dev == "cpu" else (1, 8, 32)):
                x = crops[:batch]
                net.run(x)
                ms = []
                for _ in range(5 if dev == "cpu" else 30):
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    net.run(x)
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    ms.append((time.perf_counter() - t0) * 1000)
                s = _stats(ms)
                s["per_face_ms"] = round(s["median_ms"] / batch, 3)
                out[f"torch_{dev}_landmark_net_batch{batch}"] = s

    # 3. jitter on a still photo with sensor noise, 640x480, face about 160 px wide
    still, _ = _place(photo, (640, 480), 160.0)
    stage = FaceStage()
    raw, smooth = [], []
    try:
        for i in range(n):
            noisy = np.clip(still + rng.normal(0, args.noise, still.shape), 0, 255).astype(np.uint8)
            state = stage(FrameState(image=noisy, pts=i * 3000), None)
            if state.faces:
                f = state.faces[0]
                raw.append(state.raw_landmarks[f.track_id][:, :2])
                smooth.append(f.landmarks[:, :2])
    finally:
        stage.close()
    skip = 10
    out["jitter_still_640x480"] = {
        "noise_sigma": args.noise,
        "raw_rms_px": round(_rms_jitter(np.array(raw[skip:])), 3),
        "smoothed_rms_px": round(_rms_jitter(np.array(smooth[skip:])), 3),
        "frames_with_face": len(raw),
    }

    # 4. lag on a clip moving sideways at a set speed: smoothed landmarks vs where they truly are
    ref_lms = np.array(raw).mean(axis=0)             # still-frame landmarks (mean over noise)
    _, m0 = _place(photo, (640, 480), 160.0)
    stage = FaceStage()
    lag_raw, lag_smooth, along = [], [], []
    step = args.speed / 30.0
    try:
        for i in range(n):
            dx = (i - n / 2) * step
            frame, _ = _place(photo, (640, 480), 160.0, dx=dx, noise=(args.noise, rng))
            state = stage(FrameState(image=frame, pts=i * 3000), None)
            if not state.faces or i < 10:
                continue
            truth = ref_lms + np.array([dx, 0.0])
            f = state.faces[0]
            lag_smooth.append(float(np.linalg.norm(f.landmarks[:, :2] - truth, axis=1).mean()))
            lag_raw.append(float(np.linalg.norm(state.raw_landmarks[f.track_id][:, :2] - truth, axis=1).mean()))
            along.append(float((truth[:, 0] - f.landmarks[:, 0]).mean()))
    finally:
        stage.close()
    out["lag_moving_640x480"] = {
        "speed_px_per_s": args.speed,
        "raw_error_px": round(float(np.mean(lag_raw)), 3),
        "smoothed_error_px": round(float(np.mean(lag_smooth)), 3),
        "smoothed_trailing_px": round(float(np.mean(along)), 3),   # how far behind the motion, on average
    }
    return out


def _wide_search(photo: np.ndarray, n: int) -> dict[str, Any]:
    """The wide face search (engines.landmarks.search): what one search costs in a stream (short range, the
    full-range whole-frame pass and one tile) and on a photo (every tile), against the short range alone;
    faces found per group photo (real portraits pasted at known sizes) by the wide search, by the short range
    alone and by MediaPipe's graph; and the stream's face stage with one close face, per frame."""
    import matplotlib.cbook
    from PIL import Image

    from engines.backends import BackendSettings, select_backend
    from engines.faces import LandmarkerConfig, MediaPipeLandmarker, SearchConfig
    from streamer.pipeline.pipeline import FrameState
    from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig
    from bench._scenes import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = np.ascontiguousarray(np.asarray(Image.open(f).convert("RGB")))
    a, g = (photo, ASTRONAUT_FACE), (hopper, GRACE_HOPPER_FACE)
    backend = select_backend(BackendSettings(preference=("interpreter",)))
    out: dict[str, Any] = {}
    graph = backend.landmarker(LandmarkerConfig(mode="image", max_faces=8, blendshapes=False))
    search = graph.search
    try:
        for name, size in (("640x480", (640, 480)), ("1280x720", (1280, 720))):
            frame, _ = group_frame([a + (60.0, (size[0] * 0.3, size[1] * 0.4))], size)
            timings: dict[str, list[float]] = {"short_only": [], "stream_search": [], "photo_search": []}
            for i in range(max(10, n // 2) + 2):
                for key, call in (("short_only", lambda: search.find(frame, wide=False)),
                                  ("stream_search", lambda: search.find(frame, wide=True)),
                                  ("photo_search", lambda: search.find(frame, wide=True, all_tiles=True))):
                    t0 = time.perf_counter()
                    call()
                    if i >= 2:
                        timings[key].append((time.perf_counter() - t0) * 1000)
            out[f"detect_{name}"] = {k: _stats(v) for k, v in timings.items()}
            out[f"detect_{name}"]["tiles"] = len(search.tiles(*size))

        sets = {
            "six_at_a_table_1280x886": ((1280, 886), [a + (120, (160, 300)), g + (110, (370, 330)), a + (100, (580, 280)),
                                                      g + (130, (800, 320)), a + (140, (1030, 300)), g + (100, (1180, 600))]),
            "mixed_40_to_140_1280x720": ((1280, 720), [a + (120, (150, 200)), g + (100, (450, 250)), a + (60, (700, 150)),
                                                       g + (40, (900, 500)), a + (80, (1150, 400)), g + (140, (350, 550))]),
            "panel_of_five_640x480": ((640, 480), [a + (50, (70, 200)), g + (55, (190, 230)), a + (60, (320, 210)),
                                                   g + (50, (450, 240)), a + (45, (570, 200))]),
        }
        short = backend.landmarker(LandmarkerConfig(mode="image", max_faces=8, blendshapes=False,
                                                    search=SearchConfig(wide=False)))
        mp = MediaPipeLandmarker(LandmarkerConfig(mode="image", max_faces=8, blendshapes=False))
        try:
            per_photo = {}
            for name, (size, spec) in sets.items():
                frame, _ = group_frame(spec, size)
                t0 = time.perf_counter()
                wide = len(graph.detect(frame, 0))
                wide_ms = (time.perf_counter() - t0) * 1000
                per_photo[name] = {"faces": len(spec), "found_wide": wide, "found_short_range_only": len(short.detect(frame, 0)),
                                   "found_mediapipe_graph": len(mp.detect(frame, 0)), "wide_ms": round(wide_ms, 1)}
            out["faces_per_group_photo"] = per_photo
        finally:
            short.close()
            mp.close()
    finally:
        graph.close()

    # the stream's face stage, one close face, 30 fps stream time: most frames follow the face and search
    # nothing; every 250 ms one searches (short range + the wide passes with one tile)
    for name, size, face in (("640x480", (640, 480), 160.0), ("1280x720", (1280, 720), 240.0)):
        frames = [_place(photo, size, face, dx=2.0 * np.sin(i / 5))[0] for i in range(n)]
        stage = FaceStage(FaceStageConfig(landmarker=LandmarkerConfig(max_faces=4, blendshapes=False)))
        ms = []
        try:
            for i, f in enumerate(frames * 2):
                t0 = time.perf_counter()
                stage(FrameState(image=f, pts=i * 3000), None)
                if i >= len(frames) // 4:
                    ms.append((time.perf_counter() - t0) * 1000)
        finally:
            stage.close()
        s = _stats(ms)
        s["mean_ms"] = round(float(np.mean(ms)), 2)
        out[f"stage_{name}_1face_max4"] = s
    return out


def _hand_check(photo: np.ndarray, n: int) -> dict[str, Any]:
    """The hand check (engines.landmarks.hands): what each of its steps costs on a 640x480 frame with a hand
    over a real face (the full check: palm detector + landmarks; following by optical flow; following by the
    landmark network instead, for comparison; the per-frame trigger alone), and the stream's face stage with
    one close face and no hand, with the check and without it, interleaved frame by frame on the same frames."""
    import matplotlib.cbook
    from PIL import Image

    from bench._scenes import ASTRONAUT_SKIN, skin_hand
    from engines.faces import LandmarkerConfig
    from engines.landmarks.hands import HandConfig, HandGuard, open_hand_finder
    from streamer.pipeline.pipeline import FrameState
    from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = np.ascontiguousarray(np.asarray(Image.open(f).convert("RGB")))
    import cv2

    s = 480 / hopper.shape[0]
    portrait = cv2.resize(hopper, (int(hopper.shape[1] * s), 480), interpolation=cv2.INTER_AREA)
    base = np.full((480, 640, 3), 90, np.uint8)
    x = (640 - portrait.shape[1]) // 2
    base[:, x:x + portrait.shape[1]] = portrait
    frame, _ = skin_hand(photo, ASTRONAUT_SKIN, centre=(290, 330), scale=0.7, frame=base)
    out: dict[str, Any] = {}

    finder = open_hand_finder()
    stage = FaceStage(FaceStageConfig(hands=HandConfig(enabled=False)))
    try:
        state = stage(FrameState(image=frame, pts=0), None)
    finally:
        stage.close()
    faces, raw = state.faces, state.raw_landmarks
    timings: dict[str, list[float]] = {"full_check": [], "follow_optical_flow": [], "follow_landmark_net": [],
                                       "trigger_only": []}
    full = HandGuard(finder, HandConfig(check_interval_ms=0.0, idle_interval_ms=0.0))   # a full check on every call
    flow = HandGuard(finder, HandConfig(check_interval_ms=1e12))         # checks once, then follows
    idle = HandGuard(finder, HandConfig(check_interval_ms=1e12, idle_interval_ms=1e12))
    flow(frame, faces, raw, 0.0)
    idle(base, faces, raw, 0.0)                                          # no hand: later calls only test triggers
    hands = list(flow.hands)
    found = len(hands)
    for i in range(max(10, n // 2) + 2):
        for key, call in (("full_check", lambda: full(frame, faces, raw, float(i))),
                          ("follow_optical_flow", lambda: flow(frame, faces, raw, 1.0 + i)),
                          ("follow_landmark_net", lambda: [finder.follow(frame, h) for h in hands]),
                          ("trigger_only", lambda: idle(base, faces, raw, 1.0 + i))):
            t0 = time.perf_counter()
            call()
            if i >= 2:
                timings[key].append((time.perf_counter() - t0) * 1000)
    out["check_640x480_hand_over_face"] = {**{k: _stats(v) for k, v in timings.items()}, "hands_found": found,
                                           "flow_still_following": flow.report.tracked}

    # the stream's face stage, one close face, no hand, 30 fps stream time: before (no hand check) and after
    frames = [_place(photo, (640, 480), 160.0, dx=2.0 * np.sin(i / 5))[0] for i in range(n)]
    lm = LandmarkerConfig(max_faces=4, blendshapes=False)
    stages = {"without_hand_check": FaceStage(FaceStageConfig(landmarker=lm, hands=HandConfig(enabled=False))),
              "with_hand_check": FaceStage(FaceStageConfig(landmarker=lm))}
    ms: dict[str, list[float]] = {k: [] for k in stages}
    try:
        for i, f in enumerate(frames * 2):
            for name, st in stages.items():
                t0 = time.perf_counter()
                st(FrameState(image=f, pts=i * 3000), None)
                if i >= len(frames) // 4:
                    ms[name].append((time.perf_counter() - t0) * 1000)
        checks = stages["with_hand_check"].hands.checks
    finally:
        for st in stages.values():
            st.close()
    side = {k: {**_stats(v), "mean_ms": round(float(np.mean(v)), 2)} for k, v in ms.items()}
    side["median_added_ms"] = round(side["with_hand_check"]["median_ms"] - side["without_hand_check"]["median_ms"], 2)
    side["mean_added_ms"] = round(side["with_hand_check"]["mean_ms"] - side["without_hand_check"]["mean_ms"], 2)
    side["hand_checks"] = checks
    side["frames"] = 2 * len(frames)
    out["stage_640x480_1face_max4_no_hand"] = side
    return out
