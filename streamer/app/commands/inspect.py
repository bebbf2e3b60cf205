"""`livefuse inspect IMAGE_OR_VIDEO --json [--identity] [--draw OUT.png]`: what the face engines see."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterator

HELP = "find faces in an image or video: landmarks, blendshapes, pose, track ids (and identity)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="an image (png, jpg, ...) or a video file")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: a short summary)")
    parser.add_argument("--identity", action="store_true", help="add each face's 128-d identity embedding (~70 ms a face)")
    parser.add_argument("--draw", metavar="OUT.png", help="write an overlay of the first frame (with --frame: that frame)")
    parser.add_argument("--frame", type=int, default=None, help="video: the frame index to draw (default: first with a face)")
    parser.add_argument("--max-frames", type=int, default=300, help="video: stop after this many frames (default 300)")
    parser.add_argument("--max-faces", type=int, default=4, help="faces per frame (default 4)")
    parser.add_argument("--backend", default="interpreter,litert", help="comma-separated backend preference: interpreter (the tracking graph, with the wide search that finds small and far faces), litert (MediaPipe's graph: short range only), torch, tensorrt")
    parser.add_argument("--no-landmarks", action="store_true", help="leave the 478 x 3 landmarks out of the JSON")


def run(args: argparse.Namespace) -> int:
    from engines.images import ImageError

    try:
        report, drawn = inspect_source(args)
    except (ImageError, FileNotFoundError, ValueError) as exc:
        print(f"livefuse inspect: {exc}", file=sys.stderr)
        return 2
    if args.draw:
        if drawn is None:
            print("livefuse inspect: nothing to draw (no such frame)", file=sys.stderr)
            return 2
        _write_png(args.draw, drawn)
    if args.json:
        json.dump(report, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
    else:
        for fr in report["frames"]:
            faces = ", ".join(
                f"#{f['track_id']} at {[round(v) for v in f['bbox']]} yaw {f['pose']['yaw']:.0f} pitch "
                f"{f['pose']['pitch']:.0f} roll {f['pose']['roll']:.0f}" for f in fr["faces"]) or "no face"
            print(f"frame {fr['index']}: {faces}")
    return 0


def inspect_source(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    from engines.backends import BackendSettings, select_backend
    from engines.faces import LandmarkerConfig
    from engines.images import ImageError, load_image
    from engines.smoothing import SmoothingConfig
    from engines.tracking import FaceTracker
    from streamer.pipeline.convert import frame_to_state
    from streamer.session.session import frame_context
    from streamer.pipeline.stages.faces import FaceStage, FaceStageConfig

    path = Path(args.source)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    settings = BackendSettings(preference=tuple(s.strip() for s in args.backend.split(",") if s.strip()))
    backend = select_backend(settings)
    embedder = None
    if args.identity:
        from engines.identity import IdentityEmbedder

        embedder = IdentityEmbedder()
    frames: list[dict[str, Any]] = []
    drawn = None
    try:
        image = load_image(path)
        kind = "image"
    except ImageError as exc:
        if "not a recognised image" not in str(exc):
            raise
        image, kind = None, "video"
    if kind == "image":
        lm = backend.landmarker(LandmarkerConfig(max_faces=args.max_faces, mode="image"))
        try:
            faces = FaceTracker().update(lm.detect(image, 0))
        finally:
            lm.close()
        frames.append(_frame_json(0, 0.0, image, faces, embedder, not args.no_landmarks))
        if args.frame in (None, 0):
            drawn = draw_faces(image, faces)
        h, w = image.shape[:2]
    else:
        cfg = FaceStageConfig(landmarker=LandmarkerConfig(max_faces=args.max_faces), smoothing=SmoothingConfig())
        stage = FaceStage(cfg, detector=backend.landmarker(cfg.landmarker))
        h = w = 0
        try:
            for index, frame in enumerate(_video_frames(path)):
                if index >= args.max_frames:
                    break
                state = frame_to_state(frame)
                rgb = state.image
                h, w = rgb.shape[:2]
                state = stage(state, frame_context())
                frames.append(_frame_json(index, state.seconds * 1000.0, rgb, state.faces, embedder, not args.no_landmarks))
                wanted = args.frame if args.frame is not None else (index if state.faces and drawn is None else None)
                if drawn is None and wanted == index:
                    drawn = draw_faces(rgb, state.faces)
        finally:
            stage.close()
        if not frames:
            raise ValueError(f"{path}: no video frames could be decoded")
    report = {"source": str(path), "kind": kind, "width": int(w), "height": int(h),
              "backend": backend.describe(), "frames": frames}
    return report, drawn


def _video_frames(path: Path) -> Iterator[Any]:
    """The decoded frames of a video, each timed (30 fps when the stream carries no timestamps)."""
    import av

    from streamer.pipeline.pipeline import VIDEO_TIME_BASE

    try:
        container = av.open(str(path))
    except Exception as exc:
        raise ValueError(f"{path}: neither an image nor a video we can decode ({exc})") from None
    with container:
        if not container.streams.video:
            raise ValueError(f"{path}: has no video stream")
        stream = container.streams.video[0]
        frames = container.decode(stream)
        i = 0
        while True:
            try:
                frame = next(frames)
            except StopIteration:
                return
            except av.FFmpegError as exc:
                if i == 0:
                    raise ValueError(f"{path}: neither an image nor a video we can decode ({exc})") from None
                raise ValueError(f"{path}: cannot decode the video past frame {i} ({exc})") from None
            if frame.time is None:
                frame.pts, frame.time_base = i * 3000, VIDEO_TIME_BASE   # 30 fps in 90 kHz ticks
            yield frame
            i += 1


def _frame_json(index, t_ms, image, faces, embedder, with_landmarks) -> dict[str, Any]:
    out = []
    for f in faces:
        d: dict[str, Any] = {
            "track_id": int(f.track_id),
            "bbox": [round(float(v), 2) for v in f.bbox],
            "score": round(float(f.score), 4),
            "pose": {k: round(float(v), 2) for k, v in zip(("yaw", "pitch", "roll"), f.pose)},
            "blendshapes": {k: round(float(v), 4) for k, v in f.blendshapes.items()},
        }
        if with_landmarks:
            d["landmarks"] = [[round(float(x), 2) for x in p] for p in f.landmarks]
        if embedder is not None:
            from engines.identity import IdentityError

            try:
                d["identity"] = [round(float(x), 5) for x in embedder.embed(image, f)]
            except IdentityError as exc:
                d["identity"] = None
                d["identity_error"] = str(exc)
        out.append(d)
    return {"index": index, "time_ms": round(t_ms, 2), "faces": out}


def draw_faces(image, faces):
    """A copy of `image` with each face's outline, eyes, lips, landmarks, box, id and pose drawn on."""
    import cv2
    import numpy as np

    from engines import mesh

    canvas = np.ascontiguousarray(image.copy())
    loops = mesh.loops()
    scale = max(1, round(max(canvas.shape[:2]) / 640))
    for f in faces:
        pts = f.landmarks[:, :2]
        for p in pts:
            cv2.circle(canvas, (int(round(p[0])), int(round(p[1]))), 1, (0, 255, 255), -1, cv2.LINE_AA)
        for name, colour in (("face_oval", (255, 255, 255)), ("left_eye", (0, 200, 255)), ("right_eye", (0, 200, 255)),
                             ("lips_outer", (255, 64, 160)), ("lips_inner", (255, 64, 160)),
                             ("left_iris", (64, 255, 64)), ("right_iris", (64, 255, 64))):
            poly = np.round(pts[loops[name]]).astype(np.int32)
            cv2.polylines(canvas, [poly], True, colour, scale, cv2.LINE_AA)
        x0, y0, x1, y1 = (int(round(v)) for v in f.bbox)
        cv2.rectangle(canvas, (x0, y0), (x1, y1), (0, 255, 0), scale)
        yaw, pitch, roll = f.pose
        label = f"#{f.track_id} yaw {yaw:.0f} pitch {pitch:.0f} roll {roll:.0f}"
        top = sorted(f.blendshapes.items(), key=lambda kv: -kv[1])[:2]
        lines = [label] + [f"{k} {v:.2f}" for k, v in top if v > 0.2]
        for i, text in enumerate(lines):
            org = (max(0, x0), max(14 * scale * (i + 1), y0 - 6 - 16 * scale * (len(lines) - 1 - i)))
            cv2.putText(canvas, text, org, cv2.FONT_HERSHEY_SIMPLEX, 0.45 * scale, (0, 0, 0), 2 * scale + 1, cv2.LINE_AA)
            cv2.putText(canvas, text, org, cv2.FONT_HERSHEY_SIMPLEX, 0.45 * scale, (255, 255, 255), scale, cv2.LINE_AA)
    return canvas


def _write_png(path: str, rgb) -> None:
    from PIL import Image

    Image.fromarray(rgb).save(path)
