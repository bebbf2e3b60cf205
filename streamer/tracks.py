"""The frame worker of one stream: a thread that runs the pipeline on the newest decoded frame."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from av import VideoFrame

from streamer.media.broadcast import Broadcast
from streamer.media.convert import frame_to_state, state_to_frame
from streamer.media.slot import FrameSlot
from streamer.media.stats import StreamStats
from streamer.pipeline import FrameState, Pipeline
from streamer.session import Session

log = logging.getLogger(__name__)


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
