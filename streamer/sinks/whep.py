"""WHEP egress: any number of viewers watch one session's processed stream, each on its own
connection, fed from the session's Broadcast (newest frame, no per-viewer queue, a private copy each),
with the sender's audio when the sender sends some and the viewer asks for it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from streamer.rtc.peer import answer_offer, new_peer_connection
from streamer.media.tracks import FusedTrack

if TYPE_CHECKING:  # pragma: no cover
    from aiortc import RTCSessionDescription

    from streamer.rtc.peer import PeerSession

log = logging.getLogger(__name__)


def _holds_nothing() -> None:
    return None


class WhepViewer:
    """One viewer of one session. It holds what its request took (`release`: a token's session slot)
    until it ends, by whichever way: DELETE, its connection failing or closing, or its source ending
    (the source's own idle watchdog included). Only the session's owner may add viewers (see server)."""

    def __init__(self, source: "PeerSession", *, on_closed: Callable[["WhepViewer"], None] | None = None,
                 release: Callable[[], None] = _holds_nothing) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.source = source
        self.pc = new_peer_connection(source.config)
        self.on_closed = on_closed
        self.release = release
        self._closing = False
        self._watchdog: asyncio.Task | None = None

    async def accept(self, sdp: str) -> "RTCSessionDescription":
        if self.source.fused is None:
            raise RuntimeError("source session has no stream yet")
        track = FusedTrack(self.source.worker.outbox, private=True)
        self.pc.on("connectionstatechange", self._on_state)
        answer = await answer_offer(self.pc, self.source.config, sdp, track, direction="sendonly",
                                    audio_track=self.source.listen(),
                                    context=f"whep viewer {self.id} of session {self.source.session.id}")
        self._watchdog = asyncio.ensure_future(self._until_unconnected(self.source.config.idle_timeout_s))
        return answer

    async def _until_unconnected(self, timeout_s: float) -> None:
        """A viewer that never connects, or stops being connected without a goodbye, is idle: after
        `timeout_s` of that it is closed (ICE alone would wait for its source to end)."""
        connected_at = time.monotonic()
        while True:
            await asyncio.sleep(min(1.0, timeout_s / 4))
            if self.pc.connectionState == "connected":
                connected_at = time.monotonic()
            elif time.monotonic() - connected_at > timeout_s:
                await self.close(f"not connected for {timeout_s:g} s")
                return

    def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            asyncio.ensure_future(self.close(f"connection {self.pc.connectionState}"))

    async def close(self, reason: str = "closed") -> None:
        if self._closing:
            return
        self._closing = True
        log.info("whep viewer %s of %s: closing (%s)", self.id, self.source.session.id, reason)
        if self._watchdog is not None and self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        try:
            for t in self.pc.getTransceivers():
                if t.sender.track is not None:
                    t.sender.track.stop()
            await self.pc.close()
        finally:  # what the viewer held goes back even when closing its connection fails
            self.release()
            if self.on_closed is not None:
                self.on_closed(self)


def attach_viewer(source: "PeerSession", metrics: Any = None,
                  release: Callable[[], None] = _holds_nothing) -> WhepViewer:
    """A new viewer registered on its source; it unregisters itself and calls `release` when it closes."""

    def closed(v: WhepViewer) -> None:
        if source.viewers.pop(v.id, None) is not None and metrics is not None:
            metrics.viewers.dec()

    viewer = WhepViewer(source, on_closed=closed, release=release)
    source.viewers[viewer.id] = viewer
    if metrics is not None:
        metrics.viewers.inc()
    return viewer
