"""Restream: a session's fused output pushed to RTMP / RTMPS ingest (Twitch, YouTube, Kick, a local
nginx-rtmp), H.264 + AAC in FLV, written by PyAV (FFmpeg's rtmp protocol; rtmps through its TLS).

Each destination has a worker thread of its own that owns the muxer and the encoders: connecting,
encoding and writing (which a slow network blocks) never touch the event loop or the session's frame
path. Frames are handed over newest-wins (`push_video`): a destination that falls behind drops frames
of its own and never holds up the session's stream, its viewers or another destination. Audio frames
queue (a bounded few seconds; the oldest go first). When the platform drops the connection, or it cannot
be made, the worker reconnects with backoff (`RestreamSettings.backoff_s`), each time with fresh
encoders so the stream restarts on a keyframe. The stream key is a secret: logs, events, metrics and
status show the address with its key replaced (`redact`).
"""

from __future__ import annotations

import collections
import fractions
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from streamer.sinks.addresses import UNREADABLE, origin

log = logging.getLogger(__name__)

SCHEMES = ("rtmp", "rtmps")
AUDIO_RATE = 48000


def redact(url: str) -> str:
    """The address with everything past its application name hidden: rtmp://host/app/*** (stream keys
    ride in the path's last part or the query)."""
    base = origin(url)
    if base is None:
        return UNREADABLE
    path = urlsplit(url).path.strip("/")
    app = path.split("/")[0] if path else ""
    return f"{base}/{app + '/' if app else ''}***"


def check_url(url: str) -> str:
    """The URL if it is rtmp(s)://HOST[:PORT]/APP/KEY; ValueError (which never shows the key) otherwise."""
    if not isinstance(url, str) or len(url) > 2048:
        raise ValueError("a restream address is rtmp://HOST/APP/KEY or rtmps://HOST/APP/KEY")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"restream address {redact(url)} is not a URL") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"a restream address starts with rtmp:// or rtmps://, not {parts.scheme or '(none)'}://")
    if not parts.hostname:
        raise ValueError(f"restream address {redact(url)} names no host")
    if port is not None and not (1 <= port <= 65535):
        raise ValueError(f"restream address {redact(url)}: bad port")
    if len([p for p in parts.path.split("/") if p]) < 1:
        raise ValueError(f"restream address {redact(url)} names no application and key (rtmp://HOST/APP/KEY)")
    return url


@dataclass(frozen=True, slots=True)
class RestreamSettings:
    """What the platform asks for: Twitch and YouTube take H.264 + AAC with a keyframe every 2 s;
    bitrate and size within the account's limits. width/height 0: the session's own size."""

    video_bitrate: int = 2_500_000
    audio_bitrate: int = 128_000
    keyframe_s: float = 2.0
    fps: float = 30.0
    width: int = 0
    height: int = 0
    preset: str = "veryfast"
    backoff_s: tuple[float, float] = (0.5, 3.0)
    io_timeout_s: float = 5.0
    audio_queue_s: float = 3.0

    def __post_init__(self) -> None:
        if not (100_000 <= self.video_bitrate <= 50_000_000):
            raise ValueError(f"video_bitrate must be within 100k..50M bits/s, got {self.video_bitrate}")
        if not (0.25 <= self.keyframe_s <= 10.0):
            raise ValueError(f"keyframe_s must be within 0.25..10, got {self.keyframe_s}")
        if not (1.0 <= self.fps <= 120.0):
            raise ValueError(f"fps must be within 1..120, got {self.fps}")
        for v in (self.width, self.height):
            if v and not (16 <= v <= 4096 and v % 2 == 0):
                raise ValueError(f"width and height must be even, 16..4096 (or 0: the session's), got {v}")


Event = Callable[[dict[str, Any]], None]


