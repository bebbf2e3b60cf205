"""What one stream did: frames in and out, drops, failures, delays and per-stage times."""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from streamer.pipeline.pipeline import FrameState

if TYPE_CHECKING:  # pragma: no cover
    from streamer.ops.metrics import Metrics


class StreamStats:
    """What the client sees once a second and /metrics sees always. Written by the reader, the worker
    and the sender; read by the stats loop. Every counter changes through a method, under one lock."""

    def __init__(self, metrics: "Metrics | None" = None, window: int = 120,
                 clock: Callable[[], float] = time.monotonic) -> None:
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
        self._work: deque[float] = deque(maxlen=30)   # pipeline ms of the last frames
        self._faces: list[dict[str, Any]] = []        # the last processed frame's tracked faces
        self._window = window

    def frame_in(self, dropped: bool) -> None:
        """A decoded frame arrived; `dropped`: it replaced one the worker never took."""
        now = self._clock()
        with self._lock:
            self.frames_in += 1
            self.dropped += dropped
            self._in_times.append(now)
        if self.metrics is not None:
            self.metrics.frames_in.inc()
            if dropped:
                self.metrics.dropped.inc()

    def frame_dropped(self) -> None:
        """A frame the worker took but lost to a newer one between two of its stages: a drop like any other."""
        with self._lock:
            self.dropped += 1
        if self.metrics is not None:
            self.metrics.dropped.inc()

    def processed(self, state: FrameState) -> None:
        faces = tracked_faces(state)
        with self._lock:
            self._faces = faces
            self._work.append(sum(state.timings.values()))
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

    def budget_used(self, horizon_s: float = 5.0) -> float | None:
        """Pipeline time per frame (mean of the last 30 frames) over the frame interval: 1.0 means the
        stream uses its whole frame budget (frames start to drop). None when no frame arrived in the last
        `horizon_s` or none has been processed."""
        interval = self.frame_interval_ms()
        now = self._clock()
        with self._lock:
            recent = list(self._work)
            fresh = bool(self._in_times) and now - self._in_times[-1] <= horizon_s
        if not recent or not interval or not fresh:
            return None
        return statistics.fmean(recent) / interval

    def tracked(self) -> set[int]:
        """Track ids of the faces in the last processed frame."""
        with self._lock:
            return {f["track_id"] for f in self._faces}

    def stage_error(self, stage: str) -> None:
        """One failure of one frame in `stage`."""
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
                "faces": [dict(f) for f in self._faces],
            }


def _rate(times: deque[float], now: float, horizon: float) -> float:
    recent = [t for t in times if now - t <= horizon]
    if len(recent) < 2:
        return 0.0
    span = max(now - recent[0], 1e-6)
    return (len(recent) - 1) / span if span < horizon else len(recent) / horizon


MAX_REPORTED_FACES = 16   # faces a stats message lists at most (the tracker follows fewer)


def tracked_faces(state: FrameState) -> list[dict[str, Any]]:
    """The frame's tracked faces as a client sees them: track id, box (frame pixels x0, y0, x1, y1) and
    the session's name of the source it was fused with (None: left unchanged)."""
    fused = fused_sources(state)
    out = []
    for face in state.faces[:MAX_REPORTED_FACES]:
        if face.track_id < 0:
            continue
        out.append({"track_id": int(face.track_id), "box": [int(round(float(v))) for v in face.bbox],
                    "source_id": fused.get(face.track_id)})
    return out


def fused_sources(state: FrameState) -> dict[int, str]:
    """Track id -> the session's name of the source the fusion or swap stage gave that face this frame."""
    return {d["track_id"]: d.get("source", d["source_id"]) for d in (*state.fused, *state.swapped)}
