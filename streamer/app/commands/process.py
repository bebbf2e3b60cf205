"""`livefuse process INPUT -o OUTPUT`: the live pipeline over a video file, every frame, audio kept."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from streamer.app.clips import process_file  # noqa: F401 - the command's engine (tests import it from here)
from streamer.storage.base import media_type as _media_type

HELP = "run the pipeline over a video file (audio kept, progress shown)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="input video (anything FFmpeg reads), a path or s3://bucket/key")
    parser.add_argument("-o", "--output", required=True,
                        help="output file: .mp4, .mkv, .mov (H.264) or .webm (VP8); a path or s3://bucket/key "
                             "(endpoint and credentials from the standard AWS settings, AWS_ENDPOINT_URL included)")
    parser.add_argument("--source", help="source face image (JPEG/PNG/WebP); 'demo' for the bundled one")
    parser.add_argument("--map", dest="face_map", metavar="ID=CHOICE,...",
                        help="per-face sources by track id (as `livefuse inspect` numbers them): an image, 'demo' or "
                             "'keep' (left unchanged), e.g. 1=alice.jpg,2=keep; faces not named get --source")
    parser.add_argument("--prompt", default="", help="edit prompt, e.g. 'a slight smile'")
    parser.add_argument("--background", metavar="blur|COLOR|FILE",
                        help="behind the person: 'blur', a CSS colour ('#00ff00' for a chroma key) or a picture file "
                             "(scaled to cover the frame); default: the clip's own room")
    parser.add_argument("--strength", type=float, default=1.0, help="fusion strength 0..1")
    parser.add_argument("--shape", type=float, default=None, metavar="X",
                        help="how far the face's proportions move toward the source's, 0..1 (0: its skin alone "
                             "changes; default: the server's, 0.4)")
    parser.add_argument("--enhance", type=float, default=None, metavar="X",
                        help="face enhancer strength 0..1 with --enhancer (default 1: on in clips)")
    parser.add_argument("--codec", help="video codec (default: the container's)")
    parser.add_argument("--crf", type=int, default=20, help="H.264 quality, lower is better (default 20)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--consent", action="store_true",
                        help="confirm you may use the --source face (recorded; not needed for 'demo')")
    parser.add_argument("-y", "--overwrite", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument("--face-data", dest="face_data", metavar="FILE.jsonl",
                        help="the face rig's frames as JSON lines (blendshapes, head, gaze: docs/api.md, Face events); "
                             "with --vmc / --vtube-studio a recorded clip drives an avatar app")
    from streamer.app.commands.serve import add_product_arguments

    add_product_arguments(parser)


def background_session(value: str | None):
    """The Session a clip runs in when --background is given (None without it): 'blur', a CSS colour, or a
    picture file, read and checked as a source photo is (SourceRefused with the same reasons)."""
    if not value:
        return None
    from engines.background import BackgroundError, BackgroundSpec, parse_background
    from streamer.session.session import Session

    session = Session()
    path = Path(value)
    if path.is_file():
        from engines.sources import decode_image
        from streamer.web.server import fit_background

        picture = fit_background(decode_image(path.read_bytes()))
        spec = BackgroundSpec(mode="image", image_id=session.add_background(picture))
    else:
        try:
            spec = parse_background(value)
        except BackgroundError as exc:
            raise ValueError(f"{exc}; or name a picture file") from None
        if spec.mode == "image":
            raise ValueError("name the picture's file: --background FILE")
    session.update(background=spec if spec.active else None)
    return session


def restream_of(args: argparse.Namespace) -> tuple[list[str], object] | None:
    """(--restream URLs, their RestreamSettings) or None; a bad address or setting stops with why."""
    if not getattr(args, "restream", None):
        return None
    from streamer.sinks.restream import RestreamSettings, check_url
    from streamer.web.restreams import _size

    try:
        urls = [check_url(u) for u in args.restream]
        w, h = _size(getattr(args, "restream_size", None) or "")
        settings = RestreamSettings(video_bitrate=getattr(args, "restream_bitrate", None) or 2_500_000,
                                    keyframe_s=getattr(args, "restream_keyframe_s", None) or 2.0, width=w, height=h)
    except ValueError as exc:
        raise SystemExit(f"livefuse process: --restream: {exc}") from None
    return urls, settings


def run(args: argparse.Namespace) -> int:
    from engines.sources import SourceRefused
    from streamer.app.commands.serve import _services_or_exit

    import tempfile

    from streamer.storage import StoreError, fetch_input, store_output

    from streamer.session.face_map import parse_face_map

    try:
        face_map = parse_face_map(args.face_map) if args.face_map else None
    except ValueError as exc:
        print(f"livefuse process: --map: {exc}", file=sys.stderr)
        return 2
    for name in ("shape", "enhance"):
        value = getattr(args, name)
        if value is not None and not 0.0 <= value <= 1.0:
            print(f"livefuse process: --{name} must be within 0..1", file=sys.stderr)
            return 2
    try:
        background = background_session(args.background)
    except (ValueError, OSError, SourceRefused) as exc:
        print(f"livefuse process: --background: {exc}", file=sys.stderr)
        return 2
    services = _services_or_exit(args, "127.0.0.1", live=False)   # a clip: every frame fresh
    try:
        with tempfile.TemporaryDirectory(prefix="livefuse-process-") as scratch:
            remote_out = args.output if args.output.startswith("s3://") else None
            src = fetch_input(args.input, scratch)
            dst = Path(scratch) / ("fused-result" + Path(remote_out).suffix) if remote_out else Path(args.output)
            summary = process_file(str(src), str(dst), services, source=args.source, prompt=args.prompt,
                                   strength=args.strength, codec=args.codec, crf=args.crf,
                                   progress=not args.no_progress, overwrite=args.overwrite or bool(remote_out),
                                   consent=args.consent, session=background, face_map=face_map, enhance=args.enhance,
                                   shape=args.shape,
                                   pace=bool(getattr(args, "vmc", None) or getattr(args, "vtube_studio", None)
                                             or getattr(args, "restream", None)),
                                   restream=restream_of(args))
            if remote_out:
                stored = store_output(dst, remote_out, _media_type(dst))
                summary["output"] = f"{remote_out} ({stored.size} bytes in {stored.parts} part(s))"
    except (FileNotFoundError, FileExistsError, ValueError, SourceRefused, StoreError) as exc:
        print(f"livefuse process: {exc}", file=sys.stderr)
        return 2
    finally:
        services.shutdown()
    print(f"wrote {summary['output']}: {summary['frames']} frames, {summary['width']}x{summary['height']}, "
          f"audio {summary['audio']}, {summary['stage_errors']} stage errors", file=sys.stderr)
    for st in summary.get("restream", []):
        print(f"restream {st['url']}: {st['frames']} frames, {st['state']}" + (f" ({st['error']})" if st["error"] else ""),
              file=sys.stderr)
    if summary.get("faces"):
        print("faces: " + ", ".join(f"{tid} -> {'/'.join(f['sources'])}" for tid, f in summary["faces"].items()),
              file=sys.stderr)
    return 0
