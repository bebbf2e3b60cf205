"""`livefuse verify` and `livefuse audit verify` as a user runs them."""

from __future__ import annotations

import json

import av
import numpy as np
from PIL import Image

from kernels.numpy import watermark as wm
from streamer.app.cli import main
from streamer.safety.audit import AuditConfig, AuditLog, segments
from streamer.safety.watermark_policy import WatermarkPolicy, parse_payload
from tests.watermark_clips import moving_clip


def write_video(path, frames, codec="libx264"):
    with av.open(str(path), "w") as out:
        s = out.add_stream(codec, rate=30)
        s.width, s.height, s.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        s.bit_rate = 1_000_000
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


def test_verify_image_and_video(tmp_path, capsys, astronaut, grace_hopper):
    policy = WatermarkPolicy(server_id=7)
    payload = policy.payload("session-abc", now=1_800_000_000)
    key = wm.make_key()
    frames = moving_clip(astronaut, n=15)
    pattern = wm.pattern_for(key, frames[0].shape[:2], payload)
    Image.fromarray(wm.embed(frames[0], pattern)).save(tmp_path / "marked.png")
    Image.fromarray(grace_hopper).save(tmp_path / "plain.jpg", quality=90)
    write_video(tmp_path / "marked.mp4", [wm.embed(f, pattern) for f in frames])

    assert main(["verify", str(tmp_path / "marked.png"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["watermarked"] and out["payload"] == f"{payload:016x}" and out["frames_checked"] == 1
    assert out["confidence"] > 0.8 and out["fields"]["server_id"] == 7
    assert out["fields"] == parse_payload(payload)

    assert main(["verify", str(tmp_path / "marked.mp4"), "--json", "--max-frames", "6"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["watermarked"] and out["payload"] == f"{payload:016x}" and out["frames_checked"] == 6

    assert main(["verify", str(tmp_path / "plain.jpg"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out == {**out, "watermarked": False, "payload": None, "confidence": 0.0, "frames_checked": 1}

    assert main(["verify", str(tmp_path / "missing.png"), "--json"]) == 2
    (tmp_path / "junk.mp4").write_bytes(b"not a video")
    assert main(["verify", str(tmp_path / "junk.mp4")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_audit_verify_command(tmp_path, capsys):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(AuditConfig(str(path)))
    for i in range(5):
        log.append("prompt", text=f"p{i}")
    log.close()
    assert main(["audit", "verify", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 5
    seg = segments(path)[0]
    lines = seg.read_text().splitlines()
    rec = json.loads(lines[2])
    rec["data"]["text"] = "edited"
    lines[2] = json.dumps(rec)
    seg.write_text("\n".join(lines) + "\n")
    assert main(["audit", "verify", str(path)]) == 1
    assert "TAMPERED" in capsys.readouterr().out
