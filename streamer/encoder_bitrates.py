"""aiortc keeps its video encoders' bitrate bounds as module constants that every connection in the
process shares, so they are a process setting, not an app's: the command that owns the process
(`livefuse serve`, a benchmark's server) sets them once, before serving."""

from __future__ import annotations

import logging

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
                "call streamer.encoder_bitrates.set_encoder_bitrates once before serving", min_bps, max_bps, actual)
    return False
