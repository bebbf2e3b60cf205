"""Restream to a real RTMP server: FFmpeg in listen mode (imageio-ffmpeg's binary) takes the push and keeps
it as MPEG-TS, which the same binary, independent of PyAV, decodes back: frames, size, keyframe spacing,
the audio tone. The server killed and started again mid-stream: the push comes back within 5 s. Nothing
listening: a clear event, the key never shown, and the pusher keeps trying without raising."""

from __future__ import annotations

import fractions
import re
import socket
import subprocess
import time

import av
import numpy as np
import pytest

from streamer.sinks.restream import RestreamSettings, RtmpPush, check_url, redact
from tests.faceclips import place

KEY = "live_0123456789abcdef-secret"


def ffmpeg() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether a TCP socket listens on `port` (the kernel's table: connecting would use FFmpeg's one publisher)."""
    want = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        if any(r.split()[1].endswith(want) and r.split()[3] == "0A" for r in rows):
            return True
    return False


class RtmpServer:
    """FFmpeg listening for one RTMP publisher on `port`, keeping what arrives in `out` (MPEG-TS)."""

    def __init__(self, port: int, out) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [ffmpeg(), "-hide_banner", "-loglevel", "error", "-y", "-listen", "1", "-f", "flv",
             "-i", f"rtmp://127.0.0.1:{port}/live/{KEY}", "-c", "copy", "-f", "mpegts", str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not listening(port):   # FFmpeg takes one publisher: never probe it
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(5)

    def wait(self, timeout: float = 10.0) -> None:
        self.proc.wait(timeout)


def decode_video(path, width: int, height: int) -> np.ndarray:
    raw = subprocess.run([ffmpeg(), "-hide_banner", "-loglevel", "error", "-i", str(path), "-map", "0:v",
                          "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def keyframes(path) -> int:
    out = subprocess.run([ffmpeg(), "-hide_banner", "-skip_frame", "nokey", "-i", str(path), "-map", "0:v",
                          "-fps_mode", "passthrough", "-f", "null", "-"], capture_output=True, text=True).stderr
    return int(re.findall(r"frame=\s*(\d+)", out)[-1])


def decode_audio(path) -> np.ndarray:
    raw = subprocess.run([ffmpeg(), "-hide_banner", "-loglevel", "error", "-i", str(path), "-map", "0:a",
                          "-f", "s16le", "-ac", "1", "-ar", "48000", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.int16).astype(np.float32) / 32768.0


def feed(push: RtmpPush, photo: np.ndarray, seconds: float, start: int = 0, fps: float = 30.0) -> int:
    """A real photo drifting across 640x480 at `fps`, with a 440 Hz tone in 20 ms audio frames."""
    n = start
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        frame, _ = place(photo, size=(640, 480), scale=0.9, shift=(float(n % 40), 0.0))
        vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
        vf.pts, vf.time_base = n, fractions.Fraction(1, int(fps))
        push.push_video(vf)
        for k in range(2):   # two 20 ms chunks a 33 ms frame: about real time, a little ahead
            t = (np.arange(960) + (2 * n + k) * 960) / 48000.0
            tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
            af = av.AudioFrame.from_ndarray(tone[None, :], format="fltp", layout="mono")
            af.sample_rate = 48000
            push.push_audio(af)
        n += 1
        time.sleep(1.0 / fps)
    return n


def test_push_is_read_back_by_an_independent_decoder(astronaut, tmp_path):
    port = free_port()
    server = RtmpServer(port, tmp_path / "got.ts")
    events: list[dict] = []
    push = RtmpPush(f"rtmp://127.0.0.1:{port}/live/{KEY}",
                    RestreamSettings(video_bitrate=1_500_000, keyframe_s=1.0, width=480, height=360), events.append)
    try:
        feed(push, astronaut, 3.2)
    finally:
        push.close()
    server.wait()
    frames = decode_video(tmp_path / "got.ts", 480, 360)
    assert len(frames) >= 60, len(frames)                 # ~3 s at 30 fps, a few lost to the start
    assert frames[-1].std() > 20                          # a picture, not a grey screen
    assert 2 <= keyframes(tmp_path / "got.ts") <= 5        # a keyframe a second
    audio = decode_audio(tmp_path / "got.ts")
    assert len(audio) > 48000 * 2
    spectrum = np.abs(np.fft.rfft(audio[4800:4800 + 48000]))   # one second: bins 1 Hz apart
    assert abs(int(np.argmax(spectrum)) - 440) < 5                # the tone came through
    assert [e["state"] for e in events][:1] == ["live"] and events[-1]["state"] == "stopped"
    assert all(KEY not in str(e) for e in events)


def test_a_restarted_server_gets_the_push_back_within_5_s(astronaut, tmp_path):
    port = free_port()
    first = RtmpServer(port, tmp_path / "one.ts")
    events: list[dict] = []
    push = RtmpPush(f"rtmp://127.0.0.1:{port}/live/{KEY}", RestreamSettings(video_bitrate=800_000), events.append)
    try:
        n = feed(push, astronaut, 1.5)
        assert push.state == "live"
        first.kill()                                        # the platform drops the stream
        n = feed(push, astronaut, 1.0, start=n)
        assert push.state == "reconnecting" and push.error
        second = RtmpServer(port, tmp_path / "two.ts")
        back_at = time.monotonic()
        while push.state != "live" and time.monotonic() - back_at < 6.0:
            n = feed(push, astronaut, 0.1, start=n)
        resumed = time.monotonic() - back_at
        assert push.state == "live" and resumed < 5.0, (resumed, push.status())
        feed(push, astronaut, 1.5, start=n)
    finally:
        push.close()
    second.wait()
    assert len(decode_video(tmp_path / "two.ts", 640, 480)) >= 25
    assert push.connects == 2
    states = [e["state"] for e in events]
    assert states[0] == "live" and "reconnecting" in states and states[-1] == "stopped"
    assert all(KEY not in str(e) for e in events)


def test_nothing_listening_gives_a_clear_event_and_never_raises(astronaut, caplog):
    port = free_port()
    events: list[dict] = []
    push = RtmpPush(f"rtmp://127.0.0.1:{port}/live/{KEY}", RestreamSettings(), events.append)
    try:
        feed(push, astronaut, 1.0)
        assert push.state == "reconnecting" and "refused" in (push.error or "").lower()
        assert events and events[0]["url"] == f"rtmp://127.0.0.1:{port}/live/***"
    finally:
        push.close()
    assert all(KEY not in str(e) for e in events)
    assert KEY not in caplog.text


def test_addresses_are_checked_and_keys_redacted():
    assert redact(f"rtmps://live.example.com:443/app/{KEY}?x=1") == "rtmps://live.example.com:443/app/***"
    assert redact(f"rtmp://a.rtmp.youtube.com/live2/{KEY}") == "rtmp://a.rtmp.youtube.com/live2/***"
    for bad in (f"http://example.com/live/{KEY}", f"rtmp:///live/{KEY}", "rtmp://host", "file:///etc/passwd"):
        with pytest.raises(ValueError) as exc:
            check_url(bad)
        assert KEY not in str(exc.value)
    with pytest.raises(ValueError) as exc:
        check_url(f"rtmp://host:99999/live/{KEY}")
    assert KEY not in str(exc.value)
    with pytest.raises(ValueError):
        RestreamSettings(video_bitrate=10)
