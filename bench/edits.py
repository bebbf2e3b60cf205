"""Renderer cost at 640x480 with all edits on (NumPy and torch CPU), and prompt-switch latency.

Renderer: the astronaut at 640x480 as a whole portrait (face ~112 px), a close-up (~180 px) and near the
camera (~240 px), landmarks from MediaPipe on that frame, every edit at --value; median and p95 per frame
over --frames, variants interleaved: all, geometry, appearance, all_uncapped (EditConfig(detail_cap_px=0):
full detail at any size), all_plan and all_pixels (all's planning and its pixel work apart) and, with
--baseline FILE, another version of the renderer. Prompt switch: a Session + EditsStage + PromptCache run
frame by frame; after the prompt changes, count the frames (cached prompt) and the wall time (uncached
prompt) until the frame's edits move.
"""

from __future__ import annotations

import time

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--value", type=float, default=0.6)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--switches", type=int, default=6, help="prompt switches to time")
    parser.add_argument("--renderer-only", action="store_true", help="skip the prompt-switch timing")
    parser.add_argument("--baseline", help="a module file with render_edits(image, faces, edits, config) and EditConfig, "
                                           "timed interleaved with this renderer as all_baseline")


def _stats(ms: list[float], cpu: list[float] | None = None) -> dict[str, float]:
    a = np.asarray(ms)
    out = {"median_ms": round(float(np.median(a)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3), "n": len(ms)}
    if cpu:
        out["cpu_median_ms"] = round(float(np.median(cpu)), 3)  # this thread's CPU time: less hurt by a busy machine
    return out


CROPS = {"portrait": None, "closeup": (10, 250, 100, 420), "near": (40, 220, 160, 400)}


def _frame(closeup: bool | str = False) -> tuple[np.ndarray, np.ndarray]:
    """The astronaut at 640x480: whole portrait (face ~110 px wide), a webcam-like close-up (~180 px) or a
    face near the camera ("near", ~240 px)."""
    import cv2
    import skimage.data

    from engines.faces import MediaPipeLandmarker

    src = np.ascontiguousarray(skimage.data.astronaut()[..., :3])
    crop = CROPS["closeup" if closeup is True else closeup or "portrait"]
    if crop:
        src = src[crop[0]:crop[1], crop[2]:crop[3]]
    img = cv2.resize(src, (640, 480), interpolation=cv2.INTER_AREA if not closeup else cv2.INTER_CUBIC)
    lmk = MediaPipeLandmarker()
    try:
        faces = lmk.detect(img, 0)
    finally:
        lmk.close()
    return img, faces[0].landmarks


def _load_baseline(path: str):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("edits_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["edits_baseline"] = module   # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def renderer(frames: int, value: float, with_torch: bool, closeup: bool | str = False, baseline: str | None = None) -> dict:
    from engines.edit_plan import EditConfig
    from engines.edit_render import render_edits
    from engines.edit_vocabulary import APPEARANCE, EDIT_NAMES, GEOMETRY

    img, lm = _frame(closeup)
    out: dict = {"frame": "640x480", "face_width_px": round(float(np.linalg.norm(lm[454, :2] - lm[234, :2])), 1)}
    capped, uncapped = EditConfig(), EditConfig(detail_cap_px=0)   # uncapped = full detail at any face size
    sets = {"all": ({n: value for n in EDIT_NAMES}, capped), "geometry": ({n: value for n in GEOMETRY}, capped),
            "appearance": ({n: value for n in APPEARANCE}, capped), "all_uncapped": ({n: value for n in EDIT_NAMES}, uncapped)}
    renderers = {k: render_edits for k in sets}
    if baseline:
        base = _load_baseline(baseline)
        sets["all_baseline"] = ({n: value for n in EDIT_NAMES}, base.EditConfig())
        renderers["all_baseline"] = base.render_edits
    # interleaved, so background load hits every variant alike
    import cv2
    import os

    from engines.edit_plan import plan_face
    from kernels.numpy.edits import apply_plan

    cv2.setNumThreads(1)  # one frame worker per stream; measured single-threaded so cpu_ms is this thread's all
    times: dict[str, list[float]] = {k: [] for k in [*sets, "all_plan", "all_pixels"]}
    cpu: dict[str, list[float]] = {k: [] for k in times}
    for _ in range(3):
        render_edits(img, [lm], sets["all"][0])
    for _ in range(frames):
        for k, (e, cfg) in sets.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            renderers[k](img, [lm], e, cfg)
            times[k].append((time.perf_counter() - t0) * 1000.0)
            cpu[k].append((time.thread_time() - c0) * 1000.0)
        # "all" apart: planning (masks, warp map) and the pixel work on a copy of the frame
        t0, c0 = time.perf_counter(), time.thread_time()
        plan = plan_face(img.shape[:2], lm, sets["all"][0], capped)
        t1, c1 = time.perf_counter(), time.thread_time()
        apply_plan(img.copy(), plan)
        times["all_plan"].append((t1 - t0) * 1000.0)
        cpu["all_plan"].append((c1 - c0) * 1000.0)
        times["all_pixels"].append((time.perf_counter() - t1) * 1000.0)
        cpu["all_pixels"].append((time.thread_time() - c1) * 1000.0)
    out["numpy"] = {k: _stats(v, cpu[k]) for k, v in times.items()}
    out["load_average_1min"] = round(os.getloadavg()[0], 2)
    out["cores"] = os.cpu_count()
    if with_torch:
        import torch

        torch.set_num_threads(1)  # two threads on a shared 2-core machine thrash
        timg = torch.from_numpy(img)
        for _ in range(3):
            render_edits(timg, [lm], sets["all"][0])
        ts, cs = [], []
        for _ in range(max(10, frames // 2)):
            t0, c0 = time.perf_counter(), time.thread_time()
            render_edits(timg, [lm], sets["all"][0])
            ts.append((time.perf_counter() - t0) * 1000.0)
            cs.append((time.thread_time() - c0) * 1000.0)
        out["torch_cpu_all"] = _stats(ts, cs)
        out["torch_threads"] = torch.get_num_threads()
    return out


def prompt_switch(switches: int) -> dict:
    from engines.faces import Face
    from streamer.pipeline.pipeline import FrameState
    from streamer.session.prompts import load_prompt_cache
    from streamer.session.session import Session
    from streamer.pipeline.stages.edits import EditsStage

    img, lm = _frame()
    face = Face(landmarks=lm, bbox=(0, 0, 1, 1))
    cache = load_prompt_cache()
    prompts = ["a big grin", "smoky eyes and red lips", "k-beauty glass skin", "tired", "much bigger eyes",
               "sun-kissed tan", "韩系清透裸妆", "温柔的日系妆容感", "no makeup", "sculpted western contours"]
    cached_frames, uncached_ms, uncached_frames = [], [], []
    try:
        cache.wait("warm up the encoder")
        for i in range(switches):
            session = Session()
            stage = EditsStage(cache)
            frame = lambda: stage(FrameState(image=img.copy(), faces=[face]), session.frame_context()).edits  # noqa: E731
            frame()
            # uncached: a prompt never seen
            text = f"{prompts[i % len(prompts)]} {'please ' * i}".strip()
            before = frame()
            session.update(prompt=text)
            t0 = time.perf_counter()
            n = 0
            while True:
                n += 1
                if frame() != before:
                    break
                time.sleep(0.002)  # the stream's next frame; the encoder runs meanwhile
            uncached_ms.append((time.perf_counter() - t0) * 1000.0)
            uncached_frames.append(int(np.ceil(uncached_ms[-1] / (1000.0 / 30))))  # frames of a 30 fps stream
            # cached: back to the empty prompt, then to the cached prompt again
            session.update(prompt="")
            for _ in range(6):
                frame()
            before = frame()
            session.update(prompt=text)
            n = 0
            while frame() == before:
                n += 1
            cached_frames.append(n + 1)
    finally:
        cache.close()
    return {
        "cached_frames_to_visible": {"max": max(cached_frames), "median": float(np.median(cached_frames))},
        "uncached_ms_to_visible": _stats(uncached_ms),
        "uncached_frames_at_30fps": {"max": max(uncached_frames), "median": float(np.median(uncached_frames))},
        "cache": cache.stats(),
    }


def run(args) -> dict:
    b = args.baseline
    return {"renderer": renderer(args.frames, args.value, not args.no_torch, baseline=b),
            "renderer_closeup": renderer(args.frames, args.value, False, closeup="closeup", baseline=b),
            "renderer_near": renderer(args.frames, args.value, False, closeup="near", baseline=b),
            **({} if args.renderer_only else {"prompt_switch": prompt_switch(args.switches)})}
