"""The server's restreams: which live sessions push their output to RTMP(S) destinations
(streamer/sinks/restream.py) or WHIP endpoints (streamer/sinks/whip_push.py), started for every session by `serve --restream URL` and per session by the
control protocol's `set_params.outputs.restream` or REST's `POST /v1/sessions/{id}/outputs`.

Each session's destinations share one copy of its output track and its audio; each destination encodes
on a thread of its own, so a restream never slows the session's stream, its viewers or another
destination. Status changes reach the session's clients as `restream` events and the metrics as
`livefuse_restreams{state}` and `livefuse_restream_errors_total`, neither naming a destination (an
address carries its stream key)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

MAX_DESTINATIONS = 4


class Restreams:
    def __init__(self, config: Any, metrics: Any, audit: Any = None) -> None:
        from prometheus_client import Counter, Gauge

        from streamer.sinks.restream import RestreamSettings

        self.urls: tuple[str, ...] = tuple(getattr(config, "restream", ()) or ())
        w, h = _size(getattr(config, "restream_size", "") or "")
        self.settings = RestreamSettings(video_bitrate=int(getattr(config, "restream_bitrate", 2_500_000)),
                                         keyframe_s=float(getattr(config, "restream_keyframe_s", 2.0)), width=w, height=h)
        self.audit = audit or (lambda *a, **k: None)
        self.sessions: dict[str, Any] = {}       # session id -> SessionRestream
        self._states = Gauge("livefuse_restreams", "restream destinations by state", ["state"], registry=metrics.registry)
        self._errors = Counter("livefuse_restream_errors", "restream connection failures and drops", registry=metrics.registry)
        self._last: dict[int, str] = {}

    def hook(self, peer: Any) -> Any:
        """The session's control handler's `restream` hook: called from its control thread with the destinations asked for."""
        loop = asyncio.get_running_loop()

        def request(urls: list[str]) -> None:
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.set(peer, urls)))

        return request

    async def set(self, peer: Any, urls: list[str]) -> None:
        """The session's destinations become `urls` (an empty list stops them)."""
        sid = peer.session.id
        old = self.sessions.pop(sid, None)
        if old is not None:
            await old.stop()
        if urls and not peer.closed.is_set():
            self.start(peer, urls)
        elif old is not None:
            peer.session.notify({"type": "restream", "state": "off"})
        self._count()

    def start(self, peer: Any, urls: list[str]) -> None:
        from streamer.media.tracks import FusedTrack
        from streamer.sinks.restream import SessionRestream, redact

        session = peer.session

        def event(e: dict[str, Any]) -> None:   # from a destination's worker thread
            if e.get("state") == "reconnecting":
                self._errors.inc()
            session.notify(e)
            self._count()

        try:
            self.sessions[session.id] = SessionRestream(
                FusedTrack(peer.worker.outbox, private=True), peer.listen(), list(urls)[:MAX_DESTINATIONS],
                self.settings, event, whip_tracks=lambda: (FusedTrack(peer.worker.outbox, private=True), peer.listen()))
        except ValueError as exc:   # not rtmp(s)://HOST/APP/KEY nor a WHIP https:// address (the key is never in it)
            session.notify({"type": "restream", "state": "error", "error": str(exc)})
            return
        from streamer.sinks.whip_push import redact_whip

        self.audit("restream_started", session=session.id,
                   destinations=[redact_whip(u) if u.startswith("http") else redact(u) for u in urls])

    def status(self, session_id: str) -> list[dict[str, Any]]:
        held = self.sessions.get(session_id)
        return held.status() if held is not None else []

    def session_ended(self, session_id: str) -> None:
        held = self.sessions.pop(session_id, None)
        if held is not None:
            asyncio.ensure_future(held.stop())
        self._count()

    async def close(self) -> None:
        held, self.sessions = list(self.sessions.values()), {}
        await asyncio.gather(*(h.stop() for h in held), return_exceptions=True)

    def _count(self) -> None:
        counts: dict[str, int] = {"live": 0, "connecting": 0, "reconnecting": 0}
        for held in list(self.sessions.values()):
            for st in held.status():
                counts[st["state"]] = counts.get(st["state"], 0) + 1
        for state, n in counts.items():
            self._states.labels(state).set(n)


def _size(text: str) -> tuple[int, int]:
    if not text:
        return 0, 0
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"restream size is WIDTHxHEIGHT, e.g. 1280x720, not {text!r}") from None
    return w, h
