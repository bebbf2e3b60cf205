"""`livefuse process` over a real clip made from a photo: every frame through the pipeline, audio kept,
clear errors for bad input."""

from __future__ import annotations

import fractions
import json

import av
import numpy as np
import pytest

from streamer.app.cli import main
from streamer.app.commands.process import process_file
from streamer.pipeline.pipeline import Pipeline
from bench._probe import CODE_ROWS_PX, clip_background, paint_index, read_index
from streamer.services import NullServices
from tests.streaming_helpers import Boom, InvertBelowCode

FRAMES, W, H = 24, 320, 240


@pytest.fixture(scope="module")
def clip(tmp_path_factory, request):
    """H.264 + AAC mp4: the astronaut photo drifting right, frame index painted in, a 440 Hz tone."""
    import skimage.data

    path = tmp_path_factory.mktemp("clip") / "in.mp4"
    bg = clip_background(skimage.data.astronaut(), W, H)
    with av.open(str(path), "w") as out:
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = W, H, "yuv420p"
        v.options = {"crf": "18", "preset": "ultrafast"}
        a = out.add_stream("aac", rate=48000)
        for i in range(FRAMES):
            f = av.VideoFrame.from_ndarray(paint_index(np.roll(bg, i, axis=1), i), format="rgb24")
            f.pts, f.time_base = i, fractions.Fraction(1, 24)
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
        t = np.arange(48000) / 48000.0
        tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        for k in range(0, len(tone), 1024):
            chunk = tone[k:k + 1024]
            af = av.AudioFrame.from_ndarray(chunk[None, :], format="fltp", layout="mono")
            af.sample_rate, af.pts, af.time_base = 48000, k, fractions.Fraction(1, 48000)
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode(None):
            out.mux(p)
    return path, bg


def read_all(path):
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    with av.open(str(path)) as c:
        audio = c.streams.audio[0] if c.streams.audio else None
        dur = sum(f.samples for f in c.decode(audio=0)) / 48000 if audio else 0.0
        codec = audio.codec_context.name if audio else None
    return frames, dur, codec


