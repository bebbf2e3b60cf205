"""A frame worker that overlaps stages across frames: the face stage works on frame N+1 while fusion,
edits and watermark finish frame N, each in its own thread.

Why: on the CPU path the landmarker (MediaPipe, ~14-17 ms at 640x480) and the pixel stages (~16 ms)
run one after the other in one thread, so a frame costs their sum (plus the colour conversions) and the
stream cannot reach 30 fps on a 2-core machine even with a core to spare. Split in two, a frame costs the
larger half; the price is up to one frame of extra delay. Each frame keeps its own pixels, pts and
timings from end to end; both hand-offs keep only the newest item, and a frame replaced in either is
counted as a drop, so a slow stage never builds a queue.

Drop-in for `streamer.tracks.FrameWorker` (same constructor, `start`, `submit`, `stop`, `outbox`).
"""

from __future__ import annotations

import logging
import threading
import time

from av import VideoFrame

from streamer.media.convert import frame_to_state, state_to_frame
from streamer.pipeline import FrameState, Pipeline
from streamer.session import FrameContext, Session
from streamer.media.slot import FrameSlot
from streamer.media.stats import StreamStats
from streamer.tracks import FrameWorker

log = logging.getLogger(__name__)


class OverlappedFrameWorker(FrameWorker):
    """`split` stages (default: the first, "faces") run in the front thread, the rest in the back one."""

    def __init__(self, session: Session, pipeline: Pipeline, stats: StreamStats, name: str = "", split: int = 1) -> None:
        super().__init__(session, pipeline, stats, name)
        self.split = split
        self.middle: FrameSlot[tuple[VideoFrame, float, FrameState, FrameContext]] = FrameSlot()
        self._front_thread = threading.Thread(target=self._run_front, name=f"livefuse-front-{name or session.id}", daemon=True)

    def _halves(self) -> tuple[Pipeline, Pipeline]:
        # built at start: the owner may set pipeline.on_error after constructing the worker
        def on_error(stage: str, exc: BaseException) -> None:
            if self.pipeline.on_error is not None:
                self.pipeline.on_error(stage, exc)

        stages = self.pipeline.stages
        return Pipeline(stages[: self.split], on_error), Pipeline(stages[self.split:], on_error)

    def start(self) -> None:
        self._front, self._back = self._halves()
        self._overlap = bool(self.pipeline.stages)   # no stages: nothing to overlap, the plain loop (no conversions)
        if self._overlap:
            self._front_thread.start()
        super().start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or self._front_thread.is_alive()

    # -- front: decoded frame -> RGB -> first stages ------------------------------------------------
    def _run_front(self) -> None:
        def handle(item: tuple[VideoFrame, float]) -> None:
            frame, arrived = item
            context = self.session.frame_context()   # both halves of a frame see the same controls
            if self.middle.put((frame, arrived, self.front_half(frame, context), context)):
                self.stats.frame_dropped()

        try:
            self._drain(self.inbox, handle)
        finally:
            self.middle.close()

    def front_half(self, frame: VideoFrame, context: FrameContext) -> FrameState:
        state = frame_to_state(frame)
        c0 = time.thread_time()
        state = self._front(state, context)
        state.cpu_ms += (time.thread_time() - c0) * 1000.0
        return state

    # -- back: the other stages -> yuv420p -> the encoders ------------------------------------------
    def _run(self) -> None:
        if not self._overlap:
            return super()._run()
        try:
            self._drain(self.middle, lambda item: self._emit(self.back_half(item[0], item[2], item[3]), item[1]))
        finally:
            self.outbox.close()
            self._stop.set()               # the front must be done with its stages before they close
            if threading.current_thread() is not self._front_thread:
                self._front_thread.join(5.0)
            try:
                self.pipeline.close()
            except Exception:
                log.exception("closing pipeline")

    def back_half(self, frame: VideoFrame, state: FrameState, context: FrameContext) -> VideoFrame:
        c0 = time.thread_time()
        state = self._back(state, context)
        state.cpu_ms += (time.thread_time() - c0) * 1000.0
        self.finished(state)
        return state_to_frame(state, frame)

    def finished(self, state: FrameState) -> None:
        """A frame has been through every stage (its timings hold all of them)."""
        self.stats.processed(state)
        for stage in state.errors:
            self.stats.stage_error(stage)

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        self.middle.close()
        if self._front_thread.is_alive() and threading.current_thread() is not self._front_thread:
            self._front_thread.join(timeout)

