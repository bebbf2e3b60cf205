"""The returned stream's encoders as the server's senders run them, no network: CPU per frame and
picture quality for VP8 and for H264 at each libx264 preset (`streamer.rtc.encoder_settings.set_h264_preset`).

Each case encodes the same clip (the Grace Hopper photo swaying and rolling, bench/_product.py) with the
encoder aiortc's sender makes (its `encode`, the call a sender makes per frame) at a fixed target bitrate
(the server's default `max_bitrate` unless `--bitrate`), depayloads each RTP payload and decodes it with
aiortc's own decoder, as the viewer's side would. Reports process CPU per encoded frame (median / p95,
encoder threads included), the bitrate it made and the Y-plane PSNR of what the viewer decodes against
what was sent. Cases run in turn frame by frame (A, B, C, ...), so a busy machine slows them alike.
"""

from __future__ import annotations

import fractions
import os
import time
from typing import Any

import numpy as np


def add_arguments(parser) -> None:
    parser.add_argument("--sizes", default="640x480,1280x720,1920x1080")
    parser.add_argument("--frames", type=int, default=90, help="timed frames per case (default 90)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--presets", default="medium,veryfast,superfast,ultrafast", help="libx264 presets to time")
    parser.add_argument("--bitrate", type=int, default=None, help="target bits/s (default: ServerConfig().max_bitrate)")


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return 99.0 if mse == 0 else 10.0 * np.log10(255.0 ** 2 / mse)


def run(args) -> dict[str, Any]:
    from aiortc.codecs import depayload, get_decoder
    from aiortc.jitterbuffer import JitterFrame
    from aiortc.rtcrtpparameters import RTCRtpCodecParameters
    from av import VideoFrame

    from bench._product import grace_hopper, moving_face
    from streamer.rtc import encoder_settings
    from streamer.config import ServerConfig

    bitrate = args.bitrate or ServerConfig().max_bitrate
    encoder_settings.set_encoder_bitrates(min(bitrate, ServerConfig().min_bitrate), bitrate)
    presets = [p for p in args.presets.split(",") if p]
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    params = {"VP8": RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000, payloadType=96),
              "H264": RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=102,
                                            parameters={"packetization-mode": "1", "profile-level-id": "42e01f"})}
    cases: dict[tuple[str, str, tuple[int, int]], dict[str, Any]] = {}
    for size in sizes:
        cases[("VP8", "", size)] = {}
        for p in presets:
            cases[("H264", p, size)] = {}
    from aiortc import rtcrtpsender

    for (codec, preset, size), c in cases.items():
        if codec == "H264":
            encoder_settings.set_h264_preset(preset)
        c["encoder"] = rtcrtpsender.get_encoder(params[codec])
        c["encoder"].target_bitrate = bitrate
        c["decoder"] = get_decoder(params[codec])
        c.update(cpu=[], bytes=0, psnr=[])
    encoder_settings.set_h264_preset("medium")
    photo = grace_hopper()
    clips = {size: [VideoFrame.from_ndarray(moving_face(photo, size[0], size[1], n), format="rgb24").reformat(format="yuv420p")
                    for n in range(24)] for size in sizes}
    tb = fractions.Fraction(1, 90000)
    for n in range(args.warmup + args.frames):
        for (codec, preset, size), c in cases.items():
            src = clips[size][n % len(clips[size])]
            frame = VideoFrame.from_ndarray(src.to_ndarray(), format="yuv420p")
            frame.pts, frame.time_base = n * 3000, tb
            c0 = time.process_time()
            payloads, timestamp = c["encoder"].encode(frame, n == 0)
            cpu = (time.process_time() - c0) * 1000.0
            data = b"".join(depayload(params[codec], p) for p in payloads)
            out = c["decoder"].decode(JitterFrame(data=data, timestamp=timestamp))
            if n < args.warmup:
                continue
            c["cpu"].append(cpu)
            c["bytes"] += len(data)
            if out:
                sent = src.to_ndarray()[: size[1]]
                c["psnr"].append(_psnr(out[-1].to_ndarray()[: size[1]], sent))
    rows = {}
    for (codec, preset, size), c in cases.items():
        a = np.asarray(c["cpu"])
        rows[f"{size[0]}x{size[1]} {codec}{(' ' + preset) if preset else ''}"] = {
            "cpu_ms_per_frame": {"median_ms": round(float(np.median(a)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2)},
            "kbit_per_s_at_30fps": round(c["bytes"] * 8 / len(a) * 30 / 1000),
            "y_psnr_db": round(float(np.mean(c["psnr"])), 2) if c["psnr"] else None,
            "frames_decoded": len(c["psnr"]),
        }
    return {"benchmark": "codecs", "cpu_count": os.cpu_count(), "target_bitrate": bitrate, "frames": args.frames,
            "cases": rows, "load_avg_1m": round(os.getloadavg()[0], 2)}
