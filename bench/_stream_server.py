"""The server side of `livefuse bench stream`: a real LiveFuse server in its own process (so its CPU time
can be read from /proc), with the pass-through pipeline, an artificial slow stage, or the real product
(`--pipeline product`: faces -> fusion -> edits -> watermark, the Product's own service hooks).

Every pipeline is wrapped so each processed frame's stage timings are kept with the time it finished;
`GET /bench/timings?since=T0&until=T1` (time.monotonic, the same clock in every process on Linux) gives
per-stage median / p95 over that window, so the bench reports exactly the frames it measured."""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections import deque
from typing import Any

import numpy as np
from aiohttp import web

from streamer.config import ServerConfig
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.web.server import SERVER_KEY, create_app
from streamer.services import NullServices, Services, with_hooks


class SleepStage:
    """Stands in for a slow filter: holds each frame for a fixed time, changes nothing."""

    def __init__(self, ms: float) -> None:
        self.name = f"sleep{ms:g}ms"
        self.ms = ms

    def __call__(self, state, session):
        time.sleep(self.ms / 1000.0)
        return state


class TimingLog:
    """(finished at, {stage: ms}, pipeline thread CPU ms, work) for the last few thousand frames, all
    sessions; work: how many faces fusion fused and reused, and how many faces the face stage ran its
    landmark network on and kept the landmarks of, so a window says what share of the work still faces
    skipped."""

    def __init__(self, size: int = 10000) -> None:
        self._lock = threading.Lock()
        self._rows: deque[tuple[float, dict[str, float], float, dict[str, int]]] = deque(maxlen=size)
        self._runs: dict[int, tuple[int, int]] = {}   # detector -> its (fresh, kept) counters at its last frame

    def add(self, timings: dict[str, float], cpu_ms: float, state: FrameState | None = None,
            stages: list[Any] | None = None) -> None:
        work: dict[str, int] = {}
        if state is not None:
            work["fused"] = len(state.fused)
            work["reused"] = sum(bool(f.get("reused")) for f in state.fused)
        with self._lock:
            for stage in stages or []:
                detector = getattr(stage, "detector", None)
                runs = getattr(detector, "landmark_runs", None)
                if runs is not None:   # this frame's runs: the counters' growth since the detector's last frame
                    fresh0, kept0 = self._runs.get(id(detector), (runs["fresh"], runs["kept"]))
                    work["ran"], work["kept"] = runs["fresh"] - fresh0, runs["kept"] - kept0
                    self._runs[id(detector)] = (runs["fresh"], runs["kept"])
            self._rows.append((time.monotonic(), dict(timings), cpu_ms, work))

    def summary(self, since: float, until: float) -> dict[str, Any]:
        with self._lock:
            rows = [r for r in self._rows if since <= r[0] <= until]
        stages: dict[str, list[float]] = {}
        for _, timings, _, _ in rows:
            for name, ms in timings.items():
                stages.setdefault(name, []).append(ms)
        totals = [sum(t.values()) for _, t, _, _ in rows]
        fused = sum(w.get("fused", 0) for *_, w in rows)
        reused = sum(w.get("reused", 0) for *_, w in rows)
        ran = sum(w.get("ran", 0) for *_, w in rows)
        kept = sum(w.get("kept", 0) for *_, w in rows)
        return {"frames": len(rows), "stages_ms": {k: _stats(v) for k, v in stages.items()},
                "pipeline_ms": _stats(totals), "pipeline_thread_cpu_ms": _stats([r[2] for r in rows]),
                "fusion_reused_share": round(reused / fused, 3) if fused else None,
                "landmarks_kept_share": round(kept / (ran + kept), 3) if ran + kept else None}


def _stats(ms: list[float]) -> dict[str, float] | None:
    if not ms:
        return None
    a = np.asarray(ms)
    return {"p50": round(float(np.median(a)), 2), "p95": round(float(np.percentile(a, 95)), 2)}


class RecordingPipeline(Pipeline):
    """The same stages, with each frame's timings written to the TimingLog."""

    def __init__(self, stages, log: TimingLog) -> None:
        super().__init__(stages)
        self._log = log

    def __call__(self, state: FrameState, session: Any) -> FrameState:
        c0 = time.thread_time()
        state = super().__call__(state, session)
        self._log.add(state.timings, (time.thread_time() - c0) * 1000.0, state, self.stages)
        return state


