"""The independent WebRTC clients the stream benchmark and the e2e tests drive, seen from the project's
Python: where each one is, and how to run the GStreamer one (its gi bindings live in the system Python)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

GST_SCRIPT = Path(__file__).resolve().parent / "_gst_whip.py"
SYSTEM_PYTHON = "/usr/bin/python3"
# what the client needs: webrtcbin (bad), libnice's elements and its typelib, both codecs' encoders and decoders
_GST_PROBE = (
    "import gi\n"
    "for n, v in (('Gst', '1.0'), ('GstWebRTC', '1.0'), ('GstSdp', '1.0'), ('Nice', '0.1')): gi.require_version(n, v)\n"
    "from gi.repository import Gst\n"
    "Gst.init(None)\n"
    "missing = [e for e in ('webrtcbin', 'nicesrc', 'vp8enc', 'vp8dec', 'x264enc', 'avdec_h264', 'rtpvp8pay',\n"
    "           'rtph264pay', 'imagefreeze', 'pngdec') if Gst.ElementFactory.find(e) is None]\n"
    "print(' '.join(missing))\n")


def gstreamer_missing() -> str | None:
    """None when the GStreamer client can run here, else what is missing (for a skip or failure note)."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"no {SYSTEM_PYTHON} (Debian's python3 with python3-gi)"
    try:
        out = subprocess.run([SYSTEM_PYTHON, "-c", _GST_PROBE], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "probing GStreamer timed out"
    if out.returncode != 0:
        return f"python3-gi / GStreamer typelibs missing: {out.stderr.strip().splitlines()[-1:]}"
    if out.stdout.strip():
        return f"GStreamer elements missing: {out.stdout.strip()}"
    return None


async def run_gstreamer(url: str, image: Path, *, codec: str, frames: int, timeout_s: float = 90.0,
                        width: int = 320, height: int = 240, fps: int = 15, token: str = "",
                        dump: Path | None = None) -> dict[str, Any]:
    """Publish `image` to the WHIP endpoint `url` with webrtcbin and return the client's JSON report
    (post/delete status, frames back, first_frame_s from the POST, fps, the SDP setup lines)."""
    args = [SYSTEM_PYTHON, str(GST_SCRIPT), "--url", url, "--image", str(image), "--codec", codec,
            "--frames", str(frames), "--timeout", str(timeout_s), "--width", str(width), "--height", str(height),
            "--fps", str(fps)]
    if token:
        args += ["--token", token]
    if dump is not None:
        args += ["--dump", str(dump)]
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s + 30)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError("the GStreamer client did not exit") from None
    lines = [l for l in out.decode().splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"the GStreamer client exited {proc.returncode} without a report: {err.decode()[-2000:]}")
    report = json.loads(lines[-1])
    report["exit_code"] = proc.returncode
    return report
