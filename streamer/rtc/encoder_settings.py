"""aiortc keeps its video encoders' settings as module state that every connection in the process shares
(the bitrate bounds as module constants, the encoder class each sender makes), so they are a process
setting, not an app's: the command that owns the process (`livefuse serve`, a benchmark's server) sets
them once, before serving, and `create_app` checks them.

The H264 encoder's speed: aiortc opens libx264 with `tune=zerolatency` and libx264's default preset
(medium), the costliest step of an H264 stream; `set_h264_preset` makes every H264 sender of the process
open it with the preset given instead (`livefuse bench codecs` measures each preset's CPU and PSNR)."""

from __future__ import annotations

import fractions
import logging
from typing import Any

from streamer.config import H264_PRESETS

log = logging.getLogger(__name__)


def _codec_modules():
    from aiortc.codecs import h264, vpx

    return vpx, h264


def set_encoder_bitrates(min_bps: int, max_bps: int) -> None:
    """Bound every VP8 and H264 encoder of this process to [min_bps, max_bps] (the REMB-driven target
    moves within it; the start value is clamped into it)."""
    if not 0 < min_bps <= max_bps:
        raise ValueError(f"bad bitrate bounds {min_bps}..{max_bps}")
    for mod in _codec_modules():
        mod.MIN_BITRATE = min_bps
        mod.MAX_BITRATE = max_bps
        mod.DEFAULT_BITRATE = max(min_bps, min(mod.DEFAULT_BITRATE, max_bps))


def encoder_bitrates() -> dict[str, tuple[int, int]]:
    """codec -> (min, max) bits/s as this process's encoders will use them."""
    vpx, h264 = _codec_modules()
    return {"VP8": (vpx.MIN_BITRATE, vpx.MAX_BITRATE), "H264": (h264.MIN_BITRATE, h264.MAX_BITRATE)}


def check_encoder_bitrates(min_bps: int, max_bps: int) -> bool:
    """True when the process's encoders use these bounds; otherwise log which bounds apply instead."""
    actual = encoder_bitrates()
    if all(bounds == (min_bps, max_bps) for bounds in actual.values()):
        return True
    log.warning("the server is configured for %d..%d bit/s but this process's encoders use %s; "
                "call streamer.rtc.encoder_settings.set_encoder_bitrates once before serving", min_bps, max_bps, actual)
    return False




def _h264_encoder_class(preset: str) -> type:
    from aiortc.codecs import h264

    class PresetH264Encoder(h264.H264Encoder):
        """aiortc's H264 encoder with libx264 opened at `preset`. It opens the codec when aiortc would
        (first frame, new size, the target bitrate moved by more than 10 %) with the settings aiortc uses
        (h264.H264Encoder._encode_frame) plus the preset, so aiortc's own check then finds it current."""

        preset_name = preset

        def _encode_frame(self, frame: Any, force_keyframe: bool):
            c = self.codec
            if (c is None or frame.width != c.width or frame.height != c.height
                    or abs(self.target_bitrate - c.bit_rate) / c.bit_rate > 0.1):
                import av

                self.buffer_data, self.buffer_pts = b"", None
                c = self.codec = av.CodecContext.create("libx264", "w")
                c.width, c.height, c.bit_rate, c.pix_fmt = frame.width, frame.height, self.target_bitrate, "yuv420p"
                c.framerate = fractions.Fraction(h264.MAX_FRAME_RATE, 1)
                c.time_base = fractions.Fraction(1, h264.MAX_FRAME_RATE)
                c.options = {"level": "31", "tune": "zerolatency", "preset": preset}
                c.profile = "Baseline"
            return super()._encode_frame(frame, force_keyframe)

    return PresetH264Encoder


def set_h264_preset(preset: str) -> None:
    """Every H264 sender this process makes from now on encodes with libx264's `preset` ("medium" is
    aiortc's own behaviour: its encoder class is put back)."""
    if preset not in H264_PRESETS:
        raise ValueError(f"h264 preset must be one of {', '.join(H264_PRESETS)}, got {preset!r}")
    from aiortc import codecs, rtcrtpsender

    original = codecs.get_encoder
    cls = None if preset == "medium" else _h264_encoder_class(preset)

    def get_encoder(codec: Any) -> Any:
        if cls is not None and codec.mimeType.lower() == "video/h264":
            return cls()
        return original(codec)

    get_encoder.h264_preset = preset
    rtcrtpsender.get_encoder = get_encoder     # the name the senders call


def h264_preset() -> str:
    """The libx264 preset this process's H264 senders use."""
    from aiortc import rtcrtpsender

    return getattr(rtcrtpsender.get_encoder, "h264_preset", "medium")


def check_h264_preset(preset: str) -> bool:
    """True when this process's H264 senders use `preset`; otherwise log which one applies instead."""
    actual = h264_preset()
    if actual == preset:
        return True
    log.warning("the server is configured for the libx264 preset %s but this process's H264 encoders use %s; "
                "call streamer.rtc.encoder_settings.set_h264_preset once before serving", preset, actual)
    return False
