"""`livefuse inspect` on real photos and a clip made from one, as a user runs it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from streamer.app.cli import main
from tests.faceclips import place, write_video


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["inspect", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_image_json_with_identity_and_overlay(capsys, tmp_path, astronaut):
    src, drawn = tmp_path / "astronaut.png", tmp_path / "overlay.png"
    Image.fromarray(astronaut).save(src)
    code, out, _ = run_cli(capsys, src, "--json", "--identity", "--draw", drawn)
    assert code == 0
    report = json.loads(out)
    assert report["kind"] == "image" and (report["width"], report["height"]) == (512, 512)
    (frame,) = report["frames"]
    (face,) = frame["faces"]
    assert face["track_id"] == 1
    assert np.array(face["landmarks"]).shape == (478, 3)
    assert len(face["blendshapes"]) == 52 and face["blendshapes"]["mouthSmileLeft"] > 0.5  # she smiles
    assert set(face["pose"]) == {"yaw", "pitch", "roll"} and abs(face["pose"]["yaw"]) < 15
    assert len(face["identity"]) == 128
    x0, y0, x1, y1 = face["bbox"]
    assert 150 < x0 < x1 < 300 and 50 < y0 < y1 < 200
    # the overlay changes the face and leaves the rest of the photo alone
    over = np.asarray(Image.open(drawn).convert("RGB")).astype(int)
    changed = np.abs(over - astronaut.astype(int)).sum(axis=2) > 0
    ys, xs = np.nonzero(changed)
    assert changed[int(y0):int(y1), int(x0):int(x1)].mean() > 0.05
    assert xs.min() >= x0 - 5 and xs.max() <= x1 + 200 and ys.min() >= 0 and ys.max() <= y1 + 5


def test_face_free_image_reports_no_faces(capsys, tmp_path, face_free_images):
    src = tmp_path / "coffee.jpg"
    Image.fromarray(face_free_images["coffee"]).save(src)
    code, out, _ = run_cli(capsys, src, "--json")
    assert code == 0 and json.loads(out)["frames"][0]["faces"] == []


def test_video_keeps_one_track_and_follows_the_motion(capsys, tmp_path, astronaut):
    clip = tmp_path / "clip.mp4"
    write_video(clip, [place(astronaut, shift=(4 * i, 0))[0] for i in range(10)])
    code, out, _ = run_cli(capsys, clip, "--json", "--no-landmarks")
    assert code == 0
    frames = json.loads(out)["frames"]
    assert len(frames) == 10 and all(len(f["faces"]) == 1 for f in frames)
    assert {f["faces"][0]["track_id"] for f in frames} == {1}
    assert frames[-1]["time_ms"] == pytest.approx(300.0, abs=1.0)
    moved = frames[-1]["faces"][0]["bbox"][0] - frames[0]["faces"][0]["bbox"][0]
    assert moved == pytest.approx(36.0, abs=4.0)  # 9 frames x 4 px, smoothed with little lag
    assert "landmarks" not in frames[0]["faces"][0]


def test_bad_inputs_fail_with_a_message(capsys, tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 definitely not media " * 20)
    code, _, err = run_cli(capsys, junk)
    assert code == 2 and "decode" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, tmp_path / "missing.png")
    assert code == 2 and "no such file" in err
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    code, _, err = run_cli(capsys, empty)
    assert code == 2 and "empty" in err


def test_summary_is_readable(capsys, tmp_path, grace_hopper):
    src = tmp_path / "grace.jpg"
    Image.fromarray(grace_hopper).save(src)
    code, out, _ = run_cli(capsys, src, "--backend", "torch")
    assert code == 0 and out.startswith("frame 0: #1 at [")