def test_cli_process_keeps_every_frame_and_the_audio(clip, tmp_path, capsys):
    src, _ = clip
    out = tmp_path / "out.mp4"
    audit = tmp_path / "audit.jsonl"
    assert main(["process", str(src), "-o", str(out), "--source", "demo", "--prompt", "a slight smile", "--no-progress",
                 "--audit-log", str(audit)]) == 0
    frames, dur, codec = read_all(out)
    assert len(frames) == FRAMES and frames[0].shape == (H, W, 3)
    assert [read_index(f) for f in frames] == list(range(FRAMES))
    assert codec == "aac" and abs(dur - 1.0) < 0.1
    assert "24 frames" in capsys.readouterr().err
    # the real product ran: the file carries the watermark, and the run is in a log that verifies
    assert main(["verify", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["watermarked"] is True
    assert main(["audit", "verify", str(audit), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_cli_refuses_a_source_without_consent_and_a_refused_prompt(clip, tmp_path, capsys, astronaut):
    from PIL import Image

    src, _ = clip
    face = tmp_path / "face.png"
    Image.fromarray(astronaut).save(face)
    log = ["--audit-log", str(tmp_path / "audit.jsonl"), "--no-progress"]
    assert main(["process", str(src), "-o", str(tmp_path / "a.mp4"), "--source", str(face), *log]) == 2
    assert "consent" in capsys.readouterr().err and not (tmp_path / "a.mp4").exists()
    assert main(["process", str(src), "-o", str(tmp_path / "b.mp4"), "--prompt", "make me look like Taylor Swift", *log]) == 2
    assert "prompt refused" in capsys.readouterr().err and not (tmp_path / "b.mp4").exists()


def test_process_runs_the_pipeline_on_each_frame(clip, tmp_path):
    src, bg = clip
    services = NullServices(make_pipeline=lambda s: Pipeline([Boom(), InvertBelowCode()]))
    summary = process_file(str(src), str(tmp_path / "o.webm"), services, progress=False)
    assert summary["frames"] == FRAMES and summary["stage_errors"] == FRAMES and summary["audio"] == "re-encoded"
    frames, dur, codec = read_all(tmp_path / "o.webm")
    assert len(frames) == FRAMES and codec == "opus" and dur > 0.9
    inverted = 255 - np.roll(bg, 5, axis=1)[2 * CODE_ROWS_PX:].astype(np.int16)
    assert np.abs(frames[5][2 * CODE_ROWS_PX:].astype(np.int16) - inverted).mean() < 10


class RecordShape:
    """A stage that records the shape control each frame's context carries."""

    name = "fusion"

    def __init__(self) -> None:
        self.seen: list = []

    def __call__(self, state, context):
        self.seen.append(context.controls.shape)
        return state


def test_process_shape_reaches_every_frame_and_is_checked(clip, tmp_path, capsys, monkeypatch):
    from streamer.app.commands import serve

    src, _ = clip
    stage = RecordShape()
    monkeypatch.setattr(serve, "_services_or_exit",
                        lambda *a, **k: NullServices(make_pipeline=lambda s: Pipeline([stage])))
    assert main(["process", str(src), "-o", str(tmp_path / "o.mp4"), "--shape", "0.25", "--no-progress"]) == 0
    assert stage.seen == [0.25] * FRAMES
    stage.seen.clear()
    assert main(["process", str(src), "-o", str(tmp_path / "p.mp4"), "--no-progress"]) == 0
    assert stage.seen == [None] * FRAMES                  # unset: the server's shape_weight
    for bad in ("1.5", "-0.1", "nan"):
        out = tmp_path / "x.mp4"
        assert main(["process", str(src), "-o", str(out), "--source", "demo", "--shape", bad, "--no-progress"]) == 2, bad
        assert "--shape must be within 0..1" in capsys.readouterr().err and not out.exists(), bad


def test_bad_input_is_a_clear_error_and_writes_nothing(clip, tmp_path, capsys):
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"this is not a video" * 100)
    out = tmp_path / "out.mp4"
    assert main(["process", str(garbage), "-o", str(out), "--no-progress"]) == 2
    assert "cannot read" in capsys.readouterr().err and not out.exists()
    assert main(["process", str(tmp_path / "missing.mp4"), "-o", str(out)]) == 2
    assert "no input file" in capsys.readouterr().err
    out.write_bytes(b"keep me")
    assert main(["process", str(garbage), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    assert main(["process", str(clip[0]), "-o", str(tmp_path / "x.avi"), "--no-progress"]) == 2
    assert "use one of .mp4" in capsys.readouterr().err and not list(tmp_path.glob("x*"))


def test_process_reads_and_writes_s3_urls(clip, moto_s3, tmp_path, capsys):
    """`livefuse process s3://... -o s3://...` with the store named only by the standard AWS variables."""
    path, _ = clip
    s3 = moto_s3.client()
    s3.put_object(Bucket="results", Key="in/clip.mp4", Body=path.read_bytes())
    assert main(["process", "s3://results/in/clip.mp4", "-o", "s3://results/out/fused.mp4", "--source", "demo",
                 "--no-progress", "--audit-log", str(tmp_path / "audit.jsonl")]) == 0
    assert "s3://results/out/fused.mp4" in capsys.readouterr().err
    (tmp_path / "fused.mp4").write_bytes(s3.get_object(Bucket="results", Key="out/fused.mp4")["Body"].read())
    frames, seconds = read_all(tmp_path / "fused.mp4")[:2]
    assert len(frames) == FRAMES and seconds > 0.9   # every frame, and the audio kept
    assert main(["process", "s3://results/in/missing.mp4", "-o", str(tmp_path / "x.mp4"), "--no-progress",
                 "--audit-log", str(tmp_path / "audit.jsonl")]) == 2
    assert "no object results/in/missing.mp4" in capsys.readouterr().err


@pytest.fixture(scope="module")
def pair_clip(tmp_path_factory, astronaut, grace_hopper):
    """H.264: the astronaut (left) and Grace Hopper (right) side by side, 8 frames at 640x480."""
    from tests.faceclips import ASTRONAUT_FACE, GRACE_HOPPER_FACE, group_frame

    frame, _ = group_frame([(astronaut, ASTRONAUT_FACE, 120, (170, 240)), (grace_hopper, GRACE_HOPPER_FACE, 120, (470, 240))],
                           size=(640, 480))
    path = tmp_path_factory.mktemp("pair") / "pair.mp4"
    with av.open(str(path), "w") as out:
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = 640, 480, "yuv420p"
        v.options = {"crf": "12", "preset": "ultrafast"}
        for i in range(8):
            f = av.VideoFrame.from_ndarray(frame, format="rgb24")
            f.pts, f.time_base = i, fractions.Fraction(1, 24)
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
    return path


def test_process_map_gives_each_track_its_own_choice(pair_clip, tmp_path, grace_hopper, capsys):
    from PIL import Image

    from engines.identity import IdentityEmbedder, distance
    from streamer.app.assembly import ProductConfig, build_services
    from streamer.web.kit import SafetyConfig
    from tests.streamer.pipeline.stages.test_fusion import detect

    grace = tmp_path / "grace.png"
    Image.fromarray(grace_hopper).save(grace)
    services = build_services(ProductConfig(safety=SafetyConfig(audit_path=str(tmp_path / "audit.jsonl"))))
    try:
        summary = process_file(str(pair_clip), str(tmp_path / "out.mp4"), services, progress=False, consent=True,
                               face_map={1: str(grace), 2: "keep"})
        plain = process_file(str(pair_clip), str(tmp_path / "plain.mp4"), services, progress=False)   # nothing fused
    finally:
        services.shutdown()
    faces = summary["faces"]
    assert set(faces) == {1, 2} and faces[1]["sources"] == ["face1"] and faces[2]["sources"] == ["none"]
    fused_box, kept_box = faces[1]["box"], faces[2]["box"]
    src_frames, _, _ = read_all(pair_clip)
    out_frames, _, _ = read_all(tmp_path / "out.mp4")
    before, after = src_frames[-1], out_frames[-1]

    def region(box):
        x0, y0, x1, y1 = (int(v) for v in box)
        return (slice(y0, y1), slice(x0, x1))

    diff = np.abs(after.astype(int) - before)
    marked = np.abs(read_all(tmp_path / "plain.mp4")[0][-1].astype(int) - before)   # watermark and codec alone
    assert plain["faces"][1]["sources"] == plain["faces"][2]["sources"] == ["none"]
    assert diff[region(fused_box)].mean() > 8
    assert diff[region(kept_box)].mean() < marked[region(kept_box)].mean() + 0.5   # the kept face: as the input
    emb = IdentityEmbedder()
    target = emb.embed(grace_hopper, detect(grace_hopper)[0])
    f_in = min(detect(before), key=lambda f: abs(f.bbox[0] - fused_box[0]))
    f_out = min(detect(after), key=lambda f: abs(f.bbox[0] - fused_box[0]))
    assert distance(emb.embed(after, f_out), target) < distance(emb.embed(before, f_in), target)


def test_process_map_bad_input_is_a_clear_error(pair_clip, tmp_path, capsys):
    log = ["--audit-log", str(tmp_path / "audit.jsonl"), "--no-progress"]
    for bad, words in (("1=", "ID=CHOICE"), ("one=keep", "whole number"), ("1=keep,1=demo", "twice"),
                       (",".join(f"{i}=keep" for i in range(20)), "at most 16"), ("1=missing.png", "no source image")):
        assert main(["process", str(pair_clip), "-o", str(tmp_path / "x.mp4"), "--map", bad, *log]) == 2, bad
        assert words in capsys.readouterr().err, bad
        assert not (tmp_path / "x.mp4").exists()
