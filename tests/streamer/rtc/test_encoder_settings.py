"""The H264 preset is a process setting: every H264 sender made after `set_h264_preset` opens libx264 with
it, and a real loopback stream through a sender made that way still decodes at the viewer."""

import fractions

import numpy as np
import pytest
from aiortc import rtcrtpsender
from aiortc.codecs import depayload, get_decoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from av import VideoFrame

from streamer.config import ServerConfig
from streamer.config import H264_PRESETS
from streamer.rtc.encoder_settings import check_h264_preset, h264_preset, set_h264_preset

H264 = RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=102,
                             parameters={"packetization-mode": "1", "profile-level-id": "42e01f"})
VP8 = RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000, payloadType=96)


@pytest.fixture
def preset_back():
    before = h264_preset()
    yield
    set_h264_preset(before)


def _frames(grace_hopper, n=12):
    from tests.faceclips import place

    out = []
    for i in range(n):
        f = VideoFrame.from_ndarray(place(grace_hopper, (640, 480), shift=(2.0 * i, 0.0))[0], format="rgb24").reformat(format="yuv420p")
        f.pts, f.time_base = i * 3000, fractions.Fraction(1, 90000)
        out.append(f)
    return out


def _encode_decode(frames):
    enc, dec = rtcrtpsender.get_encoder(H264), get_decoder(H264)
    got, first = [], None
    for i, f in enumerate(frames):
        payloads, ts = enc.encode(f, i == 0)
        data = b"".join(depayload(H264, p) for p in payloads)
        first = first or data
        got += dec.decode(JitterFrame(data=data, timestamp=ts))
    return first, got


def _x264_settings(bitstream: bytes) -> dict[str, str]:
    """The encoder settings libx264 writes into its first IDR (an SEI: 'x264 - core ... options: a=b c=d')."""
    text = bitstream[bitstream.index(b"x264 - core"):].split(b"\x00")[0].decode("latin-1")
    return dict(kv.split("=", 1) for kv in text.split("options:")[1].split() if "=" in kv)


def test_senders_open_libx264_with_the_preset_and_the_viewer_decodes_it(grace_hopper, preset_back):
    frames = _frames(grace_hopper)
    set_h264_preset("ultrafast")
    first, got = _encode_decode(frames)
    fast = _x264_settings(first)
    assert fast["subme"] == "0" and fast["me"] == "dia" and fast["bframes"] == "0"   # ultrafast, zerolatency
    assert len(got) == len(frames)
    sent, back = frames[-1].to_ndarray()[:480].astype(float), got[-1].to_ndarray()[:480].astype(float)
    assert 10 * np.log10(255 ** 2 / np.mean((sent - back) ** 2)) > 32       # the picture, not noise
    assert check_h264_preset("ultrafast") and not check_h264_preset("veryfast")
    set_h264_preset("medium")
    first, got = _encode_decode(frames[:2])
    assert _x264_settings(first)["subme"] == "7" and len(got) == 2                     # libx264's default


def test_medium_is_aiortcs_own_encoder_and_vp8_is_left_alone(preset_back):
    from aiortc.codecs.h264 import H264Encoder
    from aiortc.codecs.vpx import Vp8Encoder

    set_h264_preset("superfast")
    assert type(rtcrtpsender.get_encoder(VP8)) is Vp8Encoder
    set_h264_preset("medium")
    assert type(rtcrtpsender.get_encoder(H264)) is H264Encoder and h264_preset() == "medium"


def test_a_bad_preset_is_refused_before_anything_changes(preset_back):
    before = h264_preset()
    with pytest.raises(ValueError, match="h264 preset must be one of"):
        set_h264_preset("placebo")
    assert h264_preset() == before
    with pytest.raises(ValueError, match="h264_preset"):
        ServerConfig(h264_preset="slow")
    assert ServerConfig.from_env({"LIVEFUSE_H264_PRESET": "veryfast"}).h264_preset == "veryfast"
    assert set(H264_PRESETS) >= {"medium", ServerConfig().h264_preset}