class RtmpPush:
    """One destination. `push_video` / `push_audio` from any thread (the event loop); `status()` any time;
    `close()` ends the worker (it finishes the stream it is writing)."""

    def __init__(self, url: str, settings: RestreamSettings = RestreamSettings(), on_event: Event | None = None,
                 *, audio: bool = True) -> None:
        self.url = check_url(url)
        self.name = redact(url)
        self.settings = settings
        self.audio = audio
        self._on_event = on_event or (lambda e: None)
        self._video: Any = None
        self._audio_q: collections.deque = collections.deque(maxlen=max(1, int(settings.audio_queue_s * 50)))
        self._cond = threading.Condition()
        self._stop = False
        self.state = "connecting"
        self.error: str | None = None
        self.frames = 0            # video frames written, all connections
        self.audio_frames = 0
        self.dropped = 0           # video frames replaced before the worker took them
        self.connects = 0
        self.bytes_out = 0
        self._thread = threading.Thread(target=self._main, name="restream", daemon=True)
        self._thread.start()

    # --- feeding (any thread) -------------------------------------------------------------------------

    def push_video(self, frame: Any) -> None:
        """An av.VideoFrame of the session's output; replaces one not yet taken (newest wins)."""
        with self._cond:
            if self._video is not None:
                self.dropped += 1
            self._video = frame
            self._cond.notify()

    def push_audio(self, frame: Any) -> None:
        """An av.AudioFrame of the session's audio (any layout and rate; resampled to 48 kHz stereo)."""
        if self.audio:
            with self._cond:
                self._audio_q.append(frame)

    def status(self) -> dict[str, Any]:
        return {"url": self.name, "state": self.state, "frames": self.frames, "audio_frames": self.audio_frames,
                "dropped": self.dropped, "connects": self.connects, "error": self.error}

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)

    # --- the worker -----------------------------------------------------------------------------------

    def _set(self, state: str, error: str | None = None) -> None:
        changed = (state, error) != (self.state, self.error)
        self.state, self.error = state, error
        if changed:
            self._on_event({"type": "restream", **self.status()})

    def _main(self) -> None:
        low, high = self.settings.backoff_s
        wait = low
        while not self._stop:
            started = time.monotonic()
            try:
                self._stream()
            except Exception as exc:   # refused, dropped, a bad key, a codec error: say so, try again
                message = _describe(exc, self.url)
                if self.state != "reconnecting" or self.error != message:
                    log.warning("restream %s: %s; retrying", self.name, message)
                self._set("reconnecting", message)
            if self._stop:
                break
            if time.monotonic() - started > 10.0:   # it had been up a while: start the backoff over
                wait = low
            with self._cond:
                self._cond.wait_for(lambda: self._stop, timeout=wait)
            wait = min(high, wait * 2)
        self._set("stopped", self.error)

    def _next_video(self, timeout: float) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: self._stop or self._video is not None, timeout=timeout)
            frame, self._video = self._video, None
            audio = list(self._audio_q)
            self._audio_q.clear()
        return frame, audio

    def _stream(self) -> None:
        import av

        s = self.settings
        first, audio = self._next_video(s.io_timeout_s)
        if first is None:
            return
        width = s.width or first.width - first.width % 2
        height = s.height or first.height - first.height % 2
        container = av.open(self.url, mode="w", format="flv", timeout=s.io_timeout_s,
                            options={"flvflags": "no_duration_filesize"})
        try:
            rate = fractions.Fraction(s.fps).limit_denominator(1001)
            v = container.add_stream("libx264", rate=rate)
            v.width, v.height, v.pix_fmt = width, height, "yuv420p"
            v.bit_rate = s.video_bitrate
            v.time_base = fractions.Fraction(1, 1000)
            gop = max(1, round(s.keyframe_s * s.fps))
            v.options = {"preset": s.preset, "tune": "zerolatency", "g": str(gop), "keyint_min": str(gop),
                         "sc_threshold": "0", "bf": "0", "maxrate": str(s.video_bitrate),
                         "bufsize": str(2 * s.video_bitrate)}
            a = None
            resampler = None
            if self.audio:
                a = container.add_stream("aac", rate=AUDIO_RATE)
                a.bit_rate = s.audio_bitrate
                a.layout = "stereo"
                resampler = av.AudioResampler(format="fltp", layout="stereo", rate=AUDIO_RATE)
            container.start_encoding()
            self.connects += 1
            self._set("live", None)
            log.info("restream %s: live (%dx%d, %.1f Mbit/s, keyframe every %.1f s)", self.name, width, height,
                     s.video_bitrate / 1e6, s.keyframe_s)
            t0 = time.monotonic()
            last_pts = -1
            samples = 0
            frame = first
            while not self._stop:
                if frame is not None:
                    out = frame.reformat(width=width, height=height, format="yuv420p")
                    pts = int((time.monotonic() - t0) * 1000)
                    out.pts = max(pts, last_pts + 1)
                    out.time_base = v.time_base
                    last_pts = out.pts
                    for packet in v.encode(out):
                        container.mux(packet)
                    self.frames += 1
                if a is not None:
                    for af in audio:
                        for r in resampler.resample(af):
                            r.pts = samples
                            r.time_base = fractions.Fraction(1, AUDIO_RATE)
                            samples += r.samples
                            for packet in a.encode(r):
                                container.mux(packet)
                        self.audio_frames += 1
                frame, audio = self._next_video(1.0 / s.fps * 4)
                if frame is None and not audio and not self._stop:
                    continue
            for packet in v.encode(None):
                container.mux(packet)
            if a is not None:
                for packet in a.encode(None):
                    container.mux(packet)
        finally:
            try:
                container.close()
            except Exception:   # the connection is gone already
                pass


