"""A loopback client for tests and the stream benchmark: it sends a clip made from a real photo with the
frame index painted into the pixels, reads the returned stream and matches each frame to when it was sent.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import VideoFrame

from streamer.rtc.ice import LOOPBACK_ADDRESSES, gathering_on, rtc_configuration

VIDEO_CLOCK = 90000
CODE_BITS = 12           # frame index modulo 4096, plus its complement as a check
CODE_ROWS_PX = 24


def paint_index(image: np.ndarray, index: int) -> np.ndarray:
    """Paint `index` as two rows of black/white blocks across the top: the bits, then their complement."""
    out = image.copy()
    h, w = out.shape[:2]
    bw = w // CODE_BITS
    value = index % (1 << CODE_BITS)
    for row, bits in enumerate((value, ~value)):
        y0 = row * CODE_ROWS_PX
        for b in range(CODE_BITS):
            on = (bits >> (CODE_BITS - 1 - b)) & 1
            out[y0:y0 + CODE_ROWS_PX, b * bw:(b + 1) * bw] = 235 if on else 16
    return out


def read_index(image: np.ndarray) -> int | None:
    """The painted index, or None when the blocks are unreadable (the check row disagrees)."""
    h, w = image.shape[:2]
    bw = w // CODE_BITS
    band = image[: 2 * CODE_ROWS_PX, : bw * CODE_BITS].astype(np.float32)
    grey = band.mean(axis=2) if band.ndim == 3 else band
    m = 6  # read the centre of each block, away from codec ringing at the edges
    rows = []
    for row in range(2):
        y0 = row * CODE_ROWS_PX
        means = [grey[y0 + m:y0 + CODE_ROWS_PX - m, b * bw + m:(b + 1) * bw - m].mean() for b in range(CODE_BITS)]
        rows.append([1 if v > 125 else 0 for v in means])
    if any(a == b for a, b in zip(*rows)):
        return None
    return int("".join(map(str, rows[0])), 2)


def read_index_from_frame(frame: VideoFrame) -> int | None:
    """The painted index read from the luma plane's top rows only (cheap: no colour conversion)."""
    if frame.format.name not in ("yuv420p", "yuvj420p"):
        return read_index(frame.to_ndarray(format="rgb24"))
    plane = frame.planes[0]
    rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[: 2 * CODE_ROWS_PX, : frame.width]
    return read_index(rows)


def clip_background(photo: np.ndarray, width: int, height: int) -> np.ndarray:
    """The photo letterboxed into width x height (a real face, so detectors and codecs see real content)."""
    from PIL import Image

    img = Image.fromarray(photo)
    scale = min(width / img.width, height / img.height)
    img = img.resize((max(1, int(img.width * scale)), max(1, int(img.height * scale))), Image.BILINEAR)
    canvas = np.full((height, width, 3), 40, np.uint8)
    x0, y0 = (width - img.width) // 2, (height - img.height) // 2
    canvas[y0:y0 + img.height, x0:x0 + img.width] = np.asarray(img)
    return canvas


class ClipTrack(MediaStreamTrack):
    """Frames at `fps` in real time, each with its index painted in; send times kept by index."""

    kind = "video"

    def __init__(self, background: np.ndarray, fps: float = 30.0, frames: int | None = None, motion_px: int = 2) -> None:
        super().__init__()
        self.background = background
        self.fps = fps
        self.frames = frames
        self.motion_px = motion_px
        self.sent: dict[int, float] = {}
        self._n = 0
        self._t0: float | None = None

    async def recv(self) -> VideoFrame:
        if self.readyState != "live" or (self.frames is not None and self._n >= self.frames):
            self.stop()
            raise MediaStreamError
        if self._t0 is None:
            self._t0 = time.monotonic()
        due = self._t0 + self._n / self.fps
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n = self._n
        self._n += 1
        frame = self.frame(n)
        self.sent[n % (1 << CODE_BITS)] = time.monotonic()
        return frame

    def frame(self, n: int) -> Any:
        """What is sent as frame `n`: the background moved by the sway, with `n` painted in."""
        shift = int(self.motion_px * np.sin(n / 15.0))
        img = np.roll(self.background, shift, axis=1) if shift else self.background
        frame = VideoFrame.from_ndarray(paint_index(img, n), format="rgb24")
        frame.pts = int(round(n * VIDEO_CLOCK / self.fps))
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        return frame


