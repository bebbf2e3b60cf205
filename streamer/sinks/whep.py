"""WHEP egress: any number of viewers watch one session's processed stream, each on its own
connection, fed from the session's Broadcast (newest frame, no per-viewer queue, a private copy each),
with the sender's audio when the sender sends some and the viewer asks for it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable

from streamer.peer import answer_offer, new_peer_connection
from streamer.media.tracks import FusedTrack

if TYPE_CHECKING:  # pragma: no cover
    from aiortc import RTCSessionDescription

    from streamer.peer import PeerSession

log = logging.getLogger(__name__)


class WhepViewer:
    def __init__(self, source: "PeerSession", *, on_closed: Callable[["WhepViewer"], None] | None = None) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.source = source
        self.pc = new_peer_connection(source.config)
        self.on_closed = on_closed
        self._closing = False

    async def accept(self, sdp: str) -> "RTCSessionDescription":
        if self.source.fused is None:
            raise RuntimeError("source session has no stream yet")
        track = FusedTrack(self.source.worker.outbox, private=True)
        self.pc.on("connectionstatechange", self._on_state)
        return await answer_offer(self.pc, self.source.config, sdp, track, direction="sendonly",
                                  audio_track=self.source.listen())

    def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            asyncio.ensure_future(self.close(f"connection {self.pc.connectionState}"))

    async def close(self, reason: str = "closed") -> None:
        if self._closing:
            return
        self._closing = True
        log.info("whep viewer %s of %s: closing (%s)", self.id, self.source.session.id, reason)
        for t in self.pc.getTransceivers():
            if t.sender.track is not None:
                t.sender.track.stop()
        await self.pc.close()
        if self.on_closed is not None:
            self.on_closed(self)


def attach_viewer(source: "PeerSession", metrics: Any = None) -> WhepViewer:
    """A new viewer registered on its source; it unregisters itself when it closes."""

    def closed(v: WhepViewer) -> None:
        if source.viewers.pop(v.id, None) is not None and metrics is not None:
            metrics.viewers.dec()

    viewer = WhepViewer(source, on_closed=closed)
    source.viewers[viewer.id] = viewer
    if metrics is not None:
        metrics.viewers.inc()
    return viewer
