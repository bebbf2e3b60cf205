"""A clip through the live pipeline, every frame in order, audio kept: what `livefuse process` and the
API's clip jobs run."""

from __future__ import annotations

import fractions
import sys
from pathlib import Path
from typing import Any, Callable, Mapping


def process_file(input_path: str, output_path: str, services: Any, *, source: Any = None, prompt: str = "",
                 strength: float = 1.0, codec: str | None = None, crf: int = 20, progress: bool = True,
                 overwrite: bool = False, consent: bool = False,
                 on_frame: Callable[[int, int | None], None] | None = None, source_form: dict[str, str] | None = None,
                 session: Any = None, face_map: Mapping[int, str] | None = None, pace: bool = False,
                 enhance: float | None = None, restream: tuple[list[str], Any] | None = None,
                 shape: float | None = None) -> dict[str, Any]:
    """Decode -> pipeline -> encode, in order, no frame dropped (a file is not live). A source other
    than the bundled demo face needs `consent`; a prompt the policy refuses stops before any work.
    `on_frame(done, total)` after each frame (progress; an exception it raises stops the run and
    leaves no output file). `source` may also be a decoded RGB array, with `source_form` the upload's
    form fields (a clip job's), and `session` the Session it runs in (its id goes into the audit log).
    `face_map`: track id -> a source image path, "demo" or "keep" (`livefuse process --map`); faces not
    in it get `source` (none: unchanged). Each mapped image passes the same consent gate as `source`.
    `enhance`: the face enhancer's strength where one is loaded (None: the clip default, 1). `shape`: how far
    the faces' proportions move toward the source's, 0..1 (None: the server's default, FusionConfig.shape_weight).
    `pace`: frames go no faster than the clip's own rate (a clip driving a live avatar app over VMC or VTube
    Studio: the avatar moves as the person did). `restream`: (RTMP(S) URLs, RestreamSettings): the fused frames
    and the clip's audio pushed there too (streamer/sinks/restream.py), each destination's state in the summary."""
    import av
    from tqdm import tqdm

    from streamer.pipeline.convert import frame_to_state, state_to_frame
    from streamer.web.server import DEMO_SOURCE
    from engines.sources import decode_image
    from streamer.session.session import Session
    from streamer.sinks.file import VideoFileSettings, VideoFileWriter

    src, dst = Path(input_path), Path(output_path)
    if not src.is_file():
        raise FileNotFoundError(f"no input file {src}")
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists (use -y to replace it)")
    if dst.resolve() == src.resolve():
        raise ValueError("output must not be the input")
    session = session if session is not None else Session()
    session.update(strength=strength, shape=shape, enhance=enhance)
    if source is not None and not isinstance(source, str):   # an uploaded image, already decoded
        services.register_source(session, source, {"source_id": "source", **(source_form or {})})
    elif source:
        path = DEMO_SOURCE if source == "demo" else Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no source image {path}")
        form = {"source_id": "source", "consent": "true" if (consent or source == "demo") else ""}
        services.register_source(session, decode_image(path.read_bytes()), form)
    if face_map:
        _map_faces(session, services, face_map, consent)
    if prompt:
        decision = services.set_prompt(session, prompt)
        if decision.get("allowed") is False:
            raise ValueError(f"prompt refused: {decision.get('reason')}")
        if decision.get("understood") is False:
            raise ValueError(f"prompt not understood: {decision.get('reason')}")
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
        faces: dict[int, dict[str, Any]] = {}
        import time

        started = time.monotonic()
        pushes: list[Any] = []
        if restream:
            from streamer.sinks.restream import RtmpPush

            pushes = [RtmpPush(u, restream[1], audio=ain is not None) for u in restream[0]]
        try:
            streams = [vin] + ([ain] if ain is not None else [])
            for packet in container.demux(*streams):
                if packet.stream is ain:
                    writer.write_audio_packet(packet)
                    for af in (packet.decode() if pushes else ()):
                        for p in pushes:
                            p.push_audio(af)
                    continue
                for frame in packet.decode():
                    if pace:
                        ahead = started + frames / float(rate) - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
                    state = pipeline(frame_to_state(frame), session.frame_context())
                    errors += len(state.errors)
                    _note_faces(faces, state)
                    out = state_to_frame(state, frame)
                    out.pts, out.time_base = frames, 1 / fractions.Fraction(rate)   # the writer numbers frames in order
                    writer.write_video(out)
                    for p in pushes:
                        p.push_video(out)
                    frames += 1
                    bar.update(1)
                    if on_frame is not None:
                        on_frame(frames, total)
            writer.close()
        except BaseException:
            for p in pushes:
                p.close()
            bar.close()
            try:
                writer.container.close()
            finally:
                tmp.unlink(missing_ok=True)
            raise
        bar.close()
        for p in pushes:
            p.close()
        pipeline.close()
        services.session_ended(session)
        tmp.replace(dst)
    return {"output": str(dst), "frames": frames, "width": writer.video.width, "height": writer.video.height,
            "audio": ("copied" if writer.audio_copied else "re-encoded") if ain is not None else "none",
            "stage_errors": errors, "stages": pipeline.names, "restream": [p.status() for p in pushes],
            "faces": {tid: {"box": f["box"], "sources": sorted(f["sources"])} for tid, f in sorted(faces.items())}}


def _map_faces(session: Any, services: Any, face_map: Mapping[int, str], consent: bool) -> None:
    """Each mapped image registered as source `face<ID>`; the default (`source`, if any) stays the default."""
    from engines.sources import decode_image
    from streamer.session.face_map import KEEP, MAX_MAPPED_FACES
    from streamer.web.server import DEMO_SOURCE

    if len(face_map) > MAX_MAPPED_FACES:
        raise ValueError(f"--map names {len(face_map)} faces; at most {MAX_MAPPED_FACES} may be mapped")
    default = session.controls.source_id
    choices: dict[int, str] = {}
    for tid, choice in face_map.items():
        if choice == KEEP:
            choices[tid] = KEEP
            continue
        path = DEMO_SOURCE if choice == "demo" else Path(choice)
        if not path.is_file():
            raise FileNotFoundError(f"--map {tid}={choice}: no source image {path}")
        form = {"source_id": f"face{tid}", "consent": "true" if (consent or choice == "demo") else ""}
        choices[tid] = services.register_source(session, decode_image(path.read_bytes()), form)["source_id"]
    session.update(source_id=default, face_sources=choices)


def _note_faces(faces: dict[int, dict[str, Any]], state: Any) -> None:
    """What each track got over the run: its last box and every source it was fused with ("none": unchanged)."""
    from streamer.pipeline.stats import fused_sources

    fused = fused_sources(state)
    for face in state.faces:
        if face.track_id < 0:
            continue
        seen = faces.setdefault(face.track_id, {"box": None, "sources": set()})
        seen["box"] = [round(float(v), 1) for v in face.bbox]
        seen["sources"].add(fused.get(face.track_id, "none"))