class EncodedClipTrack(ClipTrack):
    """The same clip as H264 access units encoded before the stream starts (a loop of `loop` frames, an IDR
    every `gop`), handed to aiortc as packets it only packetises: the client then costs what a camera
    with its own encoder costs the machine (no encoding on the shared cores), so a benchmark on one
    machine measures the server rather than the client's encoder. The painted index is the loop
    position; send times are kept by it as `ClipTrack` keeps them."""

    mime_type = "video/H264"

    def __init__(self, background: np.ndarray, fps: float = 30.0, frames: int | None = None, motion_px: int = 2,
                 loop: int = 180, gop: int = 30, bitrate: int = 3_000_000) -> None:
        super().__init__(background, fps, frames, motion_px)
        if loop % gop:
            raise ValueError(f"loop ({loop}) must be a whole number of GOPs ({gop}) so every lap starts on an IDR")
        self.loop = loop
        self._packets = self._encode(loop, gop, bitrate)

    def _encode(self, loop: int, gop: int, bitrate: int) -> list[bytes]:
        import av

        h, w = self.background.shape[:2]
        codec = av.CodecContext.create("libx264", "w")
        codec.width, codec.height, codec.pix_fmt = w, h, "yuv420p"
        codec.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        codec.framerate = fractions.Fraction(self.fps).limit_denominator(1001)
        codec.bit_rate = bitrate
        # what WebRTC endpoints expect: constrained baseline, no B-frames, an access unit per frame at once
        codec.options = {"profile": "baseline", "tune": "zerolatency", "preset": "veryfast", "g": str(gop),
                         "keyint_min": str(gop), "sc_threshold": "0", "bf": "0", "repeat-headers": "1"}
        units: list[bytes] = []
        for n in range(loop):
            frame = self.frame(n).reformat(format="yuv420p")
            units += [bytes(p) for p in codec.encode(frame)]
        units += [bytes(p) for p in codec.encode(None)]
        if len(units) != loop:
            raise RuntimeError(f"libx264 gave {len(units)} access units for {loop} frames")
        return units

    async def recv(self) -> Any:
        import av

        if self.readyState != "live" or (self.frames is not None and self._n >= self.frames):
            self.stop()
            raise MediaStreamError
        if self._t0 is None:
            self._t0 = time.monotonic()
        delay = self._t0 + self._n / self.fps - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n = self._n
        self._n += 1
        packet = av.Packet(self._packets[n % self.loop])
        packet.pts = int(round(n * VIDEO_CLOCK / self.fps))
        packet.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self.sent[n % self.loop] = time.monotonic()
        return packet


@dataclass
class Received:
    index: int | None
    pts: int | None
    at: float
    size: tuple[int, int]
    image: np.ndarray | None = None


@dataclass
class ProbeClient:
    """One client connection: send `track`, collect what comes back and what the data channel says."""

    track: MediaStreamTrack
    keep_images: int = 0
    pc: RTCPeerConnection = field(default_factory=lambda: RTCPeerConnection(rtc_configuration(loopback=True)))
    received: list[Received] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    session_id: str | None = None
    channel: Any = None
    _reader: asyncio.Task | None = None
    _got_track: asyncio.Event = field(default_factory=asyncio.Event)
    _message_event: asyncio.Event = field(default_factory=asyncio.Event)

    async def offer(self) -> RTCSessionDescription:
        self.channel = self.pc.createDataChannel("control")

        @self.channel.on("message")
        def _msg(raw: str) -> None:
            self.messages.append(json.loads(raw))
            self._message_event.set()

        transceiver = self.pc.addTransceiver(self.track, direction="sendrecv")
        mime = getattr(self.track, "mime_type", None)   # a track of pre-encoded packets names its one codec
        if mime is not None:
            from aiortc import RTCRtpSender

            transceiver.setCodecPreferences([c for c in RTCRtpSender.getCapabilities("video").codecs
                                             if c.mimeType in (mime, "video/rtx")])
        self.pc.on("track", self._on_track)
        with gathering_on(LOOPBACK_ADDRESSES):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription

    async def accept(self, sdp: str) -> None:
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))

    async def connect_http(self, base_url: str, http: Any) -> dict[str, Any]:
        """Signal through POST /offer on a running server (http: an aiohttp ClientSession)."""
        offer = await self.offer()
        async with http.post(f"{base_url}/offer", json={"sdp": offer.sdp, "type": offer.type}) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"/offer answered {resp.status}: {body}")
        self.session_id = body["session"]
        await self.accept(body["sdp"])
        return body

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "video":
            self._reader = asyncio.ensure_future(self._read(track))
            self._got_track.set()

    async def _read(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await track.recv()
                now = time.monotonic()
                keep = frame.to_ndarray(format="rgb24") if len(self.received) < self.keep_images else None
                index = read_index(keep) if keep is not None else read_index_from_frame(frame)
                self.received.append(Received(index, frame.pts, now, (frame.width, frame.height), keep))
        except MediaStreamError:
            pass

    def send(self, msg: dict[str, Any] | str) -> None:
        self.channel.send(msg if isinstance(msg, str) else json.dumps(msg))

    async def wait_message(self, pred: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for m in self.messages[seen:]:
                if pred(m):
                    return m
            seen = len(self.messages)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message; got {self.messages[-5:]}")
            self._message_event.clear()
            try:
                await asyncio.wait_for(self._message_event.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def wait_frames(self, n: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while len([r for r in self.received if r.index is not None]) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.received)} frames back after {timeout} s, wanted {n}")
            await asyncio.sleep(0.05)

    def latencies_ms(self, sent: dict[int, float]) -> list[float]:
        return [(r.at - sent[r.index]) * 1000.0 for r in self.received if r.index is not None and r.index in sent]

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self.pc.close()
