"""`livefuse process --background`: a colour key, a blur and a picture behind the person of a real clip
(the whole product: faces, fusion, edits, background, watermark), bad values refused before any work."""

from __future__ import annotations

import fractions
from pathlib import Path

import cv2
import numpy as np
import pytest

from bench import _person_scenes as ps
from streamer.app.cli import main

W, H = 320, 180


def _clip(path: Path, frames: int = 10) -> tuple[Path, np.ndarray]:
    import av

    scene = ps.pasted_scene("grace_hopper", "studio", height=0.8, centre_x=0.3)
    img = cv2.resize(scene.image, (W, H), interpolation=cv2.INTER_AREA)
    with av.open(str(path), "w") as out:
        v = out.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = W, H, "yuv420p"
        v.options = {"crf": "16", "preset": "ultrafast"}
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = i, fractions.Fraction(1, 24)
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode(None):
            out.mux(p)
    room = cv2.resize((~scene.person).astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST)
    far = cv2.erode(room, np.ones((15, 15), np.uint8)).astype(bool)
    return path, far


def _last_frame(path: Path) -> np.ndarray:
    import av

    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return frames[-1]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return _clip(tmp_path_factory.mktemp("bgclip") / "in.mp4")


def test_colour_blur_and_picture(clip, tmp_path, face_free_images):
    src, far = clip
    plain = _last_frame(src)
    assert main(["process", str(src), "-o", str(tmp_path / "green.mp4"), "--background", "#00ff00", "--no-progress"]) == 0
    green = _last_frame(tmp_path / "green.mp4")
    assert np.abs(np.median(green[far], axis=0) - [0, 255, 0]).max() <= 8
    picture = tmp_path / "room.jpg"
    cv2.imwrite(str(picture), face_free_images["rocket"][..., ::-1])
    assert main(["process", str(src), "-o", str(tmp_path / "pic.mp4"), "--background", str(picture), "--no-progress"]) == 0
    pic = _last_frame(tmp_path / "pic.mp4")
    assert np.abs(pic[far].astype(int) - plain[far]).mean() > 20
    assert main(["process", str(src), "-o", str(tmp_path / "blur.mp4"), "--background", "blur", "--no-progress"]) == 0
    assert (tmp_path / "blur.mp4").stat().st_size > 0


def test_bad_backgrounds_are_refused_before_any_work(clip, tmp_path, capsys):
    src, _ = clip
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"GIF89a not really")
    for value, said in (("greenish", "not a CSS colour"), (str(bad), "not a recognised image"), ("image", "file")):
        out = tmp_path / "never.mp4"
        assert main(["process", str(src), "-o", str(out), "--background", value, "--no-progress"]) == 2
        assert said in capsys.readouterr().err and not out.exists()
