"""`livefuse process --vmc --face-data`: a recorded clip of a real photo (neutral, the product's smile edit,
eyelids shut, the head turned each way: tests/face_scenes.py) drives a VMC receiver on a real UDP socket,
decoded by python-osc, and writes the face data as JSON lines; the whole product runs (faces, the face rig,
fusion, edits, watermark)."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest
from pythonosc.osc_packet import OscPacket

from engines.face_rig import ARKIT_NAMES
from streamer.app.cli import main
from tests.face_scenes import scenes
from tests.faceclips import landmarks_of, write_video

FPS = 15
SEGMENTS = [("neutral", 10), ("smile", 10), ("neutral", 6), ("blink", 10), ("neutral", 6), ("turn_left", 10),
            ("neutral", 6), ("turn_right", 10)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory, grace_hopper):
    named = scenes(grace_hopper, landmarks_of(grace_hopper))
    frames, labels = [], []
    for name, n in SEGMENTS:
        frames += [named[name]] * n
        labels += [name] * n
    path = tmp_path_factory.mktemp("clip") / "scenes.mp4"
    write_video(path, frames, fps=FPS)
    return path, labels


class Receiver:
    """VMC's receiving end: a UDP socket read on a thread, each datagram decoded by python-osc; one dict
    per frame (from /VMC/Ext/T to /VMC/Ext/Blend/Apply)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.frames: list[dict] = []
        self._cur: dict = {"blend": {}}
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except OSError:
                continue
            for m in OscPacket(data).messages:
                a, p = m.message.address, list(m.message.params)
                if a == "/VMC/Ext/T":
                    self._cur["t"] = p[0]
                elif a == "/VMC/Ext/Bone/Pos" and p[0] == "Head":
                    self._cur["head"] = p[1:]
                elif a == "/VMC/Ext/Blend/Val":
                    self._cur["blend"][p[0]] = p[1]
                elif a == "/VMC/Ext/Blend/Apply":
                    self.frames.append(self._cur)
                    self._cur = {"blend": {}}

    def close(self) -> None:
        self._stop = True
        self._thread.join(2.0)
        self.sock.close()


def _mean(rows, key):
    return float(np.mean([key(r) for r in rows]))


def test_a_clip_drives_vmc_and_writes_face_data(clip, tmp_path, capsys):
    path, labels = clip
    rx = Receiver()
    data = tmp_path / "face.jsonl"
    try:
        assert main(["process", str(path), "-o", str(tmp_path / "out.mp4"), "--vmc", f"127.0.0.1:{rx.port}",
                     "--no-mirror", "--face-data", str(data), "--no-progress",
                     "--audit-log", str(tmp_path / "audit.jsonl")]) == 0
        threading.Event().wait(0.3)
    finally:
        rx.close()
    # every frame reached the receiver, each with all 52 ARKit names (and the VRM presets), values in [0, 1]
    assert len(rx.frames) == len(labels)
    for f in rx.frames:
        assert set(ARKIT_NAMES) <= set(f["blend"]) and {"Blink_L", "Blink_R", "A"} <= set(f["blend"])
        assert all(0.0 <= v <= 1.0 for v in f["blend"].values()) and len(f["head"]) == 7
    by = {name: [f for f in rx.frames if labels[round(f["t"] * FPS)] == name][3:] for name, _ in SEGMENTS}
    for side in ("mouthSmileLeft", "mouthSmileRight"):
        assert _mean(by["smile"], lambda f: f["blend"][side]) > _mean(by["neutral"], lambda f: f["blend"][side]) + 0.2
    for side in ("eyeBlinkLeft", "eyeBlinkRight"):
        assert _mean(by["blink"], lambda f: f["blend"][side]) > _mean(by["neutral"], lambda f: f["blend"][side]) + 0.08
    # --no-mirror: the avatar turns as the person does; Unity's y rotation < 0 is a turn to the avatar's left
    left_qy = _mean(by["turn_left"], lambda f: f["head"][4])
    right_qy = _mean(by["turn_right"], lambda f: f["head"][4])
    assert left_qy < -0.01 and right_qy > 0.01, (left_qy, right_qy)
    # the same frames as JSON lines, yaw in the person's terms (> 0: a turn to their left)
    lines = [json.loads(x) for x in data.read_text().splitlines()]
    assert len(lines) == len(labels) and set(lines[0]["blendshapes"]) == set(ARKIT_NAMES)
    yaw = {name: np.mean([ln["head"]["yaw"] for ln, lab in zip(lines, labels) if lab == name]) for name in ("turn_left", "turn_right")}
    assert yaw["turn_left"] > 1.5 and yaw["turn_right"] < -1.5, yaw
    assert all(ln["found"] for ln in lines)


def test_a_clip_restreamed_to_a_real_rtmp_server_arrives_watermarked(clip, tmp_path, capsys):
    """`process --restream`: FFmpeg listening as the platform; what it kept is decoded by the FFmpeg binary
    (frames, size) and carries the product's watermark (`livefuse verify`); the key is in no output."""
    from tests.streamer.sinks.test_restream import KEY, RtmpServer, decode_video, free_port

    path, labels = clip
    port = free_port()
    server = RtmpServer(port, tmp_path / "got.ts")
    url = f"rtmp://127.0.0.1:{port}/live/{KEY}"
    assert main(["process", str(path), "-o", str(tmp_path / "out.mp4"), "--restream", url, "--restream-keyframe", "1",
                 "--no-progress", "--audit-log", str(tmp_path / "audit.jsonl")]) == 0
    server.wait()
    err = capsys.readouterr().err
    assert f"restream rtmp://127.0.0.1:{port}/live/***" in err and KEY not in err
    frames = decode_video(tmp_path / "got.ts", 512, 600)
    assert len(frames) >= len(labels) - 10, len(frames)
    assert main(["verify", str(tmp_path / "got.ts"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["watermarked"] is True
