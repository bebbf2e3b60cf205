"""Background: CPU per 1280x720 frame on one core, off (mode none: the frame as it came) and on (blur,
colour, picture), timed side by side in one run (frames alternate off / on, so a drifting machine slows
both alike); and the matte's quality on the hand-drawn truth (data/background): as the network's first
look at a frame reads it, as a stream keys a still person (each face's head and shoulders read a second
time once a second and held, MatteConfig.stream_look_frames) and as a photo does (read a second time,
MatteConfig.second_look, and BlazePose's read as a third vote, MatteConfig.pose_look), the photo's also on
seven rooms no setting was chosen on (HELD_OUT), with a photo's matte timed each way.

Three clips are timed: a still person, one swaying 4 px a frame and one walking 26 px a frame with her face
followed. At the default cadence (MatteConfig.every, carry_every) the segmentation network reads one
frame in three in each: between, the last read's matte stands, moved with the face where she moved (and
a walking person's blurred room with it while her step stays within its reach). Each clip is also timed
with the network on every frame (`every` 1). At the default cadence the per-frame times are two-valued,
so the mean is the CPU a frame costs on average, the median lands on either value as their counts fall,
and each value is reported too (the median of the frames the network reads, and of the others). Each
mode is also timed with the stream's held second look off (`first_look_only`), in the same turn: a read
one in 30 frames costs its two network runs on that frame alone, so it shows in the mean and the p95
rather than the median."""

from __future__ import annotations

import time


def add_arguments(parser) -> None:
    parser.add_argument("--frames", type=int, default=120, help="frames timed per mode and clip")
    parser.add_argument("--no-quality", action="store_true", help="the stream's timing only")
    parser.add_argument("--no-stream", action="store_true", help="the quality and a photo's matte only")
    parser.add_argument("--gallery", metavar="DIR", help="also write second_look.png there: scenes keyed green "
                                                         "as the first look and as a photo (and a still stream) "
                                                         "reads them, side by side")
    parser.add_argument("--product", action="store_true",
                        help="also the whole product pipeline at 1280x720 (faces, fusion, edits, background, "
                             "watermark; the demo source and a prompt) with the background off, a colour and a blur, "
                             "frame by frame in turn: does a 720p frame still fit 30 fps")


def _stats(ts: list[float]) -> dict[str, float]:
    import numpy as np

    return {"median_ms": round(float(np.median(ts)), 3), "mean_ms": round(float(np.mean(ts)), 3),
            "p95_ms": round(float(np.percentile(ts, 95)), 3)}


def _clip(moving: str):
    """16 I420 frames at 1280x720 (a person in a room with sensor noise: still, swaying 4 px a frame, or
    walking across at 26 px a frame) and the face the face stage would follow there."""
    import numpy as np

    from bench import _person_scenes as ps
    from kernels.numpy.color import rgb_to_i420

    rng = np.random.default_rng(0)
    centres = {"still": [0.3], "swaying": 0.3 + np.arange(16) * 4 / 1280, "moving": np.linspace(0.3, 0.6, 16)}[moving]
    scenes = [ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=float(c)) for c in centres]
    frames = []
    for i in range(16):
        s = scenes[i % len(scenes)]
        frames.append((rgb_to_i420(np.clip(s.image + rng.normal(0, 2.0, s.image.shape), 0, 255).astype(np.uint8)),
                       s.face_hull))
    return frames