def use_overlapped_worker(log: TimingLog) -> None:
    """Serve every stream with streamer.pipeline.overlap.OverlappedFrameWorker, logged, in place of the plain
    FrameWorker (the server runs with `overlap="off"`, so the bench, not the host's cores, picks the worker)."""
    import streamer.rtc.peer
    from streamer.pipeline.overlap import OverlappedFrameWorker

    class LoggedWorker(OverlappedFrameWorker):
        def finished(self, state: FrameState) -> None:
            super().finished(state)
            log.add(state.timings, state.cpu_ms, state, self._front.stages)

    streamer.rtc.peer.FrameWorker = LoggedWorker


class IndexBand:
    """The client's painted frame index (the top rows, bench._probe.paint_index) kept across the background
    stage, which blurs or replaces it with the room: `keep` (before the stage) copies the band, `put_back`
    (after it) writes it again, so each returned frame can still be matched to when it was sent. Two bench
    stages around the product's own; the product's stages are timed as they are."""

    def __init__(self) -> None:
        from bench._probe import CODE_ROWS_PX

        self.rows = 2 * CODE_ROWS_PX
        self._band: dict[Any, np.ndarray] = {}

    def _luma(self, state: FrameState) -> Any:
        return state.planes.y if state.planes is not None else state.image

    def keep(self, state: FrameState, context: Any) -> FrameState:
        self._band[state.pts] = np.array(self._luma(state)[: self.rows])
        return state

    def put_back(self, state: FrameState, context: Any) -> FrameState:
        band = self._band.pop(state.pts, None)
        if band is not None:
            self._luma(state)[: self.rows] = band
        while len(self._band) > 8:              # frames a stage dropped between the two
            self._band.pop(next(iter(self._band)))
        return state


def _around_background(stages: list[Any]) -> list[Any]:
    """`stages` with IndexBand's two stages either side of the one named "background" (as they are without)."""
    names = [getattr(s, "name", "") for s in stages]
    if "background" not in names:
        return stages
    at = names.index("background")
    band = IndexBand()
    return stages[:at] + [_Stage("bench_band_keep", band.keep), stages[at], _Stage("bench_band_back", band.put_back)] + stages[at + 1:]


class _Stage:
    """A named pipeline stage made of a function (the pipeline times and reports stages by name)."""

    def __init__(self, name: str, fn: Any) -> None:
        self.name, self._fn = name, fn

    def __call__(self, state: FrameState, context: Any) -> FrameState:
        return self._fn(state, context)


def build_services(pipeline: str, delay_ms: float, log: TimingLog, face_backend: str | None = None) -> Services:
    if pipeline == "product":
        from bench._product import build_product

        product = build_product(face_backend=face_backend)
        def make(session):
            inner = product.make_pipeline(session)
            return RecordingPipeline(_around_background(list(inner.stages)), log)

        return with_hooks(product, make_pipeline=make)
    stages = [SleepStage(delay_ms)] if delay_ms > 0 else []
    return NullServices(make_pipeline=lambda s: RecordingPipeline(list(stages), log))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--codec", default="VP8")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--pipeline", choices=("passthrough", "product"), default="passthrough")
    p.add_argument("--overlap", action="store_true", help="faces on the next frame while the rest finish this one")
    p.add_argument("--cv2-threads", type=int, default=None)
    p.add_argument("--torch-threads", type=int, default=None)
    p.add_argument("--h264-preset", default=None, help="libx264 preset (default: ServerConfig's)")
    p.add_argument("--face-backend", default=None, help="face runtimes in order of preference (default: the product's)")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from streamer.app.commands.serve import apply_process_settings
    from streamer.ops.threads import ThreadConfig, apply_thread_config

    log = TimingLog()
    if a.overlap:
        use_overlapped_worker(log)
    # overlap="off": the worker is chosen above (logged variants), never by the host's core count; the
    # process settings (encoders, OpenCV's threads) as `livefuse serve` makes them, but where given here
    given = {k: v for k, v in (("h264_preset", a.h264_preset), ("cv2_threads", a.cv2_threads)) if v is not None}
    config = ServerConfig(port=a.port, codec=a.codec, max_bitrate=3_000_000, overlap="off", **given)
    apply_process_settings(config)
    apply_thread_config(ThreadConfig(torch=a.torch_threads))
    app = create_app(config, build_services(a.pipeline, a.delay_ms, log, a.face_backend))

    async def timings(request: web.Request) -> web.Response:
        q = request.query
        return web.json_response(log.summary(float(q.get("since", 0)), float(q.get("until", time.monotonic()))))

    async def sessions(_request: web.Request) -> web.Response:   # ffmpeg keeps its WHIP Location to itself
        return web.json_response(sorted(app[SERVER_KEY].peers))

    app.router.add_get("/bench/timings", timings)
    app.router.add_get("/bench/sessions", sessions)
    web.run_app(app, host="127.0.0.1", port=a.port, print=lambda *_: print("ready", flush=True))


if __name__ == "__main__":
    main()
