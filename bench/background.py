"""Background: CPU per 1280x720 frame on one core, off (mode none: the frame as it came) and on (blur,
colour, picture), timed side by side in one run (frames alternate off / on, so a drifting machine slows
both alike); and the matte's quality on the hand-drawn truth (data/background).

A still stream runs the segmentation network on every other frame (MatteConfig.every) and a moving one on
every frame; both are timed, as is every frame with the network (`every` 1)."""

from __future__ import annotations

import time


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=120, help="frames timed per mode and clip")
    parser.add_argument("--no-quality", action="store_true", help="timing only")


def _stats(ts: list[float]) -> dict[str, float]:
    import numpy as np

    return {"median_ms": round(float(np.median(ts)), 3), "p95_ms": round(float(np.percentile(ts, 95)), 3)}


def _clip(moving: bool, n: int):
    """n I420 frames at 1280x720: a person in a room with sensor noise, still or walking across."""
    import numpy as np

    from bench import _person_scenes as ps
    from kernels.numpy.color import rgb_to_i420

    rng = np.random.default_rng(0)
    scenes = [ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)]
    if moving:
        scenes = [ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=float(c))
                  for c in np.linspace(0.3, 0.6, 16)]
    frames = []
    for i in range(min(n, 16)):
        img = scenes[i % len(scenes)].image
        frames.append(rgb_to_i420(np.clip(img + rng.normal(0, 2.0, img.shape), 0, 255).astype(np.uint8)))
    return frames, scenes[0].face_hull


def _timing(frames: int) -> dict:
    import cv2
    import numpy as np

    from engines.background import Backdrop, BackgroundSpec, Matte, MatteConfig, compose_i420
    from bench._person_scenes import backgrounds

    cv2.setNumThreads(1)
    picture = backgrounds()["rocket"]
    specs = {"blur": BackgroundSpec("blur", 0.7), "color": BackgroundSpec("color", color=(0, 255, 0)),
             "image": BackgroundSpec("image", image_id="rocket")}
    out: dict = {}
    for clip_name, moving in (("still", False), ("moving", True)):
        clip, hull = _clip(moving, frames)
        for every in (2, 1):
            row: dict = {}
            for mode, spec in specs.items():
                matte = Matte(MatteConfig(every=every))
                backdrop = Backdrop()
                off, on = [], []
                for i in range(frames + 5):
                    y, u, v = clip[i % len(clip)]
                    t0 = time.thread_time()
                    _ = (y, u, v)                            # mode none: the stage returns at once
                    t1 = time.thread_time()
                    alphas = matte.alpha_i420(y, u, v, keep=[hull])
                    compose_i420(y, u, v, alphas, spec, picture=picture, backdrop=backdrop, picture_key="rocket")
                    t2 = time.thread_time()
                    if i >= 5:                               # warm-up: the network's first calls, the picture's cover
                        off.append((t1 - t0) * 1000.0)
                        on.append((t2 - t1) * 1000.0)
                row[mode] = {"off": _stats(off), "on": _stats(on),
                             "added_median_ms": round(float(np.median(on) - np.median(off)), 3),
                             "network_runs_per_frame": round(matte.network_runs / (frames + 5), 2)}
                matte.close()
            out[f"{clip_name}_every{every}"] = row
    return out


def _quality() -> dict:
    import numpy as np

    from bench import _person_scenes as ps
    from engines.background import Matte
    from kernels.numpy.color import rgb_to_i420

    matte = Matte()
    res: dict = {"photos_iou": {}, "pasted_iou": {}, "same_person_two_rooms_iou": {}}
    try:
        for name in ("grace_hopper", "astronaut"):
            s = ps.photo_scene(name)
            res["photos_iou"][name] = round(ps.iou(matte.alpha_rgb(s.image), s), 4)
            masks = {}
            for room in ("coffee", "rocket", "chelsea", "brick", "studio"):
                for h, c in ((1.0, 0.5), (0.8, 0.3)):
                    s = ps.pasted_scene(name, room, height=h, centre_x=c)
                    a = matte.alpha_i420(*rgb_to_i420(s.image), steady=False)[0]
                    res["pasted_iou"][f"{name}/{room}/{h}"] = round(ps.iou(a, s), 4)
                    if h == 0.8:
                        masks[room] = (a, s.void)
            rooms = list(masks)
            for i, r1 in enumerate(rooms):
                for r2 in rooms[i + 1:]:
                    res["same_person_two_rooms_iou"][f"{name}/{r1}-{r2}"] = round(
                        ps.mask_iou(masks[r1][0], masks[r2][0], masks[r1][1]), 4)
    finally:
        matte.close()
    vals = np.array(list(res["pasted_iou"].values()))
    res["pasted_iou_mean"] = round(float(vals.mean()), 4)
    res["pasted_at_or_over_0.92"] = f"{int((vals >= 0.92).sum())} of {len(vals)}"
    return res


def run(args) -> dict:
    out = {"frame": "1280x720 I420, one core (OpenCV 1 thread, LiteRT 1 thread), CPU time of the calling thread",
           "timing": _timing(args.frames)}
    if not args.no_quality:
        out["quality"] = _quality()
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--json", action="store_true")
    print(json.dumps(run(p.parse_args(argv)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
