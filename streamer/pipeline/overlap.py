"""A frame worker that overlaps stages across frames: the face stage works on frame N+1 while fusion,
edits and watermark finish frame N, each in its own thread.

Why: on the CPU path the landmarker and the pixel stages (each about half a frame's CPU; docs/performance.md)
run one after the other in one thread, so a frame costs their sum (plus the colour conversions) and the
stream cannot reach 30 fps on a 2-core machine even with a core to spare. Split in two, a frame costs the
larger half; the price is up to one frame of extra delay. Each frame keeps its own pixels, pts and
timings from end to end; both hand-offs keep only the newest item, and a frame replaced in either is
counted as a drop, so a slow stage never builds a queue.

It takes FrameWorker's place as it is (same constructor, `start`, `submit`, `stop`, `outbox`) and runs
each half through the same `run_stages`, `finished` and `failed`.
"""

from __future__ import annotations

import threading

from av import VideoFrame

from streamer.pipeline.convert import state_to_frame
from streamer.media.slot import FrameSlot
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.worker import ErrorHook, FrameWorker
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.session.session import FrameContext, Session


class OverlappedFrameWorker(FrameWorker):
    """`split` stages (default: the first, "faces") run in the front thread, the rest in the back one."""

    def __init__(self, session: Session, pipeline: Pipeline, stats: StreamStats, *,
                 on_error: ErrorHook | None = None, pixels: str | None = None, split: int = 1) -> None:
        super().__init__(session, pipeline, stats, on_error=on_error, pixels=pixels)
        self._front, self._back = Pipeline(pipeline.stages[:split]), Pipeline(pipeline.stages[split:])
        self._overlap = bool(pipeline.stages)   # no stages: nothing to overlap, the plain loop (no conversions)
        self.middle: FrameSlot[tuple[VideoFrame, float, FrameState, FrameContext]] = FrameSlot()
        self._front_thread = threading.Thread(target=self._run_front, name=f"livefuse-front-{session.id}", daemon=True)

    def start(self) -> None:
        if self._overlap:
            self._front_thread.start()
        super().start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or self._front_thread.is_alive()

    # -- front: decoded frame -> state -> first stages ----------------------------------------------
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
        return self.run_stages(self._front, self.to_state(frame), context)

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
            self._close_stages()

    def back_half(self, frame: VideoFrame, state: FrameState, context: FrameContext) -> VideoFrame:
        state = self.run_stages(self._back, state, context)
        self.finished(state)
        return state_to_frame(state, frame)

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        self.middle.close()
        if self._front_thread.is_alive() and threading.current_thread() is not self._front_thread:
            self._front_thread.join(timeout)
