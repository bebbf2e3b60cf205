"""The media path of one stream: the newest decoded frame waits in a FrameSlot, a worker thread runs the
pipeline on it, and FusedTrack hands the newest processed frame to whoever pulls (the aiortc encoder).

aiortc's receive queue is unbounded, so a filter slower than the camera would build seconds of delay; here
the reader drains it at once and only the newest frame is kept. Replaced frames are counted as drops.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections import deque
from typing import Any, Callable, Generic, TypeVar

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import VideoFrame

from streamer.media.convert import frame_to_state, state_to_frame
from streamer.pipeline import FrameState, Pipeline
from streamer.session import Session

log = logging.getLogger(__name__)
T = TypeVar("T")


class FrameSlot(Generic[T]):
    """Holds one item: a put replaces what nobody took yet (a drop). Thread-safe; `take` blocks."""

    def __init__(self, on_put: Callable[[], None] | None = None) -> None:
        self._cond = threading.Condition()
        self._item: T | None = None
        self._full = False
        self._closed = False
        self.on_put = on_put
        self.puts = 0
        self.dropped = 0

    def put(self, item: T) -> bool:
        """Store `item`; True when it replaced one that was never taken."""
        with self._cond:
            if self._closed:
                return False
            dropped = self._full
            self._item, self._full = item, True
            self.puts += 1
            self.dropped += dropped
            self._cond.notify_all()
        if self.on_put is not None:
            self.on_put()
        return dropped

    def take(self, timeout: float | None = None) -> T | None:
        """The newest item, waiting up to `timeout` s; None on timeout or once closed and empty."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._full or self._closed, timeout):
                return None
            return self._pop()

    def take_nowait(self) -> T | None:
        with self._cond:
            return self._pop()

    def _pop(self) -> T | None:
        if not self._full:
            return None
        item, self._item, self._full = self._item, None, False
        return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.on_put is not None:
            self.on_put()

    @property
    def closed(self) -> bool:
        return self._closed


