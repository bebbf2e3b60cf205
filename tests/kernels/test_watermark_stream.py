"""The mark through a real stream: two aiortc peers in one process (VP8 and H264 at aiortc's default
bitrates), PyAV re-encodes at low bitrate, downscale and crop. Each case reports its raw code-bit
accuracy (printed with -s); the payload must come back whole."""

from __future__ import annotations

import asyncio
import fractions

import numpy as np
import pytest

from kernels import watermark_code as code
from kernels.numpy import watermark as wm
from tests.watermark_clips import PAYLOAD, crop, downscale, moving_clip, reencode


def code_bit_accuracy(det: wm.Detection) -> float:
    expected = 1.0 - 2.0 * code.encode_payload(PAYLOAD).astype(np.float32)
    return float(np.mean(np.sign(det.soft) == expected))


async def aiortc_round_trip(frames: list[np.ndarray], mime: str, keep: int = 8) -> list[np.ndarray]:
    """Send `frames` at 30 fps from one RTCPeerConnection to another, return the last `keep` received."""
    import av
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender
    from aiortc.mediastreams import MediaStreamTrack

    class Clip(MediaStreamTrack):
        kind = "video"

        def __init__(self) -> None:
            super().__init__()
            self.i = 0

        async def recv(self):
            await asyncio.sleep(1 / 30)
            f = av.VideoFrame.from_ndarray(frames[min(self.i, len(frames) - 1)], format="rgb24")
            f.pts, f.time_base = self.i * 3000, fractions.Fraction(1, 90000)
            self.i += 1
            return f

    sender_pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    receiver_pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    got: list[np.ndarray] = []
    done = asyncio.Event()

    @receiver_pc.on("track")
    def on_track(track):
        async def pull():
            try:
                while len(got) < len(frames):
                    frame = await asyncio.wait_for(track.recv(), 10)
                    got.append(frame.to_ndarray(format="rgb24"))
            finally:
                done.set()

        asyncio.ensure_future(pull())

    try:
        transceiver = sender_pc.addTransceiver(Clip(), direction="sendonly")
        caps = RTCRtpSender.getCapabilities("video")
        transceiver.setCodecPreferences([c for c in caps.codecs if c.mimeType == mime])
        await sender_pc.setLocalDescription(await sender_pc.createOffer())
        await receiver_pc.setRemoteDescription(sender_pc.localDescription)
        await receiver_pc.setLocalDescription(await receiver_pc.createAnswer())
        await sender_pc.setRemoteDescription(receiver_pc.localDescription)
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await sender_pc.close()
        await receiver_pc.close()
    assert len(got) >= keep, f"only {len(got)} frames came through"
    return got[-keep:]


@pytest.fixture(scope="module")
def key():
    return wm.make_key()


@pytest.fixture(scope="module")
def marked_clip(astronaut, key):
    frames = moving_clip(astronaut, n=45)
    pattern = wm.pattern_for(key, frames[0].shape[:2], PAYLOAD)
    return [wm.embed(f, pattern) for f in frames]


def report(case: str, single: wm.Detection, many: wm.Detection | None = None) -> None:
    line = f"[watermark] {case:28s} single-frame bits {code_bit_accuracy(single):.3f} payload={single.payload == PAYLOAD}"
    if many is not None:
        line += f"  | several frames bits {code_bit_accuracy(many):.3f} payload={many.payload == PAYLOAD}"
    print(line)


@pytest.mark.parametrize("mime", ["video/VP8", "video/H264"])
async def test_aiortc_round_trip_keeps_the_payload(marked_clip, key, mime):
    received = await aiortc_round_trip(marked_clip, mime)
    assert received[-1].shape == marked_clip[0].shape
    single = wm.extract(received[-1], key)
    many, n = wm.extract_many(received, key)
    report(f"aiortc {mime}", single, many)
    assert many.payload == PAYLOAD and n == len(received)
    assert single.payload == PAYLOAD
    # the stream downscaled and cropped on the viewer's side
    after = wm.extract(crop(downscale(received[-1])), key)
    report(f"aiortc {mime} +50%+crop", after)
    assert after.payload == PAYLOAD


@pytest.mark.parametrize("codec,rate", [("libvpx", 500_000), ("libx264", 1_000_000), ("libvpx", 250_000), ("libx264", 500_000)])
def test_reencode_at_aiortc_start_and_floor_bitrates_then_downscale_crop(marked_clip, key, codec, rate):
    decoded = reencode(marked_clip[:30], codec, rate)
    """aiortc's start bitrates (VP8 500 kbps, H264 1 Mbps) and its floors (250 kbps, 500 kbps)."""
    for name, attack in [("", lambda f: f), ("+50%", downscale), ("+crop10", crop), ("+50%+crop10", lambda f: crop(downscale(f)))]:
        frames = [attack(f) for f in decoded[-5:]]
        single = wm.extract(frames[-1], key)
        many, _ = wm.extract_many(frames, key)
        report(f"{codec} {rate // 1000}k{name}", single, many)
        assert many.payload == PAYLOAD


def test_unmarked_clips_through_codecs_are_not_detected(grace_hopper, face_free_images, key):
    for photo in (grace_hopper, face_free_images["coffee"]):
        clip = moving_clip(photo, n=10)
        for codec, rate in (("libvpx", 500_000), ("libx264", 1_000_000)):
            decoded = reencode(clip, codec, rate)
            det, n = wm.extract_many(decoded[-4:], key)
            assert n == 4 and not det.watermarked and det.payload is None


@pytest.mark.parametrize("codec,rate", [("libvpx", 250_000), ("libx264", 500_000)])
def test_the_y_plane_mark_survives_codecs_at_their_floor_bitrates(astronaut, key, codec, rate):
    """The stream path marks the Y plane of the decoded yuv420p frame (luma_pattern_for), not RGB."""
    from kernels.numpy.color import i420_to_rgb, rgb_to_i420

    frames = moving_clip(astronaut, n=30)
    pattern = wm.luma_pattern_for(key, frames[0].shape[:2], PAYLOAD)
    marked = []
    for f in frames:
        y, u, v = rgb_to_i420(f)
        marked.append(i420_to_rgb(wm.embed(np.ascontiguousarray(y), pattern), u, v))
    decoded = reencode(marked, codec, rate)
    many, _ = wm.extract_many(decoded[-5:], key)
    report(f"Y plane {codec} {rate // 1000}k", wm.extract(decoded[-1], key), many)
    assert many.payload == PAYLOAD
    after, _ = wm.extract_many([crop(downscale(f)) for f in decoded[-5:]], key)
    assert after.payload == PAYLOAD
