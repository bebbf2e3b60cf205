"""`livefuse process INPUT -o OUTPUT`: the live pipeline over a video file, every frame, audio kept."""

from __future__ import annotations

import argparse
import fractions
import logging
import sys
from pathlib import Path
from typing import Any

HELP = "run the pipeline over a video file (audio kept, progress shown)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="input video (anything FFmpeg reads)")
    parser.add_argument("-o", "--output", required=True, help="output file: .mp4, .mkv, .mov (H.264) or .webm (VP8)")
    parser.add_argument("--source", help="source face image (JPEG/PNG/WebP); 'demo' for the bundled one")
    parser.add_argument("--prompt", default="", help="edit prompt, e.g. 'a slight smile'")
    parser.add_argument("--strength", type=float, default=1.0, help="fusion strength 0..1")
    parser.add_argument("--codec", help="video codec (default: the container's)")
    parser.add_argument("--crf", type=int, default=20, help="H.264 quality, lower is better (default 20)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--consent", action="store_true",
                        help="confirm you may use the --source face (recorded; not needed for 'demo')")
    parser.add_argument("-y", "--overwrite", action="store_true", help="replace OUTPUT if it exists")
    from streamer.commands.serve import add_product_arguments

    add_product_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engines.sources import SourceRefused
    from streamer.commands.serve import _services_or_exit

    services = _services_or_exit(args, "127.0.0.1")
    try:
        summary = process_file(args.input, args.output, services, source=args.source, prompt=args.prompt,
                               strength=args.strength, codec=args.codec, crf=args.crf,
                               progress=not args.no_progress, overwrite=args.overwrite, consent=args.consent)
    except (FileNotFoundError, FileExistsError, ValueError, SourceRefused) as exc:
        print(f"livefuse process: {exc}", file=sys.stderr)
        return 2
    finally:
        services.shutdown()
    print(f"wrote {summary['output']}: {summary['frames']} frames, {summary['width']}x{summary['height']}, "
          f"audio {summary['audio']}, {summary['stage_errors']} stage errors", file=sys.stderr)
    return 0


def process_file(input_path: str, output_path: str, services: Any, *, source: str | None = None, prompt: str = "",
                 strength: float = 1.0, codec: str | None = None, crf: int = 20, progress: bool = True,
                 overwrite: bool = False, consent: bool = False) -> dict[str, Any]:
    """Decode -> pipeline -> encode, in order, no frame dropped (a file is not live). A source other
    than the bundled demo face needs `consent`; a prompt the policy refuses stops before any work."""
    import av
    from tqdm import tqdm

    from streamer.media.convert import frame_to_state, state_to_frame
    from streamer.server import DEMO_SOURCE
    from engines.sources import decode_image
    from streamer.session import Session
    from streamer.sinks.file import VideoFileSettings, VideoFileWriter

    src, dst = Path(input_path), Path(output_path)
    if not src.is_file():
        raise FileNotFoundError(f"no input file {src}")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists (use -y to replace it)")
    if dst.resolve() == src.resolve():
        raise ValueError("output must not be the input")
    session = Session()
    session.update(strength=strength)
    if source:
        path = DEMO_SOURCE if source == "demo" else Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no source image {path}")
        form = {"source_id": "source", "consent": "true" if (consent or source == "demo") else ""}
        services.register_source(session, decode_image(path.read_bytes()), form)
    if prompt:
        decision = services.set_prompt(session, prompt)
        if decision.get("allowed") is False:
            raise ValueError(f"prompt refused: {decision.get('reason')}")
    pipeline = services.make_pipeline(session)
    try:
        container = av.open(str(src))
    except av.error.FFmpegError as exc:
        raise ValueError(f"cannot read {src.name}: {exc}") from None
    with container:
        if not container.streams.video:
            raise ValueError(f"{src.name} has no video stream")
        vin = container.streams.video[0]
        vin.thread_type = "AUTO"
        ain = container.streams.audio[0] if container.streams.audio else None
        rate = vin.average_rate or vin.guessed_rate or 30
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.stem + ".partial" + dst.suffix)
        writer = VideoFileWriter(tmp, width=vin.codec_context.width, height=vin.codec_context.height, rate=rate,
                                 audio=ain, settings=VideoFileSettings(codec=codec, crf=crf))
        total = vin.frames or (int(float(container.duration / 1e6) * float(rate)) if container.duration else None)
        bar = tqdm(total=total, unit="frame", disable=not progress, desc=src.name, file=sys.stderr)
        frames = errors = 0
        try:
            streams = [vin] + ([ain] if ain is not None else [])
            for packet in container.demux(*streams):
                if packet.stream is ain:
                    writer.write_audio_packet(packet)
                    continue
                for frame in packet.decode():
                    state = pipeline(frame_to_state(frame), session.frame_context())
                    errors += len(state.errors)
                    out = state_to_frame(state, frame)
                    out.pts, out.time_base = frames, 1 / fractions.Fraction(rate)   # the writer numbers frames in order
                    writer.write_video(out)
                    frames += 1
                    bar.update(1)
            writer.close()
        except BaseException:
            bar.close()
            try:
                writer.container.close()
            finally:
                tmp.unlink(missing_ok=True)
            raise
        bar.close()
        pipeline.close()
        services.session_ended(session)
        tmp.replace(dst)
    return {"output": str(dst), "frames": frames, "width": writer.video.width, "height": writer.video.height,
            "audio": ("copied" if writer.audio_copied else "re-encoded") if ain is not None else "none",
            "stage_errors": errors, "stages": pipeline.names}