class StreamStats:
    """What the client sees once a second and /metrics sees always. Written by the reader, the worker
    and the sender; read by the stats loop."""

    def __init__(self, metrics: Any = None, window: int = 120, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.metrics = metrics
        self.frames_in = 0
        self.frames_out = 0
        self.dropped = 0
        self.errors = 0
        self.size: tuple[int, int] | None = None
        self._in_times: deque[float] = deque(maxlen=window)
        self._out_times: deque[float] = deque(maxlen=window)
        self._delays_ms: deque[float] = deque(maxlen=window)
        self._stage_ms: dict[str, deque[float]] = {}
        self._window = window

    def frame_in(self, dropped: bool) -> None:
        now = self._clock()
        with self._lock:
            self.frames_in += 1
            self.dropped += dropped
            self._in_times.append(now)
        if self.metrics is not None:
            self.metrics.frames_in.inc()
            if dropped:
                self.metrics.dropped.inc()

    def processed(self, state: FrameState) -> None:
        with self._lock:
            for name, ms in state.timings.items():
                self._stage_ms.setdefault(name, deque(maxlen=self._window)).append(ms)
        if self.metrics is not None:
            for name, ms in state.timings.items():
                self.metrics.stage.labels(name).observe(ms / 1000.0)

    def frame_out(self, arrived: float, size: tuple[int, int]) -> None:
        now = self._clock()
        delay = (now - arrived) * 1000.0
        with self._lock:
            self.frames_out += 1
            self.size = size
            self._out_times.append(now)
            self._delays_ms.append(delay)
        if self.metrics is not None:
            self.metrics.frames_out.inc()
            self.metrics.latency.observe(delay / 1000.0)

    def delay_ms(self) -> float | None:
        """Median time the last 30 frames spent in the server (arrival -> processed), None before any."""
        with self._lock:
            return self._recent_delay_ms()

    def _recent_delay_ms(self) -> float | None:   # the caller holds the lock
        delays = list(self._delays_ms)[-30:]
        return statistics.median(delays) if delays else None

    def frame_interval_ms(self) -> float | None:
        """Median time between the last 30 frames' arrivals, None before two."""
        with self._lock:
            times = list(self._in_times)[-31:]
        if len(times) < 2:
            return None
        return statistics.median(b - a for a, b in zip(times, times[1:])) * 1000.0

    def stage_error(self, stage: str) -> None:
        with self._lock:
            self.errors += 1
        if self.metrics is not None:
            self.metrics.stage_errors.labels(stage).inc()

    def snapshot(self, horizon_s: float = 2.0) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            fps_in = _rate(self._in_times, now, horizon_s)
            fps_out = _rate(self._out_times, now, horizon_s)
            delay = self._recent_delay_ms()
            stages = {k: round(statistics.fmean(list(v)[-30:]), 2) for k, v in self._stage_ms.items() if v}
            return {
                "type": "stats",
                "fps_in": round(fps_in, 1),
                "fps_out": round(fps_out, 1),
                "server_delay_ms": round(delay, 1) if delay is not None else None,
                "stages_ms": stages,
                "frames_in": self.frames_in,
                "frames_out": self.frames_out,
                "dropped": self.dropped,
                "errors": self.errors,
                "size": list(self.size) if self.size else None,
            }


def _rate(times: deque[float], now: float, horizon: float) -> float:
    recent = [t for t in times if now - t <= horizon]
    if len(recent) < 2:
        return 0.0
    span = max(now - recent[0], 1e-6)
    return (len(recent) - 1) / span if span < horizon else len(recent) / horizon


class Broadcast:
    """The newest processed frame, numbered, for any number of FusedTracks (the peer, WHEP viewers, sinks).
    Each consumer takes the newest frame it has not seen; nobody queues."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[VideoFrame, float] | None = None
        self.seq = 0
        self.closed = False
        self._wakers: set[Callable[[], None]] = set()

    def publish(self, frame: VideoFrame, arrived: float) -> None:
        with self._lock:
            self._item = (frame, arrived)
            self.seq += 1
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def latest(self) -> tuple[int, tuple[VideoFrame, float] | None]:
        with self._lock:
            return self.seq, self._item

    def close(self) -> None:
        with self._lock:
            self.closed = True
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def subscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.add(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.discard(wake)


def copy_frame(frame: VideoFrame) -> VideoFrame:
    """An independent frame with the same pixels and timing. aiortc's encoders write into the frame they
    encode (pict_type) from their own threads, so two encoders must never share one frame object."""
    if frame.format.name == "yuv420p" and frame.width % 2 == 0 and frame.height % 2 == 0:
        out = VideoFrame.from_ndarray(frame.to_ndarray(), format="yuv420p")
    else:
        out = VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
    out.pts = frame.pts
    if frame.time_base is not None:
        out.time_base = frame.time_base
    return out


class FusedTrack(MediaStreamTrack):
    """The processed stream as an aiortc track. `recv` waits for the newest processed frame; a frame is
    never sent twice, and each keeps the pts/time_base of the frame it was made from. `private=True` hands
    out copies (for extra consumers: WHEP viewers), so only the first consumer gets the frames themselves."""

    kind = "video"

    def __init__(self, source: Broadcast, *, private: bool = False) -> None:
        super().__init__()
        self._source = source
        self._private = private
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._seen = source.seq
        self._last_pts: int | None = None
        source.subscribe(self._wake)

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:
            pass  # loop closed: nobody is pulling any more

    async def recv(self) -> VideoFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            seq, item = self._source.latest()
            if seq != self._seen and item is not None:
                self._seen = seq
                frame = item[0]
                if self._last_pts is not None and frame.pts is not None and frame.pts <= self._last_pts:
                    continue  # an out-of-order frame would make the encoder's timestamps run backwards
                self._last_pts = frame.pts
                return copy_frame(frame) if self._private else frame
            if self._source.closed:
                self.stop()
                raise MediaStreamError
            await self._ready.wait()

    def stop(self) -> None:
        self._source.unsubscribe(self._wake)
        super().stop()


class FrameWorker:
    """Runs one session's pipeline in its own thread, newest frame first, never on the event loop."""

    def __init__(self, session: Session, pipeline: Pipeline, stats: StreamStats, name: str = "") -> None:
        self.session = session
        self.pipeline = pipeline
        self.stats = stats
        self.inbox: FrameSlot[tuple[VideoFrame, float]] = FrameSlot()
        self.outbox = Broadcast()
        self._thread = threading.Thread(target=self._run, name=f"livefuse-frames-{name or session.id}", daemon=True)
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, frame: VideoFrame) -> None:
        self.stats.frame_in(self.inbox.put((frame, time.monotonic())))

    def _drain(self, slot: "FrameSlot[Any]", handle: Callable[[Any], None]) -> None:
        """Hand each item taken from `slot` to `handle` until the slot closes or the worker stops. A frame
        that fails is logged and lost; the stream goes on."""
        while not self._stop.is_set():
            item = slot.take(timeout=0.5)
            if item is None:
                if slot.closed:
                    break
                continue
            try:
                handle(item)
            except Exception:  # a broken frame must not end the stream
                log.exception("session %s: frame conversion failed", self.session.id)

    def _emit(self, out: VideoFrame, arrived: float) -> None:
        self.stats.frame_out(arrived, (out.width, out.height))
        self.outbox.publish(out, arrived)

    def _run(self) -> None:
        try:
            self._drain(self.inbox, lambda item: self._emit(self.process(item[0]), item[1]))
        finally:
            self.outbox.close()
            try:
                self.pipeline.close()
            except Exception:
                log.exception("closing pipeline")

    def process(self, frame: VideoFrame) -> VideoFrame:
        if not self.pipeline.stages:  # nothing to run: hand the decoded frame on without a colour round trip
            self.stats.processed(FrameState(image=None, pts=frame.pts or 0))
            return frame
        state = self.pipeline(frame_to_state(frame), self.session.frame_context())
        self.stats.processed(state)
        for stage in state.errors:
            self.stats.stage_error(stage)
        # to the encoders' pixel format here, once, in this thread (not in each encoder)
        return state_to_frame(state, frame)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.inbox.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)


async def pump(track: MediaStreamTrack, sink: Callable[[VideoFrame], None], on_end: Callable[[], None] | None = None) -> None:
    """Drain a received track as fast as frames arrive, handing each to `sink` (which keeps the newest)."""
    try:
        while True:
            frame = await track.recv()
            sink(frame)
    except MediaStreamError:
        pass
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("reading track %s", track.kind)
    finally:
        if on_end is not None:
            on_end()