def _timing(frames: int) -> dict:
    """Per mode, the stage off and on, frame by frame in turn (one Pipeline each, the stream's planes)."""
    import cv2
    import numpy as np

    from bench._person_scenes import backgrounds
    from engines.background import BackgroundSpec, MatteConfig
    from engines.faces import Face
    from engines.pose_segmentation import PoseSegmenter
    from streamer.media.planes import Planes
    from streamer.pipeline.pipeline import FrameState
    from streamer.pipeline.stages.background import BackgroundStage, BackgroundStageConfig
    from streamer.session.session import Session, frame_context

    cv2.setNumThreads(1)
    session = Session()
    picture_id = session.add_background(backgrounds()["rocket"])
    specs = {"blur": BackgroundSpec("blur", 0.7), "color": BackgroundSpec("color", color=(0, 255, 0)),
             "image": BackgroundSpec("image", image_id=picture_id)}
    off_ctx = frame_context()
    out: dict = {}
    # one BlazePose for every stage, its networks loaded before the timing, as the product shares one
    pose = PoseSegmenter()
    pose(np.full((360, 640, 3), 128, np.uint8))
    for clip_name in ("still", "swaying", "moving"):
        clip = _clip(clip_name)
        for every in (2, 1):
            row: dict = {}
            for mode, spec in specs.items():
                ctx = session.frame_context()
                ctx = type(ctx)(ctx.session_id, session.update(background=spec), ctx.sources, ctx.notify,
                                session.backgrounds)
                off_stage = BackgroundStage(BackgroundStageConfig(matte=MatteConfig(every=every)), pose=pose)
                on_stage = BackgroundStage(BackgroundStageConfig(matte=MatteConfig(every=every)), pose=pose)
                first_stage = BackgroundStage(
                    BackgroundStageConfig(matte=MatteConfig(every=every, stream_look_frames=0)), pose=pose)
                off, on, first, ran = [], [], [], []
                for i in range(frames + 5):
                    (y, u, v), hull = clip[i % len(clip)]
                    h, w = y.shape
                    buf = np.concatenate([y, u.reshape(h // 4, w), v.reshape(h // 4, w)])
                    face = Face(landmarks=np.c_[hull, np.zeros(len(hull))].astype(np.float32), bbox=(0, 0, 1, 1))
                    a = FrameState(image=None, planes=Planes(buf.copy(), w, h), faces=[face])
                    b = FrameState(image=None, planes=Planes(buf.copy(), w, h), faces=[face])
                    c = FrameState(image=None, planes=Planes(buf, w, h), faces=[face])
                    runs = on_stage._matte.network_runs if on_stage._matte is not None else 0
                    t0 = time.thread_time()
                    off_stage(a, off_ctx)
                    t1 = time.thread_time()
                    on_stage(b, ctx)
                    t2 = time.thread_time()
                    first_stage(c, ctx)
                    t3 = time.thread_time()
                    if i >= 5:                               # warm-up: the network's first calls, the picture's cover
                        off.append((t1 - t0) * 1000.0)
                        on.append((t2 - t1) * 1000.0)
                        first.append((t3 - t2) * 1000.0)
                        ran.append(on_stage._matte.network_runs > runs)
                matte = on_stage._matte
                ran_at = np.array(ran)
                row[mode] = {"off": _stats(off), "on": _stats(on), "first_look_only": _stats(first),
                             # a frame costs one of two values (the network reads it or not): each side's median
                             "on_network_frames_median_ms": round(float(np.median(np.array(on)[ran_at])), 3) if ran_at.any() else None,
                             "on_other_frames_median_ms": round(float(np.median(np.array(on)[~ran_at])), 3) if (~ran_at).any() else None,
                             "network_frames_share": round(float(ran_at.mean()), 3),
                             "added_median_ms": round(float(np.median(on) - np.median(off)), 3),
                             "added_mean_ms": round(float(np.mean(on) - np.mean(off)), 3),
                             "network_runs_per_frame": round(matte.network_runs / (frames + 5), 2),
                             "head_reads_per_frame": round(matte.looks_read / (frames + 5), 3),
                             "carried_per_frame": round(matte.carried / (frames + 5), 2),
                             # BlazePose's held read, once a second on the matte's own thread: its CPU is
                             # not the frame thread's, so it is not in `on`
                             "pose_reads_per_frame": round(matte.pose_reads / (frames + 5), 3),
                             "pose_worker_cpu_ms_per_frame": round(matte.pose_cpu_ms / (frames + 5), 3)}
                on_stage.close()
                first_stage.close()
            out[f"{clip_name}_every{every}"] = row
    pose.close()
    return out


STILL_FRAMES = 16  # a still person's stream frames before the one measured (sensor noise 2 grey levels)


ROOMS = ("coffee", "rocket", "chelsea", "brick", "studio")        # the rooms the matte's settings were chosen on
HELD_OUT = ("motorcycle", "hubble", "tissue", "retina", "grass", "gravel", "cell")   # and seven it never saw


def _pasted(matte, rooms: tuple[str, ...], alpha) -> dict:
    """Both people pasted full height and at 80 % on each room: each scene's IoU, and each pair of rooms'
    masks of the same person against each other, with the counts the issue's targets read."""
    import numpy as np

    from bench import _person_scenes as ps

    r: dict = {"pasted_iou": {}, "same_person_two_rooms_iou": {}}
    for name in ("grace_hopper", "astronaut"):
        for h, c in ((1.0, 0.5), (0.8, 0.3)):
            masks = {}
            for room in rooms:
                s = ps.pasted_scene(name, room, height=h, centre_x=c)
                a = alpha(matte, s)
                r["pasted_iou"][f"{name}/{room}/{h}"] = round(ps.iou(a, s), 4)
                masks[room] = (a, s.void)
            for i, r1 in enumerate(rooms):
                for r2 in rooms[i + 1:]:
                    r["same_person_two_rooms_iou"][f"{name}/{h}/{r1}-{r2}"] = round(
                        ps.mask_iou(masks[r1][0], masks[r2][0], masks[r1][1]), 4)
    vals = np.array(list(r["pasted_iou"].values()))
    pairs = r["same_person_two_rooms_iou"]
    r["pasted_iou_mean"] = round(float(vals.mean()), 4)
    r["pasted_iou_min"] = round(float(vals.min()), 4)
    r["pasted_at_or_over_0.92"] = f"{int((vals >= 0.92).sum())} of {len(vals)}"
    r["pairs_at_or_over_0.95"] = f"{sum(v >= 0.95 for v in pairs.values())} of {len(pairs)}"
    return r


def _quality() -> dict:
    """The matte against the hand-drawn truth, each face's hull kept as the product keeps it: the network's
    first look at a frame alone; a stream's matte of a still person (STILL_FRAMES noisy frames, half a
    second, the last one measured: the network has read the head once and holds it, and BlazePose's read,
    held, has voted on the reads since it came); a photo's with its two looks alone (`photo_two_looks`) and
    with BlazePose's vote (`photo`, the default). Those three rows are also read on seven rooms no setting
    was chosen on (`held_out`)."""
    import numpy as np

    from bench import _person_scenes as ps
    from engines.background import Matte, MatteConfig
    from kernels.numpy.color import rgb_to_i420

    rng = np.random.default_rng(0)

    def stream_alpha(matte, s):
        matte.reset()
        for _ in range(STILL_FRAMES):
            noisy = np.clip(s.image + rng.normal(0, 2.0, s.image.shape), 0, 255).astype(np.uint8)
            a = matte.alpha_i420(*rgb_to_i420(noisy), steady=True, keep=[s.face_hull])[0]
            matte.wait_for_pose()       # its BlazePose read lands when the frames' pace allows: here, at once
        return a

    def photo_alpha(matte, s):
        return matte.alpha_i420(*rgb_to_i420(s.image), steady=False, keep=[s.face_hull])[0]

    res: dict = {}
    for label, config in (("first_look", MatteConfig(second_look=0.0, pose_look=False)),
                          ("stream_still", MatteConfig()), ("photo_two_looks", MatteConfig(pose_look=False)),
                          ("photo", MatteConfig())):
        matte = Matte(config)
        alpha = stream_alpha if label == "stream_still" else photo_alpha
        try:
            photos = {}
            for name in ("grace_hopper", "astronaut"):
                s = ps.photo_scene(name)
                a = stream_alpha(matte, s) if label == "stream_still" else matte.alpha_rgb(s.image, keep=[s.face_hull])
                photos[name] = round(ps.iou(a, s), 4)
            r = {"photos_iou": photos, **_pasted(matte, ROOMS, alpha)}
            pairs = r["same_person_two_rooms_iou"]
            r["pairs_without_coffee_min"] = min(v for k, v in pairs.items() if "coffee" not in k)
            if label != "first_look":
                r["held_out"] = _pasted(matte, HELD_OUT, alpha)
            r["pose_reads"] = matte.pose_reads
        finally:
            matte.close()
        res[label] = r
    return res


def _keyed_sheet(scenes, configs) -> np.ndarray:
    """Each scene (name, room, height, centre_x) a row, each matte config a column: the pasted scene keyed
    green by that config's photo matte, at half size (640 x 360)."""
    import cv2
    import numpy as np

    from bench import _person_scenes as ps
    from engines.background import BackgroundSpec, Matte, compose_rgb

    key = BackgroundSpec("color", color=(0, 255, 0))
    rows = []
    for name, room, h, c in scenes:
        s = ps.pasted_scene(name, room, height=h, centre_x=c)
        row = []
        for config in configs:
            matte = Matte(config)
            try:
                out = compose_rgb(s.image, matte.alpha_rgb(s.image, keep=[s.face_hull]), key)
            finally:
                matte.close()
            row.append(cv2.resize(out, (640, 360), interpolation=cv2.INTER_AREA))
        rows.append(np.hstack(row))
    return np.vstack(rows)


def _gallery(folder: str) -> str:
    """Busy-room scenes keyed green, at half size, in three columns: as the network's first look keys them,
    with the second look written in (a stream, once it has read the head, keys them so), and as a photo does
    with BlazePose's vote too; the last row's garage is one of the held-out rooms. The path written; beside
    it islands.png: both people before the deep sky, its galaxies' islands kept and dropped (the default)."""
    from pathlib import Path

    import cv2

    from engines.background import MatteConfig

    looks = _keyed_sheet((("grace_hopper", "chelsea", 0.8, 0.3), ("astronaut", "coffee", 1.0, 0.5),
                          ("grace_hopper", "coffee", 1.0, 0.5), ("astronaut", "motorcycle", 0.8, 0.3)),
                         (MatteConfig(second_look=0.0, pose_look=False), MatteConfig(pose_look=False), MatteConfig()))
    islands = _keyed_sheet((("grace_hopper", "hubble", 0.8, 0.3), ("astronaut", "hubble", 0.8, 0.3)),
                           (MatteConfig(island_reach=0.0), MatteConfig()))
    path = Path(folder) / "second_look.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), cv2.cvtColor(looks, cv2.COLOR_RGB2BGR))
    cv2.imwrite(str(path.with_name("islands.png")), cv2.cvtColor(islands, cv2.COLOR_RGB2BGR))
    return str(path)


def _photo_matte(repeats: int) -> dict:
    """CPU of a 1280x720 photo's matte (the RGB path, one face): the first look alone, with the second look,
    and with BlazePose's vote too (the default), in turn."""
    import cv2

    from bench import _person_scenes as ps
    from engines.background import Matte, MatteConfig

    scene = ps.pasted_scene("grace_hopper", "chelsea", height=0.8, centre_x=0.3)
    mattes = {"first_look_only": Matte(MatteConfig(second_look=0.0, pose_look=False)),
              "with_second_look": Matte(MatteConfig(pose_look=False)), "with_pose_vote": Matte(MatteConfig())}
    ts: dict = {k: [] for k in mattes}
    cv2.setNumThreads(1)
    try:
        for k, m in mattes.items():
            m.alpha_rgb(scene.image, keep=[scene.face_hull])
        for _ in range(repeats):
            for k, m in mattes.items():
                t0 = time.thread_time()
                m.alpha_rgb(scene.image, keep=[scene.face_hull])
                ts[k].append((time.thread_time() - t0) * 1000.0)
    finally:
        for m in mattes.values():
            m.close()
    return {k: _stats(v) for k, v in ts.items()}


def _network_alone(frames: int) -> dict:
    """The landscape network by itself on one thumbnail: what the machine's load makes of its 2.4 ms."""
    import numpy as np

    from engines.segmentation import PersonSegmenter

    seg = PersonSegmenter()
    thumb = np.full((144, 256, 3), 128, np.uint8)
    seg(thumb, (1280, 720))
    ts = []
    for _ in range(frames):
        t0 = time.thread_time()
        seg(thumb, (1280, 720))
        ts.append((time.thread_time() - t0) * 1000.0)
    seg.close()
    return _stats(ts)


def _island_step(frames: int) -> dict:
    """What dropping the islands costs on a network read (MatteConfig.island_reach), on the network's own mask
    of the astronaut at 80 %: before the studio backdrop (one part: the connected-components pass alone)
    and before the deep sky (galaxies taken for people: the whole step), OpenCV on one thread."""
    import cv2
    import numpy as np

    from bench import _person_scenes as ps
    from engines.background import Matte
    from kernels.numpy.background import i420_thumbnail
    from kernels.numpy.color import rgb_to_i420

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    out = {}
    matte = Matte()
    try:
        for room in ("studio", "hubble"):
            s = ps.pasted_scene("astronaut", room, height=0.8, centre_x=0.3)
            mask = matte.segmenter(i420_thumbnail(*rgb_to_i420(s.image), matte.segmenter.input_size(1280, 720)),
                                   (1280, 720))
            before, ts = matte.islands_dropped, []
            for _ in range(frames):
                t0 = time.thread_time()
                matte._without_islands(mask, [s.face_hull], (1280, 720), None)
                ts.append((time.thread_time() - t0) * 1000.0)
            out[room] = {**_stats(ts), "islands_dropped_per_read": (matte.islands_dropped - before) / frames}
    finally:
        matte.close()
        cv2.setNumThreads(threads)
    return out


def _product(frames: int) -> dict:
    """The product's stream pipeline (planes, live) on a moving 1280x720 face, three sessions in turn."""
    import numpy as np
    from av import VideoFrame
    import fractions

    from bench._product import DEFAULT_PROMPT, build_product, grace_hopper, moving_face, prepare_session
    from engines.background import BackgroundSpec
    from streamer.pipeline.convert import frame_to_state, state_to_frame
    from streamer.session.session import Session

    photo = grace_hopper()
    product = build_product()
    cases: dict = {}
    try:
        for name, spec in (("off", None), ("color", BackgroundSpec("color", color=(0, 255, 0))),
                           ("blur", BackgroundSpec("blur", 0.7))):
            session = Session(f"bench-background-{name}")
            prepare_session(product, session, DEFAULT_PROMPT)
            session.update(background=spec)
            cases[name] = {"session": session, "pipe": product.make_pipeline(session), "wall": [], "cpu": [],
                           "stage": [], "errors": {}}
        for n in range(10 + frames):
            for c in cases.values():
                decoded = VideoFrame.from_ndarray(moving_face(photo, 1280, 720, n), format="rgb24").reformat(format="yuv420p")
                decoded.pts, decoded.time_base = n * 3000, fractions.Fraction(1, 90000)
                t0, c0 = time.perf_counter(), time.thread_time()
                state = c["pipe"](frame_to_state(decoded, planes=True), c["session"].frame_context())
                state_to_frame(state, decoded)
                t1, c1 = time.perf_counter(), time.thread_time()
                if n >= 10:
                    c["wall"].append((t1 - t0) * 1000.0)
                    c["cpu"].append((c1 - c0) * 1000.0)
                    c["stage"].append(state.timings.get("background", 0.0))
                    c["errors"].update(state.errors)
    finally:
        for c in cases.values():
            c["pipe"].close()
        product.close()
    out = {}
    for name, c in cases.items():
        wall = _stats(c["wall"])
        out[name] = {"frame_wall": wall, "frame_thread_cpu": _stats(c["cpu"]), "background_stage_wall": _stats(c["stage"]),
                     # frames a second one worker sustains, back to back: the mean frame's (a frame's time
                     # is many-valued: the network reads one frame in three, the faces' search its own)
                     "fps_ceiling_one_worker": round(1000.0 / wall["mean_ms"], 1), "stage_errors": c["errors"]}
    return out


def run(args) -> dict:
    out: dict = {}
    if not getattr(args, "no_stream", False):
        out = {"frame": "1280x720 I420 planes through the background stage, one core (OpenCV 1 thread, LiteRT 1 "
                        "thread), CPU time of the calling thread; off = the same stage with no background asked for",
               "network_alone": _network_alone(args.frames), "island_step": _island_step(max(100, args.frames)),
               "timing": _timing(args.frames)}
    if getattr(args, "product", False):
        out["product_1280x720"] = _product(max(30, args.frames // 2))
    if not args.no_quality:
        out["photo_matte_1280x720"] = _photo_matte(max(20, args.frames // 2))
        out["quality"] = _quality()
    if getattr(args, "gallery", None):
        out["gallery"] = _gallery(args.gallery)
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