def _describe(exc: Exception, url: str) -> str:
    """An error message for people, with the stream key kept out of it."""
    text = f"{type(exc).__name__}: {exc}"
    try:
        parts = urlsplit(url)
        for secret in (parts.path, parts.query, url):
            if secret and len(secret) > 1:
                text = text.replace(secret, "/***")
    except ValueError:
        pass
    return text[:300]


class SessionRestream:
    """A live session's output to one or more destinations. RTMP(S) ones share a task on the event loop that
    takes the session's processed frames (a private copy of its output track, as a WHEP viewer's) and its
    audio and hands them to each destination's worker; a WHIP one (http(s)://, streamer/sinks/whip_push.py)
    is an aiortc peer of its own, on fresh copies of the tracks from `whip_tracks()`. Nothing here waits
    on a destination."""

    def __init__(self, video: Any, audio: Any, urls: list[str], settings: RestreamSettings = RestreamSettings(),
                 on_event: Event | None = None, whip_tracks: Callable[[], tuple[Any, Any]] | None = None) -> None:
        import asyncio

        rtmp = [u for u in urls if not u.startswith(("http://", "https://"))]
        whip = [u for u in urls if u.startswith(("http://", "https://"))]
        if whip and whip_tracks is None:
            raise ValueError("this output takes rtmp(s):// addresses only")
        if whip:
            from streamer.sinks.whip_push import split_whip

            for u in whip:
                split_whip(u)                 # refused before anything starts
        for u in rtmp:
            check_url(u)
        self.pushes: list[Any] = [RtmpPush(u, settings, on_event, audio=audio is not None) for u in rtmp]
        self._tasks: list[Any] = []
        if self.pushes:
            self._tasks.append(asyncio.ensure_future(self._video(video)))
            if audio is not None:
                self._tasks.append(asyncio.ensure_future(self._audio(audio)))
        else:
            for t in (video, audio):
                if t is not None:
                    t.stop()
        if whip:
            from streamer.sinks.whip_push import WhipPush

            self.pushes += [WhipPush(u, whip_tracks, on_event) for u in whip]   # type: ignore[arg-type]

    async def _video(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        try:
            while True:
                frame = await track.recv()
                for p in self.pushes:
                    if isinstance(p, RtmpPush):
                        p.push_video(frame)
        except MediaStreamError:   # the session ended
            return

    async def _audio(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        try:
            while True:
                frame = await track.recv()
                for p in self.pushes:
                    if isinstance(p, RtmpPush):
                        p.push_audio(frame)
        except MediaStreamError:
            return

    def status(self) -> list[dict[str, Any]]:
        return [p.status() for p in self.pushes]

    async def stop(self) -> None:
        import asyncio

        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        rtmp = [p for p in self.pushes if isinstance(p, RtmpPush)]
        await asyncio.gather(*(p.stop() for p in self.pushes if not isinstance(p, RtmpPush)), return_exceptions=True)
        await asyncio.to_thread(lambda: [p.close() for p in rtmp])
