"""The thread that runs one session's pipeline, newest frame first, never on the event loop.

Every failure of a frame leaves the worker one way: `FrameWorker.failed`, which counts it in the stream's
stats and hands it to the owner's `on_error` (the peer tells the client). A stage's failure is what the
pipeline recorded on the frame's `errors`, and the frame goes on without that stage; a failure outside the
stages (the frame <-> state conversions at the worker's edges) is reported under CONVERSION, and that
frame is lost. Either way the stream goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from av import VideoFrame

from streamer.media.broadcast import Broadcast
from streamer.pipeline.convert import frame_to_state, state_to_frame
from streamer.media.slot import FrameSlot
from streamer.pipeline.stats import StreamStats
from streamer.pipeline.pipeline import FrameState, Pipeline
from streamer.session.session import FrameContext, Session

log = logging.getLogger(__name__)

ErrorHook = Callable[[str, str], None]
"""(stage name, message) of one failure of one frame; called in a worker thread."""

CONVERSION = "convert"   # the stage name a failure outside the stages is reported under


class FrameWorker:
    """Runs one session's pipeline in its own thread: the newest decoded frame from `inbox` becomes a
    FrameState, goes through the stages, and its encoders' frame is published on `outbox`."""

    def __init__(self, session: Session, pipeline: Pipeline, stats: StreamStats, *,
                 on_error: ErrorHook | None = None, pixels: str | None = None) -> None:
        """`pixels`: the torch device the frames' planes go to (`ServerConfig.pixel_device`); None keeps
        them in host memory."""
        self.session = session
        self.pixels = pixels
        self._upload: Any = None   # the DeviceUpload for `pixels`, made at the first frame
        self.pipeline = pipeline
        self.stats = stats
        self.on_error = on_error
        self.inbox: FrameSlot[tuple[VideoFrame, float]] = FrameSlot()
        self.outbox = Broadcast()
        self._thread = threading.Thread(target=self._run, name=f"livefuse-frames-{session.id}", daemon=True)
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, frame: VideoFrame) -> None:
        self.stats.frame_in(self.inbox.put((frame, time.monotonic())))

    def process(self, frame: VideoFrame) -> VideoFrame:
        """The encoders' frame of `frame` after every stage, made here, once, in this thread (not in each
        encoder). With no stages the decoded frame goes on as it is, without a colour round trip."""
        if not self.pipeline.stages:
            return frame
        state = self.run_stages(self.pipeline, self.to_state(frame), self.session.frame_context())
        self.finished(state)
        return state_to_frame(state, frame)

    def to_state(self, frame: VideoFrame) -> FrameState:
        """The state `frame` starts the stages as, its planes where `pixels` says (one upload per frame,
        through a buffer this worker keeps)."""
        if self.pixels is not None and self._upload is None:
            from streamer.media.device_planes import DeviceUpload

            self._upload = DeviceUpload(self.pixels)
        return frame_to_state(frame, device=self._upload)

    def run_stages(self, stages: Pipeline, state: FrameState, context: FrameContext) -> FrameState:
        """`stages` (the whole pipeline or a part of it) on `state`: their thread CPU time is added to the
        state and each of their failures is reported."""
        c0 = time.thread_time()
        state = stages(state, context)
        state.cpu_ms += (time.thread_time() - c0) * 1000.0
        for name in stages.names:
            if name in state.errors:
                self.failed(name, state.errors[name])
        return state

    def finished(self, state: FrameState) -> None:
        """A frame has been through every stage (its timings hold all of them)."""
        self.stats.processed(state)

    def failed(self, stage: str, message: str) -> None:
        """One failure of one frame: counted, then handed to `on_error`."""
        self.stats.stage_error(stage)
        if self.on_error is not None:
            try:
                self.on_error(stage, message)
            except Exception:  # the owner's hook must not end the stream either
                log.exception("session %s: error hook failed", self.session.id)

    def _drain(self, slot: FrameSlot[Any], handle: Callable[[Any], None]) -> None:
        """Hand each item taken from `slot` to `handle` until the slot closes or the worker stops. A frame
        whose handling raises is reported and lost; the stream goes on."""
        while not self._stop.is_set():
            item = slot.take(timeout=0.5)
            if item is None:
                if slot.closed:
                    break
                continue
            try:
                handle(item)
            except Exception as exc:  # a broken frame must not end the stream
                log.exception("session %s: frame conversion failed", self.session.id)
                self.failed(CONVERSION, f"{type(exc).__name__}: {exc}")

    def _emit(self, out: VideoFrame, arrived: float) -> None:
        self.stats.frame_out(arrived, (out.width, out.height))
        self.outbox.publish(out, arrived)

    def _run(self) -> None:
        try:
            self._drain(self.inbox, lambda item: self._emit(self.process(item[0]), item[1]))
        finally:
            self.outbox.close()
            self._close_stages()

    def _close_stages(self) -> None:
        try:
            self.pipeline.close()
        except Exception:
            log.exception("closing pipeline")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.inbox.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
